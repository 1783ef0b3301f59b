"""Patch torch-conv-single-copy on the installed fork (torch backend only).

Upstream's `conv` turns a channels_last input into channels-first axes with
`_transpose_spatial_inputs` (permute, then a copy to the default layout), then
`_maybe_convert_to_channels_last` copies it to channels_last memory. The patch calls
`_forkgen_transpose_conv_inputs` in place of the first step. The patched `conv` must give what
the release under test's own, unpatched `conv` gives (`upstream.upstream(nn, "conv")`, compiled
from its sources into the installed `nn` module, tests/equivalence/upstream.py: the fork with
this patch off): the same output values, dtype, shape and strides, the same gradients (values
and strides), the same errors, forward and backward, for every layout of the input, with and
without autograd.

Both sides run with glibc's allocator filling every block it hands out with one byte
(`filled_allocations`): torch's oneDNN bfloat16 convolution backward reads memory it never
wrote for some inputs (a kernel larger than a size-1 spatial axis, stride 2, "same" padding:
its weight gradient then holds whatever the heap held, different from call to call, on either
side), which made a comparison of two calls depend on the heap, not on the patch.
"""

from __future__ import annotations

import ctypes
import inspect
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import assume, given, reject
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-conv-single-copy"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-conv-single-copy"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the patch changes the torch backend only"),
]

if APPLIED and keras.backend.backend() == "torch":
    import torch

    #: The module the patch rewrote (the torch backend's nn.py).
    nn = upstream.patched_module(NAME, "nn.py")

DTYPES = ["float32", "float64", "bfloat16", "float16"]
LAYOUTS = ["dense", "offset", "from channels_first", "sliced channels", "stepped spatial", "expanded batch",
           "odd size-1 strides"]


@contextmanager
def upstream_conv() -> Iterator[None]:
    """The fork with this patch off: the release under test's own `conv` in place of the patched
    one (the ops and layers that call it look it up in `nn` at call time)."""
    with upstream.upstream(nn, "conv"):
        yield


def _mallopt() -> Any:
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl): no fill
        return None


#: glibc's `mallopt` option: fill each block malloc returns with `byte ^ 0xff`, each freed one
#: with `byte` (MALLOC_PERTURB_, settable at run time).
M_PERTURB = -6
MALLOPT = _mallopt()
#: The two fills: one for the comparison, one more to tell whether upstream's result depends on
#: memory torch never wrote.
FILLS = (0x5A, 0x33)


@contextmanager
def filled_allocations(byte: int) -> Iterator[None]:
    """Every block glibc's allocator hands out in the block (torch's tensors, oneDNN's scratch
    memory) filled with the same bytes: what a kernel reads of memory it never wrote is then
    the same on every call, on both sides, and a function of `byte`. Nothing where `mallopt`
    is not glibc's (then the reruns in `same` are the only guard, as without it)."""
    if MALLOPT is None or MALLOPT(M_PERTURB, byte) != 1:
        yield
        return
    try:
        yield
    finally:
        MALLOPT(M_PERTURB, int(os.environ.get("MALLOC_PERTURB_", "0") or 0) & 0xFF)


def values(tensor: Any) -> bytes:
    return bytes(tensor.detach().to(torch.float64).contiguous().numpy().tobytes())


@contextmanager
def repeatable(dtype: Any) -> Iterator[None]:
    """One thread for bfloat16: torch's CPU convolution sums bfloat16 weight gradients across
    threads in an order that changes from run to run (upstream's conv as much as the patched one:
    a depthwise 3-D kernel gradient took 3 different values in 200 runs on 2 threads, 1 on one)."""
    if dtype != torch.bfloat16:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def outcome(run: Callable[..., Any], make: Callable[[], tuple[Any, Any]], grad: bool, **kwargs: Any) -> tuple[object, ...]:
    """What `run(x, kernel, **kwargs)` gives, as comparable facts: the output and, when it
    records autograd, the gradients of the inputs that require them (or the errors raised)."""
    x, kernel = make()
    with repeatable(x.dtype), torch.set_grad_enabled(grad):
        try:
            out = run(x, kernel, **kwargs)
        except Exception as error:
            return ("raised", type(error), str(error))
    facts: tuple[object, ...] = (
        out.dtype, tuple(out.shape), out.stride(), out.storage_offset(), out.requires_grad,
        out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr(), values(out),
    )
    wrt = [t for t in (x, kernel) if t.requires_grad]
    if out.requires_grad and wrt:
        cotangent = (torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape) % 7 - 3).to(out.dtype)
        try:
            with repeatable(x.dtype):
                grads = torch.autograd.grad(out, wrt, cotangent)
        except Exception as error:
            return (*facts, "backward raised", type(error), str(error))
        facts += tuple((g.dtype, tuple(g.shape), g.stride(), values(g)) for g in grads)
    return facts


def conv(x: Any, kernel: Any, **kwargs: Any) -> Any:
    return nn.conv(x, kernel, **kwargs)


def same(make: Callable[[], tuple[Any, Any]], grad: bool, run: Callable[..., Any] = conv, **kwargs: Any) -> None:
    fill, other = FILLS
    with filled_allocations(fill):
        patched = outcome(run, make, grad, **kwargs)
        with upstream_conv():
            expected = outcome(run, make, grad, **kwargs)
    if patched == expected:
        return
    # Some of torch's CPU kernels (bfloat16 conv backward) read memory they never wrote: for
    # such an input upstream's own result is not a function of the input (it changes with what
    # the heap holds, so with the fill) and there is nothing to compare. A real difference
    # reproduces: upstream gives its result again, under either fill, and the fork does not.
    with upstream_conv():
        with filled_allocations(fill):
            again = outcome(run, make, grad, **kwargs)
        with filled_allocations(other):
            refilled = outcome(run, make, grad, **kwargs)
    if again != expected or refilled != expected:
        if currently_in_test_context():
            reject()
        pytest.skip("upstream's own result does not reproduce for this input (a torch kernel reads memory it "
                    "never wrote, or is nondeterministic)")
    with filled_allocations(fill):
        assert outcome(run, make, grad, **kwargs) == expected
    assert patched == expected


def layout(shape: tuple[int, ...], kind: str, dtype: str, requires_grad: bool = False) -> Any:
    """A channels_last input of `shape` laid out as `kind` (a fresh one each call)."""
    count = math.prod(shape)
    room = 3 * math.prod(max(size, 1) for size in shape) + 8
    data = torch.tensor((np.arange(room) % 13 - 6.0) / 4, dtype=getattr(torch, dtype))
    if kind == "dense":
        x = data[:count].reshape(shape)
    elif kind == "offset":
        x = data[3 : 3 + count].reshape(shape)
    elif kind == "from channels_first":
        x = data[:count].reshape(shape[0], shape[-1], *shape[1:-1]).movedim(1, -1)
    elif kind == "sliced channels":
        x = data[: 2 * count].reshape(*shape[:-1], 2 * shape[-1])[..., ::2]
    elif kind == "stepped spatial":
        x = data[: 2 * count].reshape(shape[0], 2 * shape[1], *shape[2:])[:, ::2]
    elif kind == "expanded batch":
        x = data[: math.prod(shape[1:])].reshape(1, *shape[1:]).expand(*shape)
    else:  # dense but for a stride of 5 on every size-1 axis
        strides = [5 if size == 1 else math.prod(shape[i + 1 :]) for i, size in enumerate(shape)]
        x = torch.as_strided(data, shape, strides) if count else data[:0].reshape(shape)
    return x.requires_grad_(True) if requires_grad else x.detach()


def kernel_of(rank: int, size: int, channels: int, groups: int, out: int, dtype: str, requires_grad: bool,
              transposed: bool = False) -> Any:
    shape = (*([size] * (rank - 2)), channels // groups, out)
    k = torch.tensor((np.arange(math.prod(shape)) % 7 - 3.0) / 5, dtype=getattr(torch, dtype)).reshape(shape)
    if transposed:  # the same values, laid out with the last two axes swapped
        k = k.transpose(-1, -2).contiguous().transpose(-1, -2)
    return k.requires_grad_(True) if requires_grad else k


def test_the_patch_is_in_and_the_oracle_is_upstreams_conv() -> None:
    source = inspect.getsource(nn.conv)
    assert "inputs = _forkgen_transpose_conv_inputs(inputs)  # forkgen: torch-conv-single-copy" in source
    assert "inputs = _transpose_spatial_inputs(inputs)" not in source
    assert "inputs = _maybe_convert_to_channels_last(inputs)" in source
    # The oracle is the unpatched release's conv: upstream's first step, no helper of the patch.
    assert f"# forkgen: {NAME}" not in upstream.upstream_source(nn)
    names = upstream.original(nn.conv).__code__.co_names
    assert "_transpose_spatial_inputs" in names and "_forkgen_transpose_conv_inputs" not in names
    with upstream_conv():
        assert "_forkgen_transpose_conv_inputs" not in nn.conv.__code__.co_names
    assert "_forkgen_transpose_conv_inputs" in nn.conv.__code__.co_names


def test_the_fill_fills_what_torch_allocates() -> None:
    # What `same` rests on where glibc's mallopt is there: a tensor torch allocates and never
    # writes holds the fill's bytes, for every fill (so a kernel reading such memory reads them).
    if MALLOPT is None:
        pytest.skip("no glibc mallopt here: the comparisons run without a fill")
    for byte in (*FILLS, 0xC3):
        with filled_allocations(byte):
            blank = torch.empty(4096, dtype=torch.uint8)
        assert bool((blank == (byte ^ 0xFF)).all()), f"torch's memory is not filled with {byte ^ 0xFF:#x}"


@pytest.mark.parametrize("shape", [(2, 5, 5, 3), (1, 4, 6, 8), (2, 3, 4, 3, 2)])
def test_a_dense_input_is_not_copied_without_autograd_and_copied_once_with_it(shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    # Upstream's two steps (the release under test's own helpers, which conv calls one after
    # the other).
    transpose = upstream.original(nn._transpose_spatial_inputs)
    to_channels_last = upstream.original(nn._maybe_convert_to_channels_last)
    expected = to_channels_last(transpose(x))
    with torch.no_grad():
        view = nn._forkgen_transpose_conv_inputs(x)
    assert view.data_ptr() == x.data_ptr() and view.stride() == expected.stride() and torch.equal(view, expected)
    copy = nn._forkgen_transpose_conv_inputs(x)
    assert copy.data_ptr() != x.data_ptr() and copy.stride() == expected.stride() and torch.equal(copy, expected)
    # The conversion in conv finds it converted already: no further copy.
    assert nn._maybe_convert_to_channels_last(copy) is copy and nn._maybe_convert_to_channels_last(view) is view


# Layouts where a plain single copy (keras-nightly's form of keras#23199) differs from the two
# copies of 3.15's conv (strides of the output, on CPU its values, or a backward pass that
# raises): one channel, 1x1 spatial extents, size-1 axes with odd strides; each with a pointwise
# depthwise kernel (one input channel per group), whose memory format torch reads from the input's.
EDGE_CASES = [
    ((2, 3, 3, 1), "sliced channels", 1, 1, 1), ((2, 3, 3, 1), "expanded batch", 1, 1, 2),
    ((2, 1, 1, 4), "dense", 1, 4, 4), ((2, 1, 1, 4), "sliced channels", 1, 4, 8),
    ((1, 1, 3, 4), "odd size-1 strides", 1, 4, 4), ((1, 3, 1, 2), "odd size-1 strides", 1, 2, 2),
    ((1, 1, 3, 4), "odd size-1 strides", 2, 4, 4), ((2, 3, 3, 4), "odd size-1 strides", 1, 4, 4),
    ((1, 2, 1, 3, 2), "odd size-1 strides", 1, 2, 2), ((1, 3, 3, 2), "dense", 1, 2, 2),
    ((0, 3, 3, 2), "dense", 1, 1, 2), ((2, 3, 3, 2), "from channels_first", 1, 2, 2),
    ((3, 4, 4, 2), "expanded batch", 1, 2, 2), ((2, 4, 3, 3), "stepped spatial", 2, 3, 3),
]


@pytest.mark.parametrize("grad", [True, False], ids=["autograd", "no_grad"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "kind", "size", "groups", "out"), EDGE_CASES)
@pytest.mark.parametrize("padding", ["valid", "same"])
def test_like_upstream_on_edge_layouts(
    shape: tuple[int, ...], kind: str, size: int, groups: int, out: int, dtype: str, grad: bool, padding: str
) -> None:
    def make() -> tuple[Any, Any]:
        return (layout(shape, kind, dtype, requires_grad=grad and dtype != "float16"),
                kernel_of(len(shape), size, shape[-1], groups, out, dtype, requires_grad=grad))

    same(make, grad, padding=padding, data_format="channels_last")


@given(
    rank=st.sampled_from([3, 4, 4, 5]),
    data=st.data(),
    kind=st.sampled_from(LAYOUTS),
    dtype=st.sampled_from(DTYPES),
    grad=st.booleans(),
    inputs_grad=st.booleans(),
    padding=st.sampled_from(["valid", "same"]),
    transposed=st.booleans(),
    data_format=st.sampled_from(["channels_last", "channels_last", "channels_last", "channels_first"]),
)
def test_like_upstream_property(rank: int, data: Any, kind: str, dtype: str, grad: bool, inputs_grad: bool,
                              padding: str, transposed: bool, data_format: str) -> None:
    spatial = data.draw(st.lists(st.integers(1, 4 if rank < 5 else 3), min_size=rank - 2, max_size=rank - 2))
    channels = data.draw(st.integers(1, 4))
    groups = data.draw(st.sampled_from([1, channels]))
    out = groups * data.draw(st.integers(1, 2))
    size = data.draw(st.integers(1, 3))
    strides = data.draw(st.integers(1, 2))
    dilation = data.draw(st.integers(1, 2)) if strides == 1 else 1
    shape = (data.draw(st.integers(0, 3)), *spatial, channels)
    if data_format == "channels_first":
        shape = (shape[0], channels, *spatial)
    # torch's CPU conv3d in float16 or bfloat16 may crash the interpreter (a segfault, plain torch
    # alike: `conv3d(x, k, padding="same", dilation=2)` with x of spatial shape (1, 3, 2)) when a
    # dilated kernel spans more than a spatial size under "same" padding: upstream crashes as the
    # fork does, so there is nothing to compare, and the crash would take the suite down.
    extent = (size - 1) * dilation + 1
    assume(not (rank == 5 and dtype in ("float16", "bfloat16") and padding == "same" and dilation > 1
                and min(spatial) < extent))

    def make() -> tuple[Any, Any]:
        return (layout(shape, kind, dtype, requires_grad=inputs_grad and grad),
                kernel_of(rank, size, channels, groups, out, dtype, requires_grad=grad, transposed=transposed))

    same(make, grad, strides=strides, padding=padding, data_format=data_format, dilation_rate=dilation)


def test_modifying_the_input_in_place_after_the_forward_pass_like_upstream() -> None:
    # Upstream's conv keeps its own copy of the input for the backward pass: the caller may then
    # change the input in place and still get the gradients of the values conv saw.
    def run(x: Any, kernel: Any) -> Any:
        out = nn.conv(x, kernel, padding="same")
        x.mul_(3.0)
        return out

    for shape in ((2, 5, 5, 3), (1, 3, 4, 2, 2)):
        def make(shape: tuple[int, ...] = shape) -> tuple[Any, Any]:
            return torch.randn(shape, generator=torch.Generator().manual_seed(1)), kernel_of(
                len(shape), 3, shape[-1], 1, 2, "float32", requires_grad=True)

        same(make, True, run=run)
        assert "backward raised" not in outcome(run, make, True)


@pytest.mark.parametrize("grad", [True, False], ids=["autograd", "no_grad"])
def test_the_ops_that_call_conv(grad: bool) -> None:
    x_shape = (2, 6, 6, 4)

    def depthwise(x: Any, kernel: Any) -> Any:
        return nn.depthwise_conv(x, kernel, padding="same")

    def separable(x: Any, kernel: Any) -> Any:
        return nn.separable_conv(x, kernel, torch.ones(1, 1, 8, 3), padding="same")

    def public(x: Any, kernel: Any) -> Any:
        return keras.ops.conv(x, kernel, strides=2, padding="same")

    for run, kernel_shape in ((depthwise, (3, 3, 4, 2)), (separable, (3, 3, 4, 2)), (public, (3, 3, 4, 5))):
        def make(kernel_shape: tuple[int, ...] = kernel_shape) -> tuple[Any, Any]:
            k = torch.tensor((np.arange(math.prod(kernel_shape)) % 5 - 2.0) / 3, dtype=torch.float32)
            return layout(x_shape, "dense", "float32", requires_grad=grad), k.reshape(kernel_shape).requires_grad_(grad)

        same(make, grad, run=run)


@pytest.mark.parametrize("layer", ["Conv2D", "Conv3D", "DepthwiseConv2D", "SeparableConv2D", "Conv1D"])
def test_layers_like_upstream(layer: str) -> None:
    shapes = {"Conv3D": (2, 4, 4, 4, 3), "Conv1D": (2, 7, 3)}
    shape = shapes.get(layer, (2, 6, 6, 3))
    keras.utils.set_random_seed(7)
    arguments = {"kernel_size": 3, "padding": "same"} | ({} if layer == "DepthwiseConv2D" else {"filters": 4})
    block = getattr(keras.layers, layer)(**arguments)
    block.build(shape)
    x = torch.tensor(np.random.default_rng(3).normal(size=shape), dtype=torch.float32)

    def facts() -> tuple[object, ...]:
        with torch.no_grad():
            predicted = block(x)
        out = block(x)
        grads = torch.autograd.grad(out.square().sum(), [w.value for w in block.trainable_weights])
        return (values(predicted), predicted.stride(), values(out), out.stride(),
                *((g.stride(), values(g)) for g in grads))

    patched = facts()
    with upstream_conv():
        assert facts() == patched


def test_errors_like_upstream() -> None:
    cases = [
        ((2, 3), (1, 3, 2)),                # rank 2: no spatial axis
        ((2, 4, 4, 3), (3, 3, 2, 4)),       # 3 channels, kernel for 2
        ((1, 2, 2, 2, 2, 2), (1, 1, 1, 1, 2, 2)),  # rank 6
        ((2, 2, 2, 3), (3, 3, 3, 4)),       # kernel larger than the input, "valid"
    ]
    for x_shape, k_shape in cases:
        def make(x_shape: tuple[int, ...] = x_shape, k_shape: tuple[int, ...] = k_shape) -> tuple[Any, Any]:
            return torch.ones(x_shape), torch.ones(k_shape)

        patched = outcome(conv, make, True)
        with upstream_conv():
            assert outcome(conv, make, True) == patched
        assert patched[0] == "raised"
