"""The benchmark's plain-PyTorch twins (tests/bench/twins.py) do the work of their Keras models
(tests/bench/cases.py), so that "fork / plain torch" in `nox -s bench` compares the same work:
from the same weights, the same forward outputs in inference, the same loss (and accuracy) and
the same weights after training steps, the same `predict` and `evaluate` results, within
float tolerance. Run by `nox -s smoke` against the fork wheel with torch.

The faults below break a twin the way a twin is easily got wrong (a kernel not transposed,
the attention's query and key swapped, LayerNorm's torch epsilon, torch's Adam epsilon,
another loss, `predict` in training mode): each must make the comparison fail.

Dropout is switched off in both models for the training comparisons (its masks are random).
The Transformer is compiled with the probability cross-entropy on unnormalised outputs (the
bench's `train_step` model): dividing by sums near zero amplifies float rounding, and Adam
turns the resulting relative differences of near-cancelling gradients (the keys' kernel) into
weight differences of about 1e-4 after the first step on a second batch (two identical torch
twins, one of them perturbed by 1e-7, part as far). So its training is compared from the same
weights on one batch: `train_on_batch` twice on it, `fit` on its 32 sequences (one step); the
MLP's over a whole epoch of `fit` (32 steps).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import cases  # noqa: E402
import twins  # noqa: E402

#: Keras's torch backend converts tensors with np.array(tensor), which NumPy 2 warns about.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")

#: Largest absolute difference allowed: outputs, losses, accuracies, weights (float32; the
#: measured differences are at most about 2e-6, a fault's at least about 1e-4).
TOLERANCE = 1e-5
#: Sequences of the Transformer's `fit` comparison: one step of 32.
TRANSFORMER_FIT_SEQUENCES = 32


def difference(a: Any, b: Any) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype="float64") - np.asarray(b, dtype="float64"))))


def array(value: Any) -> Any:
    return keras.ops.convert_to_numpy(value)


def weights_difference(model: Any, twin: Any, module: Any) -> float:
    """How far the twin's weights are from the Keras model's, mapped as the twin maps them."""
    if isinstance(model, keras.layers.Dense):
        expected = twins.linear(model).state_dict()
    elif isinstance(model, keras.Sequential):
        expected = twins.mlp(model).state_dict()
    else:
        expected = twins.transformer(model).state_dict()
    return max(difference(value, module.state_dict()[name]) for name, value in expected.items())


def without_dropout(model: Any, twin: Any) -> None:
    for layer in model.layers:
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    for module in twin.module.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def mismatches(case: str, fault: Callable[[Any], None] | None = None) -> dict[str, float]:
    """What differs beyond TOLERANCE between `case`'s Keras model and its twin (with `fault`
    applied to the twin first): {what: largest difference}."""
    model, twin, inputs = cases.twin_of(case)
    if fault is not None:
        fault(twin)
    found: dict[str, float] = {}

    def compare(what: str, keras_value: Any, twin_value: Any) -> None:
        if np.shape(keras_value) != np.shape(twin_value):
            found[what] = float("inf")
            return
        gap = difference(keras_value, twin_value)
        if not gap <= TOLERANCE:  # NaN too
            found[what] = gap

    if case == "dense":
        (x,) = inputs
        compare("forward", array(model(x)), twin(torch.as_tensor(array(x))).detach())
        return found
    x, y = inputs
    tx, ty = torch.as_tensor(x), torch.as_tensor(y).long()
    kind = {"transformer": "call", "train_step": "train_step"}.get(case) or cases.LOOP_KINDS[case]
    if kind == "call":
        batch = slice(0, cases.LOOP_BATCH if case == "mlp_call" else None)
        twin.module.eval()
        compare("forward", array(model(x[batch], training=False)), twin.module(tx[batch]).detach())
    elif kind == "predict":
        compare("predict", model.predict(x, verbose=0), twin.predict(tx))
    elif kind == "evaluate":
        compare("evaluate", model.evaluate(x, y, verbose=0), twin.evaluate(tx, ty))
    elif kind == "train_step":
        without_dropout(model, twin)
        batch = slice(0, cases.LOOP_BATCH)
        for step in (1, 2):  # the second step exercises Adam's bias correction at t = 2
            compare(f"train_on_batch {step}: loss (and accuracy)", model.train_on_batch(x[batch], y[batch]),
                    twin.train_step(tx[batch], ty[batch]))
            compare(f"train_on_batch {step}: weights", 0.0, weights_difference(model, twin, twin.module))
    else:  # fit, in order (the shuffles cannot be the same)
        without_dropout(model, twin)
        samples = slice(0, TRANSFORMER_FIT_SEQUENCES if case == "transformer_fit" else None)
        history = model.fit(x[samples], y[samples], epochs=1, verbose=0, shuffle=False).history
        logs = [history["loss"][0], *([history["accuracy"][0]] if "accuracy" in history else [])]
        compare("fit: loss (and accuracy)", logs, twin.fit(tx[samples], ty[samples], shuffle=False))
        compare("fit: weights", 0.0, weights_difference(model, twin, twin.module))
    return found


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the bench runs; also spares the shared CI machine
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("case", cases.TWIN_CASES)
def test_the_twin_does_what_the_keras_model_does(case: str) -> None:
    assert mismatches(case) == {}


def untransposed(twin: Any) -> None:
    """Dense(4)'s kernel copied into Linear(4, 4) as it is, (in, out) for (out, in)."""
    with torch.no_grad():
        twin.weight.copy_(twin.weight.T.clone())


def query_key_swapped(twin: Any) -> None:
    module = twin.module
    module.query, module.key = module.key, module.query


def torch_layer_norm_epsilon(twin: Any) -> None:
    twin.module.attention_norm.eps = twin.module.feedforward_norm.eps = 1e-5


def hidden_kernel_untransposed(twin: Any) -> None:
    """The MLP's second Dense(64) kernel, square, not transposed."""
    with torch.no_grad():
        twin.module[2].weight.copy_(twin.module[2].weight.T.clone())


class FixedEpsilon(dict[str, Any]):
    """A parameter group whose epsilon stays what torch.optim.Adam was given (1e-7)."""

    def __setitem__(self, key: str, value: Any) -> None:
        if key != "eps":
            super().__setitem__(key, value)


def torch_adam_epsilon(twin: Any) -> None:
    twin.optimizer.param_groups[0] = FixedEpsilon(twin.optimizer.param_groups[0])


def logits_loss(twin: Any) -> None:
    twin.loss = twins.logits_crossentropy


def predict_in_training_mode(twin: Any) -> None:
    module = twin.module
    module.eval = lambda: module.train()  # dropout stays on


FAULTS = [
    ("dense", untransposed),
    ("mlp_call", hidden_kernel_untransposed),
    ("mlp_fit", hidden_kernel_untransposed),
    ("transformer", query_key_swapped),
    ("transformer", torch_layer_norm_epsilon),
    ("mlp_train_step", torch_adam_epsilon),
    ("train_step", torch_adam_epsilon),
    ("transformer_evaluate", logits_loss),
    ("transformer_predict", predict_in_training_mode),
]


@pytest.mark.parametrize(("case", "fault"), FAULTS, ids=[f"{case}-{fault.__name__}" for case, fault in FAULTS])
def test_a_faulty_twin_fails_the_comparison(case: str, fault: Callable[[Any], None]) -> None:
    assert mismatches(case, fault) != {}


# The ConvNet and the KV-cached decoder: twins of `nox -s bench -- --compile` (tests/bench/compile.py
# compiles each beside its Keras model), compared on their forward in inference and, for the
# decoder, one decode step with a key/value cache: the logits and the updated cache.

def convnet_and_twin() -> tuple[Any, Any, dict[str, Any]]:
    """`cases.convnet()` built by an eager call, its BatchNormalization moving statistics made
    random (the initial ones, 0 and 1, would hide a twin that does not copy them), and its twin."""
    rng = np.random.default_rng(7)
    model = cases.convnet()
    images = rng.standard_normal((cases.CONV_BATCH, cases.CONV_SIZE, cases.CONV_SIZE, 3)).astype("float32")
    model(images, training=False)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(rng.normal(0.0, 0.3, layer.moving_mean.shape).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, layer.moving_variance.shape).astype("float32"))
    return model, twins.convnet(model).eval(), {"images": images}


def kv_decoder_and_twin() -> tuple[Any, Any, dict[str, Any]]:
    """`cases.kv_decoder()` built by an eager call, its twin, and the inputs: a sequence whose
    second row is padded at its end, and a decode step at `LM_PROMPT` over a random cache."""
    rng = np.random.default_rng(7)
    model = cases.kv_decoder()
    tokens = rng.integers(0, cases.LM_VOCAB, (cases.LM_BATCH, cases.KV_SEQUENCE)).astype("int32")
    mask = np.ones((cases.LM_BATCH, cases.KV_SEQUENCE), dtype="int32")
    mask[1, -3:] = 0
    model({"token_ids": tokens, "padding_mask": mask}, training=False)
    cache = rng.standard_normal((cases.LM_BATCH, cases.LM_BLOCKS, 2, cases.LM_MAX_LENGTH, cases.LM_HEADS,
                                 cases.LM_WIDTH // cases.LM_HEADS)).astype("float32")
    row = np.arange(cases.LM_MAX_LENGTH) < cases.LM_PROMPT + 1
    cache_mask = np.broadcast_to(row, (cases.LM_BATCH, cases.LM_MAX_LENGTH)).astype("bool")
    inputs = {"tokens": tokens, "mask": mask, "token": tokens[:, :1], "cache_mask": cache_mask, "cache": cache}
    return model, twins.kv_decoder(model).eval(), inputs


def forward_mismatches(name: str, fault: Callable[[Any], None] | None = None) -> dict[str, float]:
    """What differs beyond TOLERANCE between the Keras model `name` (convnet, kv_decoder) and its
    twin, with `fault` applied to the twin first: {what: largest difference}."""
    model, twin, inputs = convnet_and_twin() if name == "convnet" else kv_decoder_and_twin()
    if fault is not None:
        fault(twin)
    found: dict[str, float] = {}

    def compare(what: str, keras_value: Any, twin_value: Any) -> None:
        keras_value, twin_value = array(keras_value), twin_value.detach().numpy()
        gap = float("inf") if keras_value.shape != twin_value.shape else difference(keras_value, twin_value)
        if not gap <= TOLERANCE:
            found[what] = gap

    t = {key: torch.as_tensor(value) for key, value in inputs.items()}
    if name == "convnet":
        compare("forward", model(inputs["images"], training=False), twin(t["images"]))
        return found
    compare("forward", model({"token_ids": inputs["tokens"], "padding_mask": inputs["mask"]}, training=False),
            twin(t["tokens"], t["mask"]))
    logits, cache = model({"token_ids": inputs["token"], "padding_mask": inputs["cache_mask"]},
                          cache=keras.ops.convert_to_tensor(inputs["cache"]),
                          cache_update_index=cases.LM_PROMPT, training=False)
    twin_logits, twin_cache = twin(t["token"], t["cache_mask"], cache=t["cache"], cache_update_index=cases.LM_PROMPT)
    compare("decode step: logits", logits, twin_logits)
    compare("decode step: cache", cache, twin_cache)
    return found


@pytest.mark.parametrize("name", ["convnet", "kv_decoder"])
def test_the_compile_bench_twin_computes_the_keras_forward(name: str) -> None:
    assert forward_mismatches(name) == {}


def spatial_kernel_transposed(twin: Any) -> None:
    """Conv2D's kernel (kh, kw, in, out) permuted to (out, in, kw, kh)."""
    with torch.no_grad():
        for module in twin.modules():
            if isinstance(module, torch.nn.Conv2d):
                module.weight.copy_(module.weight.transpose(2, 3).clone())


def moving_statistics_not_copied(twin: Any) -> None:
    for module in twin.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.reset_running_stats()


def decoder_query_key_swapped(twin: Any) -> None:
    for block in twin.blocks:
        block.query, block.key = block.key, block.query


def positions_reversed(twin: Any) -> None:
    with torch.no_grad():
        twin.position_embedding.copy_(twin.position_embedding.flip(0).clone())


def cache_written_one_later(twin: Any) -> None:
    """Each block writes the new keys and values one position after `cache_update_index`."""
    for block in twin.blocks:
        forward = block.forward
        block.forward = lambda x, mask, cache=None, index=0, forward=forward: forward(x, mask, cache, index + 1)


FORWARD_FAULTS = [
    ("convnet", spatial_kernel_transposed),
    ("convnet", moving_statistics_not_copied),
    ("kv_decoder", decoder_query_key_swapped),
    ("kv_decoder", positions_reversed),
    ("kv_decoder", cache_written_one_later),
]


@pytest.mark.parametrize(("name", "fault"), FORWARD_FAULTS,
                         ids=[f"{name}-{fault.__name__}" for name, fault in FORWARD_FAULTS])
def test_a_faulty_compile_bench_twin_fails_the_comparison(name: str, fault: Callable[[Any], None]) -> None:
    found = forward_mismatches(name, fault)
    assert found != {}
    if fault is cache_written_one_later:  # the sequence's forward has no cache: only the decode step differs
        assert "forward" not in found and "decode step: cache" in found
