"""What `torch-max-pool-channels-last` makes of torch nn modules shaped like Keras's, what the
patched max_pool returns and copies beside upstream's (both run by tests/unit/test_patch_cases.py),
and the breaks of its inserted code the equivalence suite must catch.

`NN_PY` (`FILES`: the series' synthetic tree) is a minimal `keras/src/backend/torch/nn.py`:
`torch-conv-single-copy` anchors on the same file, so it is that patch's synthetic nn.py (its
cases' `NN_PY`, copied: no `requires` between the two) with a `max_pool` shaped like Keras
3.15.x's (written for these tests; only the anchored statements follow Keras: the rank, the
channels_last copy, the "same"/other padding branch, the "meta" device stand-in, the per-rank
pooling calls, `.to(device)` and the permutation back) and the imports and the padding helper it
uses, so that both patches find their anchors in the one synthetic tree (this patch comes later
in the series: its `FILES` wins). tests/support/torch_strided.py runs it on a numpy stand-in."""

import difflib
import functools
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import (
    Case,
    Mutant,
    Outcome,
    Sources,
    piece_text,
    replace_once,
    run_module,
)
from codemods.torch_max_pool_channels_last import PATCH

NN_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/nn.py (the conv input path)."""

    import torch
    import torch.nn.functional as tnn

    from keras.src import backend
    from keras.src.backend.torch.core import convert_to_tensor
    from keras.src.backend.torch.core import get_device
    from keras.src.utils.argument_validation import standardize_tuple


    def _apply_same_padding(inputs, kernel_size, strides, data_format, operation_type):
        """Pads `inputs` for "same" pooling (the stand-in pads nothing)."""
        return inputs, [0] * len(kernel_size)


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


    def max_pool(
        inputs,
        pool_size,
        strides=None,
        padding="valid",
        data_format=None,
    ):
        """Max pooling over 1, 2 or 3 spatial axes."""
        inputs = convert_to_tensor(inputs)
        num_spatial_dims = inputs.ndim - 2
        pool_size = standardize_tuple(pool_size, num_spatial_dims, "pool_size")
        if strides is None:
            strides = pool_size
        else:
            strides = standardize_tuple(strides, num_spatial_dims, "strides")

        data_format = backend.standardize_data_format(data_format)
        if data_format == "channels_last":
            inputs = _transpose_spatial_inputs(inputs)

        if padding == "same":
            # Torch pools without "same" padding: pad the input first.
            inputs, padding = _apply_same_padding(
                inputs, pool_size, strides, data_format, "pooling"
            )
        else:
            padding = 0

        device = get_device()
        # A real stand-in on the symbolic device.
        if device == "meta":
            inputs = torch.empty(size=inputs.shape, dtype=inputs.dtype, device="cpu")

        if num_spatial_dims == 1:
            outputs = tnn.max_pool1d(
                inputs, kernel_size=pool_size, stride=strides, padding=padding
            )
        elif num_spatial_dims == 2:
            outputs = tnn.max_pool2d(
                inputs, kernel_size=pool_size, stride=strides, padding=padding
            )
        elif num_spatial_dims == 3:
            outputs = tnn.max_pool3d(
                inputs, kernel_size=pool_size, stride=strides, padding=padding
            )
        else:
            raise ValueError(f"Expected 3, 4 or 5 dimensions, got shape {inputs.shape}.")

        outputs = outputs.to(device)
        if data_format == "channels_last":
            outputs = _transpose_spatial_outputs(outputs)
        return outputs


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

#: The same paths as the conv patch's cases: its nn.py, extended.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    "keras/src/backend/torch/nn.py": NN_PY,
}

BEFORE = NN_PY
NIGHTLY_NN = "keras/src/backend/torch/ops/nn.py"
MARK = "  # forkgen: torch-max-pool-channels-last"
TRANSPOSE = "inputs = _transpose_spatial_inputs(inputs)"
STATEMENT = f'    if data_format == "channels_last":\n        {TRANSPOSE}\n\n    if padding'
CALL = (
    '    if data_format == "channels_last":\n'
    f"        forkgen_view = _forkgen_max_pool_view(inputs, num_spatial_dims, padding){MARK}\n"
    "        inputs = _transpose_spatial_inputs(inputs) if forkgen_view is None else forkgen_view\n\n    if padding"
)
POOL = "        outputs = tnn.max_pool2d(\n            inputs, kernel_size=pool_size, stride=strides, padding=padding\n        )\n"
OUTPUT = (
    f'        if data_format == "channels_last" and forkgen_view is not None:{MARK}\n'
    "            outputs = outputs.clone(memory_format=torch.contiguous_format)\n"
)
HELPER = piece_text(__file__, "helper")
AFTER = replace_once(
    replace_once(replace_once(BEFORE, "\n\n\ndef max_pool(\n", "\n\n\n" + HELPER + "\n\ndef max_pool(\n"), STATEMENT, CALL),
    POOL, POOL + OUTPUT,
)
#: keras-nightly's shape since #23645 (its nn.py moved to torch/ops/): max_pool passes the flag.
NIGHTLY = replace_once(
    BEFORE, STATEMENT,
    '    if data_format == "channels_last":\n        inputs = _transpose_spatial_inputs(\n'
    "            inputs, channels_last_memory_format=True\n        )\n\n    if padding",
)
#: Keras 3.14.x: `_transpose_spatial_inputs` returns the view (no copy to save).
V3_14 = BEFORE.replace(")).contiguous()\n", "))\n")
DATA_FORMAT = "    data_format = backend.standardize_data_format(data_format)\n"
TO_DEVICE = "    outputs = outputs.to(device)\n"


def _drift(name: str, old: str, new: str, drift: str, before: str = BEFORE) -> Case:
    return Case(name, replace_once(before, old, new), drift=drift)


CASES = (
    Case("inserts the helper and its statements in max_pool", BEFORE, AFTER,
         detail="max_pool pools a dense input's channels-first view instead of a copy",
         anchors=((TRANSPOSE, 81), ("outputs = tnn.max_pool2d(inputs, ...)", 101), ("def _transpose_spatial_inputs", 17))),
    Case("keras-nightly passes the flag (#23645)", NIGHTLY, upstream=True),
    Case("keras-nightly's torch/ops/nn.py", {NIGHTLY_NN: NIGHTLY}, upstream=True),
    Case("3.14's view", V3_14, drift="nn.py:17: anchor 'return torch.permute(inputs, (0, 3, 1, 2)).contiguous()': expected exactly one `return torch.permute(inputs, (0, 3, 1, 2)).contiguous()` in _transpose_spatial_inputs; found 0"),
    _drift("another signature", "def _transpose_spatial_inputs(inputs):", "def _transpose_spatial_inputs(inputs, copy=True):", "nn.py:1: anchor 'def _transpose_spatial_inputs': expected exactly one `def _transpose_spatial_inputs` at module level; found 0"),
    _drift("no channels_last if", STATEMENT, f"    {TRANSPOSE}\n\n    if padding", "nn.py:80: anchor 'inputs = _transpose_spatial_inputs(inputs)': expected alone under an `if data_format == \"channels_last\":` of max_pool; found another shape"),
    _drift("not alone in its if", STATEMENT, STATEMENT.replace("(inputs)\n", "(inputs)\n        inputs = inputs * 1\n"), "nn.py:81: anchor 'inputs = _transpose_spatial_inputs(inputs)': expected alone under an `if data_format == \"channels_last\":` of max_pool; found another shape"),
    _drift("two copies", STATEMENT, STATEMENT.replace("(inputs)\n", f"(inputs)\n        {TRANSPOSE}\n"), "nn.py:81: anchor 'inputs = _transpose_spatial_inputs(inputs)': expected exactly one `inputs = _transpose_spatial_inputs(inputs)` in max_pool; found 2 not replaced and 0 replaced"),
    _drift("another rank", "    num_spatial_dims = inputs.ndim - 2\n    pool_size",
           "    num_spatial_dims = len(inputs.shape) - 2\n    pool_size", "nn.py:63: anchor 'num_spatial_dims = inputs.ndim - 2': expected exactly one `num_spatial_dims = inputs.ndim - 2` in max_pool; found 0"),
    _drift("inputs reassigned before", DATA_FORMAT, DATA_FORMAT + "    inputs = inputs[:1]\n", "nn.py:82: anchor 'inputs = _transpose_spatial_inputs(inputs)': expected `inputs` unchanged since `num_spatial_dims = inputs.ndim - 2`; found inputs reassigned"),
    _drift("padding reassigned", DATA_FORMAT, DATA_FORMAT + "    padding = padding.lower()\n", "nn.py:82: anchor 'inputs = _transpose_spatial_inputs(inputs)': expected `padding` unchanged before it; found padding reassigned"),
    _drift("another padding default", "    else:\n        padding = 0\n", "    else:\n        padding = 1\n", "nn.py:63: anchor 'if padding == \"same\": ... else: padding = 0': expected exactly one `if padding == \"same\": ... else: padding = 0` in max_pool; found 0"),
    _drift("another device lookup", "    device = get_device()\n", "    device = backend.get_device()\n", "nn.py:63: anchor 'device = get_device()': expected exactly one `device = get_device()` in max_pool; found 0"),
    _drift("no meta stand-in", '    if device == "meta":\n', '    if device == "cpu":\n', "nn.py:63: anchor 'if device == \"meta\":': expected exactly one `if device == \"meta\":` in max_pool; found 0"),
    _drift("inputs reassigned after", "    device = get_device()\n", "    device = get_device()\n    inputs = inputs + 0\n", "nn.py:81: anchor 'inputs = _transpose_spatial_inputs(inputs)': expected `inputs` unchanged between it and `outputs = tnn.max_pool2d(inputs, ...)` (but where 3.15.1 pads it or replaces it on 'meta'); found inputs reassigned"),
    _drift("no max_pool2d", POOL, POOL.replace("tnn.max_pool2d(", "tnn.max_pool2d_fast("), "nn.py:63: anchor 'outputs = tnn.max_pool2d(inputs, ...)': expected exactly one `outputs = tnn.max_pool2d(inputs, ...)` in max_pool; found 0"),
    _drift("no 2-D branch", "    elif num_spatial_dims == 2:\n", "    elif num_spatial_dims >= 2:\n", "nn.py:81: anchor 'outputs = tnn.max_pool2d(inputs, ...)': expected after `if device == \"meta\":` in max_pool (under `... num_spatial_dims == 2:`); found another shape"),
    _drift("another to()", TO_DEVICE, "    outputs = outputs.to(device, copy=True)\n", "nn.py:63: anchor 'outputs = outputs.to(device)': expected exactly one `outputs = outputs.to(device)` in max_pool; found 0"),
    _drift("no transpose back", "        outputs = _transpose_spatial_outputs(outputs)\n    return outputs\n\n\ndef conv(",
           "        pass\n    return outputs\n\n\ndef conv(", "nn.py:63: anchor 'outputs = _transpose_spatial_outputs(outputs)': expected exactly one `outputs = _transpose_spatial_outputs(outputs)` in max_pool; found 0"),
    _drift("data_format reassigned", TO_DEVICE, TO_DEVICE + '    data_format = "channels_first"\n', "nn.py:81: anchor 'inputs = _transpose_spatial_inputs(inputs)': expected `data_format` unchanged after it; found data_format reassigned"),
    _drift("flag name taken", TO_DEVICE, "    forkgen_view = None\n" + TO_DEVICE, "nn.py:81: anchor 'max_pool: forkgen_view': expected names free for pool_inputs; found used"),
    _drift("no max_pool", "def max_pool(\n", "def max_pool2d(\n", "nn.py:1: anchor 'max_pool': expected exactly one def max_pool; found 0"),
    _drift("torch aliased", "import torch\nimport torch.nn", "import torch as th\nimport torch.nn", "nn.py:101: anchor 'torch': expected bound where pool_outputs goes (in max_pool or at module level); found not bound"),
    _drift("no get_device", "from keras.src.backend.torch.core import get_device\n", "", "nn.py:62: anchor 'get_device': expected bound where helper goes (at module level or at module level); found not bound"),
    Case("helper name taken", BEFORE + "\n\ndef _forkgen_max_pool_view(inputs, num_spatial_dims, padding):\n    return None\n",
         drift="nn.py:141: anchor '_forkgen_max_pool_view': expected names free for helper (forkgen's helper); found already bound"),
    Case("builtin shadowed", BEFORE + "\n\ndef zip(*values):\n    return ()\n", drift="nn.py:63: anchor 'zip': expected the builtins helper reads; found bound at module level"),
    _drift("statements without helper", HELPER + "\n\n", "", "nn.py:63: anchor 'torch-max-pool-channels-last': expected all pieces present or none; found inputs = _transpose_spatial_inputs(inputs), outputs = tnn.max_pool2d(inputs, ...) forkgen's, def max_pool missing", AFTER),
    _drift("no output copy", OUTPUT, "", "nn.py:140: anchor 'torch-max-pool-channels-last': expected all pieces present or none; found inputs = _transpose_spatial_inputs(inputs), def max_pool forkgen's, outputs = tnn.max_pool2d(inputs, ...) missing", AFTER),
)

MUTANTS = (
    Mutant("the output made contiguous with .contiguous() (keeps a 1x1 output's strides)",
           "        outputs = outputs.clone(memory_format=torch.contiguous_format)\n", "        outputs = outputs.contiguous()\n"),
    Mutant("the view also pooled while autograd records", "            or (inputs.requires_grad and torch.is_grad_enabled())\n", ""),
    Mutant("a view that is contiguous already (one channel) pooled and re-laid out too",
           "        if view.is_contiguous():\n            return None\n", ""),
    Mutant("bfloat16 pooled in place too (its kernel writes another NaN)",
           "            or inputs.dtype not in (torch.float32, torch.float64, torch.float16)\n",
           "            or inputs.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16)\n"),
)


# -- behaviours: the edit and its outcomes; max_pool beside upstream's, on the numpy stand-in -----

NN = "keras/src/backend/torch/nn.py"


def check(source: str, path: str = NN) -> Any:
    return PATCH.check(Sources(lambda p: source if p == path else None))


def line_of(source: str, text: str) -> int:
    return source[: source.index(text)].count("\n") + 1


ANCHOR_LINE = line_of(BEFORE, STATEMENT) + 1


def only_max_pool_changes_and_only_by_one_statement() -> None:
    diff = list(difflib.ndiff(BEFORE.splitlines(True), AFTER.splitlines(True)))
    assert [line for line in diff if line.startswith("- ")] == ["-         inputs = _transpose_spatial_inputs(inputs)\n"]
    # What is added: two blank lines and the helper, the two statements, the output copy (difflib
    # may align the blank lines either side of the helper).
    added = sorted(line[2:] for line in diff if line.startswith("+ "))
    inserted = "\n\n" + HELPER + CALL.split("\n", 1)[1].rsplit("\n\n", 1)[0] + "\n" + OUTPUT
    assert added == sorted(inserted.splitlines(True))
    # conv, conv_transpose and the other pooling statements keep upstream's code.
    assert AFTER.count("inputs = _transpose_spatial_inputs(inputs)\n") == 2
    assert AFTER.count("tnn.max_pool1d(") == AFTER.count("tnn.max_pool3d(") == 1
    assert HELPER.startswith("# forkgen: torch-max-pool-channels-last (keras#23645")
    assert "def _forkgen_max_pool_view(inputs, num_spatial_dims, padding):\n" in HELPER
    assert "        or (inputs.requires_grad and torch.is_grad_enabled())\n" in HELPER


def outcomes() -> None:
    # Beyond the cases: the lines of the applied and upstream forms, and the file nightly names.
    present = check(AFTER)
    assert present.anchors[0].line == line_of(AFTER, CALL) + 1
    assert present.anchors[1].line == line_of(AFTER, POOL)
    assert check(NIGHTLY).anchors[0].line == ANCHOR_LINE
    moved = check(NIGHTLY, NIGHTLY_NN)
    assert moved.outcome is Outcome.UPSTREAM and moved.anchors[0].path == NIGHTLY_NN
    assert PATCH.since == "3.15.0"



class PoolStandIn:
    """torch for the synthetic max_pool: the conv patch's strided numpy stand-in (`strided`, the
    `torch_strided` fixture) with what max_pool's path reads besides (`Tensor`), a max_pool2d
    that records what it is given (`received`), and the Keras modules the synthetic nn.py imports
    (Keras's device: `device`). `upstream` and `patched`: BEFORE and AFTER executed on it."""

    def __init__(self, strided: types.ModuleType) -> None:
        self.strided = strided
        self.device = "cpu"
        self.received: list[Any] = []

        class PoolTensor(strided.Tensor):  # type: ignore[name-defined,misc]
            """The conv patch's strided numpy stand-in, with what max_pool's path reads besides."""

            layout = "strided"
            dtype = "float32"
            requires_grad = False
            device = types.SimpleNamespace(type="cpu")

            def clone(self, memory_format: Any) -> Any:
                return PoolTensor(super().clone(memory_format).array)

            def to(self, device: str) -> Any:
                return self

        self.Tensor = PoolTensor
        self.upstream = self.load(BEFORE, "max_pool_upstream")
        self.patched = self.load(AFTER, "max_pool_patched")

    def max_pool2d(self, inputs: Any, kernel_size: tuple[int, int], stride: tuple[int, int], padding: int) -> Any:
        """Max pooling of an NCHW tensor; the output in the format torch picks for the input:
        channels_last for a channels_last-strided input that is not contiguous, else the default."""
        strided = self.strided
        self.received.append(inputs)
        x = inputs.array
        (kh, kw), (sh, sw) = kernel_size, stride
        oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
        values = np.empty((x.shape[0], x.shape[1], oh, ow))
        for i in range(oh):
            for j in range(ow):
                values[:, :, i, j] = x[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw].max(axis=(2, 3))
        last = inputs.is_contiguous(strided.channels_last) and not inputs.is_contiguous()
        fmt = strided.channels_last if last else strided.contiguous_format
        return self.Tensor(strided.strided(values, strided.canonical_strides(values.shape, fmt)).array)

    def load(self, source: str, name: str) -> types.ModuleType:
        """`source` executed with the stand-in's torch and Keras modules for its imports."""
        strided, tensor = self.strided, self.Tensor
        torch = types.ModuleType("torch")
        for key, value in {
            "Tensor": tensor, "strided": "strided", "float32": "float32", "float64": "float64",
            "float16": "float16", "bfloat16": "bfloat16", "contiguous_format": strided.contiguous_format,
            "channels_last": strided.channels_last, "channels_last_3d": strided.channels_last_3d,
            "permute": lambda t, dims: tensor(t.array.transpose(tuple(dims))),
            "is_grad_enabled": strided.is_grad_enabled,
            "compiler": types.SimpleNamespace(is_compiling=lambda: False),
            "_C": types.SimpleNamespace(_functorch=types.SimpleNamespace(is_functorch_wrapped_tensor=lambda t: False)),
            "empty": lambda size, dtype, device: tensor(np.zeros(size)),
        }.items():
            setattr(torch, key, value)
        tnn = types.ModuleType("torch.nn.functional")
        tnn.max_pool2d = self.max_pool2d  # type: ignore[attr-defined]
        torch.nn = types.SimpleNamespace(functional=tnn)  # type: ignore[attr-defined]
        backend = types.SimpleNamespace(standardize_data_format=lambda f: f or "channels_last")
        core = types.SimpleNamespace(convert_to_tensor=lambda x: x, get_device=lambda: self.device)
        validation = types.SimpleNamespace(
            standardize_tuple=lambda v, n, name: (v,) * n if isinstance(v, int) else tuple(v))
        # `import torch.nn.functional as tnn` takes `torch`'s; `from a.b import c`, the one for "a.b".
        stand_ins = {"torch": torch, "keras.src": types.SimpleNamespace(backend=backend),
                     "keras.src.backend.torch.core": core, "keras.src.utils.argument_validation": validation}
        return run_module(source, name, stand_ins)

    def make(self, shape: tuple[int, ...], layout: str, requires_grad: bool) -> Any:
        strided = self.strided
        values = (np.arange(int(np.prod(shape))) % 5).astype("float64").reshape(shape)
        if layout == "dense":
            x = self.Tensor(strided.dense(shape).array)
            x.array[...] = values
        elif layout == "offset":
            x = self.Tensor(strided.strided(values, strided.canonical_strides(
                shape, strided.contiguous_format), offset=3).array)
        elif layout == "sliced channels":
            wide = strided.dense((*shape[:-1], 2 * shape[-1]))
            x = self.Tensor(wide.array[..., ::2])
            x.array[...] = values
        else:
            strides = [7 if size == 1 else s for size, s in zip(shape, strided.canonical_strides(
                shape, strided.contiguous_format), strict=True)]
            x = self.Tensor(strided.strided(values, strides).array)
        x.requires_grad = requires_grad
        return x

    @contextmanager
    def on(self, name: str) -> Iterator[None]:
        """Keras's device is `name` (get_device())."""
        previous, self.device = self.device, name
        try:
            yield
        finally:
            self.device = previous

    def pooled(self, module: types.ModuleType, x: Any, grad: bool, padding: str, where: str, **kwargs: Any) -> Any:
        self.received.clear()
        self.strided.State.copied.clear()
        with self.strided.grad(grad), self.on(where):
            out = module.max_pool(x, 2, padding=padding, data_format="channels_last", **kwargs)
        (received,) = self.received
        facts = (out.shape, out.stride(), out.array.tobytes())
        return facts, received.shares_memory(x), [t.numel() for t in self.strided.State.copied]


@functools.cache
def pool_stand_in(torch_strided: types.ModuleType) -> PoolStandIn:
    return PoolStandIn(torch_strided)


LAYOUTS = ["dense", "offset", "sliced channels", "odd size-1 strides"]


@settings(max_examples=300, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 2), st.integers(2, 5), st.integers(2, 5), st.integers(1, 3)),
    layout=st.sampled_from(LAYOUTS),
    grad=st.booleans(),
    requires_grad=st.booleans(),
    padding=st.sampled_from(["valid", "same"]),
    where=st.sampled_from(["cpu", "cpu", "meta"]),
    strides=st.sampled_from([None, 1, (1, 2)]),
)
def max_pool_gives_upstreams_tensor_and_copies_only_the_output(
    torch_strided: types.ModuleType, shape: tuple[int, ...], layout: str, grad: bool, requires_grad: bool,
    padding: str, where: str, strides: Any,
) -> None:
    pool = pool_stand_in(torch_strided)
    upstream = pool.pooled(pool.upstream, pool.make(shape, layout, requires_grad), grad, padding, where, strides=strides)
    x = pool.make(shape, layout, requires_grad)
    patched = pool.pooled(pool.patched, x, grad, padding, where, strides=strides)
    assert patched[0] == upstream[0]
    dense = layout in ("dense", "offset") or (layout == "odd size-1 strides" and 1 not in shape)
    eligible = (dense and shape[-1] > 1 and padding == "valid" and where == "cpu"
                and not (grad and requires_grad))
    # The view itself is pooled exactly where the patch applies (or where upstream's copy was none:
    # a view contiguous already); then only the output is copied.
    assert patched[1] is (eligible or upstream[1])
    if eligible:
        assert upstream[2] == [x.numel()] and patched[2] == [int(np.prod(upstream[0][0]))]
    else:
        assert patched[2] == upstream[2]


def a_one_by_one_output_gets_upstreams_strides(torch_strided: types.ModuleType) -> None:
    # A channels_last output of 1x1 spatial size counts as contiguous: `.contiguous()` would keep
    # its strides; the clone gives the default layout's, as 3.15.1's output has.
    pool = pool_stand_in(torch_strided)
    for shape in ((2, 2, 2, 3), (1, 3, 2, 4)):
        upstream = pool.pooled(pool.upstream, pool.make(shape, "dense", False), False, "valid", "cpu", strides=None)
        patched = pool.pooled(pool.patched, pool.make(shape, "dense", False), False, "valid", "cpu", strides=None)
        assert patched[0] == upstream[0] and patched[1]
        assert upstream[0][1] == (shape[-1], 1, 1, 1)


def other_data_formats_and_ranks_keep_upstreams_steps(torch_strided: types.ModuleType) -> None:
    pool = pool_stand_in(torch_strided)
    x = pool.make((2, 3, 4, 4), "dense", False)
    pool.received.clear()
    with torch_strided.grad(False):
        pool.patched.max_pool(x, 2, data_format="channels_first")
    assert pool.received[0] is x
    assert pool.patched._forkgen_max_pool_view(pool.make((2, 4, 3), "dense", False), 1, "valid") is None
    assert pool.patched._forkgen_max_pool_view(pool.make((2, 4, 4, 3), "dense", False), 2, "valid") is not None


BEHAVIOURS = (
    only_max_pool_changes_and_only_by_one_statement, outcomes,
    max_pool_gives_upstreams_tensor_and_copies_only_the_output, a_one_by_one_output_gets_upstreams_strides,
    other_data_formats_and_ranks_keep_upstreams_steps,
)
