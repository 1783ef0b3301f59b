"""Patch torch-convert-to-tensor-noop-moves (ours) on synthetic torch core modules: what its cases
(codemods/torch_convert_to_tensor_noop_moves/cases.py) cannot say, and the synthetic upstream and
patched modules executed side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.patchlib import AnchorDrift, Outcome, Patch, Sources
from codemods.series import load_series, run
from codemods.torch_convert_to_tensor_device import PATCH as DEVICE_PATCH
from codemods.torch_convert_to_tensor_noop_moves import PATCH
from tests.support import synthetic_torch_convert_to_tensor_noop_moves as synthetic
from tests.support.synthetic import load_module

CORE = "keras/src/backend/torch/core.py"
MARK = "# forkgen: torch-convert-to-tensor-noop-moves"


def test_release_range_and_no_requirement() -> None:
    assert PATCH.since == "3.12.0" and PATCH.requires == ()
    series = load_series()
    names = [p.name for p in series]
    assert names.index(PATCH.name) > names.index(DEVICE_PATCH.name)
    old = run(lambda p: synthetic.CORE_PY if p == CORE else None, [PATCH], release="3.11.3")
    assert old.results[0].outcome is Outcome.NOT_APPLICABLE


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
        assert patched.count(MARK) == 5
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
