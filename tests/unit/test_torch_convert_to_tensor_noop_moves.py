"""Patch torch-convert-to-tensor-noop-moves (ours) on synthetic torch core modules: what its cases
(codemods/torch_convert_to_tensor_noop_moves/cases.py) cannot say, and the synthetic upstream and
patched modules executed side by side."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import AnchorDrift, Outcome, Patch, Sources
from codemods.series import load_series, run
from codemods.torch_convert_to_tensor_device import PATCH as DEVICE_PATCH
from codemods.torch_convert_to_tensor_noop_moves import PATCH
from codemods.torch_convert_to_tensor_noop_moves import cases as synthetic
from tests.support import torch_current_cuda as standin
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
        assert patched.count(MARK) == 6
        assert PATCH.check(Sources(lambda p, text=patched: text if p == CORE else None)).present


# -- behaviour: the synthetic upstream and patched modules, side by side -----------------------

UPSTREAM = load_module(synthetic.CORE_PY, "noop_moves_upstream")
PATCHED = load_module(_patched([PATCH]), "noop_moves_patched")
DEVICE_ONLY = load_module(_patched([DEVICE_PATCH]), "noop_moves_device_only")
BOTH = load_module(_patched([DEVICE_PATCH, PATCH]), "noop_moves_both")
torch = standin.torch


def _mode(tensor: Any, target: Any) -> Any:
    """A torch-function mode that answers every `.to()` itself."""
    return torch.Tensor(("mode",), tensor.dtype, tensor.device)


def run_one(module: Any, kind: str, values: tuple[float, ...], source_device: str, source_dtype: str,
            dtype: str | None, device: Any, variable: bool, requires_grad: bool, mode: bool,
            current: int = 0) -> tuple[object, ...]:
    """What `convert_to_tensor` returns, and which `.to()` calls a mode or subclass saw, with
    `current` the current cuda device."""
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
        return ("raised", type(error), str(error), _seen(mode))
    finally:
        standin.global_state.clear()
        torch.mode = None
    return (out.values, out.dtype.name, repr(out.device), type(out).__name__, out.requires_grad, out is tensor,
            _seen(mode))


def _seen(mode: bool) -> list[str]:
    """The `.to()` calls a mode sees (all of them), or a subclass (its own `.to` only)."""
    return list(torch.log) if mode else [step for step in torch.log if step == "Logged.to"]


DEVICES = st.sampled_from([None, "cpu", "cuda", "cuda:0", "cuda:1", "cpu:0", "meta", "mps", "bogus", "", "cpu"])


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
def test_patched_converts_like_upstream(
    kind: str, values: tuple[float, ...], source_device: str, source_dtype: str, dtype: str | None, device: Any,
    variable: bool, requires_grad: bool, mode: bool, current: int,
) -> None:
    args = (kind, values, source_device, source_dtype, dtype, device, variable, requires_grad, mode, current)
    assert run_one(PATCHED, *args) == run_one(UPSTREAM, *args)
    assert run_one(BOTH, *args) == run_one(DEVICE_ONLY, *args)


@pytest.mark.parametrize("module", [PATCHED, BOTH], ids=["alone", "after the device patch"])
def test_no_op_moves_are_skipped_and_the_others_made(module: Any) -> None:
    assert run_one(module, "Parameter", (1.0,), "cpu", "float32", "float32", None, True, True, False)[5] is True
    assert torch.log == []
    assert run_one(module, "Tensor", (1.0,), "cuda:1", "float32", None, "cuda:1", False, False, False)[5] is True
    assert torch.log == []
    # "cuda" is the current cuda device for torch, asked at each call: on it, no call; else a move.
    assert run_one(module, "Tensor", (1.0,), "cuda:0", "float32", None, "cuda", False, False, False)[5] is True
    assert torch.log == []
    moved = run_one(module, "Tensor", (1.0,), "cuda:0", "float32", None, "cuda", False, False, False, current=1)
    assert moved[2] == "device(type='cuda', index=1)" and moved[5] is False
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


@pytest.mark.parametrize("module", [PATCHED, BOTH], ids=["alone", "after the device patch"])
def test_cuda_is_the_current_device_asked_at_each_call(module: Any) -> None:
    """Upstream's and the patched `convert_to_tensor` side by side, the current cuda device
    changed between calls (0, 1, then 0 again: a remembered answer goes stale): the same
    results, and the same `.to()` calls but the no-ops on the current device."""
    reference = DEVICE_ONLY if module is BOTH else UPSTREAM
    skipped = 0
    try:
        for current in (0, 1, 0):
            for kind, source_device, device, dtype, variable in itertools.product(
                ["Tensor", "Parameter"], ["cuda:0", "cuda:1", "cpu", "mps:0"], ["cuda", "mps", "cuda:1", "cpu"],
                [None, "float32", "int32"], [False, True],
            ):
                args = (kind, (1.0, 2.0), source_device, "float32", dtype, device, variable, True, False, current)
                expected = run_one(reference, *args)
                upstream_moves = list(torch.moves)
                assert run_one(module, *args) == expected, (current, args)
                assert [target for target, _ in torch.moves] == _noop_moves_kept(upstream_moves), (current, args)
                if device == "cuda" and source_device == f"cuda:{current}":
                    # torch's `.to("cuda")` returned x (and the cast too, unless to int32): skipped.
                    assert upstream_moves[0] == ("'cuda'", True) and expected[5] is (dtype != "int32")
                    assert "'cuda'" not in [target for target, _ in torch.moves]
                    skipped += 1
    finally:
        torch.cuda.set_device(0)
    assert skipped == 3 * 2 * 3 * 2


def test_cuda_is_asked_only_about_a_tensor_on_cuda_for_cuda() -> None:
    """The cpu path (and every device but "cuda") never asks CUDA, which a torch without CUDA
    cannot answer; each call about a tensor on cuda for "cuda" asks again."""
    torch.cuda.asked = 0
    for device in ("cpu", "cuda:0", "cuda:1", "mps", None):
        for source_device in ("cpu", "cuda:0", "cuda:1", "mps:0"):
            run_one(PATCHED, "Tensor", (1.0,), source_device, "float32", "float32", device, False, False, False)
    for source_device in ("cpu", "mps:0", "meta"):
        run_one(PATCHED, "Tensor", (1.0,), source_device, "float32", None, "cuda", True, False, False)
    assert torch.cuda.asked == 0
    for current in (0, 1, 1):
        run_one(PATCHED, "Parameter", (1.0,), "cuda:1", "float32", None, "cuda", True, False, False, current)
    torch.cuda.set_device(0)
    assert torch.cuda.asked == 3
