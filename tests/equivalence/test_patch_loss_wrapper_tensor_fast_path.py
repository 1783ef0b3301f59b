"""Patch loss-wrapper-tensor-fast-path on the installed fork.

The patch puts a torch fast path first in `keras.src.losses.losses.LossFunctionWrapper.call`: two
exact torch tensors get upstream's rank match once and go to `fn` without the three pytree walks.
The patched method must do what the release under test's own, unpatched `call`
(`upstream.original`, compiled from its sources into the installed module,
tests/equivalence/upstream.py) does with the same arguments: call `fn` with the same objects,
return the same kind of tensor, dtype, shape, device, mask and bits, give the same gradients and
raise the same errors, on the fast path and on every fallback the guards read (nested values,
arrays, parameters and subclasses, symbolic tensors, `torch.Tensor` registered as a pytree node,
a monkeypatched `tree.map_structure`/`map_structure_up_to`/`squeeze_or_expand_to_same_rank`); models
trained and evaluated with it must end with the same weights, optimizer state, metrics and logs as
with upstream's method; dynamo must trace it as it traces upstream's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from keras import ops

from tests.equivalence import upstream
from tests.equivalence.helpers import get_mask, patch_applied

NAME = "loss-wrapper-tensor-fast-path"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply loss-wrapper-tensor-fast-path")

if APPLIED:
    from keras.src import tree as tree_module
    from keras.src.losses import losses as losses_module

    Wrapper = losses_module.LossFunctionWrapper


@functools.cache
def reference() -> Callable[..., Any]:
    return upstream.original(Wrapper.call, owner=Wrapper)


def bits(x: Any) -> Any:
    """dtype, shape and the exact values of a tensor (every dtype here widens exactly to float64),
    or the structure of bits of a nested value."""
    if isinstance(x, (list, tuple)):
        return type(x).__name__, [bits(v) for v in x]
    if isinstance(x, dict):
        return {k: bits(v) for k, v in x.items()}
    dtype = keras.backend.standardize_dtype(x.dtype)
    array = np.asarray(keras.ops.convert_to_numpy(ops.cast(x, "float64")))
    return dtype, tuple(array.shape), array.tobytes()


def same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    assert bits(got) == bits(want)
    if TORCH and not isinstance(want, (list, tuple, dict)):
        assert got.device == want.device and got.requires_grad == want.requires_grad
        assert (got.grad_fn is None) == (want.grad_fn is None)
        if want.grad_fn is not None:
            assert type(got.grad_fn) is type(want.grad_fn)
    mask, want_mask = get_mask(got), get_mask(want)
    assert (mask is None) == (want_mask is None)
    if want_mask is not None:
        assert bits(mask) == bits(want_mask)


def outcome(function: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return "value", function(*args)
    except Exception as error:  # noqa: BLE001 - the error is part of the behaviour compared
        return "error", (type(error), str(error))


def both(wrapper: Any, y_true: Any, y_pred: Any) -> Any:
    """Upstream's and the patched call on the same arguments: the same value, or the same error."""
    want = outcome(reference(), wrapper, y_true, y_pred)
    got = outcome(Wrapper.call, wrapper, y_true, y_pred)
    assert got[0] == want[0], (got, want)
    if want[0] == "error":
        assert got[1] == want[1]
    else:
        same(got[1], want[1])
    return got[1]


def recording(calls: list[tuple[Any, ...]]) -> Callable[..., Any]:
    def fn(y_true: Any, y_pred: Any, **kwargs: Any) -> Any:
        calls.append((y_true, y_pred, tuple(sorted(kwargs.items()))))
        return ops.sum(y_pred, axis=-1) + ops.sum(y_true, axis=-1) if hasattr(y_pred, "shape") else y_pred
    return fn


#: Function losses (every compiled loss given as a string or a built-in loss class is one) and
#: the labels they take: "int" labels, or "float" labels of y_pred's shape.
LOSSES: list[tuple[Any, dict[str, Any], str]] = [
    (keras.losses.mean_squared_error, {}, "float"),
    (keras.losses.mean_absolute_error, {}, "float"),
    (keras.losses.huber, {"delta": 0.5}, "float"),
    (keras.losses.cosine_similarity, {"axis": -1}, "float"),
    (keras.losses.binary_crossentropy, {"from_logits": True}, "binary"),
    (keras.losses.categorical_crossentropy, {"from_logits": False}, "onehot"),
    (keras.losses.sparse_categorical_crossentropy, {"from_logits": True}, "int"),
    (keras.losses.sparse_categorical_crossentropy, {"from_logits": True, "ignore_class": 0}, "int"),
]


def labels(kind: str, rng: np.random.Generator, batch: int, classes: int, rank1: bool) -> np.ndarray:
    if kind == "int":
        y = rng.integers(0, classes, batch)
        return y if rank1 else y[:, None]
    if kind == "binary":
        return rng.integers(0, 2, (batch, classes)).astype("float32")
    if kind == "onehot":
        return np.eye(classes, dtype="float32")[rng.integers(0, classes, batch)]
    return rng.standard_normal((batch, classes)).astype("float32")


def tensor(array: Any, dtype: str | None = None, grad: bool = False) -> Any:
    x = ops.convert_to_tensor(array, dtype=dtype)
    if grad and TORCH:
        x.requires_grad_(True)
    return x


def test_the_patch_is_in_and_the_oracle_is_upstreams() -> None:
    assert "_forkgen_wrapper_call_functions" in Wrapper.call.__code__.co_names
    assert "_forkgen_wrapper_call_functions" not in reference().__code__.co_names


@settings(max_examples=80, deadline=None)
@given(
    loss=st.integers(0, len(LOSSES) - 1),
    batch=st.integers(1, 6),
    classes=st.integers(1, 5),
    rank1=st.booleans(),
    y_true_dtype=st.sampled_from([None, "float32", "float16", "int32"]),
    y_pred_dtype=st.sampled_from(["float32", "float16", "float64"]),
    grad=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_function_losses_like_upstream(loss: int, batch: int, classes: int, rank1: bool, y_true_dtype: Any,
                                       y_pred_dtype: str, grad: bool, seed: int) -> None:
    fn, kwargs, kind = LOSSES[loss]
    rng = np.random.default_rng(seed)
    wrapper = Wrapper(fn, **kwargs)
    y_true = tensor(labels(kind, rng, batch, classes, rank1), y_true_dtype)
    y_pred = tensor(rng.standard_normal((batch, classes)), y_pred_dtype, grad)
    both(wrapper, y_true, y_pred)


@pytest.mark.parametrize(("true_shape", "pred_shape"), [
    ((4,), (4,)), ((4, 1), (4,)), ((4,), (4, 1)), ((4, 1), (4, 3)), ((4,), (4, 3)), ((4, 3), (4,)),
    ((4, 3, 1), (4, 3)), ((4, 3), (4, 3, 1)), ((2, 3), (4, 5)), ((), ()), ((), (3,)), ((1,), ()),
])
def test_rank_matches_hand_fn_the_same_objects(true_shape: tuple[int, ...], pred_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(4)
    y_true = tensor(np.asarray(rng.standard_normal(true_shape), dtype="float32"))
    y_pred = tensor(np.asarray(rng.standard_normal(pred_shape), dtype="float32"), grad=True)
    got_calls: list[tuple[Any, ...]] = []
    want_calls: list[tuple[Any, ...]] = []
    want = outcome(reference(), Wrapper(recording(want_calls), scale=2), y_true, y_pred)
    got = outcome(Wrapper.call, Wrapper(recording(got_calls), scale=2), y_true, y_pred)
    assert got[0] == want[0]
    if want[0] == "error":
        assert got[1] == want[1]
    else:
        same(got[1], want[1])
    assert len(got_calls) == len(want_calls)
    for (gt, gp, gk), (wt, wp, wk) in zip(got_calls, want_calls, strict=True):
        assert gk == wk
        same(gt, wt)
        same(gp, wp)
        # What the rank match leaves as it is goes to `fn` as the very object given.
        assert (gt is y_true) == (wt is y_true) and (gp is y_pred) == (wp is y_pred)


def test_gradients_like_upstream() -> None:
    if not TORCH:
        pytest.skip("gradients through a tensor's .grad: torch only")
    import torch

    rng = np.random.default_rng(5)
    for fn, kwargs, kind in LOSSES:
        for rank1 in (True, False):
            array = rng.standard_normal((5, 3)).astype("float32")
            y = labels(kind, rng, 5, 3, rank1)
            grads = []
            for function in (reference(), Wrapper.call):
                y_pred = torch.tensor(array, requires_grad=True)
                out = function(Wrapper(fn, **kwargs), tensor(y, "float32"), y_pred * 1.5)
                out.sum().backward()
                grads.append(y_pred.grad)
            assert bits(grads[0]) == bits(grads[1])


@pytest.mark.parametrize("kind", ["list", "tuple", "dict", "numpy", "python", "variable", "parameter",
                                  "subclass", "nested_pred", "nested_true", "array_true"])
def test_other_values_like_upstream(kind: str) -> None:
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((3, 2)).astype("float32"), rng.standard_normal((3, 2)).astype("float32")
    wrapper = Wrapper(keras.losses.mean_squared_error)
    if kind == "list":
        both(wrapper, [tensor(a), tensor(b)], [tensor(b), tensor(a)])
    elif kind == "tuple":
        both(wrapper, (tensor(a), tensor(b)), (tensor(b), tensor(a)))
    elif kind == "dict":
        both(Wrapper(recording([])), {"x": tensor(a), "y": tensor(b)}, {"x": tensor(b), "y": tensor(a)})
    elif kind == "numpy":
        both(wrapper, a, b)
    elif kind == "python":
        both(wrapper, a.tolist(), b.tolist())
    elif kind == "variable":
        both(wrapper, tensor(a), keras.Variable(b))
    elif kind == "nested_pred":
        both(wrapper, tensor(a), [tensor(b)])
    elif kind == "nested_true":
        both(wrapper, [tensor(a)], tensor(b))
    elif kind == "array_true":
        both(wrapper, a, tensor(b))
    elif not TORCH:
        pytest.skip("torch tensor types")
    else:
        import torch

        class Sub(torch.Tensor):
            pass

        if kind == "parameter":
            both(wrapper, tensor(a), torch.nn.Parameter(torch.tensor(b)))
        else:
            both(wrapper, torch.tensor(a).as_subclass(Sub), tensor(b))


def test_symbolic_values_like_upstream() -> None:
    wrapper = Wrapper(keras.losses.sparse_categorical_crossentropy, from_logits=True)
    y_true, y_pred = keras.KerasTensor((None,), dtype="float32"), keras.KerasTensor((None, 4), dtype="float32")
    got = Wrapper.call(wrapper, y_true, y_pred)
    want = reference()(wrapper, y_true, y_pred)
    assert type(got) is type(want) and got.shape == want.shape and got.dtype == want.dtype


def test_a_mask_fn_sets_like_upstream() -> None:
    wrapper = Wrapper(keras.losses.sparse_categorical_crossentropy, from_logits=True, ignore_class=1)
    out = both(wrapper, tensor(np.array([0, 1, 2, 1]), "float32"), tensor(np.eye(4, 3, dtype="float32")))
    assert get_mask(out) is not None


@pytest.mark.parametrize("name", ["map_structure", "map_structure_up_to"])
def test_a_monkeypatched_tree_function_is_called_as_upstream_calls_it(name: str) -> None:
    original = getattr(tree_module, name)
    calls: list[str] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return original(*args, **kwargs)

    wrapper = Wrapper(keras.losses.mean_squared_error)
    args = (tensor(np.ones((3, 1), "float32")), tensor(np.arange(3.0, dtype="float32")))
    with mock.patch.object(tree_module, name, spy):
        reference()(wrapper, *args)
        upstream_calls = len(calls)
        calls.clear()
        both(wrapper, *args)
    assert upstream_calls and len(calls) == 2 * upstream_calls


def test_a_monkeypatched_rank_match_raising_stop_iteration() -> None:
    """Upstream's tree_map turns a StopIteration of the rank match into torch's length error."""
    def stop(x1: Any, x2: Any) -> Any:
        raise StopIteration

    wrapper = Wrapper(keras.losses.mean_squared_error)
    with mock.patch.object(losses_module, "squeeze_or_expand_to_same_rank", stop):
        both(wrapper, tensor(np.ones((3,), "float32")), tensor(np.ones((3,), "float32")))


def test_a_monkeypatched_rank_match_is_called_as_upstream_calls_it() -> None:
    """The module's `squeeze_or_expand_to_same_rank` replaced: the patched call falls back and calls
    it as upstream does (`mean_squared_error` calls it too)."""
    calls: list[Any] = []
    original = losses_module.squeeze_or_expand_to_same_rank

    def spy(x1: Any, x2: Any) -> Any:
        calls.append((x1, x2))
        return original(x1, x2)

    wrapper = Wrapper(keras.losses.mean_squared_error)
    args = (tensor(np.ones((3, 1), "float32")), tensor(np.arange(3.0, dtype="float32")))
    with mock.patch.object(losses_module, "squeeze_or_expand_to_same_rank", spy):
        want = reference()(wrapper, *args)
        upstream_calls = [tuple(map(bits, c)) for c in calls]
        calls.clear()
        got = Wrapper.call(wrapper, *args)
    same(got, want)
    assert [tuple(map(bits, c)) for c in calls] == upstream_calls and len(upstream_calls) == 2


def test_torch_tensor_registered_as_a_pytree_node() -> None:
    """A tensor that torch's pytree flattens (here into its values, as nested lists of floats) is
    no leaf: upstream's walks hand the rank match floats, and the patched call must too."""
    if not TORCH:
        pytest.skip("torch's pytree")
    import torch
    from torch.utils import _pytree

    def flatten(t: Any) -> tuple[list[Any], Any]:
        return [t.tolist()], None

    def unflatten(children: Any, context: Any) -> Any:
        return torch.tensor(list(children)[0])

    node = _pytree.NodeDef(torch.Tensor, flatten, unflatten, None)
    wrapper = Wrapper(lambda y_true, y_pred: y_pred)
    y_true, y_pred = tensor(np.arange(6.0, dtype="float32").reshape(3, 2)), tensor(np.ones((3, 2), "float32"))
    with mock.patch.dict(_pytree.SUPPORTED_NODES, {torch.Tensor: node}):
        want = outcome(reference(), wrapper, y_true, y_pred)
        got = outcome(Wrapper.call, wrapper, y_true, y_pred)
    assert want[0] == "error"
    assert got == want


def test_the_fast_path_runs_on_torch() -> None:
    if not TORCH:
        pytest.skip("the fast path is torch's")
    from torch.utils import _pytree

    wrapper = Wrapper(keras.losses.sparse_categorical_crossentropy, from_logits=True)
    args = (tensor(np.array([0, 2, 1]), "float32"), tensor(np.eye(3, dtype="float32")))
    want = reference()(wrapper, *args)
    with mock.patch.object(_pytree, "tree_map", side_effect=AssertionError("upstream's tree walks")):
        got = Wrapper.call(wrapper, *args)
    same(got, want)


def test_torch_compile_traces_the_fast_path_like_upstreams() -> None:
    """Dynamo traces the fast path as it traces upstream's body: as many graphs and breaks, the
    same result."""
    if not TORCH:
        pytest.skip("torch.compile")
    import torch
    import torch._dynamo

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    y_true, y_pred = torch.tensor([0.0, 2.0, 1.0]), torch.eye(3)

    def explain() -> tuple[int, int, Any]:
        torch._dynamo.reset()
        explained = torch._dynamo.explain(loss)(y_true, y_pred)
        torch._dynamo.reset()
        return explained.graph_count, explained.graph_break_count, loss(y_true, y_pred)

    patched = explain()
    with upstream.upstream(Wrapper, "call"):
        reference_run = explain()
    assert patched[:2] == reference_run[:2]
    assert torch.equal(patched[2], reference_run[2])


def _train(loss: Any, labels_kind: str, weighted: bool, jit: bool = False, steps: int = 3) -> list[bytes]:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)])
    metrics = ["accuracy"] if labels_kind == "int" else ["mae"]
    model.compile(optimizer="adam", loss=loss, metrics=metrics, jit_compile=jit)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 6)).astype("float32")
    y = (rng.integers(0, 4, (16,)).astype("int64") if labels_kind == "int"
         else rng.standard_normal((16, 4)).astype("float32"))
    sw = rng.uniform(0, 2, 16).astype("float32") if weighted else None
    logs = [model.train_on_batch(x, y, sample_weight=sw, return_dict=True) for _ in range(steps)]
    logs.append(model.test_on_batch(x, y, sample_weight=sw, return_dict=True))
    history = model.fit(x, y, sample_weight=sw, batch_size=4, epochs=1, verbose=0)
    logs.append(history.history)
    logs.append(model.evaluate(x, y, sample_weight=sw, batch_size=8, verbose=0, return_dict=True))
    state = [np.asarray(keras.ops.convert_to_numpy(v)).tobytes() for v in model.weights + model.optimizer.variables]
    state += [np.asarray(keras.ops.convert_to_numpy(v)).tobytes() for v in model.metrics_variables]
    return state + [repr(sorted(log.items())).encode() for log in logs]


@pytest.mark.skipif(keras.backend.backend() == "numpy", reason="the numpy backend does not train")
@pytest.mark.parametrize(
    ("loss", "labels_kind", "weighted"),
    [
        (keras.losses.SparseCategoricalCrossentropy(from_logits=True), "int", False),
        ("sparse_categorical_crossentropy", "int", True),
        ("mse", "float", False),
        (keras.losses.Huber(), "float", True),
        (keras.losses.CategoricalCrossentropy(from_logits=True, reduction="sum"), "float", False),
    ],
)
def test_training_like_upstream(loss: Any, labels_kind: str, weighted: bool) -> None:
    got = _train(loss, labels_kind, weighted)
    with upstream.upstream(Wrapper, "call"):
        want = _train(loss, labels_kind, weighted)
    assert got == want


def test_jit_compiled_training_like_upstream() -> None:
    if not TORCH:
        pytest.skip("jit_compile on torch: torch.compile")
    import torch._dynamo

    torch._dynamo.reset()
    got = _train(keras.losses.SparseCategoricalCrossentropy(from_logits=True), "int", False, jit=True, steps=2)
    torch._dynamo.reset()
    with upstream.upstream(Wrapper, "call"):
        want = _train(keras.losses.SparseCategoricalCrossentropy(from_logits=True), "int", False, jit=True, steps=2)
    torch._dynamo.reset()
    assert got == want
