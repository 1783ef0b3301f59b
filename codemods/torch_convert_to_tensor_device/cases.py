"""What `torch-convert-to-tensor-device` makes of torch core modules shaped like Keras's, how the
synthetic upstream and patched modules convert side by side (both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from __future__ import annotations

import textwrap
import types
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import (
    NIGHTLY_TORCH_CORE_PY,
    Case,
    Mutant,
    Outcome,
    Sources,
    piece_text,
    run_module,
)
from codemods.torch_convert_to_tensor_device import PATCH

#: A minimal `keras/src/backend/torch/core.py` shaped like Keras 3.10-3.15.1's (`FILES`: the
#: series' synthetic tree, where torch-variable-value-fast-path's, later in the series, wins):
#: `get_device()` (a `str`), a `Variable` with `.value`, and `convert_to_tensor` whose tensor branch
#: has the `device = get_device()` / `if x.device != device:` anchor (written for these tests; only
#: the anchored statements follow Keras). Its imports are Keras's; the behaviours run it with a
#: stand-in torch and `global_state` (`stand_ins`: the fixture `torch_device_moves`,
#: tests/support/torch_device_moves.py, which logs every move, copy and cast).
CORE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/core.py (convert_to_tensor)."""

    import torch

    from keras.src.backend.common import global_state

    DEFAULT_DEVICE = "cpu"


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
        return torch.dtype(dtype)


    def convert_to_tensor(x, dtype=None, sparse=None, ragged=None):
        if sparse:
            raise ValueError("`sparse=True` is not supported with torch backend")
        if ragged:
            raise ValueError("`ragged=True` is not supported with torch backend")
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
        dtype = to_torch_dtype(dtype or "float32")
        return torch.as_tensor(x, dtype=dtype, device=get_device())
    '''
)

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    "keras/src/backend/torch/core.py": CORE_PY,
}

#: The piece's marker line, where `if x.device != device:` was (its body, `UPSTREAM`, one level out).
MARK = piece_text(__file__, "unconditional_move", "        ", upstream="")
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
TEST = "        if x.device != device:\n"
AFTER = BEFORE.replace(
    TEST + "            if x.is_meta:\n"
    "                x = torch.empty_like(x, device=device)\n"
    "            else:\n"
    "                x = x.to(device)\n",
    MARK + "        if x.is_meta:\n"
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
            if x.device != device:  # always
                x = x.to(device)
            if dtype is None:
                return x
            return x.to(to_torch_dtype(dtype))
        return torch.as_tensor(x)
    """
)
OLD_AFTER = OLD_BEFORE.replace(TEST[:-1] + "  # always\n            x = x.to(device)\n",
                               "        # always\n" + MARK + "        x = x.to(device)\n")
UPSTREAM = "convert_to_tensor moves tensors to get_device() without a test"
FOUND_0 = "expected exactly one `if x.device != device:` in convert_to_tensor; found 0 to unwrap and 0 unwrapped"


def _drift(name: str, old: str, new: str, drift: str) -> Case:
    assert BEFORE.count(old) == 1, old
    return Case(name, BEFORE.replace(old, new), drift=drift)


CASES = (
    Case("the test dropped, its body one level out", BEFORE, AFTER,
         detail="drop `if x.device != device:`, keep its body", anchors=(("if x.device != device:", 13),)),
    Case("3.0-3.9: the plain move (a comment on the test's line stays above)", OLD_BEFORE, OLD_AFTER),
    Case("keras-nightly's shape is upstream's", NIGHTLY, upstream=True, detail=UPSTREAM,
         anchors=(("if x.device != device:", 13),)),
    Case("keras-nightly's torch/ops/core.py", {NIGHTLY_TORCH_CORE_PY: NIGHTLY}, upstream=True),
    _drift("no get_device", "        device = get_device()\n", "        device = self.device\n",
           "core.py:5: anchor 'device = get_device()': expected exactly one `device = get_device()` in "
           "convert_to_tensor; found 0"),
    _drift("two tests", TEST, TEST + "            pass\n" + TEST,
           "core.py:13: anchor 'if x.device != device:': expected exactly one `if x.device != device:` in "
           "convert_to_tensor; found 2 to unwrap and 0 unwrapped"),
    _drift("an else", "                x = x.to(device)\n",
           "                x = x.to(device)\n        else:\n            pass\n", f"core.py:5: anchor 'if x.device != device:': {FOUND_0}"),
    _drift("reshaped test", TEST, "        if x.device is not device:\n", f"core.py:5: anchor 'if x.device != device:': {FOUND_0}"),
    _drift("no tensor branch", "is_tensor(x):", "torch.is_tensor(x):",
           "core.py:5: anchor 'if ... is_tensor(x):': expected exactly one `if ... is_tensor(x):` in convert_to_tensor; found 0"),
    _drift("no function", "def convert_to_tensor(", "def convert(",
           "core.py:1: anchor 'convert_to_tensor': expected exactly one def convert_to_tensor; found 0"),
)

MUTANTS = (Mutant("the moved tensor is detached", "    UPSTREAM\n", "    UPSTREAM\n    x = x.detach()\n"),)


# -- behaviours: what the cases cannot say, and the synthetic upstream and patched modules side by side --

CORE = "keras/src/backend/torch/core.py"


def keras_nightly_is_upstream_in_its_moved_file() -> None:
    # keras-nightly has no torch/core.py: convert_to_tensor is in torch/ops/core.py, which reports name.
    moved = PATCH.check(Sources(lambda p: NIGHTLY if p == NIGHTLY_TORCH_CORE_PY else None))
    assert moved.outcome is Outcome.UPSTREAM
    assert [(a.line, a.path) for a in moved.anchors] == [(13, NIGHTLY_TORCH_CORE_PY)]



def the_synthetic_tree_file_takes_the_patch() -> None:
    sources = Sources(lambda p: FILES.get(p))
    first = PATCH.check(sources)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(sources)
    patched = sources.rendered()[CORE]
    assert patched.count("# forkgen: torch-convert-to-tensor-device") == 1
    assert PATCH.check(Sources(lambda p: patched if p == CORE else None)).present


def _patched_core() -> str:
    sources = Sources(lambda p: FILES.get(p))
    PATCH.apply(sources)
    return sources.rendered()[CORE]


def _modules(standin: types.ModuleType) -> tuple[Any, Any]:
    """Upstream's and the patched synthetic core module, run against the stand-in torch and
    `global_state` of `standin` (the fixture `torch_device_moves`)."""
    stand_ins = {"torch": standin.torch, "keras.src.backend.common": types.SimpleNamespace(global_state=standin.global_state)}
    return (run_module(CORE_PY, "torch_core_upstream", stand_ins),
            run_module(_patched_core(), "torch_core_patched", stand_ins))


def run(standin: types.ModuleType, module: Any, make: Callable[[Any], Any], dtype: str | None,
        device: Any) -> tuple[object, ...]:
    """What `convert_to_tensor` returns for the input `make` builds, and what it did."""
    torch = standin.torch
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


def patched_converts_like_upstream(torch_device_moves: types.ModuleType) -> None:
    standin = torch_device_moves
    torch = standin.torch
    upstream_module, patched_module = _modules(standin)

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
    def converts_like_upstream(
        values: tuple[float, ...], source_device: str, source_dtype: str, dtype: str | None, device: str | None,
        variable: bool, requires_grad: bool,
    ) -> None:
        def make(module: Any) -> Any:
            tensor = torch.tensor(values, source_dtype, source_device, requires_grad)
            return module.Variable(tensor) if variable else tensor

        upstream = run(standin, upstream_module, make, dtype, device)
        assert run(standin, patched_module, make, dtype, device) == upstream
        # The test never skipped the move: `.to(device)` or `empty_like` ran in upstream too.
        log = upstream[-1]
        assert isinstance(log, list) and any(step.startswith(("to('", "empty_like")) for step in log)

    converts_like_upstream()


def same_device_keeps_the_object_and_meta_gets_a_fresh_tensor(torch_device_moves: types.ModuleType) -> None:
    torch = torch_device_moves.torch
    cpu = torch.tensor((1.0, 2.0))
    meta = torch.tensor((1.0,), device="meta")
    for module in _modules(torch_device_moves):
        assert module.convert_to_tensor(cpu) is cpu
        moved = module.convert_to_tensor(meta)
        assert moved is not meta and moved.device.type == "cpu" and moved.values is None


def the_private_torch_device_difference_is_documented(torch_device_moves: types.ModuleType) -> None:
    # Only a torch.device object written into the private global state makes the test False;
    # then upstream skips and the patch moves (same object for a real tensor, a fresh one for
    # a meta tensor), which is what the package docstring says.
    standin = torch_device_moves
    torch = standin.torch
    upstream_module, patched_module = _modules(standin)

    def make(module: Any) -> Any:
        return torch.tensor((1.0,), device="cpu")

    upstream = run(standin, upstream_module, make, None, torch.device("cpu"))
    patched = run(standin, patched_module, make, None, torch.device("cpu"))
    assert upstream[:5] == patched[:5] and upstream[4] is True
    assert upstream[-1] == [] and patched[-1] == ["to(device(type='cpu'))"]


BEHAVIOURS = (
    keras_nightly_is_upstream_in_its_moved_file,
    the_synthetic_tree_file_takes_the_patch,
    patched_converts_like_upstream,
    same_device_keeps_the_object_and_meta_gets_a_fresh_tensor,
    the_private_torch_device_difference_is_documented,
)
