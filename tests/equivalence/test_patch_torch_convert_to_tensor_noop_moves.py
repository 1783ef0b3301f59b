"""Patch torch-convert-to-tensor-noop-moves on the installed fork (torch backend only).

The patch skips `convert_to_tensor`'s `x.to(device)` and `x.to(to_torch_dtype(dtype))` where
torch would return `x` itself. The patched function must give what the release under test's
own, unpatched `convert_to_tensor` gives (`upstream.original`, compiled from its sources into
the installed core module, tests/equivalence/upstream.py; 3.x's `backend/torch/core.py`,
keras-nightly's `backend/torch/ops/core.py`): the same values, dtype, device, requires_grad,
autograd history, memory layout and the same object (or the same kind of copy); a tensor
subclass or a torch-function mode must see the same `.to()` calls; and torch.compile must split
a step into no more graphs than upstream's function under the installed torch (one graph
wherever upstream's is one). (The oracle is upstream's whole function: where another patch
rewrote it too, as torch-convert-to-tensor-device does on 3.x, that one is off in it as well.)
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import compiled, patch_applied

NAME = "torch-convert-to-tensor-noop-moves"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-convert-to-tensor-noop-moves"),
    pytest.mark.skipif(not TORCH, reason="the patch changes the torch backend only"),
]

if APPLIED and TORCH:
    import torch
    from torch.overrides import TorchFunctionMode

    #: The module the patch rewrote (the torch backend's core.py: 3.x's, or keras-nightly's
    #: ops/core.py).
    core = upstream.patched_module(NAME, "core.py")

    class Logged(torch.Tensor):
        """A subclass whose `__torch_function__` sees (and logs) every `.to()` call."""

        calls: list[str] = []

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if getattr(func, "__name__", "") == "to":
                cls.calls.append(repr(args[1:]))
            return super().__torch_function__(func, types, args, kwargs or {})

    class ToMode(TorchFunctionMode):
        """A torch-function mode that logs every `.to()` call."""

        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if getattr(func, "__name__", "") == "to":
                self.calls.append(repr(args[1:]))
            return func(*args, **(kwargs or {}))

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool", "complex64"]
#: What `keras.device` scopes give `get_device()` (a str): "cpu:0" makes `.to()` copy a cpu
#: tensor, "gpu:0"/"cuda" raise without CUDA; None: the default device.
SCOPES = [None, "cpu", "cpu:0", "meta", "gpu:0", "cuda"]


@functools.cache
def _upstream_convert_to_tensor() -> Callable[..., Any]:
    return upstream.original(core.convert_to_tensor)


def reference(x: Any, dtype: Any = None, sparse: Any = None, ragged: Any = None) -> Any:
    """The release under test's own `convert_to_tensor` (run in the installed core module: the
    same `get_device`, `Variable` and `to_torch_dtype`)."""
    return _upstream_convert_to_tensor()(x, dtype, sparse, ragged)


def outcome(convert: Callable[..., Any], make: Callable[[], Any], *args: Any) -> tuple[object, ...]:
    """What `convert(make(), *args)` gives, as comparable facts (or the error it raises), with
    the `.to()` calls a subclass saw."""
    Logged.calls = []
    try:
        x = make()
        source = x.value if isinstance(x, core.Variable) else x
        out = convert(x, *args)
    except Exception as error:
        return ("raised", type(error), str(error), list(Logged.calls))
    facts: tuple[object, ...] = (
        type(out), out.dtype, out.device, tuple(out.shape), out.requires_grad, out.is_leaf,
        type(out.grad_fn).__name__ if out.grad_fn is not None else None,
        out is source, out is x, list(Logged.calls),
    )
    if not out.is_meta and not source.is_meta:
        plain = out.as_subclass(torch.Tensor) if isinstance(out, Logged) else out
        shares = plain.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
        values = plain.detach().cpu().to(torch.float64 if not plain.is_complex() else torch.complex128)
        facts += (shares, plain.stride(), plain.is_contiguous(memory_format=torch.channels_last), values.numpy().tobytes())
    return facts


@contextmanager
def scope(device: str | None) -> Iterator[None]:
    with keras.device(device) if device is not None else nullcontext():
        yield


def test_the_patch_is_in_and_the_oracle_is_upstreams_function() -> None:
    source = inspect.getsource(core.convert_to_tensor)
    assert source.count("# forkgen: torch-convert-to-tensor-noop-moves") == 2
    assert "x = x.to(device)" in source and "to_torch_dtype(dtype))" not in source
    assert core._FORKGEN_TORCH_DEVICES is not None
    # The oracle is the unpatched release's function: both `.to()` calls, no helper of the patch.
    text = upstream.upstream_source(core)
    assert "x = x.to(to_torch_dtype(dtype))" in text and "x = x.to(device)" in text and "# forkgen:" not in text
    names = _upstream_convert_to_tensor().__code__.co_names
    assert "_forkgen_torch_device" not in names and "_FORKGEN_TORCH_DEVICES" not in names


def _maker(kind: str, shape: list[int], source: str, requires_grad: bool) -> Callable[[], Any]:
    def make() -> Any:
        dtype = core.to_torch_dtype(source)
        if kind == "meta":
            return torch.empty(shape, dtype=dtype, device="meta")
        values = np.arange(int(np.prod(shape)), dtype="float64").reshape(shape) - 1.5
        if kind == "variable":
            return keras.Variable(values, dtype=source, trainable=requires_grad)
        tensor = torch.tensor(values).to(dtype)
        grad = requires_grad and (tensor.is_floating_point() or tensor.is_complex())
        if kind == "parameter":
            return torch.nn.Parameter(tensor, requires_grad=grad)
        if kind == "view" and tensor.ndim >= 2:
            tensor = tensor.transpose(0, 1)
        if kind == "channels_last":
            tensor = tensor.reshape(1, 1, *tensor.shape[:2], -1)[..., 0].contiguous(memory_format=torch.channels_last) \
                if tensor.ndim >= 2 else tensor
        if grad:
            tensor.requires_grad_(True)
            if kind == "non-leaf":
                tensor = tensor * 2
        if kind == "subclass":
            return tensor.as_subclass(Logged)
        return tensor

    return make


KINDS = ["tensor", "variable", "parameter", "view", "non-leaf", "channels_last", "subclass", "meta"]


@given(
    kind=st.sampled_from(KINDS),
    shape=st.lists(st.integers(0, 3), max_size=3),
    source=st.sampled_from(DTYPES),
    dtype=st.sampled_from([None, *DTYPES, "not-a-dtype"]),
    requires_grad=st.booleans(),
    device=st.sampled_from(SCOPES),
)
def test_like_upstream_property(kind: str, shape: list[int], source: str, dtype: str | None, requires_grad: bool,
                              device: str | None) -> None:
    make = _maker(kind, shape, source, requires_grad)
    with scope(device):
        expected = outcome(reference, make, dtype)
        assert outcome(core.convert_to_tensor, make, dtype) == expected
        if dtype != "not-a-dtype":  # the public op rejects it before reaching the backend
            assert outcome(keras.ops.convert_to_tensor, make, dtype) == expected


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [None, "float32", "float64"])
def test_a_mode_sees_the_same_calls(kind: str, dtype: str | None) -> None:
    make = _maker(kind, [2, 3], "float32", True)
    seen = []
    for convert in (reference, core.convert_to_tensor):
        with ToMode() as mode:
            facts = outcome(convert, make, dtype)
        seen.append((facts, mode.calls))
    assert seen[1] == seen[0]
    assert seen[0][1] or kind == "meta"  # the mode saw `.to()` calls: the test can tell


def test_a_subclass_sees_the_same_calls() -> None:
    make = _maker("subclass", [2], "float32", False)
    for dtype in (None, "float32", "int32"):
        expected = outcome(reference, make, dtype)
        assert expected[9], "the subclass saw no .to() call: the test could not tell"
        assert outcome(core.convert_to_tensor, make, dtype) == expected


@contextmanager
def counted_to() -> Iterator[list[object]]:
    """Every `torch.Tensor.to` call (replacing torch's method: the one thing the patch does not
    guard, see its docstring; used here to see which calls are skipped)."""
    calls: list[object] = []
    original = torch.Tensor.to

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(self, *args, **kwargs)

    torch.Tensor.to = to  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        torch.Tensor.to = original  # type: ignore[method-assign]


def test_no_op_moves_are_skipped_and_others_made() -> None:
    x = torch.ones(3)
    v = keras.Variable(np.ones(3, dtype="float32"))
    with counted_to() as calls:
        assert core.convert_to_tensor(x) is x
        assert core.convert_to_tensor(x, dtype="float32") is x
        assert core.convert_to_tensor(v, dtype="float32") is v.value
        assert calls == []
        assert core.convert_to_tensor(x, dtype="float64").dtype == torch.float64
        assert calls == [(torch.float64,)]
        calls.clear()
        with keras.device("cpu:0"):
            moved = core.convert_to_tensor(x)
        assert moved is not x and calls == [("cpu:0",)]
        calls.clear()
        assert reference(x, "float32") is x and len(calls) == 2


def test_while_dynamo_traces_both_moves_are_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """While dynamo traces (`torch.compiler.is_dynamo_compiling()` True, stood in for here), the
    moves are upstream's: the same `.to()` calls, the same results."""
    x = torch.ones(3)
    assert core._forkgen_compiling() is False
    monkeypatch.setattr(core, "_forkgen_compiling", lambda: True)
    with counted_to() as calls:
        assert core.convert_to_tensor(x, dtype="float32") is x
        fork_calls = list(calls)
        calls.clear()
        assert reference(x, "float32") is x
        assert fork_calls == calls and len(calls) == 2


def test_errors_are_the_same() -> None:
    x = torch.ones(2)
    for args in ((None, True, None), (None, None, True), ("float128",), ("not-a-dtype",)):
        expected = outcome(reference, lambda: x, *args)
        assert expected[0] == "raised" and outcome(core.convert_to_tensor, lambda: x, *args) == expected
    for device in ("gpu:0", "cuda", "xla"):
        with scope(device) if device != "xla" else private_device(device):
            assert outcome(core.convert_to_tensor, lambda: x) == outcome(reference, lambda: x)


@contextmanager
def private_device(device: Any) -> Iterator[None]:
    from keras.src.backend.common import global_state

    previous = global_state.get_global_attribute("torch_device", None)
    global_state.set_global_attribute("torch_device", device)
    try:
        yield
    finally:
        global_state.set_global_attribute("torch_device", previous)


def test_private_device_objects_take_the_call() -> None:
    # A torch.device (or anything not a str) in the private global state: `.to()` is called.
    x = torch.ones(2)
    for device in (torch.device("cpu"), torch.device("meta"), ["cpu"]):
        with private_device(device):
            assert outcome(core.convert_to_tensor, lambda: x) == outcome(reference, lambda: x)


def test_cuda_is_the_current_cuda_device_asked_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_forkgen_on_current_cuda(x, device)`, the patch's test for a tensor whose device the str
    names by no index: True exactly when `x.to(device)` keeps `x`'s device there, i.e. for the
    index-less "cuda" (exactly that string) and `x` on the current cuda device (aten's
    `ensure_has_index`), asked again at each call; CUDA asked only about a tensor on cuda. The
    current cuda device is stood in (`torch.cuda.current_device`), and so are tensors on cuda
    (objects with their `.device`: the helper reads nothing else), so this runs without CUDA."""
    from types import SimpleNamespace

    current = [0]
    asked: list[int] = []

    def current_device() -> int:
        asked.append(current[0])
        return current[0]

    monkeypatch.setattr(torch.cuda, "current_device", current_device)
    sources = ["cuda:0", "cuda:1", "cpu", "meta"]
    devices = ["cuda", "cuda:0", "cuda:1", "cpu", "cpu:0", "meta", "mps", "xpu", "CUDA", "cuda ", "gpu", "bogus"]
    on_cuda = 0
    for current[0] in (0, 1, 0, 1):
        for source in sources:
            x = SimpleNamespace(device=torch.device(source))
            for device in devices:
                expected = device == "cuda" and x.device == torch.device("cuda", current[0])
                assert core._forkgen_on_current_cuda(x, device) is expected, (current[0], source, device)
                on_cuda += device == "cuda" and source.startswith("cuda")
    assert len(asked) == on_cuda == 4 * 2


def test_on_cuda_the_index_less_cuda_is_the_current_device() -> None:
    """On a GPU: with `get_device()` "cuda", a tensor on the current cuda device takes no
    `.to()` call (torch's returns it itself), one on another moves as upstream's, after each
    change of the current device too (two devices where there are two)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    indices = list(range(min(torch.cuda.device_count(), 2)))
    with private_device("cuda"):
        for current in indices + indices[:1]:
            with torch.cuda.device(current):
                for index in indices:
                    x = torch.ones(3, device=f"cuda:{index}")
                    expected = outcome(reference, lambda x=x: x)
                    assert expected[2] == torch.device("cuda", current) and expected[7] is (index == current)
                    assert outcome(core.convert_to_tensor, lambda x=x: x) == expected
                    with counted_to() as calls:
                        core.convert_to_tensor(x)
                    assert calls == ([] if index == current else [("cuda",)])


def _compiled_frames(convert: Callable[..., Any]) -> tuple[int, int, list[float]]:
    """Frames Dynamo compiles, and the ops in them, for two calls of a small train-like step
    with `convert_to_tensor` as given (in every Keras module that imported it), and the
    step's results."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    original = core.convert_to_tensor
    holders = [m for name, m in list(sys.modules.items())
               if name.startswith("keras.src") and getattr(m, "convert_to_tensor", None) is original]
    for holder in holders:
        holder.convert_to_tensor = convert  # type: ignore[attr-defined]
    try:
        torch._dynamo.reset()
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])
        w = keras.Variable(np.ones((2,), dtype="float32"))
        x = torch.ones(5, 4)
        # One eager call first, so that the tables the patches fill on a first call (this one's
        # parsed devices too) are filled: a call traced while they are empty splits where one
        # changes (Dynamo graph-breaks at a class `__dict__` read after a dict changed), more
        # with the fork than upstream, which has no such tables.
        core._FORKGEN_TORCH_DEVICES.clear()
        model(x)
        counter = CompileCounter()

        def step(x: Any) -> Any:
            y = keras.ops.convert_to_tensor(model(x), dtype="float32")
            loss = keras.ops.mean(y * keras.ops.convert_to_tensor(w))
            loss.backward()
            return keras.ops.add(loss, keras.ops.convert_to_tensor(x, dtype="float64").sum())

        compiled = torch.compile(step, backend=counter)
        results = [float(compiled(x)), float(compiled(x))]
        return int(counter.frame_count), int(counter.op_count), results
    finally:
        for holder in holders:
            holder.convert_to_tensor = original  # type: ignore[attr-defined]
        torch._dynamo.reset()


def test_torch_compile_splits_no_more_than_upstream() -> None:
    frames, ops, results = _compiled_frames(core.convert_to_tensor)
    upstream_frames, upstream_ops, upstream_results = _compiled_frames(_upstream_convert_to_tensor())
    assert results == upstream_results
    # Never more frames than upstream's function under this torch (each graph break adds one).
    # Traced, the moves are upstream's (the fast path stands aside): the same frames, the same ops.
    assert (frames, ops) == (upstream_frames, upstream_ops)
    # And a function of its own: no worse than upstream's function (one graph wherever
    # upstream's is one graph under this torch, never more frames).

    def converting(convert: Callable[..., Any]) -> Callable[[Any], Any]:
        return lambda x: convert(convert(x), dtype="float32") * 2

    fork = compiled(converting(core.convert_to_tensor), torch.ones(3), prepare=core._FORKGEN_TORCH_DEVICES.clear)
    theirs = compiled(converting(_upstream_convert_to_tensor()), torch.ones(3))
    fork.no_worse_than(theirs)
    assert torch.equal(fork.result, theirs.result)
