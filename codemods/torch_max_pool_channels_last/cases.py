"""What `torch-max-pool-channels-last` makes of torch nn modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from codemods.engine import Case, Mutant
from codemods.torch_conv_single_copy.cases import template_helper
from tests.support.synthetic import replace_once
from tests.support.synthetic_torch_max_pool_channels_last import NN_PY

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
HELPER = template_helper("codemods.torch_max_pool_channels_last", "# forkgen: torch-max-pool-channels-last (")
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
