"""Patch torch-convert-to-tensor-device (keras-team/keras#23189) on synthetic torch core modules."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.patchlib import AnchorDrift, Outcome, Sources
from codemods.torch_convert_to_tensor_device import PATCH, DropDeviceCheckCommand
from tests.support import synthetic_torch_convert_to_tensor_device as synthetic
from tests.support.synthetic import assert_applies_once, load_module

CORE = "keras/src/backend/torch/core.py"
MARK = "        # forkgen: torch-convert-to-tensor-device (keras#23189: `x.device != device` was always True)\n"

BEFORE = textwrap.dedent(
    """\
    def get_device():
        return "cpu"


    def convert_to_tensor(x, dtype=None):
        if sparse:
            raise ValueError("no sparse")
        if isinstance(x, Variable) or is_tensor(x):
            if isinstance(x, Variable):
                x = x.value
            device = get_device()
            # Move to the current device.
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
AFTER = BEFORE.replace(
    "        if x.device != device:\n"
    "            if x.is_meta:\n"
    "                x = torch.empty_like(x, device=device)\n"
    "            else:\n"
    "                x = x.to(device)\n",
    MARK
    + "        if x.is_meta:\n"
    "            x = torch.empty_like(x, device=device)\n"
    "        else:\n"
    "            x = x.to(device)\n",
)
# keras-nightly's shape since #23189: the same statements, without forkgen's marker.
NIGHTLY = AFTER.replace(MARK, "")
# Keras 3.0-3.9: `if is_tensor(x):`, and the test guards a plain move.
OLD_BEFORE = textwrap.dedent(
    """\
    def convert_to_tensor(x, dtype=None):
        if is_tensor(x):
            device = get_device()
            if x.device != device:
                x = x.to(device)
            if dtype is None:
                return x
            return x.to(to_torch_dtype(dtype))
        return torch.as_tensor(x)
    """
)
OLD_AFTER = OLD_BEFORE.replace(
    "        if x.device != device:\n            x = x.to(device)\n", MARK + "        x = x.to(device)\n"
)


def check(source: str, path: str = CORE) -> Any:
    return PATCH.check(Sources(lambda p: source if p == path else None))


class TestDropDeviceCheck(CodemodTest):
    TRANSFORM = DropDeviceCheckCommand

    def test_drops_the_test_and_keeps_its_body(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_the_older_plain_move(self) -> None:
        self.assertCodemod(OLD_BEFORE, OLD_AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)
        self.assertCodemod(OLD_AFTER, OLD_AFTER, expected_skip=True)

    def test_noop_on_the_upstream_shape(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY, expected_skip=True)


def test_outcomes() -> None:
    before = check(BEFORE)
    assert before.outcome is Outcome.APPLIED and not before.present
    assert [(a.name, a.line) for a in before.anchors] == [("if x.device != device:", 13)]
    assert check(OLD_BEFORE).outcome is Outcome.APPLIED
    for source in (AFTER, OLD_AFTER):
        present = check(source)
        assert present.outcome is Outcome.APPLIED and present.present
    nightly = check(NIGHTLY)
    assert nightly.outcome is Outcome.UPSTREAM and nightly.anchors[0].line == 13
    # keras-nightly has no torch/core.py: convert_to_tensor is in torch/ops/core.py.
    moved = check(NIGHTLY, "keras/src/backend/torch/ops/core.py")
    assert moved.outcome is Outcome.UPSTREAM
    assert moved.anchors[0].path == "keras/src/backend/torch/ops/core.py"


def test_apply_then_check_again_is_present_and_byte_identical() -> None:
    assert_applies_once(PATCH, CORE, BEFORE, AFTER)


@pytest.mark.parametrize(
    ("source", "anchor", "found", "line"),
    [
        (BEFORE.replace("        device = get_device()\n", "        device = self.device\n"),
         "device = get_device()", "found 0", 13),
        (BEFORE.replace("        if x.device != device:\n", "        if x.device != device:\n"
                        "            pass\n        if x.device != device:\n"),
         "if x.device != device:", "found 2", 13),
        (BEFORE.replace("                x = x.to(device)\n",
                        "                x = x.to(device)\n        else:\n            pass\n"),
         "if x.device != device:", "upstream's unconditional move", 13),
        (BEFORE.replace("        if x.device != device:\n", "        if x.device is not device:\n"),
         "if x.device != device:", "another statement", 13),
        (BEFORE.replace("is_tensor(x):", "torch.is_tensor(x):"), "if ... is_tensor(x):", "found 0", 5),
        (BEFORE.replace("def convert_to_tensor(", "def convert(", 1), "convert_to_tensor", "found 0", 1),
    ],
    ids=["no get_device", "two tests", "an else", "reshaped test", "no tensor branch", "no function"],
)
def test_drift(source: str, anchor: str, found: str, line: int) -> None:
    with pytest.raises(AnchorDrift) as caught:
        check(source)
    assert caught.value.anchor == anchor and found in str(caught.value)
    assert (caught.value.path, caught.value.line) == (CORE, line)


def test_a_tree_without_the_torch_backend_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == CORE and "no such file" in str(caught.value)


def test_the_synthetic_tree_file_takes_the_patch() -> None:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    first = PATCH.check(sources)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(sources)
    patched = sources.rendered()[CORE]
    assert patched.count("# forkgen: torch-convert-to-tensor-device") == 1
    assert PATCH.check(Sources(lambda p: patched if p == CORE else None)).present


# -- behaviour: the synthetic upstream and patched modules, side by side -----------------------

def _patched_core() -> str:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    PATCH.apply(sources)
    return sources.rendered()[CORE]


UPSTREAM_MODULE = load_module(synthetic.CORE_PY, "torch_core_upstream")
PATCHED_MODULE = load_module(_patched_core(), "torch_core_patched")
torch = synthetic.torch


def run(module: Any, make: Callable[[Any], Any], dtype: str | None, device: Any) -> tuple[object, ...]:
    """What `convert_to_tensor` returns for the input `make` builds, and what it did."""
    synthetic.global_state.clear()
    if device is not None:
        synthetic.global_state["torch_device"] = device
    torch.log.clear()
    x = make(module)
    source = x.value if isinstance(x, module.Variable) else x
    try:
        out = module.convert_to_tensor(x, dtype=dtype)
    except Exception as error:  # the same error, with the same message
        return ("raised", type(error), str(error), list(torch.log))
    finally:
        synthetic.global_state.clear()
    return (out.values, out.dtype.name, out.device.type, out.requires_grad, out is source, list(torch.log))


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
    source_device=st.sampled_from(["cpu", "cuda", "meta"]),
    source_dtype=st.sampled_from(["float32", "int32", "bfloat16"]),
    dtype=st.sampled_from([None, "float32", "int32", "float64"]),
    device=st.sampled_from([None, "cpu", "cuda", "meta"]),
    variable=st.booleans(),
    requires_grad=st.booleans(),
)
def test_patched_converts_like_upstream(
    values: tuple[float, ...], source_device: str, source_dtype: str, dtype: str | None, device: str | None,
    variable: bool, requires_grad: bool,
) -> None:
    def make(module: Any) -> Any:
        tensor = torch.tensor(values, source_dtype, source_device, requires_grad)
        return module.Variable(tensor) if variable else tensor

    upstream = run(UPSTREAM_MODULE, make, dtype, device)
    assert run(PATCHED_MODULE, make, dtype, device) == upstream
    # The test never skipped the move: `.to(device)` or `empty_like` ran in upstream too.
    assert any(step.startswith(("to('", "empty_like")) for step in upstream[-1])  # type: ignore[union-attr]


def test_same_device_keeps_the_object_and_meta_gets_a_fresh_tensor() -> None:
    cpu = torch.tensor((1.0, 2.0))
    meta = torch.tensor((1.0,), device="meta")
    for module in (UPSTREAM_MODULE, PATCHED_MODULE):
        assert module.convert_to_tensor(cpu) is cpu
        moved = module.convert_to_tensor(meta)
        assert moved is not meta and moved.device.type == "cpu" and moved.values is None


def test_the_private_torch_device_difference_is_documented() -> None:
    # Only a torch.device object written into the private global state makes the test False;
    # then upstream skips and the patch moves (same object for a real tensor, a fresh one for
    # a meta tensor), which is what the package docstring says.
    def make(module: Any) -> Any:
        return torch.tensor((1.0,), device="cpu")

    upstream = run(UPSTREAM_MODULE, make, None, torch.device("cpu"))
    patched = run(PATCHED_MODULE, make, None, torch.device("cpu"))
    assert upstream[:5] == patched[:5] and upstream[4] is True
    assert upstream[-1] == [] and patched[-1] == ["to(device(type='cpu'))"]
