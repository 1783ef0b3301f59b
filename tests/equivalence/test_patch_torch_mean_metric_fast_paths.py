"""Patch torch-mean-metric-fast-paths on the installed fork.

The patch puts torch fast paths into `keras.src.metrics.reduction_metrics.Mean.update_state` and
`Mean.result`. The oracle is the release under test: both methods compiled from the unpatched
source (`tests/equivalence/upstream.py`). Each scenario runs on two metrics in the same state, one
through the patched methods and one through upstream's, and must end the same: what the call
returns or raises, each variable's value bits, dtype, shape, device, `requires_grad`, autograd
leafness and how many times it was written (torch's version counter), and `result()`'s type,
dtype, shape, device, `requires_grad` and bits. The fields the guards read are varied: the
values' dtype, rank, layout, special values and `requires_grad`, the weight's kind (None, int in
and out of [0, 2**24], float, tensors of other dtypes and shapes, numpy), a mask, the metric's
dtype and class, the variables' state (zero, -0.0 or NaN counts, trainable, shadowed methods),
scopes (stateless, autocast, device), torch modes, monkeypatched ops, grad and inference mode,
torch.compile; models trained and evaluated with it end as with upstream's methods. Keras's
index-less "cuda" (a default GPU machine): the installed helpers, rebound onto a stand-in torch
whose current cuda device the test changes (tests/support/torch_current_cuda.py), take the fast
paths exactly when torch's `.to("cuda")` keeps the variables and values where they are, and the
cuda result's quotient has upstream's `divide_no_nan` bits for every total and count.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import backend_numpy, patch_applied, set_mask
from tests.support import torch_current_cuda as standin

NAME = "torch-mean-metric-fast-paths"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-mean-metric-fast-paths")

if APPLIED:
    from keras.src import backend as backend_module
    from keras.src import ops as ops_module
    from keras.src.metrics import reduction_metrics as rm

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32")
SPECIALS = (None, np.nan, np.inf, -np.inf, -0.0, 0.0)


@functools.cache
def oracles() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Upstream's `Mean.update_state` and `Mean.result`, compiled once: new code objects for each
    of the many scenarios would let Dynamo meet a recycled code id in the compiled tests."""
    return (upstream.original(rm.Mean.update_state, owner=rm.Mean),
            upstream.original(rm.Mean.result, owner=rm.Mean))


@contextlib.contextmanager
def patch_off() -> Iterator[None]:
    """`Mean` with upstream's `update_state` and `result` (the patch off)."""
    update_state, result = oracles()
    with mock.patch.object(rm.Mean, "update_state", update_state), mock.patch.object(rm.Mean, "result", result):
        yield


def bits(x: Any) -> tuple[Any, ...]:
    """Type, dtype, shape, device, grad state and the exact bytes of a tensor or variable."""
    if TORCH:
        import torch

        value = x.value if isinstance(x, keras.Variable) else x
        if isinstance(value, torch.Tensor):
            data = b"meta" if value.is_meta else value.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            return (type(value).__name__, str(value.dtype), tuple(value.shape), str(value.device),
                    value.requires_grad, value.is_leaf, value.grad_fn is None,
                    data if isinstance(data, bytes) else data.numpy().tobytes())
    array = np.asarray(keras.ops.convert_to_numpy(x))
    return (type(x).__name__, str(array.dtype), array.shape, array.tobytes())


def state(metric: Any) -> tuple[Any, ...]:
    variables = [metric.total, metric.count]
    versions = tuple(-1 if v.value.is_inference() else v.value._version for v in variables) if TORCH else ()
    return tuple(bits(v) for v in variables) + (versions,)


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        got = call()
    except Exception as error:  # noqa: BLE001 - the exception is part of what is compared
        return "raised", (type(error), str(error))
    if got is None or isinstance(got, (int, list, tuple)):
        return "returned", got
    return "returned", bits(got)


def fresh(make: Callable[[], Any], total: float, count: float) -> Any:
    metric = make()
    metric.total.assign(total)
    metric.count.assign(count)
    return metric


def compare(make: Callable[[], Any], total: float, count: float, *steps: Callable[[Any], Any]) -> list[Any]:
    """Run `steps` on a fresh metric with the patch on, then on one with it off; equal records."""
    records = []
    for off in (False, True):
        with patch_off() if off else contextlib.nullcontext():
            metric = fresh(make, total, count)
            before = state(metric)[-1]
            record = []
            for step in steps:
                record.append(outcome(lambda step=step, metric=metric: step(metric)))
                now = state(metric)
                versions = tuple(n - b for n, b in zip(now[-1], before, strict=True)) if TORCH else ()
                record.append(now[:-1] + (versions,))
            record.append(outcome(metric.result))
            records.append(record)
    assert records[0] == records[1]
    return records[0]


def update(values: Any, sample_weight: Any = None) -> Callable[[Any], Any]:
    return lambda metric: metric.update_state(values, sample_weight=sample_weight)


def tensor(array: Any, dtype: str = "float32") -> Any:
    return keras.ops.convert_to_tensor(np.asarray(array), dtype=dtype)


def test_the_patch_is_in_and_the_oracle_is_upstreams() -> None:
    update_state, result = oracles()
    assert "_forkgen_mean_update" in rm.Mean.update_state.__code__.co_names
    assert "_forkgen_mean_update" not in update_state.__code__.co_names
    assert "_forkgen_mean_result" in rm.Mean.result.__code__.co_names
    assert "_forkgen_mean_result" not in result.__code__.co_names


WEIGHTS = ("none", "int", "big int", "negative int", "float", "same", "same float64", "row", "numpy", "grad")


def weight_of(kind: str, shape: tuple[int, ...], rng: np.random.Generator, n: int) -> Any:
    if kind == "none":
        return None
    if kind == "int":
        return n
    if kind == "big int":
        return 2**24 + 1 + n
    if kind == "negative int":
        return -n - 1
    if kind == "float":
        return 0.5 + n
    array = np.asarray(rng.uniform(0, 2, shape)).astype("float32")
    if kind == "same":
        return tensor(array)
    if kind == "same float64":
        return tensor(array, "float64")
    if kind == "row":
        return tensor(np.asarray(rng.uniform(0, 2, shape[:1] or (3,))).astype("float32"))
    if kind == "numpy":
        return array
    assert kind == "grad"
    if not TORCH:
        return tensor(array)
    import torch

    return torch.tensor(array, requires_grad=True) * 1.0


@settings(deadline=None)
@given(
    shape=st.sampled_from([(), (1,), (5,), (32,), (0,), (4, 3), (2, 3, 2)]),
    dtype=st.sampled_from(DTYPES),
    weight=st.sampled_from(WEIGHTS),
    special=st.sampled_from(SPECIALS),
    total=st.sampled_from([0.0, -0.0, 1.5, np.nan, -3.25, 1e30]),
    count=st.sampled_from([0.0, -0.0, 2.0, 7.0, np.nan, 1e-30]),
    metric_dtype=st.sampled_from([None, "float32", "float16", "float64", "mixed_float16"]),
    masked=st.booleans(),
    grad=st.booleans(),
    n=st.integers(0, 40),
    seed=st.integers(0, 2**16),
)
def test_update_and_result_like_upstream(shape: tuple[int, ...], dtype: str, weight: str, special: Any, total: float,
                                         count: float, metric_dtype: Any, masked: bool, grad: bool, n: int,
                                         seed: int) -> None:
    rng = np.random.default_rng(seed)
    array = rng.standard_normal(shape) * 3
    if dtype == "int32":
        array = np.round(array)
    elif special is not None and array.size:
        array.flat[0] = special
    values = tensor(array, dtype)
    if grad and TORCH and dtype != "int32":
        values = values.detach().clone().requires_grad_(True) * 1.0
    if masked:
        set_mask(values, tensor(rng.integers(0, 2, shape[:1] or ()).astype(bool), "bool"))
    sample_weight = weight_of(weight, shape, rng, n)
    compare(lambda: keras.metrics.Mean(dtype=metric_dtype), total, count,
            update(values, sample_weight), update(values, sample_weight))


@pytest.mark.parametrize("count", [0.0, -0.0, 3.0, np.nan, np.inf])
@pytest.mark.parametrize("total", [0.0, -0.0, 2.0, np.nan, -np.inf])
def test_results_like_upstream(total: float, count: float) -> None:
    compare(keras.metrics.Mean, total, count)


@pytest.mark.parametrize("weight", WEIGHTS)
@pytest.mark.parametrize("shape", [(), (6,), (6, 1), (6, 4)])
def test_wrapped_metrics_like_upstream(weight: str, shape: tuple[int, ...]) -> None:
    """MeanMetricWrapper metrics (their `update_state` ends in `Mean.update_state`), with and
    without a mask on the predictions."""
    rng = np.random.default_rng(len(shape))
    y_true = tensor(rng.integers(0, 4, shape).astype("float32"))
    y_pred = tensor(rng.standard_normal(shape).astype("float32"))
    sample_weight = weight_of(weight, shape[:1], rng, 3)
    for make in (keras.metrics.MeanAbsoluteError, keras.metrics.BinaryAccuracy, keras.metrics.MeanSquaredError):
        compare(make, 0.0, 0.0, update_wrapped(y_true, y_pred, sample_weight), update_wrapped(y_true, y_pred, None))
        masked = tensor(np.asarray(keras.ops.convert_to_numpy(y_pred)))
        set_mask(masked, tensor(rng.integers(0, 2, shape[:1]).astype(bool), "bool"))
        compare(make, 1.0, 2.0, update_wrapped(y_true, masked, sample_weight))


def update_wrapped(y_true: Any, y_pred: Any, sample_weight: Any) -> Callable[[Any], Any]:
    return lambda metric: metric.update_state(y_true, y_pred, sample_weight=sample_weight)


def test_sparse_categorical_accuracy_like_upstream() -> None:
    rng = np.random.default_rng(5)
    y_true = tensor(rng.integers(0, 10, 32), "int32")
    y_pred = tensor(rng.standard_normal((32, 10)).astype("float32"))
    steps = [update_wrapped(y_true, y_pred, None), update_wrapped(y_true, y_pred, tensor(rng.uniform(0, 1, 32)))]
    compare(keras.metrics.SparseCategoricalAccuracy, 0.0, 0.0, *steps)


def test_loss_tracker_updates_like_upstream() -> None:
    """The trainers' loss tracker: a 0-d loss weighted by the batch size, a grad-requiring loss."""
    steps = [update(tensor(2.5), 32), update(tensor(-0.0), 0), update(tensor(np.nan), 7), update(tensor(1e38), 2**24)]
    if TORCH:
        import torch

        leaf = torch.tensor(1.25, requires_grad=True)
        loss = leaf * 3.0
        steps.append(update(loss, 16))
        compare(keras.metrics.Mean, 0.0, 0.0, *steps)
        assert loss.grad_fn is not None and leaf.grad is None
        loss.backward()
        assert leaf.grad is not None and float(leaf.grad) == 3.0
    else:
        compare(keras.metrics.Mean, 0.0, 0.0, *steps)


def test_masked_values_like_upstream() -> None:
    """A mask on the values counts with a weight (upstream folds it into the weight), not without."""
    scalar = tensor(2.5)
    set_mask(scalar, tensor(False, "bool"))
    row = tensor([1.0, 2.0, 4.0])
    set_mask(row, tensor([True, False, True], "bool"))
    steps = [update(scalar, 8), update(scalar), update(row, tensor([0.5, 1.0, 2.0])), update(row)]
    compare(keras.metrics.Mean, 1.0, 2.0, *steps)


def test_aliased_arguments_like_upstream() -> None:
    """A weight or values that are a variable's own parameter are read in upstream's order."""
    if not TORCH:
        pytest.skip("parameters: torch")

    def weight_is_total(metric: Any) -> Any:
        return metric.update_state(tensor(1.5), sample_weight=metric.total.value)

    def values_are_count(metric: Any) -> Any:
        return metric.update_state(metric.count.value, sample_weight=metric.total.value)

    compare(keras.metrics.Mean, 2.0, 3.0, weight_is_total, values_are_count, update(tensor([1.0, 2.0])))


# -- fallbacks ------------------------------------------------------------------------------


def test_stateless_scope_like_upstream() -> None:
    def stateless(metric: Any) -> Any:
        mapping = [(v, v.value * 2.0) for v in metric.variables]
        with backend_module.StatelessScope(state_mapping=mapping) as scope:
            metric.update_state(tensor([1.0, 2.0]), sample_weight=None)
            updates = [scope.get_current_value(v) for v in metric.variables]
            result = metric.result()
        return [bits(u) for u in updates] + [bits(result)]

    record = compare(keras.metrics.Mean, 1.0, 2.0, stateless)
    assert record[0][0] == "returned"


def test_autocast_scope_like_upstream() -> None:
    def autocast(metric: Any) -> Any:
        with backend_module.AutocastScope("float16"):
            metric.update_state(tensor([1.0, 2.0]))
            return metric.result()

    compare(keras.metrics.Mean, 1.0, 2.0, autocast)


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "meta", "cuda", "nonsense"])
def test_device_scopes_like_upstream(device: str) -> None:
    if not TORCH:
        pytest.skip("device scopes: torch")

    def scoped(metric: Any) -> Any:
        values = tensor([1.0, 2.0])
        with keras.device(device):
            metric.update_state(values, sample_weight=None)
            return metric.result()

    compare(keras.metrics.Mean, 1.0, 2.0, scoped)


@pytest.mark.parametrize("cuda_built", [True, False], ids=["cuda torch", "cpu-only torch"])
def test_cuda_without_an_index_is_the_current_cuda_device_at_each_call(cuda_built: bool) -> None:
    """The installed helpers on the stand-in torch: for "cuda" `update_state`'s fast path is taken
    exactly when both variables and the values are on the current cuda device, asked at each
    call (the test changes it between calls) and only with the total on a cuda device; the
    result there is the quotient, without reading the count (a sync); "mps", "xpu", "meta" and
    rejected strings never take them."""
    fake = standin.Torch(cuda_built)
    names = ("_forkgen_mean_place", "_forkgen_mean_current", "_forkgen_mean_class", "_forkgen_mean_unobserved",
             "_forkgen_mean_state", "_forkgen_mean_update", "_forkgen_mean_result")
    namespace = standin.rebind(standin.mean_standin(dict(vars(rm)), fake), tuple(getattr(rm, n) for n in names))
    assert standin.check_mean_state(namespace, fake) > 0
    assert (fake.asked > 0) is cuda_built and fake.synced == 0


def test_the_cuda_quotient_has_divide_no_nans_bits() -> None:
    """`_forkgen_mean_quotient` (the cuda result, here on the cpu) against upstream's
    `divide_no_nan` on the metric's two 0-d float32 parameters: type, dtype, device, grad and bits
    for zero, signed zero, NaN, infinite, tiny and huge totals and counts."""
    if not TORCH:
        pytest.skip("torch only")
    import torch

    oracle = upstream.original(backend_numpy().divide_no_nan)
    specials = (0.0, -0.0, 1.0, -3.0, 7.0, 1e-45, -1e-38, 3e38, 16777216.0, np.nan, -np.nan, np.inf, -np.inf)
    for total in specials:
        for count in specials:
            t, c = (torch.nn.Parameter(torch.tensor(v, dtype=torch.float32), requires_grad=False)
                    for v in (total, count))
            assert bits(rm._forkgen_mean_quotient(t, c)) == bits(oracle(t, c)), (total, count)


def test_torch_modes_like_upstream() -> None:
    if not TORCH:
        pytest.skip("torch modes")
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Functions(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    class Dispatches(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    for mode_type in (Functions, Dispatches):
        def observed(metric: Any, mode_type: Any = mode_type) -> Any:
            with mode_type() as mode:
                metric.update_state(tensor([1.0, 2.0]), sample_weight=tensor([0.5, 1.5]))
                metric.update_state(tensor(3.0), sample_weight=4)
                result = metric.result()
            return mode.seen, bits(result)

        compare(keras.metrics.Mean, 1.0, 2.0, observed)

    def vmapped(metric: Any) -> Any:
        return bits(torch.func.vmap(lambda x: metric.update_state(x) or x.sum())(torch.ones(3, 2)))

    compare(keras.metrics.Mean, 1.0, 2.0, vmapped)


@pytest.mark.parametrize("name", ["sum", "shape", "cast", "convert_to_tensor", "broadcast_to", "divide_no_nan"])
def test_a_monkeypatched_op_is_called_as_upstream_calls_it(name: str) -> None:
    original = getattr(ops_module, name)
    calls: list[str] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return original(*args, **kwargs)

    counts = []
    for off in (False, True):
        with mock.patch.object(ops_module, name, spy), patch_off() if off else contextlib.nullcontext():
            metric = fresh(keras.metrics.Mean, 1.0, 2.0)
            metric.update_state(tensor([1.0, 2.0, 4.0]))
            metric.update_state(tensor(2.0), sample_weight=3)
            metric.update_state(tensor([1.0, 2.0]), sample_weight=tensor([0.5, 0.25]))
            result = metric.result()
            counts.append((len(calls), state(metric)[:-1], bits(result)))
            calls.clear()
    assert counts[0] == counts[1]


def test_monkeypatched_reduction_and_mask_getters() -> None:
    """`reduce_to_samplewise_values`, `squeeze_or_expand_to_same_rank` and the mask getter
    replaced: the replacement is called as upstream calls it."""
    from keras.src import losses

    def checked(owner: Any, name: str) -> None:
        original = getattr(owner, name)
        calls: list[str] = []

        def spy(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return original(*args, **kwargs)

        counts = []
        for off in (False, True):
            with mock.patch.object(owner, name, spy), patch_off() if off else contextlib.nullcontext():
                metric = fresh(keras.metrics.Mean, 1.0, 2.0)
                metric.update_state(tensor([1.0, 2.0]))
                metric.update_state(tensor(2.0), sample_weight=3)
                counts.append((len(calls), state(metric)[:-1]))
                calls.clear()
        assert counts[0] == counts[1] and counts[0][0] > 0

    checked(rm, "reduce_to_samplewise_values")
    checked(losses.loss, "squeeze_or_expand_to_same_rank")
    if hasattr(backend_module, "get_keras_mask") and "get_keras_mask" not in vars(rm):
        checked(backend_module, "get_keras_mask")
    if "get_keras_mask" in vars(rm):
        checked(rm, "get_keras_mask")


def test_metric_classes_and_variables_off_the_plain_path() -> None:
    class TotalProperty(keras.metrics.Mean):
        reads = 0

        @property
        def total(self) -> Any:
            type(self).reads += 1
            return self.__dict__["_total"]

        @total.setter
        def total(self, value: Any) -> None:
            self.__dict__["_total"] = value

    class OwnDtype(keras.metrics.Mean):
        @property
        def dtype(self) -> Any:
            return "float32"

    steps = [update(tensor([1.0, 2.0])), update(tensor(3.0), 2)]
    compare(TotalProperty, 1.0, 2.0, *steps)
    compare(OwnDtype, 1.0, 2.0, *steps)

    def shadowed(metric: Any) -> Any:
        calls = []
        original = metric.total.assign_add
        metric.total.assign_add = lambda value: calls.append(1) or original(value)
        metric.update_state(tensor([1.0, 2.0]))
        return len(calls)

    compare(keras.metrics.Mean, 1.0, 2.0, shadowed)

    def trainable(metric: Any) -> Any:
        metric.total.trainable = True
        metric.update_state(tensor([1.0, 2.0]))
        return metric.result()

    compare(keras.metrics.Mean, 1.0, 2.0, trainable)


def test_grad_and_inference_modes_like_upstream() -> None:
    if not TORCH:
        pytest.skip("grad modes: torch")
    import torch

    def in_mode(mode: Callable[[], Any], values: Callable[[], Any], weight: Any = None) -> Callable[[Any], Any]:
        def step(metric: Any) -> Any:
            with mode():
                metric.update_state(values(), sample_weight=weight)
                return metric.result()

        return step

    def leaf() -> Any:
        return torch.tensor([1.0, 2.0], requires_grad=True) * 2.0

    for mode in (torch.no_grad, torch.enable_grad, torch.inference_mode):
        compare(keras.metrics.Mean, 1.0, 2.0, in_mode(mode, leaf), in_mode(mode, lambda: torch.tensor(2.0), 3))

    records = []
    for off in (False, True):
        with patch_off() if off else contextlib.nullcontext():
            with torch.inference_mode():
                metric = fresh(keras.metrics.Mean, 1.0, 2.0)
            records.append([outcome(lambda metric=metric: metric.update_state(tensor([1.0, 2.0]))), state(metric),
                            outcome(metric.result)])
    assert records[0] == records[1] and records[0][0][0] == "raised"


def test_the_fast_paths_run_on_torch() -> None:
    if not TORCH:
        pytest.skip("the fast paths are torch's")
    import torch

    metric = fresh(keras.metrics.Mean, 1.0, 2.0)
    with mock.patch.object(rm, "_forkgen_mean_accumulate", wraps=rm._forkgen_mean_accumulate) as accumulate:
        metric.update_state(tensor([1.0, 2.0]))
        metric.update_state(tensor(2.0), sample_weight=3)
        metric.update_state(tensor([1.0, 2.0]), sample_weight=tensor([0.5, 0.25]))
    assert accumulate.call_count == 3
    with mock.patch.object(torch, "where", side_effect=AssertionError("upstream's divide_no_nan")):
        result = metric.result()
    assert float(result) == float(np.float32(1.0 + 3.0 + 6.0 + 1.0) / np.float32(2.0 + 2.0 + 3.0 + 0.75))


# -- models ---------------------------------------------------------------------------------


def _model_run(weighted: bool, jit_compile: bool) -> list[Any]:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", keras.metrics.SparseCategoricalCrossentropy(from_logits=True)], weighted_metrics=["accuracy"] if weighted else None,
                  jit_compile=jit_compile)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 6)).astype("float32")
    y = rng.integers(0, 4, 40).astype("int32")
    sw = rng.uniform(0, 2, 40).astype("float32") if weighted else None
    history = model.fit(x, y, sample_weight=sw, batch_size=16, epochs=2, verbose=0, validation_split=0.2)
    logs = model.evaluate(x, y, sample_weight=sw, batch_size=16, verbose=0, return_dict=True)
    batch = model.train_on_batch(x[:8], y[:8], return_dict=True)
    state = [np.asarray(keras.ops.convert_to_numpy(v)).tobytes() for v in model.weights + model.optimizer.variables]
    state += [np.asarray(keras.ops.convert_to_numpy(v)).tobytes() for v in model.metrics_variables]
    return state + [repr(sorted(history.history.items())), repr(sorted(logs.items())), repr(sorted(batch.items()))]


@pytest.mark.skipif(keras.backend.backend() == "numpy", reason="the numpy backend does not train")
@pytest.mark.parametrize("weighted", [False, True])
def test_training_like_upstream(weighted: bool) -> None:
    got = _model_run(weighted, False)
    with patch_off():
        want = _model_run(weighted, False)
    assert got == want


def test_compiled_training_like_upstream() -> None:
    if not TORCH:
        pytest.skip("jit_compile on torch: torch.compile")
    import torch

    def compiled() -> list[Any]:
        # Layers left from earlier tests are collected first: Dynamo guards on the entries of
        # layer-call-fast-lane's weak dict of layers, and one collected between tracing and
        # guard building makes the guard fail to build (IndexError).
        gc.collect()
        torch._dynamo.reset()
        return _model_run(False, True)

    got = compiled()
    with patch_off():
        want = compiled()
    torch._dynamo.reset()
    assert got == want


def test_dynamo_traces_like_upstream() -> None:
    """Under torch.compile the fast paths step aside: the same graphs and breaks as upstream's."""
    if not TORCH:
        pytest.skip("dynamo: torch")
    import torch

    def explained() -> tuple[int, int, str]:
        torch._dynamo.reset()
        metric = fresh(keras.metrics.Mean, 1.0, 2.0)

        def step(values: Any) -> Any:
            metric.update_state(values, sample_weight=4)
            metric.update_state(values)
            return metric.result()

        report = torch._dynamo.explain(step)(torch.tensor(2.0))
        return report.graph_count, report.graph_break_count, bits(metric.total)[-1].hex()

    got = explained()
    with patch_off():
        want = explained()
    torch._dynamo.reset()
    assert got == want
