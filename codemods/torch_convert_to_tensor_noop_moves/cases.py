"""What `torch-convert-to-tensor-noop-moves` makes of torch core modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import NIGHTLY_TORCH_CORE_PY, Case, Mutant

MARK = "# forkgen: torch-convert-to-tensor-noop-moves"
BEFORE = textwrap.dedent(
    """\
    import torch

    from keras.src.backend.common.dtypes import to_torch_dtype


    def get_device():
        return "cpu"


    def convert_to_tensor(x, dtype=None):
        if sparse:
            raise ValueError("no sparse")
        if isinstance(x, Variable) or is_tensor(x):
            if isinstance(x, Variable):
                x = x.value
            device = get_device()
            if x.device != device:
                if x.is_meta:
                    x = torch.empty_like(x, device=device)
                else:
                    x = x.to(device)
            if dtype is not None:
                x = x.to(to_torch_dtype(dtype))
            return x
        return torch.as_tensor(x, device=get_device())
    """
)
# The table, then the helpers, as inserted right before `def convert_to_tensor`.
MODULE_PIECES = f"""\
{MARK}
_FORKGEN_TORCH_DEVICES = {{}}


{MARK}
_forkgen_compiling = getattr(getattr(torch, "compiler", None), "is_dynamo_compiling", None) or bool


{MARK}
def _forkgen_torch_device(device):
    \"\"\"What a tensor's `.device` equals exactly when `x.to(device)` returns `x` itself, for
    the str `device` (remembered): `torch.device(device)` when it names one device (cpu, or
    an index is given); else `device`, which no `torch.device` equals (an index-less device
    is the current one of its kind, torch decides at the call: for "cuda" exactly,
    `_forkgen_on_current_cuda` asks; a string torch rejects makes `.to()` raise as before).\"\"\"
    try:
        parsed = torch.device(device)
    except Exception:
        return device
    if parsed.type != "cpu" and parsed.index is None:
        parsed = device
    if len(_FORKGEN_TORCH_DEVICES) < 64:
        _FORKGEN_TORCH_DEVICES[device] = parsed
    return parsed


{MARK}
def _forkgen_on_current_cuda(x, device):
    \"\"\"Whether `x.to(device)` keeps `x`'s device though the str `device` names none by itself:
    for the index-less "cuda" exactly (any other: False), when `x` is on the current cuda
    device, which torch gives "cuda" (aten's `ensure_has_index`), asked at each call
    (`torch.cuda.set_device` and `torch.cuda.device(...)` change it). CUDA is asked only about
    a tensor on cuda (one exists only once CUDA is initialised): never on a torch without CUDA.\"\"\"
    if device != "cuda":
        return False
    found = x.device
    return found.type == "cuda" and found.index == torch.cuda.current_device()


"""
DEVICE_TEST = (
    f"{MARK} (`.to()` only where it may not return `x` itself)\n"
    "if (\n"
    "    (type(x) is not torch.Tensor and type(x) is not torch.nn.Parameter)\n"
    "    or type(device) is not str\n"
    "    or _forkgen_compiling()\n"
    "    or torch._C._is_torch_function_mode_enabled()\n"
    "    or (\n"
    "        x.device != (_FORKGEN_TORCH_DEVICES.get(device) or _forkgen_torch_device(device))\n"
    "        and not _forkgen_on_current_cuda(x, device)\n"
    "    )\n"
    "):\n"
    "    x = x.to(device)\n"
)
DTYPE_TEST = (
    f"_forkgen_dtype = to_torch_dtype(dtype)  {MARK}\n"
    "if (\n"
    "    (type(x) is not torch.Tensor and type(x) is not torch.nn.Parameter)\n"
    "    or _forkgen_compiling()\n"
    "    or torch._C._is_torch_function_mode_enabled()\n"
    "    or x.dtype is not _forkgen_dtype\n"
    "):\n"
    "    x = x.to(_forkgen_dtype)\n"
)


def _after(before: str, move_indent: int) -> str:
    after = before.replace("def convert_to_tensor(", MODULE_PIECES + "def convert_to_tensor(", 1)
    after = after.replace(" " * move_indent + "x = x.to(device)\n", textwrap.indent(DEVICE_TEST, " " * move_indent))
    return after.replace("            x = x.to(to_torch_dtype(dtype))\n", textwrap.indent(DTYPE_TEST, " " * 12))


AFTER = _after(BEFORE, 16)

# keras-nightly's shape (and what torch-convert-to-tensor-device leaves): no `x.device != device`.
NIGHTLY = BEFORE.replace(
    "        if x.device != device:\n"
    "            if x.is_meta:\n"
    "                x = torch.empty_like(x, device=device)\n"
    "            else:\n"
    "                x = x.to(device)\n",
    "        if x.is_meta:\n"
    "            x = torch.empty_like(x, device=device)\n"
    "        else:\n"
    "            x = x.to(device)\n",
)
assert NIGHTLY != BEFORE
NIGHTLY_AFTER = _after(NIGHTLY, 12)
assert AFTER.count(MARK) == NIGHTLY_AFTER.count(MARK) == 6


DEVICE = "                x = x.to(device)\n"
DTYPE = "            x = x.to(to_torch_dtype(dtype))\n"


def _drift(name: str, old: str, new: str, drift: str) -> Case:
    assert BEFORE.count(old) == 1, old
    return Case(name, BEFORE.replace(old, new), drift=drift)


CASES = (
    Case("both moves tested, the table and its helper before the function", BEFORE, AFTER,
         detail="test both `.to()` calls of convert_to_tensor for a no-op",
         anchors=(("x = x.to(device)", 21), ("x = x.to(to_torch_dtype(dtype))", 23))),
    Case("the shape without the device test (keras-nightly's, torch-convert-to-tensor-device's)", NIGHTLY, NIGHTLY_AFTER),
    Case("keras-nightly's torch/ops/core.py takes it too", {NIGHTLY_TORCH_CORE_PY: NIGHTLY},
         {NIGHTLY_TORCH_CORE_PY: NIGHTLY_AFTER}),
    _drift("two moves", DEVICE, DEVICE * 2, "expected exactly one `x = x.to(device)` in convert_to_tensor; found 2"),
    _drift("no move", DEVICE, "                x = x.cuda()\n", "found 0 unguarded and 0 guarded"),
    _drift("move not alone", DEVICE, DEVICE + "                x = x.contiguous()\n",
           "anchor 'if x.is_meta:': expected exactly one `if x.is_meta:` in convert_to_tensor; found 0"),
    _drift("no is_meta", "if x.is_meta:", "if x.is_sparse:", "anchor 'if x.is_meta:'"),
    # 3.0-3.11: the cast is returned, not assigned under `if dtype is not None:`.
    _drift("3.11's cast", "        if dtype is not None:\n" + DTYPE + "        return x\n",
           "        if dtype is None:\n            return x\n        return x.to(to_torch_dtype(dtype))\n",
           "expected exactly one `x = x.to(to_torch_dtype(dtype))` in convert_to_tensor; found 0"),
    _drift("cast with copy", DTYPE, "            x = x.to(to_torch_dtype(dtype), copy=True)\n",
           "`x = x.to(to_torch_dtype(dtype))` in convert_to_tensor; found 0"),
    _drift("cast not alone", DTYPE, DTYPE + "            x = x.contiguous()\n",
           "anchor 'if dtype is not None:': expected exactly one"),
    _drift("no torch", "import torch\n", "import numpy\n", "anchor 'torch': expected bound where"),
    _drift("table name taken", "import torch\n", "import torch\n\n_FORKGEN_TORCH_DEVICES = {}\n",
           "anchor '_FORKGEN_TORCH_DEVICES': expected names free for module_level (forkgen's helper); found already bound"),
    _drift("helper name taken", "import torch\n", "import torch\n\n\ndef _forkgen_torch_device(d):\n    return d\n",
           "anchor '_forkgen_torch_device': expected names free for module_level"),
    _drift("current-cuda helper name taken", "import torch\n", "import torch\n\n_forkgen_on_current_cuda = None\n",
           "anchor '_forkgen_on_current_cuda': expected names free for module_level (forkgen's helper); found already bound"),
    _drift("compiling name taken", "import torch\n", "import torch\n\n_forkgen_compiling = None\n",
           "anchor '_forkgen_compiling': expected names free for module_level (forkgen's helper); found already bound"),
    _drift("getattr shadowed", "import torch\n", "import torch\nfrom builtins import len as getattr\n",
           "anchor 'getattr': expected the builtin (the inserted code calls it); found a module-level binding"),
    _drift("type shadowed", "import torch\n", "import torch\nfrom builtins import len as type\n",
           "anchor 'type': expected the builtin (the inserted code calls it); found a module-level binding"),
    _drift("local name taken", "        device = get_device()\n", "        device = get_device()\n        _forkgen_dtype = None\n",
           "anchor 'convert_to_tensor: _forkgen_dtype': expected names free for dtype_move; found used"),
    _drift("no function", "def convert_to_tensor(", "def convert(", "expected exactly one def convert_to_tensor; found 0"),
    Case("half applied", AFTER.replace(textwrap.indent(DTYPE_TEST, " " * 12), DTYPE),
         drift="expected all pieces present or none; found x = x.to(device), def convert_to_tensor(___): ___ forkgen's, "
               "x = x.to(to_torch_dtype(dtype)) missing"),
    Case("an unmarked device test", AFTER.replace(f"{MARK} (`.to()` only", "# (`.to()` only"),
         drift="expected unguarded, or guarded by forkgen; found a guard without forkgen's marker"),
)

MUTANTS = (
    Mutant("a device's index ignored (\"cpu:0\" taken for \"cpu\", no copy)",
           "        parsed = torch.device(device)\n", "        parsed = torch.device(device.split(\":\")[0])\n"),
    Mutant("the device move skipped while dynamo traces too (the graph loses upstream's move)",
           "        or type(device) is not str\n        or _forkgen_compiling()\n",
           "        or type(device) is not str\n"),
    Mutant("the cast skipped while dynamo traces too",
           "        or _forkgen_compiling()\n        or torch._C._is_torch_function_mode_enabled()\n        or x.dtype is not _forkgen_dtype\n",
           "        or torch._C._is_torch_function_mode_enabled()\n        or x.dtype is not _forkgen_dtype\n"),
    Mutant("the cast skipped under a torch-function mode too",
           "        or _forkgen_compiling()\n        or torch._C._is_torch_function_mode_enabled()\n        or x.dtype is not _forkgen_dtype\n",
           "        or _forkgen_compiling()\n        or x.dtype is not _forkgen_dtype\n"),
    Mutant("\"cuda\" with an index taken for the current cuda device (\"cuda:1\" kept on cuda:0)",
           '        if device != "cuda":\n', '        if device[:4] != "cuda":\n'),
    Mutant("the current cuda device not asked (a tensor on any cuda device kept for \"cuda\")",
           '        return found.type == "cuda" and found.index == torch.cuda.current_device()\n',
           '        return found.type == "cuda"\n'),
    Mutant("the current cuda device remembered (stale after torch.cuda.set_device)",
           "found.index == torch.cuda.current_device()",
           "found.index == _FORKGEN_TORCH_DEVICES.setdefault(\"cuda's current\", torch.cuda.current_device())"),
    Mutant("CUDA asked about a tensor not on cuda (a torch without CUDA raises)",
           'found.type == "cuda" and found.index == torch.cuda.current_device()',
           'found.index == torch.cuda.current_device() and found.type == "cuda"'),
)
