"""What `torch-variable-value-fast-path` makes of torch core modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from codemods.engine import NIGHTLY_TORCH_CORE_PY, Case, Mutant

GET_DEVICE = '''\
def get_device():
    device = global_state.get_global_attribute("torch_device", None)
    if device is None:
        return DEFAULT_DEVICE
    return device
'''
BEFORE = f'''\
from keras.src.backend.common import global_state
from keras.src.backend.common.stateless_scope import in_stateless_scope
from keras.src.backend.common.variables import KerasVariable

DEFAULT_DEVICE = "cpu"


{GET_DEVICE}

class Variable(KerasVariable):
    @property
    def value(self):
        # A comment above the closure, as upstream has one.
        def maybe_use_symbolic_tensor(value):
            if str(get_device()) == "meta" and str(value.device) != "meta":
                return torch.empty(size=value.shape, dtype=value.dtype, device="meta")
            return value

        if in_stateless_scope():
            scope = get_stateless_scope()
            value = scope.get_current_value(self)
            if value is not None:
                value = self._maybe_autocast(value)
                return maybe_use_symbolic_tensor(value)
        if self._value is None:
            value = self._maybe_autocast(self._initializer(self._shape, dtype=self._dtype))
        else:
            value = self._maybe_autocast(self._value)
        return maybe_use_symbolic_tensor(value)


def convert_to_tensor(x):
    return x
'''
FAST_PATH = '''\
        # forkgen: torch-variable-value-fast-path (no scope, no autocast, a non-meta str device: `self._value`)
        if (
            type(self)._maybe_autocast is _forkgen_maybe_autocast
            and in_stateless_scope is _forkgen_in_stateless_scope
            and get_device is _forkgen_get_device
            and _forkgen_autocast_module.get_autocast_scope is _forkgen_get_autocast_scope
            and global_state.get_global_attribute is _forkgen_get_global_attribute
        ):
            fast_value = self._value
            fast_tracker = global_state.GLOBAL_STATE_TRACKER
            if fast_value is not None and type(fast_tracker) is _forkgen_local_type:
                fast_state = fast_tracker.__dict__
                if fast_state.get("stateless_scope") is None and (
                    not self._autocast or fast_state.get("autocast_scope") is None
                ):
                    fast_device = fast_state.get("torch_device")
                    if fast_device is None:
                        fast_device = DEFAULT_DEVICE
                    if type(fast_device) is str and fast_device != "meta":
                        return fast_value

'''
CAPTURED = '''\


# forkgen: torch-variable-value-fast-path (the originals Variable.value's fast path relies on)
from threading import local as _forkgen_local_type
_forkgen_maybe_autocast = KerasVariable._maybe_autocast
from sys import modules as _forkgen_modules
_forkgen_autocast_module = _forkgen_modules[_forkgen_maybe_autocast.__module__]
_forkgen_get_autocast_scope = _forkgen_autocast_module.get_autocast_scope
_forkgen_in_stateless_scope = in_stateless_scope
_forkgen_get_device = get_device
_forkgen_get_global_attribute = global_state.get_global_attribute
'''
CLOSURE = "        def maybe_use_symbolic_tensor(value):\n"
LAST = "        return maybe_use_symbolic_tensor(value)\n"
#: Upstream's comment stays the getter's first line, above the fast path; the body is unchanged.
AFTER = BEFORE.replace(CLOSURE, FAST_PATH + CLOSURE).replace(LAST + "\n\n", LAST + CAPTURED + "\n\n")
GETTER = "Variable.value: def maybe_use_symbolic_tensor(value): / if in_stateless_scope(): / ..."
SHAPE = f"expected exactly one `{GETTER}` in Variable; found 0"


def _drift(name: str, old: str, new: str, drift: str) -> Case:
    assert BEFORE.count(old) == 1, old
    return Case(name, BEFORE.replace(old, new), drift=drift)


CASES = (
    Case("the fast path first in the getter, the originals after the class", BEFORE, AFTER,
         detail="a fast path returning self._value at the top of Variable.value", anchors=((GETTER, 17),)),
    Case("keras-nightly's torch/ops/core.py takes it too", {NIGHTLY_TORCH_CORE_PY: BEFORE},
         {NIGHTLY_TORCH_CORE_PY: AFTER}, anchors=((GETTER, 17),)),
    Case("two classes", BEFORE + "\n\nclass Variable:\n    pass\n", drift="exactly one class Variable; found 2"),
    _drift("no class", "class Variable(", "class Var(", "exactly one class Variable; found 0"),
    _drift("not a property", "    @property\n", "", SHAPE),
    _drift("other parameters", "def value(self):", "def value(self, default=None):", SHAPE),
    _drift("3.4's getter: no closure", CLOSURE, "        def maybe_stub(value):\n", SHAPE),
    _drift("the stateless call reshaped", "if in_stateless_scope():", "if in_stateless_scope(self):", SHAPE),
    _drift("no autocast", "value = self._maybe_autocast(self._value)", "value = self._value", SHAPE),
    _drift("device not str()", 'if str(get_device()) == "meta"', 'if get_device() == "meta"', SHAPE),
    _drift("return reshaped", LAST + "\n\n", "        value = maybe_use_symbolic_tensor(value)\n        return value\n\n\n",
           SHAPE),
    _drift("get_device reshaped", "        return DEFAULT_DEVICE\n", '        return "cpu"\n',
           "anchor 'def get_device(): (global 'torch_device', else DEFAULT_DEVICE)': expected exactly one"),
    _drift("two get_device", "class Variable(", "def get_device():\n    return DEFAULT_DEVICE\n\n\nclass Variable(",
           "anchor 'def get_device()': expected exactly one `def get_device()` at module level; found 2"),
    _drift("in_stateless_scope unbound", "from keras.src.backend.common.stateless_scope import in_stateless_scope\n",
           "", "anchor 'in_stateless_scope': expected bound where value_fast_path goes"),
    Case("a captured name taken", BEFORE + "\n_forkgen_get_device = None\n",
         drift="anchor '_forkgen_get_device': expected names free for module_level (forkgen's helper); found already bound"),
    _drift("a local named like the fast path's", "            if value is not None:\n",
           "            fast_state = value\n            if value is not None:\n",
           "anchor 'Variable.value: fast_state': expected names free for value_fast_path; found used"),
    _drift("another local named like the fast path's", "            value = self._maybe_autocast(self._value)\n",
           "            value = self._maybe_autocast(self._value)\n            fast_value = value\n",
           "anchor 'Variable.value: fast_value'"),
    Case("half applied", AFTER.replace(CAPTURED, "\n"),
         drift=f"expected all pieces present or none; found {GETTER} forkgen's, class Variable(___): ___ missing"),
    Case("an unmarked fast path is not upstream's", AFTER.replace("# forkgen: torch-variable-value-fast-path (no", "# (no"),
         drift="expected to edit, or edited by forkgen; found an edited form without forkgen's marker"),
)

MUTANTS = (
    Mutant(
        "the autocast module's get_autocast_scope not checked (a monkeypatched one skipped)",
        "        and _forkgen_autocast_module.get_autocast_scope is _forkgen_get_autocast_scope\n",
        "",
    ),
    Mutant(
        "the autocast scope ignored (an autocast variable returned uncast)",
        "            if fast_state.get(\"stateless_scope\") is None and (\n"
        "                not self._autocast or fast_state.get(\"autocast_scope\") is None\n"
        "            ):\n",
        "            if fast_state.get(\"stateless_scope\") is None:\n",
    ),
)
