"""What `torch-convert-to-tensor-device` makes of torch core modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import NIGHTLY_TORCH_CORE_PY, Case, Mutant, piece_text

#: A minimal `keras/src/backend/torch/core.py` shaped like Keras 3.10-3.15.1's (`FILES`: the
#: series' synthetic tree, where torch-variable-value-fast-path's, later in the series, wins):
#: `get_device()` (a `str`), a `Variable` with `.value`, and `convert_to_tensor` whose tensor branch
#: has the `device = get_device()` / `if x.device != device:` anchor (written for these tests; only
#: the anchored statements follow Keras). It runs against the stand-in torch it imports
#: (tests/support/torch_device_moves.py), which logs every move, copy and cast.
CORE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/core.py (convert_to_tensor)."""

    from tests.support.torch_device_moves import global_state
    from tests.support.torch_device_moves import torch

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
