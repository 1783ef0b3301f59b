"""What `torch-max-pool-channels-last` makes of torch nn modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch.

`NN_PY` (`FILES`: the series' synthetic tree) is a minimal `keras/src/backend/torch/nn.py`:
`torch-conv-single-copy` anchors on the same file, so it is that patch's synthetic nn.py (its
cases' `NN_PY`, copied: no `requires` between the two) with a `max_pool` shaped like Keras
3.15.x's (written for these tests; only the anchored statements follow Keras: the rank, the
channels_last copy, the "same"/other padding branch, the "meta" device stand-in, the per-rank
pooling calls, `.to(device)` and the permutation back) and the imports and the padding helper it
uses, so that both patches find their anchors in the one synthetic tree (this patch comes later
in the series: its `FILES` wins). tests/support/torch_strided.py runs it on a numpy stand-in."""

import textwrap

from codemods.engine import Case, Mutant, piece_text, replace_once

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
