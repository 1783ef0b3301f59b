"""What `torch-convert-to-tensor-noop-moves` makes of torch core modules shaped like Keras's, how the
synthetic upstream and patched modules convert side by side (both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from __future__ import annotations

import itertools
import textwrap
import types
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import (
    NIGHTLY_TORCH_CORE_PY,
    Case,
    Mutant,
    Outcome,
    Sources,
    applied_piece,
    piece_text,
    replace_once,
    run_module,
)
from codemods.torch_convert_to_tensor_noop_moves import PATCH

#: A minimal `keras/src/backend/torch/core.py` shaped like Keras 3.12-3.15.1's (`FILES`: the
#: series' synthetic tree, where torch-variable-value-fast-path's, later in the series, wins;
#: written for these tests, only the anchored statements follow Keras): `get_device()` (a `str`),
#: a `Variable` with `.value`, `to_torch_dtype`, and `convert_to_tensor` whose tensor branch has
#: `if x.device != device:` around the `is_meta` branch (what `torch-convert-to-tensor-device`
#: anchors on too) and `if dtype is not None: x = x.to(to_torch_dtype(dtype))`. Its imports are
#: Keras's; the behaviours run it with a stand-in torch and `global_state` (`_run_core`: the
#: fixture `torch_current_cuda`, tests/support/torch_current_cuda.py: torch's rules for `.to()`,
#: every `.to()` logged).
CORE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/core.py (convert_to_tensor)."""

    import torch

    from keras.src.backend.common import global_state

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


# -- behaviours: what the cases cannot say, and the synthetic upstream and patched modules side by side --

CORE = "keras/src/backend/torch/core.py"
#: The body of `CORE_PY`'s `if x.device != device:`.
_DEVICE_BODY = (
    "            if x.is_meta:\n"
    "                x = torch.empty_like(x, device=device)\n"
    "            else:\n"
    "                x = x.to(device)\n"
)
#: `CORE_PY` as torch-convert-to-tensor-device (earlier in the series; no `requires` between the
#: two) leaves it: its piece as applied where `if x.device != device:` was, read through the engine
#: (`applied_piece`). tests/unit/test_patches_together.py holds it to what that
#: patch renders.
DEVICE_APPLIED_PY = replace_once(
    CORE_PY, "        if x.device != device:\n" + _DEVICE_BODY,
    applied_piece("torch-convert-to-tensor-device", "unconditional_move", "        ", upstream=_DEVICE_BODY),
)



def _patched(core: str) -> str:
    """The tree's core.py `core` (`CORE_PY`, or `DEVICE_APPLIED_PY`) with this patch applied."""
    files = {**FILES, CORE: core}
    sources = Sources(lambda p: files.get(p))
    check_ = PATCH.check(sources)
    assert check_.outcome is Outcome.APPLIED and not check_.present
    PATCH.apply(sources)
    return sources.rendered()[CORE]


def _modules(standin: types.ModuleType) -> types.SimpleNamespace:
    """The synthetic core modules, run against the stand-in torch and `global_state` of `standin`
    (the fixture `torch_current_cuda`): upstream's, this patch's alone, the device patch's alone,
    and both."""
    stand_ins = {"torch": standin.torch, "keras.src.backend.common": types.SimpleNamespace(global_state=standin.global_state)}
    return types.SimpleNamespace(
        upstream=run_module(CORE_PY, "noop_moves_upstream", stand_ins),
        patched=run_module(_patched(CORE_PY), "noop_moves_patched", stand_ins),
        device_only=run_module(DEVICE_APPLIED_PY, "noop_moves_device_only", stand_ins),
        both=run_module(_patched(DEVICE_APPLIED_PY), "noop_moves_both", stand_ins),
    )


def run_one(standin: types.ModuleType, module: Any, kind: str, values: tuple[float, ...], source_device: str,
            source_dtype: str, dtype: str | None, device: Any, variable: bool, requires_grad: bool, mode: bool,
            current: int = 0) -> tuple[object, ...]:
    """What `convert_to_tensor` returns, and which `.to()` calls a mode or subclass saw, with
    `current` the current cuda device."""
    torch = standin.torch

    def _mode(tensor: Any, target: Any) -> Any:
        """A torch-function mode that answers every `.to()` itself."""
        return torch.Tensor(("mode",), tensor.dtype, tensor.device)

    standin.global_state.clear()
    if device is not None:
        standin.global_state["torch_device"] = device
    torch.cuda.set_device(current)
    torch.log.clear()
    torch.moves.clear()
    tensor = torch.tensor(values, source_dtype, source_device, requires_grad, kind)
    x = module.Variable(tensor) if variable else tensor
    torch.mode = _mode if mode else None
    try:
        out = module.convert_to_tensor(x, dtype=dtype)
    except Exception as error:  # the same error, with the same message
        return ("raised", type(error), str(error), _seen(torch, mode))
    finally:
        standin.global_state.clear()
        torch.mode = None
    return (out.values, out.dtype.name, repr(out.device), type(out).__name__, out.requires_grad, out is tensor,
            _seen(torch, mode))


def _seen(torch: Any, mode: bool) -> list[str]:
    """The `.to()` calls a mode sees (all of them), or a subclass (its own `.to` only)."""
    return list(torch.log) if mode else [step for step in torch.log if step == "Logged.to"]


DEVICES = st.sampled_from([None, "cpu", "cuda", "cuda:0", "cuda:1", "cpu:0", "meta", "mps", "bogus", "", "cpu"])


def patched_converts_like_upstream(torch_current_cuda: types.ModuleType) -> None:
    standin = torch_current_cuda
    modules = _modules(standin)

    @settings(max_examples=400, deadline=None)
    @given(
        kind=st.sampled_from(["Tensor", "Parameter", "Logged"]),
        values=st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
        source_device=st.sampled_from(["cpu", "cuda:0", "cuda:1", "mps:0", "meta"]),
        source_dtype=st.sampled_from(["float32", "int32"]),
        dtype=st.sampled_from([None, "float32", "int32", "float64", "complex7"]),
        device=DEVICES | st.sampled_from(["cpu", "cuda:0"]).map(standin.Device),
        variable=st.booleans(),
        requires_grad=st.booleans(),
        mode=st.booleans(),
        current=st.sampled_from([0, 1]),
    )
    def converts_like_upstream(
        kind: str, values: tuple[float, ...], source_device: str, source_dtype: str, dtype: str | None, device: Any,
        variable: bool, requires_grad: bool, mode: bool, current: int,
    ) -> None:
        args = (kind, values, source_device, source_dtype, dtype, device, variable, requires_grad, mode, current)
        assert run_one(standin, modules.patched, *args) == run_one(standin, modules.upstream, *args)
        assert run_one(standin, modules.both, *args) == run_one(standin, modules.device_only, *args)

    converts_like_upstream()


def no_op_moves_are_skipped_and_the_others_made(torch_current_cuda: types.ModuleType) -> None:
    standin = torch_current_cuda
    torch = standin.torch
    modules = _modules(standin)
    for module in (modules.patched, modules.both):  # alone, after the device patch
        assert run_one(standin, module, "Parameter", (1.0,), "cpu", "float32", "float32", None, True, True, False)[5] is True
        assert torch.log == []
        assert run_one(standin, module, "Tensor", (1.0,), "cuda:1", "float32", None, "cuda:1", False, False, False)[5] is True
        assert torch.log == []
        # "cuda" is the current cuda device for torch, asked at each call: on it, no call; else a move.
        assert run_one(standin, module, "Tensor", (1.0,), "cuda:0", "float32", None, "cuda", False, False, False)[5] is True
        assert torch.log == []
        moved = run_one(standin, module, "Tensor", (1.0,), "cuda:0", "float32", None, "cuda", False, False, False,
                        current=1)
        assert moved[2] == "device(type='cuda', index=1)" and moved[5] is False
        assert torch.log == ["to('cuda')"]
        moved = run_one(standin, module, "Tensor", (1.0,), "cpu", "float32", "int32", "cpu:0", False, False, False)
        assert moved[1:3] == ("int32", "device(type='cpu', index=0)") and moved[5] is False
        assert torch.log == ["to('cpu:0')", "to(torch.int32)"]
        # Subclasses and modes see every call.
        run_one(standin, module, "Logged", (1.0,), "cpu", "float32", "float32", None, False, False, False)
        assert torch.log == ["Logged.to", "to('cpu')", "Logged.to", "to(torch.float32)"]
        run_one(standin, module, "Tensor", (1.0,), "cpu", "float32", "float32", None, False, False, True)
        assert torch.log == ["to('cpu')", "to(torch.float32)"]
        # The table keeps what each device string means, at most 64 of them.
        assert module._FORKGEN_TORCH_DEVICES["cpu"] == standin.Device("cpu")
        assert module._FORKGEN_TORCH_DEVICES["cuda"] == "cuda"
        assert module._FORKGEN_TORCH_DEVICES["cpu:0"] == standin.Device("cpu:0")
        assert "bogus" not in module._FORKGEN_TORCH_DEVICES


# -- the index-less "cuda" (a default GPU machine's `get_device()`): the current cuda device --


def _noop_moves_kept(moves: list[tuple[str, bool]]) -> list[str]:
    """Upstream's `.to()` calls less those the patch skips: the device moves to "cuda" and to
    a device with an index (or "cpu"), and the casts, that returned the tensor itself; an
    index-less "mps" (the current mps device, torch decides) is always called."""
    return [target for target, itself in moves if not itself or target == "'mps'"]


def cuda_is_the_current_device_asked_at_each_call(torch_current_cuda: types.ModuleType) -> None:
    """Upstream's and the patched `convert_to_tensor` side by side, the current cuda device
    changed between calls (0, 1, then 0 again: a remembered answer goes stale): the same
    results, and the same `.to()` calls but the no-ops on the current device."""
    standin = torch_current_cuda
    torch = standin.torch
    modules = _modules(standin)
    # alone (against upstream's), after the device patch (against the device patch's alone)
    for module, reference in ((modules.patched, modules.upstream), (modules.both, modules.device_only)):
        skipped = 0
        try:
            for current in (0, 1, 0):
                for kind, source_device, device, dtype, variable in itertools.product(
                    ["Tensor", "Parameter"], ["cuda:0", "cuda:1", "cpu", "mps:0"], ["cuda", "mps", "cuda:1", "cpu"],
                    [None, "float32", "int32"], [False, True],
                ):
                    args = (kind, (1.0, 2.0), source_device, "float32", dtype, device, variable, True, False, current)
                    expected = run_one(standin, reference, *args)
                    upstream_moves = list(torch.moves)
                    assert run_one(standin, module, *args) == expected, (current, args)
                    assert [target for target, _ in torch.moves] == _noop_moves_kept(upstream_moves), (current, args)
                    if device == "cuda" and source_device == f"cuda:{current}":
                        # torch's `.to("cuda")` returned x (and the cast too, unless to int32): skipped.
                        assert upstream_moves[0] == ("'cuda'", True) and expected[5] is (dtype != "int32")
                        assert "'cuda'" not in [target for target, _ in torch.moves]
                        skipped += 1
        finally:
            torch.cuda.set_device(0)
        assert skipped == 3 * 2 * 3 * 2


def cuda_is_asked_only_about_a_tensor_on_cuda_for_cuda(torch_current_cuda: types.ModuleType) -> None:
    """The cpu path (and every device but "cuda") never asks CUDA, which a torch without CUDA
    cannot answer; each call about a tensor on cuda for "cuda" asks again."""
    standin = torch_current_cuda
    torch = standin.torch
    patched = _modules(standin).patched
    torch.cuda.asked = 0
    for device in ("cpu", "cuda:0", "cuda:1", "mps", None):
        for source_device in ("cpu", "cuda:0", "cuda:1", "mps:0"):
            run_one(standin, patched, "Tensor", (1.0,), source_device, "float32", "float32", device, False, False, False)
    for source_device in ("cpu", "mps:0", "meta"):
        run_one(standin, patched, "Tensor", (1.0,), source_device, "float32", None, "cuda", True, False, False)
    assert torch.cuda.asked == 0
    for current in (0, 1, 1):
        run_one(standin, patched, "Parameter", (1.0,), "cuda:1", "float32", None, "cuda", True, False, False, current)
    torch.cuda.set_device(0)
    assert torch.cuda.asked == 3


BEHAVIOURS = (
    patched_converts_like_upstream,
    no_op_moves_are_skipped_and_the_others_made,
    cuda_is_the_current_device_asked_at_each_call,
    cuda_is_asked_only_about_a_tensor_on_cuda_for_cuda,
)
