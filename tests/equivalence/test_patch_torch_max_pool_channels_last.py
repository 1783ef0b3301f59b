"""Patch torch-max-pool-channels-last on the installed fork (torch backend only).

Upstream's `max_pool` (3.15) turns a channels_last input into channels-first axes with a copy
(`_transpose_spatial_inputs`: permute, then `.contiguous()`), pools, moves the output to
`get_device()` and permutes it back. The patched `max_pool` pools a dense 2-D input's view
instead (no autograd, CPU, float dtypes, "valid" padding) and copies the output into the default
layout. It must give what the release under test's own, unpatched `max_pool` gives
(`upstream.original`, compiled from its sources into the installed `nn` module,
tests/equivalence/upstream.py: `reference_max_pool`): the same values bit for bit (NaN positions
and the sign of zeros included), dtype, shape, strides, storage offset, device, requires_grad
and autograd graph, and, under autograd, the same gradients, for every layout of the input; and
the same errors.
"""

from __future__ import annotations

import functools
import inspect
import math
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

NAME = "torch-max-pool-channels-last"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-max-pool-channels-last"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the patch changes the torch backend only"),
]

if APPLIED and keras.backend.backend() == "torch":
    import torch
    import torch.nn.functional as tnn

    #: The module the patch rewrote (the torch backend's nn.py).
    nn = upstream.patched_module(NAME, "nn.py")

DTYPES = ["float32", "float64", "bfloat16", "float16"]
LAYOUTS = ["dense", "dense", "dense", "offset", "from channels_first", "sliced channels", "stepped spatial",
           "expanded batch", "odd size-1 strides"]
#: Values with many ties, both zeros, NaN and both infinities.
SPECIAL = [0.0, -0.0, 1.0, -1.0, 1.0, 2.0, 0.5, math.nan, math.inf, -math.inf]


@functools.cache
def _upstream_max_pool() -> Callable[..., Any]:
    return upstream.original(nn.max_pool)


def reference_max_pool(inputs: Any, pool_size: Any, strides: Any = None, padding: str = "valid",
                       data_format: Any = None) -> Any:
    """The release under test's own `max_pool` (run in the installed `nn` module: the same
    `_transpose_spatial_inputs`, `_apply_same_padding`, `convert_to_tensor` and `get_device`)."""
    return _upstream_max_pool()(inputs, pool_size, strides, padding, data_format)


def bits(tensor: Any) -> bytes:
    """The tensor's values, bit for bit (NaN payloads and signs of zeros included)."""
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return bytes(tensor.detach().contiguous().view(as_int).numpy().tobytes())


def graph(tensor: Any) -> list[str]:
    """The names of the autograd nodes from `tensor` back to the leaf, first inputs first."""
    names: list[str] = []
    node = tensor.grad_fn
    while node is not None:
        names.append(node.name())
        node = next((n for n, _ in node.next_functions if n is not None), None)
    return names


def outcome(run: Callable[..., Any], make: Callable[[], Any], grad: bool, **kwargs: Any) -> tuple[object, ...]:
    """What `run(x, **kwargs)` gives, as comparable facts (or the error it raises)."""
    x = make()
    with torch.set_grad_enabled(grad):
        try:
            out = run(x, **kwargs)
        except Exception as error:
            return ("raised", type(error), str(error))
    facts: tuple[object, ...] = (
        out.dtype, tuple(out.shape), out.stride(), out.storage_offset(), str(out.device), out.requires_grad,
        out.is_contiguous(), out.is_contiguous(memory_format=torch.channels_last) if out.ndim == 4 else None,
        out.untyped_storage().nbytes(), None if out.is_meta else bits(out), graph(out),
    )
    if out.requires_grad:
        cotangent = (torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape) % 7 - 3).to(out.dtype)
        (g,) = torch.autograd.grad(out, [x], cotangent)
        facts += (g.dtype, g.stride(), bits(g))
    return facts


def patched_max_pool(x: Any, **kwargs: Any) -> Any:
    return nn.max_pool(x, **kwargs)


@contextmanager
def without_view() -> Iterator[None]:
    """The fork's max_pool with the helper answering None: upstream's statements only."""
    helper = nn._forkgen_max_pool_view
    nn._forkgen_max_pool_view = lambda inputs, num_spatial_dims, padding: None
    try:
        yield
    finally:
        nn._forkgen_max_pool_view = helper


def same(make: Callable[[], Any], grad: bool, **kwargs: Any) -> tuple[object, ...]:
    patched = outcome(patched_max_pool, make, grad, **kwargs)
    expected = outcome(reference_max_pool, make, grad, **kwargs)
    assert patched == expected
    return patched


def layout(shape: tuple[int, ...], kind: str, dtype: str, values: list[float], requires_grad: bool = False) -> Any:
    """A channels_last input of `shape` laid out as `kind`, holding `values` over and over."""
    count = math.prod(shape)
    room = 3 * math.prod(max(size, 1) for size in shape) + 8
    data = torch.tensor([values[i % len(values)] for i in range(room)], dtype=getattr(torch, dtype))
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
    return x.detach().requires_grad_(requires_grad)


@contextmanager
def pooled_inputs() -> Iterator[list[Any]]:
    """The tensors torch's max_pool2d is handed while inside."""
    seen: list[Any] = []
    original = nn.tnn.max_pool2d

    def recording(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(inputs)
        return original(inputs, *args, **kwargs)

    nn.tnn.max_pool2d = recording
    try:
        yield seen
    finally:
        nn.tnn.max_pool2d = original


def test_the_patch_is_in_and_the_reference_is_the_forks_max_pool_without_it() -> None:
    source = inspect.getsource(nn.max_pool)
    assert "forkgen_view = _forkgen_max_pool_view(inputs, num_spatial_dims, padding)" in source
    assert "outputs = outputs.clone(memory_format=torch.contiguous_format)" in source
    # The oracle is the unpatched release's max_pool: upstream's copy, no helper of the patch.
    assert f"# forkgen: {NAME}" not in upstream.upstream_source(nn)
    names = _upstream_max_pool().__code__.co_names
    assert "_transpose_spatial_inputs" in names and "_forkgen_max_pool_view" not in names
    # And the patch diverges from it only through its helper: without it, the fork's statements
    # give upstream's result.
    x = torch.randn(2, 6, 6, 3)
    with without_view():
        fork = outcome(patched_max_pool, lambda: x, False, pool_size=2)
    assert fork == outcome(reference_max_pool, lambda: x, False, pool_size=2)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("shape", [(8, 32, 32, 16), (2, 5, 7, 3), (1, 4, 4, 2), (3, 2, 9, 4)])
def test_a_dense_input_is_pooled_in_place_without_autograd(shape: tuple[int, ...], dtype: str) -> None:
    def make(requires_grad: bool = False) -> Any:
        return layout(shape, "dense", dtype, [v / 8 for v in range(-20, 20)] + SPECIAL, requires_grad)

    x = make()
    with torch.no_grad(), pooled_inputs() as seen:
        nn.max_pool(x, 2)
    assert seen[0].data_ptr() == x.data_ptr() and seen[0].is_contiguous(memory_format=torch.channels_last)
    same(make, False, pool_size=2)
    # With autograd recording, upstream's copy (and graph).
    with pooled_inputs() as seen:
        nn.max_pool(make(requires_grad=True), 2)
    assert seen[0].is_contiguous() and not seen[0].is_contiguous(memory_format=torch.channels_last)
    same(lambda: make(requires_grad=True), True, pool_size=2)


def test_bfloat16_keeps_upstreams_copy() -> None:
    # torch 2.13's channels_last CPU kernel for bfloat16 writes a NaN of its own (0xFFFF, sign bit
    # set) where the default-layout kernel passes the input's on (0x7FC0), at least in its
    # vectorised path (16 channels here): bfloat16 is copied, whatever the installed torch's
    # kernels do (the NaNs sit where they sit in both layouts; their bits may differ).
    def make() -> Any:
        return layout((2, 6, 6, 16), "dense", "bfloat16", SPECIAL)

    with torch.no_grad():
        view = torch.permute(make(), (0, 3, 1, 2))
        ours = tnn.max_pool2d(view, 2)
        theirs = tnn.max_pool2d(view.contiguous(), 2)
        assert torch.isnan(ours).equal(torch.isnan(theirs))
        with pooled_inputs() as seen:
            nn.max_pool(make(), 2)
    assert seen[0].is_contiguous() and not seen[0].is_contiguous(memory_format=torch.channels_last)
    same(make, False, pool_size=2)


@pytest.mark.parametrize("shape", [(2, 2, 2, 3), (1, 3, 3, 4), (2, 2, 5, 2), (1, 4, 2, 5)])
def test_outputs_of_one_row_column_or_pixel_have_upstreams_strides(shape: tuple[int, ...]) -> None:
    # A channels_last output of 1x1 spatial size counts as contiguous already: a `.contiguous()`
    # would keep its strides; the patched max_pool's clone gives upstream's.
    facts = same(lambda: layout(shape, "dense", "float32", SPECIAL), False, pool_size=(2, 2), strides=(2, 3))
    assert facts[0] == torch.float32


@pytest.mark.parametrize("kind", LAYOUTS[2:])
@pytest.mark.parametrize("grad", [True, False], ids=["autograd", "no_grad"])
def test_other_layouts_and_autograd_like_upstream(kind: str, grad: bool) -> None:
    for shape in ((2, 4, 4, 3), (1, 5, 4, 1), (2, 1, 1, 4), (3, 4, 6, 2)):
        same(lambda shape=shape: layout(shape, kind, "float32", SPECIAL, requires_grad=grad), grad, pool_size=2,
             strides=(1, 2))


@given(
    data=st.data(),
    rank=st.sampled_from([4, 4, 4, 4, 3, 5]),
    kind=st.sampled_from(LAYOUTS),
    dtype=st.sampled_from(DTYPES),
    grad=st.booleans(),
    requires_grad=st.booleans(),
    padding=st.sampled_from(["valid", "valid", "valid", "same"]),
    data_format=st.sampled_from(["channels_last", "channels_last", "channels_last", "channels_first", None]),
    values=st.lists(st.sampled_from(SPECIAL), min_size=1, max_size=12),
)
def test_like_upstream_property(data: Any, rank: int, kind: str, dtype: str, grad: bool, requires_grad: bool,
                              padding: str, data_format: Any, values: list[float]) -> None:
    spatial = data.draw(st.lists(st.integers(1, 7 if rank < 5 else 4), min_size=rank - 2, max_size=rank - 2))
    shape = (data.draw(st.integers(1, 3)), *spatial, data.draw(st.integers(1, 5)))
    pool = tuple(data.draw(st.integers(1, 3)) for _ in spatial)
    strides = data.draw(st.one_of(st.none(), st.tuples(*[st.integers(1, 3)] * len(spatial))))
    same(lambda: layout(shape, kind, dtype, values, requires_grad=requires_grad), grad,
         pool_size=pool if data.draw(st.booleans()) else pool[0], strides=strides, padding=padding,
         data_format=data_format)


def test_errors_like_upstream() -> None:
    # A window larger than the input ("valid"); the wrong ranks (upstream's own messages).
    for shape, pool in (((2, 2, 2, 3), 3), ((2, 2, 5, 3), (1, 6)), ((2, 3), 2), ((1, 2, 2, 2, 2, 2), 1)):
        def make(shape: tuple[int, ...] = shape) -> Any:
            return torch.ones(shape)

        patched = outcome(patched_max_pool, make, False, pool_size=pool)
        with without_view():
            assert outcome(patched_max_pool, make, False, pool_size=pool) == patched
        assert outcome(reference_max_pool, make, False, pool_size=pool) == patched
        assert patched[0] == "raised"


def test_the_meta_device_like_upstream() -> None:
    def make() -> Any:
        return layout((2, 4, 4, 3), "dense", "float32", SPECIAL)

    with keras.device("meta"):
        patched = outcome(patched_max_pool, make, False, pool_size=2)
        expected = outcome(reference_max_pool, make, False, pool_size=2)
    # The values of a meta tensor are not there: compare everything else.
    assert patched[:9] == expected[:9] and patched[4] == "meta"


def test_tensor_subclasses_and_inference_mode_like_upstream() -> None:
    class Marked(torch.Tensor):
        pass

    x = torch.randn(2, 4, 4, 3)
    with torch.no_grad(), pooled_inputs() as seen:
        nn.max_pool(x.as_subclass(Marked), 2)
    assert seen[0].is_contiguous()
    with torch.inference_mode():
        same(lambda: torch.randn(2, 4, 4, 3, generator=torch.Generator().manual_seed(0)), False, pool_size=2)
    same(lambda: torch.nn.Parameter(torch.randn(2, 4, 4, 3, generator=torch.Generator().manual_seed(0))), True,
         pool_size=2)


def test_layers_like_upstream() -> None:
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((12, 12, 3)), keras.layers.Conv2D(4, 3), keras.layers.MaxPooling2D(2),
                              keras.layers.MaxPooling2D((2, 1), strides=(1, 2))])
    x = np.random.default_rng(3).normal(size=(4, 12, 12, 3)).astype("float32")

    def facts() -> tuple[object, ...]:
        predicted = model.predict_on_batch(x)
        with torch.no_grad():
            called = model(x)
        return bits(torch.as_tensor(predicted)), called.stride(), bits(called)

    patched = facts()
    # The fork with this patch off: upstream's max_pool in place of the patched one (the
    # layers' op looks it up in `nn` at call time).
    with upstream.upstream(nn, "max_pool"):
        assert facts() == patched

