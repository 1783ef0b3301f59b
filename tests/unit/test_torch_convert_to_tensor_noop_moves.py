"""Patch torch-convert-to-tensor-noop-moves (ours) on synthetic torch core modules."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.patchlib import AnchorDrift, Outcome, Patch, Sources
from codemods.series import load_series, run
from codemods.torch_convert_to_tensor_device import PATCH as DEVICE_PATCH
from codemods.torch_convert_to_tensor_noop_moves import PATCH, SkipNoopMovesCommand
from codemods.torch_convert_to_tensor_noop_moves.skip_noop_moves import module_pieces
from tests.support import synthetic_torch_convert_to_tensor_noop_moves as synthetic
from tests.support.synthetic import assert_applies_once, load_module

CORE = "keras/src/backend/torch/core.py"
NIGHTLY_CORE = "keras/src/backend/torch/ops/core.py"
MARK = "# forkgen: torch-convert-to-tensor-noop-moves"

BEFORE = textwrap.dedent(
    """\
    import torch


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
# The table, then the helper as the template writes it (its behaviour is tested below).
MODULE_PIECES = f"{MARK}\n_FORKGEN_TORCH_DEVICES = {{}}\n" + cst.Module(body=[module_pieces()[1]]).code + "\n\n"
DEVICE_TEST = (
    f"{MARK} (`.to()` only where it may not return `x` itself)\n"
    "if (\n"
    "    (type(x) is not torch.Tensor and type(x) is not torch.nn.Parameter)\n"
    "    or type(device) is not str\n"
    "    or torch._C._is_torch_function_mode_enabled()\n"
    "    or x.device != (_FORKGEN_TORCH_DEVICES.get(device) or _forkgen_torch_device(device))\n"
    "):\n"
    "    x = x.to(device)\n"
)
DTYPE_TEST = (
    f"_forkgen_dtype = to_torch_dtype(dtype)  {MARK}\n"
    "if (\n"
    "    (type(x) is not torch.Tensor and type(x) is not torch.nn.Parameter)\n"
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
assert AFTER.count(MARK) == NIGHTLY_AFTER.count(MARK) == 4


def check(source: str, path: str = CORE) -> Any:
    return PATCH.check(Sources(lambda p: source if p == path else None))


class TestSkipNoopMoves(CodemodTest):
    TRANSFORM = SkipNoopMovesCommand

    def test_wraps_both_moves(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_the_shape_without_the_device_test(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY_AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)
        self.assertCodemod(NIGHTLY_AFTER, NIGHTLY_AFTER, expected_skip=True)


def test_the_inserted_code_is_there_once() -> None:
    assert AFTER.count(MARK) == 4
    assert AFTER.count("x = x.to(device)\n") == 1 and AFTER.count("x = x.to(_forkgen_dtype)\n") == 1
    assert "to_torch_dtype(dtype))" not in AFTER
    # Upstream's code outside the two statements is untouched.
    assert AFTER.replace(MODULE_PIECES, "").count("if x.device != device:") == 1


def test_outcomes() -> None:
    before = check(BEFORE)
    assert before.outcome is Outcome.APPLIED and not before.present
    assert [(a.name, a.line) for a in before.anchors] == [
        ("x = x.to(device)", 19), ("x = x.to(to_torch_dtype(dtype))", 21)]
    for source in (AFTER, NIGHTLY_AFTER):
        present = check(source)
        assert present.outcome is Outcome.APPLIED and present.present
    # keras-nightly: the same anchors in torch/ops/core.py; ours, so applied there too.
    nightly = check(NIGHTLY, NIGHTLY_CORE)
    assert nightly.outcome is Outcome.APPLIED and not nightly.present
    assert nightly.anchors[0].path == NIGHTLY_CORE
    sources = Sources(lambda p: NIGHTLY if p == NIGHTLY_CORE else None)
    PATCH.apply(sources)
    assert sources.rendered() == {NIGHTLY_CORE: NIGHTLY_AFTER}


def test_apply_then_check_again_is_present_and_byte_identical() -> None:
    assert_applies_once(PATCH, CORE, BEFORE, AFTER)


def test_release_range_and_no_requirement() -> None:
    assert PATCH.since == "3.12.0" and PATCH.requires == ()
    series = load_series()
    names = [p.name for p in series]
    assert names.index(PATCH.name) > names.index(DEVICE_PATCH.name)
    old = run(lambda p: BEFORE if p == CORE else None, [PATCH], release="3.11.3")
    assert old.results[0].outcome is Outcome.NOT_APPLICABLE


def _drifted(source: str) -> AnchorDrift:
    with pytest.raises(AnchorDrift) as caught:
        check(source)
    return caught.value


@pytest.mark.parametrize(
    ("source", "anchor", "found", "line"),
    [
        (BEFORE.replace("                x = x.to(device)\n",
                        "                x = x.to(device)\n                x = x.to(device)\n"),
         "x = x.to(device)", "found 2", 19),
        (BEFORE.replace("                x = x.to(device)\n", "                x = x.cuda()\n"),
         "x = x.to(device)", "found 0", 8),
        (BEFORE.replace("                x = x.to(device)\n",
                        "                x = x.to(device)\n                x = x.contiguous()\n"),
         "x = x.to(device)", "another shape", 19),
        (BEFORE.replace("if x.is_meta:", "if x.is_sparse:"), "if x.is_meta:", "found 0", 19),
        # 3.0-3.11: the cast is returned, not assigned under `if dtype is not None:`.
        (BEFORE.replace("        if dtype is not None:\n            x = x.to(to_torch_dtype(dtype))\n"
                        "        return x\n",
                        "        if dtype is None:\n            return x\n"
                        "        return x.to(to_torch_dtype(dtype))\n"),
         "if dtype is not None:", "found 0", 22),
        (BEFORE.replace("            x = x.to(to_torch_dtype(dtype))\n",
                        "            x = x.to(to_torch_dtype(dtype), copy=True)\n"),
         "x = x.to(to_torch_dtype(dtype))", "another statement", 21),
        (BEFORE.replace("            x = x.to(to_torch_dtype(dtype))\n",
                        "            x = x.to(to_torch_dtype(dtype))\n            x = x.contiguous()\n"),
         "x = x.to(to_torch_dtype(dtype))", "2 statements", 21),
        (BEFORE.replace("import torch\n", "import numpy\n"), "import torch", "none", 1),
        (BEFORE.replace("import torch\n", "import torch\n\n_FORKGEN_TORCH_DEVICES = {}\n"),
         "_FORKGEN_TORCH_DEVICES", "1 unmarked", 1),
        (BEFORE.replace("import torch\n", "import torch\n\n\ndef _forkgen_torch_device(d):\n    return d\n"),
         "_forkgen_torch_device", "1 unmarked", 1),
        (BEFORE.replace("import torch\n", "import torch\nfrom builtins import len as type\n"),
         "type", "a module-level binding", 1),
        (BEFORE.replace("        device = get_device()\n", "        device = get_device()\n"
                        "        _forkgen_dtype = None\n"), "_forkgen_dtype", "1 uses", 8),
        (BEFORE.replace("is_tensor(x):", "torch.is_tensor(x):"), "if ... is_tensor(x):", "found 0", 8),
        (BEFORE.replace("def convert_to_tensor(", "def convert(", 1), "convert_to_tensor", "found 0", 1),
    ],
    ids=["two moves", "no move", "move not alone", "no is_meta", "3.11's cast", "cast with copy",
         "cast not alone", "no torch", "table name taken", "helper name taken", "type shadowed",
         "local name taken", "no tensor branch", "no function"],
)
def test_drift(source: str, anchor: str, found: str, line: int) -> None:
    error = _drifted(source)
    assert error.anchor == anchor and found in str(error), str(error)
    assert (error.path, error.line) == (CORE, line)


def test_half_applied_is_drift() -> None:
    half = AFTER.replace(textwrap.indent(DTYPE_TEST, " " * 12), "            x = x.to(to_torch_dtype(dtype))\n")
    error = _drifted(half)
    assert error.anchor == PATCH.name and "the dtype test absent" in str(error)
    assert "the device test present" in str(error)
    assert error.line == half.splitlines().index(" " * 20 + "x = x.to(device)") + 1
    unmarked = AFTER.replace(f"{MARK} (`.to()` only", "# (`.to()` only")
    error = _drifted(unmarked)
    assert error.anchor == "x = x.to(device)" and "another shape" in str(error)


def test_a_tree_without_the_torch_backend_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == CORE and "no such file" in str(caught.value)


def _patched(patches: Sequence[Patch]) -> str:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    for patch in patches:
        check_ = patch.check(sources)
        assert check_.outcome is Outcome.APPLIED and not check_.present
        patch.apply(sources)
    return sources.rendered()[CORE]


def test_the_synthetic_tree_file_takes_both_patches_in_series_order() -> None:
    for patches in ([PATCH], [DEVICE_PATCH, PATCH]):
        patched = _patched(patches)
        assert patched.count(MARK) == 4
        assert PATCH.check(Sources(lambda p, text=patched: text if p == CORE else None)).present


# -- behaviour: the synthetic upstream and patched modules, side by side -----------------------

UPSTREAM = load_module(synthetic.CORE_PY, "noop_moves_upstream")
PATCHED = load_module(_patched([PATCH]), "noop_moves_patched")
DEVICE_ONLY = load_module(_patched([DEVICE_PATCH]), "noop_moves_device_only")
BOTH = load_module(_patched([DEVICE_PATCH, PATCH]), "noop_moves_both")
torch = synthetic.torch


def _mode(tensor: Any, target: Any) -> Any:
    """A torch-function mode that answers every `.to()` itself."""
    return torch.Tensor(("mode",), tensor.dtype, tensor.device)


def run_one(module: Any, kind: str, values: tuple[float, ...], source_device: str, source_dtype: str,
            dtype: str | None, device: Any, variable: bool, requires_grad: bool, mode: bool) -> tuple[object, ...]:
    """What `convert_to_tensor` returns, and which `.to()` calls a mode or subclass saw."""
    synthetic.global_state.clear()
    if device is not None:
        synthetic.global_state["torch_device"] = device
    torch.log.clear()
    tensor = torch.tensor(values, source_dtype, source_device, requires_grad, kind)
    x = module.Variable(tensor) if variable else tensor
    torch.mode = _mode if mode else None
    try:
        out = module.convert_to_tensor(x, dtype=dtype)
    except Exception as error:  # the same error, with the same message
        return ("raised", type(error), str(error), _seen(mode))
    finally:
        synthetic.global_state.clear()
        torch.mode = None
    return (out.values, out.dtype.name, repr(out.device), type(out).__name__, out.requires_grad, out is tensor,
            _seen(mode))


def _seen(mode: bool) -> list[str]:
    """The `.to()` calls a mode sees (all of them), or a subclass (its own `.to` only)."""
    return list(torch.log) if mode else [step for step in torch.log if step == "Logged.to"]


DEVICES = st.sampled_from([None, "cpu", "cuda", "cuda:0", "cuda:1", "cpu:0", "meta", "bogus", "", "cpu"])


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(["Tensor", "Parameter", "Logged"]),
    values=st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
    source_device=st.sampled_from(["cpu", "cuda:0", "cuda:1", "meta"]),
    source_dtype=st.sampled_from(["float32", "int32"]),
    dtype=st.sampled_from([None, "float32", "int32", "float64", "complex7"]),
    device=DEVICES | st.sampled_from(["cpu", "cuda:0"]).map(synthetic._Device),
    variable=st.booleans(),
    requires_grad=st.booleans(),
    mode=st.booleans(),
)
def test_patched_converts_like_upstream(
    kind: str, values: tuple[float, ...], source_device: str, source_dtype: str, dtype: str | None, device: Any,
    variable: bool, requires_grad: bool, mode: bool,
) -> None:
    args = (kind, values, source_device, source_dtype, dtype, device, variable, requires_grad, mode)
    assert run_one(PATCHED, *args) == run_one(UPSTREAM, *args)
    assert run_one(BOTH, *args) == run_one(DEVICE_ONLY, *args)


@pytest.mark.parametrize("module", [PATCHED, BOTH], ids=["alone", "after the device patch"])
def test_no_op_moves_are_skipped_and_the_others_made(module: Any) -> None:
    assert run_one(module, "Parameter", (1.0,), "cpu", "float32", "float32", None, True, True, False)[5] is True
    assert torch.log == []
    assert run_one(module, "Tensor", (1.0,), "cuda:1", "float32", None, "cuda:1", False, False, False)[5] is True
    assert torch.log == []
    # "cuda" is the current cuda device for torch: the call is made (and returns x here).
    assert run_one(module, "Tensor", (1.0,), "cuda:0", "float32", None, "cuda", False, False, False)[5] is True
    assert torch.log == ["to('cuda')"]
    moved = run_one(module, "Tensor", (1.0,), "cpu", "float32", "int32", "cpu:0", False, False, False)
    assert moved[1:3] == ("int32", "device(type='cpu', index=0)") and moved[5] is False
    assert torch.log == ["to('cpu:0')", "to(torch.int32)"]
    # Subclasses and modes see every call.
    run_one(module, "Logged", (1.0,), "cpu", "float32", "float32", None, False, False, False)
    assert torch.log == ["Logged.to", "to('cpu')", "Logged.to", "to(torch.float32)"]
    run_one(module, "Tensor", (1.0,), "cpu", "float32", "float32", None, False, False, True)
    assert torch.log == ["to('cpu')", "to(torch.float32)"]
    # The table keeps what each device string means, at most 64 of them.
    assert module._FORKGEN_TORCH_DEVICES["cpu"] == synthetic._Device("cpu")
    assert module._FORKGEN_TORCH_DEVICES["cuda"] == "cuda"
    assert module._FORKGEN_TORCH_DEVICES["cpu:0"] == synthetic._Device("cpu:0")
    assert "bogus" not in module._FORKGEN_TORCH_DEVICES
