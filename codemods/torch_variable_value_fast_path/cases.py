"""What `torch-variable-value-fast-path` makes of torch core modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import NIGHTLY_TORCH_CORE_PY, Case, Mutant, piece_text

GET_DEVICE = '''\
def get_device():
    device = global_state.get_global_attribute("torch_device", None)
    if device is None:
        return DEFAULT_DEVICE
    return device
'''

# -- the synthetic modules the unit tests execute (tests/unit/test_torch_variable_value_fast_path.py) --
#
# `CORE_PY` is a minimal `keras/src/backend/torch/core.py` shaped like Keras 3.5.0-3.15.1's
# (written for these tests; only the anchored statements follow Keras): `get_device()` reading the
# global "torch_device", and `class Variable(KerasVariable)` whose `value` property has the closure,
# the stateless-scope branch, the uninitialised branch and the final return. It runs against the
# stand-ins it imports (`STANDIN`).
#
# `TREE_CORE_PY` (`FILES`: the series' synthetic tree) is the tree's core.py, which the
# torch-convert-to-tensor patches anchor on too: their `convert_to_tensor` (a copy of
# torch-convert-to-tensor-noop-moves' synthetic one, with its stand-in torch: no `requires` between
# the patches; this patch comes later in the series, so its core.py is the one the tree gets) below
# this Keras-shaped `Variable` and `get_device`.

#: Where the stand-ins the synthetic modules import are (test infrastructure).
STANDIN = "tests.support.keras_variable"

VARIABLE = textwrap.dedent(
    '''\
    class Variable(KerasVariable):
        def _convert_to_tensor(self, value, dtype=None):
            return value

        @property
        def value(self):
            # A comment above the closure, as upstream has one.
            def maybe_use_symbolic_tensor(value):
                # A meta stub for symbolic calls.
                if str(get_device()) == "meta" and str(value.device) != "meta":
                    return torch.nn.Parameter(
                        torch.empty(
                            size=self._shape,
                            dtype=to_torch_dtype(self._dtype),
                            device="meta",
                        ),
                        requires_grad=self.trainable,
                    )
                return value

            if in_stateless_scope():
                scope = get_stateless_scope()
                value = scope.get_current_value(self)
                if value is not None:
                    value = self._maybe_autocast(value)
                    return maybe_use_symbolic_tensor(value)
            if self._value is None:
                # Not initialised: a placeholder.
                value = self._maybe_autocast(
                    self._initializer(self._shape, dtype=self._dtype)
                )
            else:
                value = self._maybe_autocast(self._value)
            return maybe_use_symbolic_tensor(value)
    '''
)

CORE_PY = (
    textwrap.dedent(
        f'''\
        """Synthetic stand-in for keras/src/backend/torch/core.py (Variable.value)."""

        from {STANDIN} import KerasVariable
        from {STANDIN} import get_stateless_scope
        from {STANDIN} import global_state
        from {STANDIN} import in_stateless_scope
        from {STANDIN} import torch

        DEFAULT_DEVICE = "cpu"


        '''
    )
    + GET_DEVICE
    + "\n\n"
    + textwrap.dedent(
        """\
        def to_torch_dtype(dtype):
            return dtype


        """
    )
    + VARIABLE
)


CONVERT = textwrap.dedent(
    '''\
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
TREE_CORE_PY = (
    textwrap.dedent(
        f'''\
        """Synthetic stand-in for keras/src/backend/torch/core.py (convert_to_tensor)."""

        from {STANDIN} import KerasVariable
        from {STANDIN} import get_stateless_scope
        from {STANDIN} import global_state
        from {STANDIN} import in_stateless_scope
        from tests.support.torch_current_cuda import torch

        DEFAULT_DEVICE = "cpu"
        '''
    )
    + 'DTYPES = {"float32": torch.float32, "int32": torch.int32, "float64": torch.float64}\n\n\n'
    + GET_DEVICE
    + "\n\n"
    + VARIABLE
    + "\n\n"
    + CONVERT
)

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    "keras/src/backend/torch/core.py": TREE_CORE_PY,
}

# -- the cases ----------------------------------------------------------------------------------

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
FAST_PATH = piece_text(__file__, "value_fast_path", "        ") + "\n"
CAPTURED = "\n\n" + piece_text(__file__, "module_level")
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
