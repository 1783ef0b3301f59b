"""Patch torch-conv-single-copy (keras-team/keras#23199) on synthetic torch nn modules."""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import AnchorDrift, Outcome, Sources
from codemods.torch_conv_single_copy import PATCH
from codemods.torch_conv_single_copy import cases as synthetic
from codemods.torch_conv_single_copy.cases import AFTER, BEFORE, CALL, HELPER, NIGHTLY, NIGHTLY_NN
from tests.support import torch_strided as standin

NN = "keras/src/backend/torch/nn.py"


def check(source: str, path: str = NN) -> Any:
    return PATCH.check(Sources(lambda p: source if p == path else None))


def line_of(source: str, text: str) -> int:
    return source[: source.index(text)].count("\n") + 1


def test_only_conv_changes_and_only_by_one_statement() -> None:
    removed = [line for line in difflib.ndiff(BEFORE.splitlines(True), AFTER.splitlines(True)) if line.startswith("- ")]
    assert removed == ["-         inputs = _transpose_spatial_inputs(inputs)\n"]
    # The pooling op and conv_transpose keep upstream's helper; conv keeps its conversion.
    assert AFTER.count("inputs = _transpose_spatial_inputs(inputs)") == 2
    assert AFTER.count("inputs = _maybe_convert_to_channels_last(inputs)") == 1
    assert HELPER.startswith("# forkgen: torch-conv-single-copy (keras#23199")
    assert "def _forkgen_transpose_conv_inputs(inputs):\n" in HELPER and "    return _transpose_spatial_inputs(inputs)\n" in HELPER


def test_outcomes() -> None:
    # Beyond cases.py: the lines of the applied and upstream forms, and the file nightly names.
    assert check(AFTER).anchors[0].line == line_of(AFTER, CALL)
    nightly = check(NIGHTLY)
    assert nightly.anchors[0].line == line_of(NIGHTLY, "        inputs = _transpose_spatial_inputs(\n            inputs, chan")
    moved = check(NIGHTLY, NIGHTLY_NN)
    assert moved.outcome is Outcome.UPSTREAM and moved.anchors[0].path == NIGHTLY_NN
    assert PATCH.since == "3.15.0"


def test_a_tree_without_the_torch_backend_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == NN and "no such file" in str(caught.value)


def test_the_synthetic_tree_file_takes_the_patch() -> None:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    first = PATCH.check(sources)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(sources)
    patched = sources.rendered()[NN]
    assert patched.count("# forkgen: torch-conv-single-copy") == 2
    assert PATCH.check(Sources(lambda p: patched if p == NN else None)).present


# -- behaviour: the synthetic upstream and patched modules, side by side, on the numpy stand-in ---

UPSTREAM_NN, UPSTREAM_F = standin.load_nn(BEFORE, "torch_nn_upstream")
PATCHED_NN, PATCHED_F = standin.load_nn(AFTER, "torch_nn_patched")

LAYOUTS = ["dense", "offset", "from channels_first", "sliced channels", "stepped spatial", "expanded batch",
           "odd size-1 strides"]


def make(shape: tuple[int, ...], layout: str) -> standin.Tensor:
    """A channels_last input of `shape` laid out as `layout` (a fresh one each call)."""
    values = np.arange(int(np.prod(shape)), dtype="float64").reshape(shape) - 3.5
    if layout == "dense":
        return standin.dense(shape)
    if layout == "offset":
        return standin.dense(shape, offset=3)
    if layout == "from channels_first":
        first = (shape[0], shape[-1], *shape[1:-1])
        return standin.permute(standin.dense(first), (0, *range(2, len(shape)), 1))
    if layout == "sliced channels":
        wide = standin.dense((*shape[:-1], 2 * shape[-1]))
        return standin.Tensor(wide.array[..., ::2])
    if layout == "stepped spatial":
        wide = standin.dense((shape[0], 2 * shape[1], *shape[2:]))
        return standin.Tensor(wide.array[:, ::2])
    if layout == "expanded batch":
        one = standin.dense((1, *shape[1:]))
        return standin.Tensor(np.broadcast_to(one.array, shape))
    # A dense layout, except that every size-1 axis has stride 7.
    strides = [7 if size == 1 else s for size, s in zip(shape, standin.canonical_strides(
        shape, standin.contiguous_format), strict=True)]
    return standin.strided(values, strides)


def conv_input(module: Any, functional: Any, x: standin.Tensor, grad: bool) -> tuple[Any, int]:
    """What the convolution receives from `module.conv(x)`, and how many copies of the input
    (not of the kernel) that took."""
    functional.received.clear()
    standin.State.copied.clear()
    kernel = standin.dense((*([1] * (x.ndim - 2)), x.shape[-1], 2))

    def copies() -> int:
        return sum(not t.shares_memory(kernel) for t in standin.State.copied)

    with standin.grad(grad):
        try:
            module.conv(x, kernel, data_format="channels_last")
        except ValueError as error:
            return ("raised", str(error)), copies()
    (_, received), = [r for r in functional.received if r[0] == "conv"]
    facts = (received.shape, received.stride(), received.array.tobytes(), received.shares_memory(x))
    return facts, copies()


shapes = st.integers(3, 5).flatmap(
    lambda rank: st.tuples(st.integers(0, 2), *[st.integers(1, 3)] * (rank - 2), st.integers(1, 3))
)


@settings(max_examples=400, deadline=None)
@given(shape=shapes, layout=st.sampled_from(LAYOUTS), grad=st.booleans())
def test_conv_receives_what_upstream_gives_it_with_fewer_copies(shape: tuple[int, ...], layout: str, grad: bool) -> None:
    x = make(shape, layout)
    upstream, upstream_copies = conv_input(UPSTREAM_NN, UPSTREAM_F, x, grad)
    patched, patched_copies = conv_input(PATCHED_NN, PATCHED_F, make(shape, layout), grad)
    # Shape, strides and values; sharing memory with the input only where upstream does too,
    # or, without autograd, for a densely laid out input.
    assert patched[:3] == upstream[:3]
    assert patched_copies <= upstream_copies and patched_copies <= 1
    if patched[3] and not upstream[3]:
        assert not grad and x.stride() == standin.canonical_strides(shape, standin.contiguous_format)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 3, 4, 2), (2, 1, 3, 2), (2, 3, 3, 2)])
@pytest.mark.parametrize("layout", ["dense", "offset"])
def test_a_dense_input_is_copied_once_with_autograd_and_never_without(shape: tuple[int, ...], layout: str) -> None:
    for grad, copies in ((True, 1), (False, 0)):
        upstream, upstream_copies = conv_input(UPSTREAM_NN, UPSTREAM_F, make(shape, layout), grad)
        patched, patched_copies = conv_input(PATCHED_NN, PATCHED_F, make(shape, layout), grad)
        assert upstream_copies == 2 and patched_copies == copies and patched[:3] == upstream[:3]
        assert patched[3] is not grad and upstream[3] is False


@pytest.mark.parametrize(
    ("shape", "layout", "copies"),
    [((2, 3, 3, 1), "sliced channels", (1, 1)), ((2, 1, 1, 3), "dense", (0, 0)), ((2, 3, 3, 1), "dense", (0, 0)),
     ((0, 3, 3, 2), "dense", (0, 0)), ((2, 3, 2), "dense", (1, 1)), ((2, 3, 3, 2), "from channels_first", (1, 1)),
     ((1, 3, 3, 2), "odd size-1 strides", (2, 1)), ((2, 3, 1, 2), "odd size-1 strides", (2, 1)),
     ((2, 3, 3, 2), "sliced channels", (2, 1)), ((2, 3, 3, 2), "expanded batch", (2, 1))],
    ids=["one channel, sliced", "1x1 spatial", "one channel", "empty", "1-D", "channels_first data",
         "odd batch stride", "odd spatial stride", "sliced", "expanded"],
)
def test_copies_where_the_input_is_not_dense(shape: tuple[int, ...], layout: str, copies: tuple[int, int]) -> None:
    # Where the layout is ambiguous, the view contiguous already or the rank not 4/5, the helper
    # hands over to `_transpose_spatial_inputs` (upstream's copies); any other view that is not
    # dense is copied once, straight into channels_last strides. The same tensor either way.
    for grad in (True, False):
        upstream, upstream_copies = conv_input(UPSTREAM_NN, UPSTREAM_F, make(shape, layout), grad)
        patched, patched_copies = conv_input(PATCHED_NN, PATCHED_F, make(shape, layout), grad)
        assert patched == upstream and (upstream_copies, patched_copies) == copies


def test_other_ranks_raise_like_upstream() -> None:
    for shape in ((2, 3), (1, 2, 2, 2, 2, 2)):
        x = standin.dense(shape)
        assert conv_input(PATCHED_NN, PATCHED_F, x, True) == conv_input(UPSTREAM_NN, UPSTREAM_F, x, True)
        assert conv_input(PATCHED_NN, PATCHED_F, x, True)[0][0] == "raised"


def test_pooling_and_conv_transpose_are_untouched() -> None:
    for module, functional in ((UPSTREAM_NN, UPSTREAM_F), (PATCHED_NN, PATCHED_F)):
        functional.received.clear()
        standin.State.copied.clear()
        with standin.grad(False):
            module.max_pool(standin.dense((2, 3, 3, 2)), data_format="channels_last")
            module.conv_transpose(standin.dense((2, 3, 3, 2)), standin.dense((1, 1, 2, 2)),
                                  data_format="channels_last")
        assert len(standin.State.copied) == 2
        assert [(op, t.stride()) for op, t in functional.received] == [("max_pool", (18, 9, 3, 1)),
                                                                       ("conv_transpose", (18, 9, 3, 1))]
