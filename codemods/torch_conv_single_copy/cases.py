"""What `torch-conv-single-copy` makes of torch nn modules shaped like Keras's, what the patched
conv hands the convolution beside upstream's (both run by tests/unit/test_patch_cases.py), and the
breaks of its inserted code the equivalence suite must catch.

`NN_PY` (`FILES`: the series' synthetic tree) is a minimal `keras/src/backend/torch/nn.py` shaped
like Keras 3.15.x's conv input path: `_transpose_spatial_inputs` (permute, then `.contiguous()`),
keras#22324's `_get_channels_last_memory_format` and `_maybe_convert_to_channels_last`, a pooling
op and `conv_transpose` that also call `_transpose_spatial_inputs`, and `conv` with its two
`if data_format == "channels_last":` blocks (written for these tests; only the anchored statements
follow Keras). tests/support/torch_strided.py runs it on a numpy stand-in for torch."""

import difflib
import functools
import textwrap
import types
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Case, Mutant, Outcome, Sources, piece_text, replace_once
from codemods.torch_conv_single_copy import PATCH

NN_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/nn.py (the conv input path)."""

    import torch
    import torch.nn.functional as tnn


    def _transpose_spatial_inputs(inputs):
        """Channels-last axes to channels-first axes, in the default layout."""
        # A plain view breaks view-based ops downstream: copy it.
        ndim = inputs.ndim - 2
        if ndim == 1:
            return torch.permute(inputs, (0, 2, 1)).contiguous()
        elif ndim == 2:
            return torch.permute(inputs, (0, 3, 1, 2)).contiguous()
        elif ndim == 3:
            return torch.permute(inputs, (0, 4, 1, 2, 3)).contiguous()
        raise ValueError(f"Expected 3, 4 or 5 dimensions, got shape {inputs.shape}.")


    def _transpose_spatial_outputs(outputs):
        ndim = outputs.ndim - 2
        if ndim == 1:
            return torch.permute(outputs, (0, 2, 1))
        elif ndim == 2:
            return torch.permute(outputs, (0, 2, 3, 1))
        return torch.permute(outputs, (0, 2, 3, 4, 1))


    def _transpose_conv_kernel(kernel):
        ndim = kernel.ndim - 2
        if ndim == 1:
            return torch.permute(kernel, (2, 1, 0))
        elif ndim == 2:
            return torch.permute(kernel, (3, 2, 0, 1))
        return torch.permute(kernel, (4, 3, 0, 1, 2))


    def _get_channels_last_memory_format(ndim):
        if ndim == 4:
            return torch.channels_last
        elif ndim == 5:
            return torch.channels_last_3d
        return None


    def _maybe_convert_to_channels_last(tensor):
        mem_fmt = _get_channels_last_memory_format(tensor.ndim)
        if mem_fmt is not None and not tensor.is_contiguous(memory_format=mem_fmt):
            return tensor.contiguous(memory_format=mem_fmt)
        return tensor


    def max_pool(inputs, data_format=None):
        if data_format == "channels_last":
            inputs = _transpose_spatial_inputs(inputs)
        return tnn.max_pool(inputs)


    def conv(inputs, kernel, data_format=None):
        """Convolution (the stand-in records what it is given)."""
        if data_format == "channels_last":
            inputs = _transpose_spatial_inputs(inputs)

        kernel = _transpose_conv_kernel(kernel)

        if data_format == "channels_last":
            inputs = _maybe_convert_to_channels_last(inputs)
            kernel = _maybe_convert_to_channels_last(kernel)

        outputs = tnn.conv(inputs, kernel)
        if data_format == "channels_last":
            outputs = _transpose_spatial_outputs(outputs)
        return outputs


    def conv_transpose(inputs, kernel, data_format=None):
        if data_format == "channels_last":
            inputs = _transpose_spatial_inputs(inputs)
        kernel = _transpose_conv_kernel(kernel)
        return tnn.conv_transpose(inputs, kernel)
    '''
)

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    "keras/src/backend/torch/nn.py": NN_PY,
}

BEFORE = NN_PY
NIGHTLY_NN = "keras/src/backend/torch/ops/nn.py"
STATEMENT = "        inputs = _transpose_spatial_inputs(inputs)\n\n    kernel = _transpose_conv_kernel(kernel)\n"
CALL = "        inputs = _forkgen_transpose_conv_inputs(inputs)  # forkgen: torch-conv-single-copy\n"
HELPER = piece_text(__file__, "helper")
AFTER = replace_once(
    replace_once(BEFORE, "        return tensor.contiguous(memory_format=mem_fmt)\n    return tensor\n",
                 "        return tensor.contiguous(memory_format=mem_fmt)\n    return tensor\n\n\n" + HELPER),
    STATEMENT, CALL + "\n    kernel = _transpose_conv_kernel(kernel)\n",
)
#: keras-nightly's shape since #23199 (its nn.py moved to torch/ops/): conv passes the flag and
#: no longer converts its inputs a second time.
NIGHTLY = replace_once(
    replace_once(BEFORE, STATEMENT,
                 "        inputs = _transpose_spatial_inputs(\n            inputs, channels_last_memory_format=True\n"
                 "        )\n\n    kernel = _transpose_conv_kernel(kernel)\n"),
    "        inputs = _maybe_convert_to_channels_last(inputs)\n", "",
)
#: Keras 3.14.x: keras#22324's conversion, but `_transpose_spatial_inputs` returns the view.
V3_14 = BEFORE.replace(")).contiguous()\n", "))\n")
CONVERT = "inputs = _maybe_convert_to_channels_last(inputs)"


def _drift(name: str, source: str, drift: str) -> Case:
    return Case(name, source, drift=drift)


CASES = (
    Case("inserts the helper and calls it from conv", BEFORE, AFTER,
         detail="conv calls a single-copy helper instead of _transpose_spatial_inputs",
         anchors=(("inputs = _transpose_spatial_inputs(inputs)", 62), ("def _maybe_convert_to_channels_last", 46),
                  ("def _transpose_spatial_inputs", 7))),
    Case("keras-nightly passes the flag (#23199)", NIGHTLY, upstream=True),
    Case("keras-nightly's torch/ops/nn.py", {NIGHTLY_NN: NIGHTLY}, upstream=True),
    _drift("3.14's view", V3_14, "nn.py:7: anchor 'return torch.permute(inputs, (0, 3, 1, 2)).contiguous()': expected "
           "exactly one `return torch.permute(inputs, (0, 3, 1, 2)).contiguous()` in _transpose_spatial_inputs; found 0"),
    _drift("another permutation", replace_once(BEFORE, "(0, 4, 1, 2, 3)).contiguous()", "(0, 1, 4, 2, 3)).contiguous()"),
           "nn.py:7: anchor 'return torch.permute(inputs, (0, 4, 1, 2, 3)).contiguous()'"),
    _drift("another signature", BEFORE.replace("def _transpose_spatial_inputs(inputs):",
                                               "def _transpose_spatial_inputs(inputs, copy=True):"),
           "nn.py:1: anchor 'def _transpose_spatial_inputs': expected exactly one `def _transpose_spatial_inputs` at "
           "module level; found 0"),
    _drift("no conversion", BEFORE.replace(f"        {CONVERT}\n", ""),
           f"nn.py:59: anchor '{CONVERT}': expected exactly one `{CONVERT}` in conv; found 0"),
    _drift("two conversions", BEFORE.replace("        kernel = _maybe_convert_to_channels_last(kernel)\n",
                                             f"        kernel = _maybe_convert_to_channels_last(kernel)\n        {CONVERT}\n"),
           f"nn.py:67: anchor '{CONVERT}': expected exactly one `{CONVERT}` in conv; found 2"),
    _drift("inputs reassigned", BEFORE.replace("    kernel = _transpose_conv_kernel(kernel)\n\n    if",
                                               "    kernel = _transpose_conv_kernel(kernel)\n    inputs = inputs[:, :1]\n\n    if"),
           f"nn.py:62: anchor '{CONVERT}': expected `inputs` unchanged between `inputs = _transpose_spatial_inputs(inputs)` "
           "and it; found inputs reassigned"),
    _drift("conversion in the same if", BEFORE.replace(
        STATEMENT, f"        inputs = _transpose_spatial_inputs(inputs)\n        {CONVERT}\n\n    kernel = _transpose_conv_kernel(kernel)\n",
    ).replace(f'    if data_format == "channels_last":\n        {CONVERT}\n        kernel',
              '    if data_format == "channels_last":\n        kernel'),
        f"nn.py:62: anchor '{CONVERT}': expected in an `if` after the one of `inputs = _transpose_spatial_inputs(inputs)`; "
        "found it in the same or an earlier one"),
    _drift("no channels_last if", BEFORE.replace(
        '    if data_format == "channels_last":\n' + STATEMENT, "    inputs = _transpose_spatial_inputs(inputs)\n\n"
        "    kernel = _transpose_conv_kernel(kernel)\n"),
        f"nn.py:61: anchor '{CONVERT}': expected it and `inputs = _transpose_spatial_inputs(inputs)` each under an "
        '`if data_format == "channels_last":` of conv; found another shape'),
    _drift("two transposes", BEFORE.replace("    kernel = _transpose_conv_kernel(kernel)\n\n",
                                            "    kernel = _transpose_conv_kernel(kernel)\n    inputs = _transpose_spatial_inputs(inputs)\n\n"),
           "nn.py:62: anchor 'inputs = _transpose_spatial_inputs(inputs)': expected exactly one "
           "`inputs = _transpose_spatial_inputs(inputs)` in conv; found 2"),
    _drift("no conv", BEFORE.replace("def conv(", "def conv2d("), "nn.py:1: anchor 'conv': expected exactly one def conv; found 0"),
    _drift("no channels_last_3d", replace_once(BEFORE, "        return torch.channels_last_3d\n", "        return None\n"),
           "nn.py:38: anchor 'torch.channels_last_3d': expected exactly one `torch.channels_last_3d` in "
           "_get_channels_last_memory_format; found 0"),
    _drift("another conversion", BEFORE.replace("        return tensor.contiguous(memory_format=mem_fmt)\n",
                                                "        return tensor.to(memory_format=mem_fmt)\n"),
           "nn.py:46: anchor 'tensor.contiguous(memory_format=__)': expected exactly one "
           "`tensor.contiguous(memory_format=__)` in _maybe_convert_to_channels_last; found 0"),
    _drift("no conversion helper", BEFORE.replace("def _maybe_convert_to_channels_last(", "def _to_channels_last("),
           "nn.py:1: anchor 'def _maybe_convert_to_channels_last': expected exactly one "
           "`def _maybe_convert_to_channels_last` at module level; found 0"),
    _drift("torch aliased", BEFORE.replace("import torch\nimport torch.nn", "import torch as th\nimport torch.nn"),
           "nn.py:46: anchor 'torch': expected bound where helper goes (at module level or at module level); found not bound"),
    _drift("helper name taken", BEFORE + "\n\ndef _forkgen_transpose_conv_inputs(inputs):\n    return inputs\n",
           "nn.py:83: anchor '_forkgen_transpose_conv_inputs': expected names free for helper (forkgen's helper); "
           "found already bound"),
    _drift("builtin shadowed", BEFORE + "\n\ndef any(values):\n    return False\n",
           "nn.py:46: anchor 'any': expected the builtins helper reads; found bound at module level"),
    _drift("call without helper", AFTER.replace(HELPER, ""),
           "nn.py:46: anchor 'torch-conv-single-copy': expected all pieces present or none; found "
           "inputs = _transpose_spatial_inputs(inputs) forkgen's, def _maybe_convert_to_channels_last missing"),
    _drift("helper without call", AFTER.replace(CALL, STATEMENT.split("\n")[0] + "\n"),
           "nn.py:92: anchor 'torch-conv-single-copy': expected all pieces present or none; found "
           "def _maybe_convert_to_channels_last forkgen's, inputs = _transpose_spatial_inputs(inputs) missing"),
)

MUTANTS = (
    Mutant("conv gets the caller's memory while autograd records",
           "                if dense and not torch.is_grad_enabled():\n", "                if dense:\n"),
    Mutant("one-channel inputs take the single copy",
           "            if not view.is_contiguous() and sizes[1] != 1 and any(size != 1 for size in sizes[2:]):\n",
           "            if not view.is_contiguous() and any(size != 1 for size in sizes[2:]):\n"),
    Mutant("any stride of a size-1 axis counts as dense",
           "                    dense = dense and stride == expected\n",
           "                    dense = dense and (stride == expected or size == 1)\n"),
)


# -- behaviours: the edit and its outcomes; conv's input beside upstream's, on the numpy stand-in ---

NN = "keras/src/backend/torch/nn.py"


def check(source: str, path: str = NN) -> Any:
    return PATCH.check(Sources(lambda p: source if p == path else None))


def line_of(source: str, text: str) -> int:
    return source[: source.index(text)].count("\n") + 1


def only_conv_changes_and_only_by_one_statement() -> None:
    removed = [line for line in difflib.ndiff(BEFORE.splitlines(True), AFTER.splitlines(True)) if line.startswith("- ")]
    assert removed == ["-         inputs = _transpose_spatial_inputs(inputs)\n"]
    # The pooling op and conv_transpose keep upstream's helper; conv keeps its conversion.
    assert AFTER.count("inputs = _transpose_spatial_inputs(inputs)") == 2
    assert AFTER.count("inputs = _maybe_convert_to_channels_last(inputs)") == 1
    assert HELPER.startswith("# forkgen: torch-conv-single-copy (keras#23199")
    assert "def _forkgen_transpose_conv_inputs(inputs):\n" in HELPER and "    return _transpose_spatial_inputs(inputs)\n" in HELPER


def outcomes() -> None:
    # Beyond the cases: the lines of the applied and upstream forms, and the file nightly names.
    assert check(AFTER).anchors[0].line == line_of(AFTER, CALL)
    nightly = check(NIGHTLY)
    assert nightly.anchors[0].line == line_of(NIGHTLY, "        inputs = _transpose_spatial_inputs(\n            inputs, chan")
    moved = check(NIGHTLY, NIGHTLY_NN)
    assert moved.outcome is Outcome.UPSTREAM and moved.anchors[0].path == NIGHTLY_NN
    assert PATCH.since == "3.15.0"



def the_synthetic_tree_file_takes_the_patch() -> None:
    sources = Sources(lambda p: FILES.get(p))
    first = PATCH.check(sources)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(sources)
    patched = sources.rendered()[NN]
    assert patched.count("# forkgen: torch-conv-single-copy") == 2
    assert PATCH.check(Sources(lambda p: patched if p == NN else None)).present


@functools.cache
def loaded(standin: types.ModuleType) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """The synthetic upstream and patched nn.py, each with its `tnn`, executed on the stand-in
    `torch_strided` (its `load_nn`: `import torch` gets the stand-in's)."""
    return standin.load_nn(BEFORE, "torch_nn_upstream"), standin.load_nn(AFTER, "torch_nn_patched")


LAYOUTS = ["dense", "offset", "from channels_first", "sliced channels", "stepped spatial", "expanded batch",
           "odd size-1 strides"]


def make(standin: types.ModuleType, shape: tuple[int, ...], layout: str) -> Any:
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


def conv_input(standin: types.ModuleType, module: Any, functional: Any, x: Any, grad: bool) -> tuple[Any, int]:
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
def conv_receives_what_upstream_gives_it_with_fewer_copies(
    torch_strided: types.ModuleType, shape: tuple[int, ...], layout: str, grad: bool
) -> None:
    standin = torch_strided
    (upstream_nn, upstream_f), (patched_nn, patched_f) = loaded(standin)
    x = make(standin, shape, layout)
    upstream, upstream_copies = conv_input(standin, upstream_nn, upstream_f, x, grad)
    patched, patched_copies = conv_input(standin, patched_nn, patched_f, make(standin, shape, layout), grad)
    # Shape, strides and values; sharing memory with the input only where upstream does too,
    # or, without autograd, for a densely laid out input.
    assert patched[:3] == upstream[:3]
    assert patched_copies <= upstream_copies and patched_copies <= 1
    if patched[3] and not upstream[3]:
        assert not grad and x.stride() == standin.canonical_strides(shape, standin.contiguous_format)


def a_dense_input_is_copied_once_with_autograd_and_never_without(torch_strided: types.ModuleType) -> None:
    standin = torch_strided
    (upstream_nn, upstream_f), (patched_nn, patched_f) = loaded(standin)
    for shape in [(2, 3, 4, 5), (1, 2, 3, 4, 2), (2, 1, 3, 2), (2, 3, 3, 2)]:
        for layout in ["dense", "offset"]:
            for grad, copies in ((True, 1), (False, 0)):
                upstream, upstream_copies = conv_input(standin, upstream_nn, upstream_f, make(standin, shape, layout), grad)
                patched, patched_copies = conv_input(standin, patched_nn, patched_f, make(standin, shape, layout), grad)
                assert upstream_copies == 2 and patched_copies == copies and patched[:3] == upstream[:3], (shape, layout, grad)
                assert patched[3] is not grad and upstream[3] is False, (shape, layout, grad)


#: (what, shape, layout, (upstream's copies, the patched conv's copies)).
NOT_DENSE = (
    ("one channel, sliced", (2, 3, 3, 1), "sliced channels", (1, 1)), ("1x1 spatial", (2, 1, 1, 3), "dense", (0, 0)),
    ("one channel", (2, 3, 3, 1), "dense", (0, 0)), ("empty", (0, 3, 3, 2), "dense", (0, 0)),
    ("1-D", (2, 3, 2), "dense", (1, 1)), ("channels_first data", (2, 3, 3, 2), "from channels_first", (1, 1)),
    ("odd batch stride", (1, 3, 3, 2), "odd size-1 strides", (2, 1)),
    ("odd spatial stride", (2, 3, 1, 2), "odd size-1 strides", (2, 1)),
    ("sliced", (2, 3, 3, 2), "sliced channels", (2, 1)), ("expanded", (2, 3, 3, 2), "expanded batch", (2, 1)),
)


def copies_where_the_input_is_not_dense(torch_strided: types.ModuleType) -> None:
    # Where the layout is ambiguous, the view contiguous already or the rank not 4/5, the helper
    # hands over to `_transpose_spatial_inputs` (upstream's copies); any other view that is not
    # dense is copied once, straight into channels_last strides. The same tensor either way.
    standin = torch_strided
    (upstream_nn, upstream_f), (patched_nn, patched_f) = loaded(standin)
    for what, shape, layout, copies in NOT_DENSE:
        for grad in (True, False):
            upstream, upstream_copies = conv_input(standin, upstream_nn, upstream_f, make(standin, shape, layout), grad)
            patched, patched_copies = conv_input(standin, patched_nn, patched_f, make(standin, shape, layout), grad)
            assert patched == upstream and (upstream_copies, patched_copies) == copies, (what, grad)


def other_ranks_raise_like_upstream(torch_strided: types.ModuleType) -> None:
    standin = torch_strided
    (upstream_nn, upstream_f), (patched_nn, patched_f) = loaded(standin)
    for shape in ((2, 3), (1, 2, 2, 2, 2, 2)):
        x = standin.dense(shape)
        assert conv_input(standin, patched_nn, patched_f, x, True) == conv_input(standin, upstream_nn, upstream_f, x, True)
        assert conv_input(standin, patched_nn, patched_f, x, True)[0][0] == "raised"


def pooling_and_conv_transpose_are_untouched(torch_strided: types.ModuleType) -> None:
    standin = torch_strided
    for module, functional in loaded(standin):
        functional.received.clear()
        standin.State.copied.clear()
        with standin.grad(False):
            module.max_pool(standin.dense((2, 3, 3, 2)), data_format="channels_last")
            module.conv_transpose(standin.dense((2, 3, 3, 2)), standin.dense((1, 1, 2, 2)),
                                  data_format="channels_last")
        assert len(standin.State.copied) == 2
        assert [(op, t.stride()) for op, t in functional.received] == [("max_pool", (18, 9, 3, 1)),
                                                                       ("conv_transpose", (18, 9, 3, 1))]


BEHAVIOURS = (
    only_conv_changes_and_only_by_one_statement, outcomes,
    the_synthetic_tree_file_takes_the_patch, conv_receives_what_upstream_gives_it_with_fewer_copies,
    a_dense_input_is_copied_once_with_autograd_and_never_without, copies_where_the_input_is_not_dense,
    other_ranks_raise_like_upstream, pooling_and_conv_transpose_are_untouched,
)
