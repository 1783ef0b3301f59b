"""What `torch-convert-to-tensor-noop-moves` makes of torch core modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import NIGHTLY_TORCH_CORE_PY, Case, Mutant, piece_text

#: A minimal `keras/src/backend/torch/core.py` shaped like Keras 3.12-3.15.1's (`FILES`: the
#: series' synthetic tree, where torch-variable-value-fast-path's, later in the series, wins;
#: written for these tests, only the anchored statements follow Keras): `get_device()` (a `str`),
#: a `Variable` with `.value`, `to_torch_dtype`, and `convert_to_tensor` whose tensor branch has
#: `if x.device != device:` around the `is_meta` branch (what `torch-convert-to-tensor-device`
#: anchors on too) and `if dtype is not None: x = x.to(to_torch_dtype(dtype))`. It runs against
#: the stand-in torch it imports (tests/support/torch_current_cuda.py: torch's rules for `.to()`,
#: every `.to()` logged).
CORE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/core.py (convert_to_tensor)."""

    from tests.support.torch_current_cuda import global_state
    from tests.support.torch_current_cuda import torch

    DEFAULT_DEVICE = "cpu"
    DTYPES = {"float32": torch.float32, "int32": torch.int32, "float64": torch.float64}


    class Variable:
        def __init__(self, value):
            self._value = value

        @property
        def value(self):
            return self._value


    def get_device():
        device = global_state.get("torch_device")
        if device is None:
            return DEFAULT_DEVICE
        return device


    def is_tensor(x):
        return torch.is_tensor(x)


    def to_torch_dtype(dtype):
        found = DTYPES.get(dtype)
        if found is None:
            raise ValueError(f"Unsupported dtype for PyTorch: {dtype}")
        return found


    def convert_to_tensor(x, dtype=None, sparse=None, ragged=None):
        if sparse:
            raise ValueError("`sparse=True` is not supported with torch backend")
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
        return torch.as_tensor(x, dtype=to_torch_dtype(dtype or "float32"), device=get_device())
    '''
)

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    "keras/src/backend/torch/core.py": CORE_PY,
}

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
MODULE_PIECES = piece_text(__file__, "module_level") + "\n\n"
DEVICE_TEST = piece_text(__file__, "device_move", upstream="x = x.to(device)\n")
DTYPE_TEST = piece_text(__file__, "dtype_move")


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
