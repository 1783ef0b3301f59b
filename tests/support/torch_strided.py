"""A numpy stand-in for torch's strided tensors, for the synthetic torch nn.py of the patches of
nn.py's conv and pooling input path (`torch-conv-single-copy`, `torch-max-pool-channels-last`:
their cases.py hold the synthetic modules).

`load_nn` executes such a module against `torch` below: numpy arrays with torch's rules for
strides, contiguity (size-1 axes skipped; an empty tensor is contiguous in the default format
only) and the canonical strides of `clone(memory_format=...)`, counting every copy, so the
upstream and patched modules can be compared offline.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from codemods.engine import run_module


class MemoryFormat:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


contiguous_format = MemoryFormat("contiguous_format")
channels_last = MemoryFormat("channels_last")
channels_last_3d = MemoryFormat("channels_last_3d")

#: Axis orders, innermost first, in which each format lays a tensor out (torch's).
_ORDERS = {channels_last: (1, 3, 2, 0), channels_last_3d: (1, 4, 3, 2, 0)}


class State:
    """What the stand-in did: the tensors it copied; whether autograd records."""

    copied: list[Tensor] = []
    grad_enabled = True


def canonical_strides(sizes: Sequence[int], memory_format: MemoryFormat) -> tuple[int, ...]:
    """The strides torch gives a new tensor of `sizes` in `memory_format` (an empty axis counts
    as 1 in the default format, as 0 in channels_last, as torch does)."""
    strides = [0] * len(sizes)
    expected = 1
    if memory_format is contiguous_format:
        for axis in reversed(range(len(sizes))):
            strides[axis] = expected
            expected *= max(sizes[axis], 1)
        return tuple(strides)
    for axis in _ORDERS[memory_format]:
        strides[axis] = expected
        expected *= sizes[axis]
    return tuple(strides)


class Tensor:
    """A strided view of numpy memory, with the parts of torch.Tensor conv's input path uses."""

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def ndim(self) -> int:
        return int(self.array.ndim)

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def numel(self) -> int:
        return int(self.array.size)

    def is_contiguous(self, memory_format: MemoryFormat = contiguous_format) -> bool:
        sizes, strides = self.shape, self.stride()
        if memory_format is contiguous_format:
            if self.numel() == 0:
                return True
            order: Sequence[int] = tuple(reversed(range(self.ndim)))
        elif len(_ORDERS[memory_format]) == self.ndim:
            order = _ORDERS[memory_format]
        else:
            return False
        expected = 1
        for axis in order:
            if sizes[axis] != 1:
                if strides[axis] != expected:
                    return False
                expected *= sizes[axis]
        return True

    def contiguous(self, memory_format: MemoryFormat = contiguous_format) -> Tensor:
        return self if self.is_contiguous(memory_format) else self.clone(memory_format=memory_format)

    def clone(self, memory_format: MemoryFormat) -> Tensor:
        State.copied.append(self)
        return strided(self.array, canonical_strides(self.shape, memory_format))

    def shares_memory(self, other: Tensor) -> bool:
        return bool(np.shares_memory(self.array, other.array))


def strided(values: np.ndarray[Any, Any], strides: Sequence[int], offset: int = 0) -> Tensor:
    """A new tensor holding `values` at `strides` (in elements) past `offset` elements."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(values.shape, strides, strict=True)) \
        if values.size else 0
    buffer = np.zeros(offset + extent + 1, dtype=values.dtype)
    itemsize = buffer.itemsize
    array = np.lib.stride_tricks.as_strided(
        buffer[offset:], values.shape, tuple(s * itemsize for s in strides), writeable=True
    )
    if values.size:
        array[...] = values
    return Tensor(array)


def permute(tensor: Tensor, dims: Sequence[int]) -> Tensor:
    return Tensor(tensor.array.transpose(tuple(dims)))


def is_grad_enabled() -> bool:
    return State.grad_enabled


class Functional(types.ModuleType):
    """`torch.nn.functional`: the ops record the tensors they are given, and return them."""

    def __init__(self) -> None:
        super().__init__("torch.nn.functional")
        self.received: list[tuple[str, Tensor]] = []

    def _record(self, op: str, tensor: Tensor) -> Tensor:
        self.received.append((op, tensor))
        return tensor

    def conv(self, inputs: Tensor, kernel: Tensor) -> Tensor:
        self._record("conv kernel", kernel)
        return self._record("conv", inputs)

    def max_pool(self, inputs: Tensor) -> Tensor:
        return self._record("max_pool", inputs)

    def conv_transpose(self, inputs: Tensor, kernel: Tensor) -> Tensor:
        return self._record("conv_transpose", inputs)


def _torch() -> tuple[types.ModuleType, Functional]:
    torch = types.ModuleType("torch")
    functional = Functional()
    nn = types.ModuleType("torch.nn")
    nn.functional = functional  # type: ignore[attr-defined]
    torch.nn = nn  # type: ignore[attr-defined]
    for name, value in (("contiguous_format", contiguous_format), ("channels_last", channels_last),
                        ("channels_last_3d", channels_last_3d), ("permute", permute),
                        ("is_grad_enabled", is_grad_enabled), ("Tensor", Tensor)):
        setattr(torch, name, value)
    return torch, functional


@contextmanager
def grad(enabled: bool) -> Iterator[None]:
    previous = State.grad_enabled
    State.grad_enabled = enabled
    try:
        yield
    finally:
        State.grad_enabled = previous


def load_nn(source: str, name: str) -> tuple[types.ModuleType, Functional]:
    """Execute a synthetic (or patched) nn.py against the stand-in; return it and its `tnn`."""
    torch, functional = _torch()
    modules = {"torch": torch, "torch.nn": torch.nn, "torch.nn.functional": functional}
    return run_module(source, name, modules), functional


def dense(shape: Sequence[int], offset: int = 0) -> Tensor:
    """A tensor of distinct values laid out densely (canonical strides) past `offset`."""
    values = np.arange(math.prod(shape), dtype="float64").reshape(shape)
    return strided(values, canonical_strides(shape, contiguous_format), offset)
