"""Patch torch-convert-to-tensor-device (keras-team/keras#23189) on synthetic torch core modules:
what its cases (codemods/torch_convert_to_tensor_device/cases.py) cannot say, and the synthetic
upstream and patched modules executed side by side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import NIGHTLY_TORCH_CORE_PY, AnchorDrift, Outcome, Sources
from codemods.torch_convert_to_tensor_device import PATCH
from codemods.torch_convert_to_tensor_device import cases as synthetic
from codemods.torch_convert_to_tensor_device.cases import NIGHTLY
from tests.support import torch_device_moves as standin
from tests.support.synthetic import load_module

CORE = "keras/src/backend/torch/core.py"


def test_keras_nightly_is_upstream_in_its_moved_file() -> None:
    # keras-nightly has no torch/core.py: convert_to_tensor is in torch/ops/core.py, which reports name.
    moved = PATCH.check(Sources(lambda p: NIGHTLY if p == NIGHTLY_TORCH_CORE_PY else None))
    assert moved.outcome is Outcome.UPSTREAM
    assert [(a.line, a.path) for a in moved.anchors] == [(13, NIGHTLY_TORCH_CORE_PY)]


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
torch = standin.torch


def run(module: Any, make: Callable[[Any], Any], dtype: str | None, device: Any) -> tuple[object, ...]:
    """What `convert_to_tensor` returns for the input `make` builds, and what it did."""
    standin.global_state.clear()
    if device is not None:
        standin.global_state["torch_device"] = device
    torch.log.clear()
    x = make(module)
    source = x.value if isinstance(x, module.Variable) else x
    try:
        out = module.convert_to_tensor(x, dtype=dtype)
    except Exception as error:  # the same error, with the same message
        return ("raised", type(error), str(error), list(torch.log))
    finally:
        standin.global_state.clear()
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
    log = upstream[-1]
    assert isinstance(log, list) and any(step.startswith(("to('", "empty_like")) for step in log)


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
