"""Patch torch-convert-to-tensor-device on the installed fork (torch backend only).

Upstream (3.0-3.15) moves a tensor to `get_device()` under `if x.device != device:`; the patch
drops that always-true test. The patched `convert_to_tensor` must give what the release under
test's own, unpatched `convert_to_tensor` gives (`upstream.original`, compiled from its sources
into the installed core module, tests/equivalence/upstream.py): the same values, dtype, device,
requires_grad and autograd history, and the same object (or the same kind of copy) for every
tensor input. (The oracle is upstream's whole function: where another patch rewrote the same
function, as torch-convert-to-tensor-noop-moves does, it is off in the oracle too.)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-convert-to-tensor-device"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-convert-to-tensor-device"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the patch changes the torch backend only"),
]

if APPLIED and keras.backend.backend() == "torch":
    import torch
    from keras.src.backend.common import global_state

    #: The module the patch rewrote (the torch backend's core.py).
    core = upstream.patched_module(NAME, "core.py")

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64"]


@functools.cache
def _upstream_convert_to_tensor() -> Callable[..., Any]:
    return upstream.original(core.convert_to_tensor)


def reference(x: Any, *args: Any) -> Any:
    """The release under test's own `convert_to_tensor` (run in the installed core module: the
    same `get_device`, `Variable` and `to_torch_dtype`), called as the fork's is (its parameters
    are the release's: `ragged` came in 3.7)."""
    return _upstream_convert_to_tensor()(x, *args)


def outcome(convert: Callable[..., Any], make: Callable[[], Any], *args: Any) -> tuple[object, ...]:
    """What `convert(make(), *args)` gives, as comparable facts (or the error it raises)."""
    try:
        x = make()
        source = x.value if isinstance(x, core.Variable) else x
        out = convert(x, *args)
    except Exception as error:
        return ("raised", type(error), str(error))
    facts: tuple[object, ...] = (
        type(out), out.dtype, out.device, tuple(out.shape), out.requires_grad, out.is_leaf,
        type(out.grad_fn).__name__ if out.grad_fn is not None else None,
        out is source, out is x,
    )
    # A meta input becomes `torch.empty_like` on the target device: uninitialised, no values
    # to compare (the same shape, dtype and device are).
    if not out.is_meta and not source.is_meta:
        shares = out.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
        facts += (shares, out.detach().cpu().to(torch.float64 if not out.is_complex() else torch.complex128).numpy()
                  .tobytes())
    return facts


@contextmanager
def private_device(device: Any) -> Iterator[None]:
    previous = global_state.get_global_attribute("torch_device", None)
    global_state.set_global_attribute("torch_device", device)
    try:
        yield
    finally:
        global_state.set_global_attribute("torch_device", previous)


def test_the_patch_is_in_and_the_test_it_drops_was_always_true() -> None:
    source = inspect.getsource(core.convert_to_tensor)
    assert "# forkgen: torch-convert-to-tensor-device" in source and "if x.device != device" not in source
    # The oracle is the unpatched release's function, test and all.
    text = upstream.upstream_source(core)
    assert "if x.device != device:" in text and f"# forkgen: {NAME}" not in text
    assert _upstream_convert_to_tensor().__code__ is not core.convert_to_tensor.__code__
    # The fact the patch rests on: get_device() is a str, and a torch.device never equals one.
    assert isinstance(core.get_device(), str)
    for name in ("cpu", "cpu:0", "meta", "cuda"):
        assert torch.device(name) != name
    with core.device_scope("cpu:0"):
        assert isinstance(core.get_device(), str)


def inputs() -> list[tuple[str, Callable[[], Any]]]:
    """Tensors of every kind the tensor branch sees (builders: each call makes a fresh one)."""
    base = np.arange(6, dtype="float32").reshape(2, 3) - 2.5

    def leaf_grad() -> Any:
        return torch.tensor(base, requires_grad=True)

    def non_leaf() -> Any:
        return torch.tensor(base, requires_grad=True) * 2.0

    def view() -> Any:
        return torch.tensor(base).t()

    def variable(dtype: str) -> Callable[[], Any]:
        return lambda: keras.Variable(base.astype("float64"), dtype=dtype)

    return [
        ("cpu float32", lambda: torch.tensor(base)),
        ("cpu int64", lambda: torch.arange(6).reshape(2, 3)),
        ("cpu bool", lambda: torch.tensor([True, False])),
        ("cpu bfloat16", lambda: torch.tensor(base, dtype=torch.bfloat16)),
        ("cpu complex64", lambda: torch.tensor(base, dtype=torch.complex64)),
        ("scalar", lambda: torch.tensor(3.5)),
        ("empty", lambda: torch.zeros((0, 3))),
        ("non-contiguous view", view),
        ("requires_grad leaf", leaf_grad),
        ("requires_grad non-leaf", non_leaf),
        ("parameter", lambda: torch.nn.Parameter(torch.tensor(base))),
        ("meta", lambda: torch.empty((2, 3), device="meta")),
        ("meta int", lambda: torch.empty((4,), dtype=torch.int32, device="meta")),
        ("variable float32", variable("float32")),
        ("variable float16", variable("float16")),
        ("variable int32", variable("int32")),
        ("trainable=False variable", lambda: keras.Variable(base, trainable=False)),
    ]


INPUTS = inputs() if APPLIED and keras.backend.backend() == "torch" else []


@pytest.mark.parametrize("dtype", [None, *DTYPES, "not-a-dtype", "float8_e4m3fn"])
@pytest.mark.parametrize(("kind", "make"), INPUTS, ids=[kind for kind, _ in INPUTS])
def test_like_upstream_on_every_kind_of_tensor(kind: str, make: Callable[[], Any], dtype: str | None) -> None:
    expected = outcome(reference, make, dtype)
    assert outcome(core.convert_to_tensor, make, dtype) == expected
    # The public op, which reaches the same function.
    assert outcome(keras.ops.convert_to_tensor, make, dtype) == expected


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "meta", "CPU"])
@pytest.mark.parametrize(("kind", "make"), INPUTS, ids=[kind for kind, _ in INPUTS])
def test_like_upstream_under_a_device_scope(kind: str, make: Callable[[], Any], device: str) -> None:
    # "cpu:0" makes `.to()` copy a CPU tensor, and "meta" moves everything to meta: upstream
    # too, since its test was True for these as for all.
    with core.device_scope(device):
        expected = outcome(reference, make, None)
        assert outcome(core.convert_to_tensor, make, None) == expected
        assert outcome(core.convert_to_tensor, make, "float64") == outcome(reference, make, "float64")


def test_errors_are_the_same() -> None:
    x = torch.ones(2)
    for sparse, ragged in ((True, None), (None, True)):
        assert outcome(core.convert_to_tensor, lambda: x, None, sparse, ragged) == outcome(
            reference, lambda: x, None, sparse, ragged
        )
    assert outcome(core.convert_to_tensor, lambda: x, "float128")[0] == "raised"
    assert outcome(core.convert_to_tensor, lambda: x, "float128") == outcome(reference, lambda: x, "float128")


@given(
    shape=st.lists(st.integers(0, 3), max_size=3),
    source=st.sampled_from(DTYPES),
    dtype=st.sampled_from([None, *DTYPES]),
    requires_grad=st.booleans(),
    wrap=st.sampled_from(["tensor", "variable", "meta"]),
)
def test_like_upstream_property(shape: list[int], source: str, dtype: str | None, requires_grad: bool, wrap: str) -> None:
    def make() -> Any:
        if wrap == "meta":
            return torch.empty(shape, dtype=core.to_torch_dtype(source), device="meta")
        values = np.arange(int(np.prod(shape)), dtype="float64").reshape(shape) - 1.5
        if wrap == "variable":
            return keras.Variable(values, dtype=source, trainable=requires_grad)
        tensor = torch.tensor(values).to(core.to_torch_dtype(source))
        if requires_grad and tensor.is_floating_point():
            tensor.requires_grad_(True)
        return tensor

    assert outcome(core.convert_to_tensor, make, dtype) == outcome(reference, make, dtype)


def test_the_documented_private_difference() -> None:
    # A torch.device written into the private global state (public device_scope stores a str)
    # is the one case where upstream's test was False: it skipped the move, the patch makes it.
    # Same object for a real tensor; for a meta tensor, what the release's move gives: a fresh
    # `empty_like` where the move makes one (3.10+), else `x.to(device)`, the same tensor.
    cpu = torch.ones(3)
    with private_device(torch.device("cpu")):
        assert core.convert_to_tensor(cpu) is cpu and reference(cpu) is cpu
    meta = torch.empty(3, device="meta")
    copies_meta = "torch.empty_like(x, device=device)" in inspect.getsource(core.convert_to_tensor)
    with private_device(torch.device("meta")):
        assert reference(meta) is meta
        moved = core.convert_to_tensor(meta)
        assert moved.is_meta and moved.shape == meta.shape and moved.dtype == meta.dtype
        assert (moved is not meta) is copies_meta, (copies_meta, inspect.getsource(core.convert_to_tensor))
