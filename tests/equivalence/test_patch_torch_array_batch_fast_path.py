"""Patch torch-array-batch-fast-path on the installed fork.

The patch puts two fast paths into the torch `DataLoader`'s dataset of
`keras.src.trainers.data_adapters.array_data_adapter.ArrayDataAdapter.get_torch_dataloader`
(`ArrayDataset.__getitems__`): an exact NumPy array's batch made with upstream's NumPy copies and
its one `torch.as_tensor` call alone, and a flat tuple of them without the pytree walk. The
patched loader must give what the release under test's own, unpatched `get_torch_dataloader`
(`upstream.original`, compiled from its sources into the installed module, tests/equivalence/
upstream.py) gives for the same data and seeds: the same batches (structures and their types,
tensor kinds, dtypes, devices, shapes, strides, bits, no memory shared with the inputs), the
same torch and NumPy generator states after two epochs, the same errors; on the fast paths and
on every fallback (nested structures, None entries, uint32, torch tensors, pandas, other index
kinds, a shadowed or monkeypatched conversion, torch compiling); and `fit`/`evaluate`/`predict`
must end with the same weights, logs and predictions.

Torch only: only the torch backend's `TorchEpochIterator` builds this `DataLoader`.
"""

from __future__ import annotations

import collections
import functools
import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-array-batch-fast-path"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-array-batch-fast-path"),
    pytest.mark.skipif(not TORCH, reason="only the torch backend's TorchEpochIterator builds this DataLoader"),
]

if APPLIED and TORCH:
    import torch
    from keras.src.trainers.data_adapters import array_data_adapter as adapter_module
    from keras.src.trainers.data_adapters import array_slicing
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

N = 37  # 4 full batches of 8 and a partial one


@functools.cache
def reference() -> Callable[..., Any]:
    return upstream.original(ArrayDataAdapter.get_torch_dataloader)


def torch_core() -> Any:
    for name in ("keras.src.backend.torch.ops.core", "keras.src.backend.torch.core"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "convert_to_tensor") and hasattr(module, "to_torch_dtype"):
            return module
    raise LookupError("no torch core module")


def loaders(**kwargs: Any) -> tuple[Any, Any]:
    """(upstream's DataLoader, the patched one) over the same data."""
    want = reference()(ArrayDataAdapter(**kwargs))
    got = ArrayDataAdapter(**kwargs).get_torch_dataloader()
    return want, got


def bits(t: Any) -> bytes:
    if not t.numel():
        return b""
    return bytes(t.detach().cpu().contiguous().flatten().view(torch.uint8).numpy().tobytes())


def same(got: Any, want: Any, inputs: Sequence[np.ndarray] = ()) -> None:
    """Same structure (types, keys, order), and tensors alike in every observable way."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            same(got[key], want[key], inputs)
    elif isinstance(want, (list, tuple)):
        for a, b in zip(got, want, strict=True):
            same(a, b, inputs)
    elif torch.is_tensor(want):
        assert (got.dtype, got.device, got.shape, got.stride(), got.layout, got.requires_grad) == (
            want.dtype, want.device, want.shape, want.stride(), want.layout, want.requires_grad)
        assert got.storage_offset() == want.storage_offset() and got.is_contiguous() == want.is_contiguous()
        assert bits(got) == bits(want)
        for array in inputs:
            if got.dtype is not torch.bfloat16 and got.numel():
                assert not np.shares_memory(got.numpy(), array)
    else:
        assert got == want


def epochs(loader: Any, seed: int, count: int = 2) -> tuple[list[Any], Any, Any]:
    torch.manual_seed(seed)
    np.random.seed(seed)
    batches = [batch for _ in range(count) for batch in loader]
    return batches, torch.get_rng_state(), np.random.get_state()


def both(seed: int = 0, inputs: Sequence[np.ndarray] = (), **kwargs: Any) -> list[Any]:
    want_loader, got_loader = loaders(**kwargs)
    want, want_torch, want_numpy = epochs(want_loader, seed)
    got, got_torch, got_numpy = epochs(got_loader, seed)
    same(got, want, inputs)
    assert torch.equal(got_torch, want_torch)
    assert repr(got_numpy) == repr(want_numpy)
    return got


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def x_y(dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    r = rng()
    return r.standard_normal((N, 5)).astype(dtype), r.integers(0, 3, N)


def names(code: Any) -> set[str]:
    """The global names a function's code and its nested code read."""
    found = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            found |= names(const)
    return found


def test_the_patch_is_in_and_the_oracle_is_upstreams() -> None:
    assert {"_forkgen_numpy_batch", "_forkgen_numpy_batches"} <= names(ArrayDataAdapter.get_torch_dataloader.__code__)
    assert not {n for n in names(reference().__code__) if n.startswith("_forkgen")}


def test_the_fast_paths_are_taken() -> None:
    x, y = x_y()
    _, loader = loaders(x=x, y=y, batch_size=8)
    convert = torch_core().convert_to_tensor
    arrays = loader.dataset.array
    assert adapter_module._forkgen_numpy_batches(arrays, [0, 3, 1], convert) is not None
    assert adapter_module._forkgen_numpy_batch(arrays[0], [0, 3, 1], convert) is not None
    # Not while torch compiles: Dynamo traces upstream's code.
    with mock.patch.object(torch.compiler, "is_compiling", lambda: True):
        assert adapter_module._forkgen_numpy_batches(arrays, [0, 3, 1], convert) is None
        assert adapter_module._forkgen_numpy_batch(arrays[0], [0, 3, 1], convert) is None


@pytest.mark.parametrize("shuffle", [False, True, "batch"])
@pytest.mark.parametrize("batch_size", [8, N, 64])
@pytest.mark.parametrize("kind", ["x_y", "x", "x_y_weight", "x_y_class_weight", "dict", "list", "tuple", "none_entry"])
def test_batches_like_upstream(shuffle: Any, batch_size: int, kind: str) -> None:
    x, y = x_y()
    r = rng(1)
    kwargs: dict[str, Any] = {"batch_size": batch_size, "shuffle": shuffle}
    inputs = [x, y]
    if kind == "x_y":
        kwargs.update(x=x, y=y)
    elif kind == "x":
        kwargs.update(x=x)
    elif kind == "x_y_weight":
        weight = r.uniform(0, 2, N).astype("float32")
        kwargs.update(x=x, y=y, sample_weight=weight)
        inputs.append(weight)
    elif kind == "x_y_class_weight":
        kwargs.update(x=x, y=y, class_weight={0: 1.0, 1: 2.0, 2: 0.5})
    elif kind == "dict":
        kwargs.update(x={"a": x, "b": r.integers(0, 9, (N, 2)).astype("int32")}, y=y)
    elif kind == "list":
        kwargs.update(x=[x, r.standard_normal((N, 2, 3)).astype("float32")], y=y)
    elif kind == "tuple":
        kwargs.update(x=(x, r.integers(0, 2, N).astype("bool")))
    else:
        kwargs.update(x={"a": x, "b": None}, y=y)
    both(seed=batch_size, inputs=inputs, **kwargs)


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "float16", "float32",
          "float64", "complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES + ["bfloat16", "uint64", ">f4", "<i8"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_dtype_like_upstream(dtype: str, shuffle: bool) -> None:
    r = rng(2)
    if dtype == "bfloat16":
        import ml_dtypes

        array = r.standard_normal((N, 3)).astype(ml_dtypes.bfloat16)
    elif dtype.startswith("complex"):
        array = (r.standard_normal((N, 3)) + 1j * r.standard_normal((N, 3))).astype(dtype)
    elif dtype == "bool":
        array = r.integers(0, 2, (N, 3)).astype(bool)
    else:
        array = (r.standard_normal((N, 3)) * 50).astype(dtype)
    for kwargs in ({"x": array}, {"x": array, "y": array[:, 0]}):
        try:
            both(seed=3, inputs=[array], batch_size=8, shuffle=shuffle, **kwargs)
        except Exception as error:  # upstream refuses it too (uint64: no torch dtype)
            with pytest.raises(type(error)):
                epochs(reference()(ArrayDataAdapter(batch_size=8, **kwargs)), 3)


def test_floatx_float64() -> None:
    floatx = keras.config.floatx()
    keras.config.set_floatx("float64")
    try:
        x, y = x_y()
        both(x=x, y=y, batch_size=8, shuffle=True)
        both(x=x.astype("float64"), y=y, batch_size=8)
    finally:
        keras.config.set_floatx(floatx)


@pytest.mark.parametrize("layout", ["fortran", "strided", "transposed", "broadcast", "read_only", "empty_rows"])
def test_layouts_like_upstream(layout: str) -> None:
    r = rng(4)
    base = r.standard_normal((N, 6, 4)).astype("float32")
    if layout == "fortran":
        x = np.asfortranarray(base)
    elif layout == "strided":
        x = base[:, ::2, 1:]
    elif layout == "transposed":
        x = np.transpose(base, (0, 2, 1))
    elif layout == "broadcast":
        x = np.broadcast_to(base[:1], base.shape)
    elif layout == "read_only":
        x = base.copy()
        x.setflags(write=False)
    else:
        x = np.zeros((N, 0), dtype="float32")
    both(x=x, y=r.integers(0, 3, N), batch_size=8, shuffle=True)
    both(x=x, batch_size=8)


def test_other_inputs_take_upstreams_path() -> None:
    x, y = x_y()
    both(x=torch.as_tensor(x), y=torch.as_tensor(y), batch_size=8, shuffle=True)
    both(x=x, y=torch.as_tensor(y), batch_size=8)
    both(x=np.ma.masked_array(x), y=y, batch_size=8)
    both(x=x.view(np.matrix) if x.ndim == 2 else x, y=y, batch_size=8)
    pandas = pytest.importorskip("pandas")
    both(x=pandas.DataFrame(x), y=pandas.Series(y), batch_size=8, shuffle=True)


def getitems_both(want_loader: Any, got_loader: Any, indices: Any) -> None:
    try:
        want = want_loader.dataset.__getitems__(indices)
    except Exception as error:
        with pytest.raises(type(error)) as caught:
            got_loader.dataset.__getitems__(indices)
        assert str(caught.value) == str(error)
        return
    same(got_loader.dataset.__getitems__(indices), want)


@pytest.mark.parametrize("kind", ["x_y", "x", "x_float64"])
def test_any_indices_like_upstream(kind: str) -> None:
    x, y = x_y()
    kwargs: dict[str, Any] = {"x": x, "y": y} if kind == "x_y" else {"x": x if kind == "x" else x[:, 0]}
    want_loader, got_loader = loaders(batch_size=8, **kwargs)
    if kind == "x_float64":
        # A float64 array reaching the conversion (Sliceable casts floats to floatx first): a
        # NumPy float64 scalar from an int or tuple index is a Python float to the conversion.
        for loader in (want_loader, got_loader):
            loader.dataset.array = array_slicing.NumpySliceable(x[:, 0].astype("float64"))
    for indices in ([0, 5, 2], [np.int64(1), np.int64(4)], np.array([3, 1]), (1,), 2, [], [N], [-1, -N],
                    [True] * N, [[0, 1], [2, 3]], range(3), [0.5], torch.tensor([1, 2]), slice(2, 6)):
        getitems_both(want_loader, got_loader, indices)


def test_a_namedtuple_of_arrays_stays_a_namedtuple() -> None:
    x, y = x_y()
    want_loader, got_loader = loaders(x=x, y=y, batch_size=8)
    pair = collections.namedtuple("pair", ["x", "y"])
    for loader in (want_loader, got_loader):
        loader.dataset.array = pair(*loader.dataset.array)
    getitems_both(want_loader, got_loader, [0, 3, 1])


def test_a_sliceables_own_conversion_is_called() -> None:
    x, y = x_y()
    want_loader, got_loader = loaders(x=x, y=y, batch_size=8)
    for loader in (want_loader, got_loader):
        for sliceable in loader.dataset.array:
            sliceable.convert_to_torch_compatible = lambda batch: batch[::-1] * 2
    same(epochs(got_loader, 5)[0], epochs(want_loader, 5)[0])


@contextmanager
def warm() -> Iterator[None]:
    """The fast path's dtype table made (first use), before a test changes what it reads."""
    x, y = x_y()
    both(x=x, y=y, batch_size=8)
    yield
    both(x=x, y=y, batch_size=8)
    _, loader = loaders(x=x, y=y, batch_size=8)
    assert adapter_module._forkgen_numpy_batches(loader.dataset.array, [0], torch_core().convert_to_tensor) is not None


@pytest.mark.parametrize("name", ["to_torch_dtype", "get_device", "standardize_dtype", "convert_to_tensor"])
def test_a_monkeypatched_core_function_is_called_as_upstream_calls_it(name: str) -> None:
    core = torch_core()
    original = getattr(core, name)
    calls: list[str] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        result = original(*args, **kwargs)
        return torch.float64 if name == "to_torch_dtype" else result

    x, y = x_y()
    with warm(), mock.patch.object(core, name, spy):
        want_loader, got_loader = loaders(x=x, y=y, batch_size=8)
        want = epochs(want_loader, 6)[0]
        upstream_calls = len(calls)
        calls.clear()
        same(epochs(got_loader, 6)[0], want)
        assert len(calls) == upstream_calls


class UnhashableConversion:
    """A conversion that is no function and cannot be hashed (it defines `__eq__` only)."""

    def __init__(self, convert: Callable[..., Any]) -> None:
        self.convert = convert
        self.calls = 0

    def __eq__(self, other: object) -> bool:
        return self is other

    def __call__(self, x: Any) -> Any:
        self.calls += 1
        return self.convert(x)


def test_a_conversion_that_is_no_function_is_called_as_upstream_calls_it() -> None:
    core = torch_core()
    spy = UnhashableConversion(core.convert_to_tensor)
    x, y = x_y()
    with warm(), mock.patch.object(core, "convert_to_tensor", spy):
        want_loader, got_loader = loaders(x=x, y=y, batch_size=8)
        want = epochs(want_loader, 9)[0]
        upstream_calls, spy.calls = spy.calls, 0
        same(epochs(got_loader, 9)[0], want)
        assert spy.calls == upstream_calls > 0


def test_a_monkeypatched_sliceable_class_is_called_as_upstream_calls_it() -> None:
    original = array_slicing.Sliceable.__getitem__
    calls: list[Any] = []

    def getitem(self: Any, indices: Any) -> Any:
        calls.append(indices)
        return original(self, indices)[::-1]

    x, y = x_y()
    with warm(), mock.patch.object(array_slicing.Sliceable, "__getitem__", getitem):
        want_loader, got_loader = loaders(x=x, y=y, batch_size=8)
        want = epochs(want_loader, 7)[0]
        upstream_calls = len(calls)
        calls.clear()
        same(epochs(got_loader, 7)[0], want)
        assert len(calls) == upstream_calls


def test_a_device_scope_like_upstream() -> None:
    x, y = x_y()
    with keras.device("cpu:0"):
        both(x=x, y=y, batch_size=8, shuffle=True)
    with keras.device("meta"):
        want_loader, got_loader = loaders(x=x, y=y, batch_size=8)
        want = next(iter(want_loader))
        got = next(iter(got_loader))
    assert [(t.device, t.shape, t.dtype) for t in got] == [(t.device, t.shape, t.dtype) for t in want]


def _loop(patched: bool, shuffle: Any, weighted: bool) -> list[bytes]:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dropout(0.3),
                              keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y = x_y()
    weight = rng(8).uniform(0, 2, N).astype("float32") if weighted else None

    def run() -> list[bytes]:
        history = model.fit(x, y, sample_weight=weight, batch_size=8, epochs=3, shuffle=shuffle, verbose=0,
                            validation_split=0.2)
        logs = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
        predictions = model.predict(x, batch_size=8, verbose=0)
        state = [np.asarray(keras.ops.convert_to_numpy(v)).tobytes() for v in model.weights + model.optimizer.variables]
        return state + [repr(history.history).encode(), repr(sorted(logs.items())).encode(), predictions.tobytes(),
                        bits(torch.get_rng_state()), repr(np.random.get_state()).encode()]

    if patched:
        return run()
    with upstream.upstream(ArrayDataAdapter, "get_torch_dataloader"):
        return run()


@pytest.mark.parametrize(("shuffle", "weighted"), [(True, False), (False, True), ("batch", False)])
def test_fit_evaluate_predict_like_upstream(shuffle: Any, weighted: bool) -> None:
    assert _loop(True, shuffle, weighted) == _loop(False, shuffle, weighted)
