"""Patch loss-mean-reduction-fast-path on the installed fork.

The patch puts a torch fast path into `keras.src.losses.loss.reduce_values` (a float32 sum
divided by its static element count). The patched function must return what the release under
test's own, unpatched `reduce_values` (`upstream.original`, compiled from its sources into the
installed module, tests/equivalence/upstream.py) returns for the same arguments: same kind of
tensor, dtype, shape and bits, the same gradients, on the fast path (torch, float32, a mean with
1..2**24 elements) and on every fallback (other reductions, a weighted mean, other dtypes, an
empty shape, more than 2**24 elements, symbolic tensors, a monkeypatched op, another backend);
and models trained with it must end with the same weights, metrics and optimizer variables as
with upstream's function.
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
from tests.equivalence.helpers import backend_numpy, compiled, patch_applied

NAME = "loss-mean-reduction-fast-path"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply loss-mean-reduction-fast-path")

if APPLIED:
    from keras.src import ops as ops_module
    from keras.src.losses import loss as loss_module

REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight", "sum", "none", None)
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32")


@functools.cache
def reference() -> Callable[..., Any]:
    return upstream.original(loss_module.reduce_values)


def bits(x: Any) -> tuple[str, tuple[int, ...], bytes]:
    """dtype, shape and the exact values (every supported dtype widens exactly to float64)."""
    dtype = keras.backend.standardize_dtype(x.dtype)
    array = np.asarray(keras.ops.convert_to_numpy(ops.cast(x, "float64")))
    return dtype, tuple(array.shape), array.tobytes()


def same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    assert bits(got) == bits(want)
    if TORCH:
        assert got.device == want.device and got.requires_grad == want.requires_grad


def both(values: Any, sample_weight: Any = None, reduction: Any = "sum_over_batch_size") -> Any:
    want = reference()(values, sample_weight, reduction)
    got = loss_module.reduce_values(values, sample_weight, reduction)
    same(got, want)
    return got


def tensor(array: np.ndarray, dtype: str) -> Any:
    return ops.convert_to_tensor(array, dtype=dtype)


def test_the_patch_is_in_and_the_oracle_is_upstreams() -> None:
    assert "_forkgen_static_count" in loss_module.reduce_values.__code__.co_names
    assert "_forkgen_static_count" not in reference().__code__.co_names


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    dtype=st.sampled_from(DTYPES),
    reduction=st.sampled_from(REDUCTIONS),
    weighted=st.booleans(),
    special=st.sampled_from([None, np.nan, np.inf, -np.inf, -0.0]),
    seed=st.integers(0, 2**16),
)
def test_like_upstream(shape: list[int], dtype: str, reduction: Any, weighted: bool, special: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    array = rng.standard_normal(shape) * 3
    if dtype == "int32":
        array = np.round(array)
    elif special is not None and array.size:
        array.flat[0] = special
    values = tensor(array, dtype)
    sample_weight = tensor(rng.uniform(0, 2, shape), dtype) if weighted else None
    both(values, sample_weight, reduction)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean", "mean_with_sample_weight"])
@pytest.mark.parametrize("shape", [(1,), (32,), (7, 3), (2, 3, 5), (2, 0, 3), (4, 0)])
def test_the_fast_path_and_the_empty_shapes(reduction: str, shape: tuple[int, ...]) -> None:
    values = tensor(np.random.default_rng(0).standard_normal(shape), "float32")
    both(values, None, reduction)


def test_gradients_like_upstream() -> None:
    if not TORCH:
        pytest.skip("gradients through a tensor's .grad: torch only")
    import torch

    for shape, reduction in [((32,), "sum_over_batch_size"), ((4, 6), "mean"), ((3,), "mean_with_sample_weight")]:
        grads = []
        for function in (reference(), loss_module.reduce_values):
            values = torch.tensor(np.random.default_rng(1).standard_normal(shape), dtype=torch.float32,
                                  requires_grad=True)
            out = function(values * 1.5, None, reduction)
            out.backward()
            grads.append(values.grad)
        assert bits(grads[0]) == bits(grads[1])


def test_more_than_2_to_the_24_elements() -> None:
    for count in (2**24, 2**24 + 1):
        values = tensor(np.full((count,), 0.5, dtype="float32"), "float32")
        both(values)


def test_floatx_float64() -> None:
    floatx = keras.config.floatx()
    keras.config.set_floatx("float64")
    try:
        both(tensor(np.arange(6.0).reshape(2, 3), "float32"))
    finally:
        keras.config.set_floatx(floatx)


def test_numpy_and_variable_values() -> None:
    array = np.random.default_rng(2).standard_normal((4, 3)).astype("float32")
    both(array)
    both(keras.Variable(array))


def test_symbolic_values() -> None:
    values = keras.KerasTensor((2, 3), dtype="float32")
    want = reference()(values)
    got = loss_module.reduce_values(values)
    assert type(got) is type(want) and got.shape == want.shape and got.dtype == want.dtype


@pytest.mark.parametrize("name", ["divide_no_nan", "prod", "cast", "shape", "convert_to_tensor", "divide"])
def test_a_monkeypatched_op_is_called_as_upstream_calls_it(name: str) -> None:
    original = getattr(ops_module, name)
    calls: list[str] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return original(*args, **kwargs)

    values = tensor(np.arange(1.0, 7.0).reshape(2, 3), "float32")
    with mock.patch.object(ops_module, name, spy):
        want = reference()(values)
        upstream_calls = len(calls)
        calls.clear()
        got = loss_module.reduce_values(values)
    same(got, want)
    assert len(calls) == upstream_calls


def _train(loss: Any, weighted: bool, masked: bool, float_labels: bool, steps: int = 3) -> list[bytes]:
    keras.utils.set_random_seed(0)
    layers: list[Any] = [keras.Input((6,))]
    if masked:
        layers.append(keras.layers.Masking(0.0))
    layers += [keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)]
    model = keras.Sequential(layers)
    model.compile(optimizer="adam", loss=loss, metrics=["mae"] if float_labels else ["accuracy"])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 6)).astype("float32")
    if masked:
        x[::3] = 0.0
    y = rng.standard_normal((16, 4)).astype("float32") if float_labels else rng.integers(0, 4, 16).astype("int32")
    sw = rng.uniform(0, 2, 16).astype("float32") if weighted else None
    logs = [model.train_on_batch(x, y, sample_weight=sw, return_dict=True) for _ in range(steps)]
    logs.append(model.test_on_batch(x, y, sample_weight=sw, return_dict=True))
    state = [np.asarray(keras.ops.convert_to_numpy(v)).tobytes() for v in model.weights + model.optimizer.variables]
    state += [np.asarray(keras.ops.convert_to_numpy(v)).tobytes() for v in model.metrics_variables]
    return state + [repr(sorted(log.items())).encode() for log in logs]


@pytest.mark.skipif(keras.backend.backend() == "numpy", reason="the numpy backend does not train")
@pytest.mark.parametrize(
    ("loss", "weighted", "masked", "float_labels"),
    [
        ("sparse_categorical_crossentropy", False, False, False),
        ("sparse_categorical_crossentropy", True, False, False),
        ("mse", False, True, True),
        ("mse", True, False, True),
        (keras.losses.MeanSquaredError(reduction="mean_with_sample_weight"), True, False, True),
        (keras.losses.MeanSquaredError(reduction="sum"), False, False, True),
    ],
)
def test_training_like_upstream(loss: Any, weighted: bool, masked: bool, float_labels: bool) -> None:
    got = _train(loss, weighted, masked, float_labels)
    with upstream.upstream(loss_module, "reduce_values"):
        want = _train(loss, weighted, masked, float_labels)
    assert got == want


def test_the_fast_path_runs_on_torch() -> None:
    if not TORCH:
        pytest.skip("the fast path is torch's")
    values = tensor(np.arange(1.0, 7.0).reshape(2, 3), "float32")
    want = reference()(values)
    # Upstream's divisor path ends in the backend's divide_no_nan (through `ops.divide_no_nan`,
    # which the fast path's guard requires unpatched, so it is the backend function that is
    # replaced here); the fast path divides with `ops.divide`.
    numpy_module = backend_numpy()
    with mock.patch.object(numpy_module, "divide_no_nan", side_effect=AssertionError("upstream's divisor path")):
        with pytest.raises(AssertionError, match="upstream's divisor path"):
            ops_module.divide_no_nan(values, values)  # the function replaced is the one ops reach
        got = loss_module.reduce_values(values)
    same(got, want)


def test_torch_compile_traces_upstreams_divisor() -> None:
    """A process whose first reduction is compiled: the reduction compiles no worse than
    upstream's under this torch (one graph wherever upstream's is one graph, never more
    frames), and gives the eager value (the fast path stands aside while dynamo traces)."""
    if not TORCH:
        pytest.skip("the fast path is torch's")

    values = tensor(np.arange(1.0, 7.0).reshape(2, 3), "float32")
    want = reference()(values)
    # As in a process whose first reduction is compiled.
    fork = compiled(loss_module.reduce_values, values, prepare=loss_module._forkgen_mean_reduction_ops.clear)
    theirs = compiled(reference(), values, prepare=loss_module._forkgen_mean_reduction_ops.clear)
    fork.no_worse_than(theirs)
    same(fork.result, want)
