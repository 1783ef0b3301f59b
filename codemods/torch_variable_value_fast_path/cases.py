"""What `torch-variable-value-fast-path` makes of torch core modules shaped like Keras's, how the
synthetic upstream and patched getters behave side by side (both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from __future__ import annotations

import sys
import textwrap
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import (
    NIGHTLY_TORCH_CORE_PY,
    Case,
    Mutant,
    Sources,
    piece_text,
    run_module,
)
from codemods.torch_variable_value_fast_path import PATCH

GET_DEVICE = '''\
def get_device():
    device = global_state.get_global_attribute("torch_device", None)
    if device is None:
        return DEFAULT_DEVICE
    return device
'''

# -- the synthetic modules the behaviours execute (below) --------------------------------------
#
# `CORE_PY` is a minimal `keras/src/backend/torch/core.py` shaped like Keras 3.5.0-3.15.1's
# (written for these tests; only the anchored statements follow Keras): `get_device()` reading the
# global "torch_device", and `class Variable(KerasVariable)` whose `value` property has the closure,
# the stateless-scope branch, the uninitialised branch and the final return. Its imports are
# Keras's; the behaviours run it with the stand-ins of the fixture `keras_variable`
# (tests/support/keras_variable.py, handed in by `_modules`).
#
# `TREE_CORE_PY` (`FILES`: the series' synthetic tree) is the tree's core.py, which the
# torch-convert-to-tensor patches anchor on too: their `convert_to_tensor` (a copy of
# torch-convert-to-tensor-noop-moves' synthetic one, with its stand-in torch: no `requires` between
# the patches; this patch comes later in the series, so its core.py is the one the tree gets) below
# this Keras-shaped `Variable` and `get_device`.

#: The imports of `CORE_PY` and `TREE_CORE_PY`, as Keras's torch core.py has them.
IMPORTS = textwrap.dedent(
    """\
    import torch

    from keras.src.backend.common import KerasVariable
    from keras.src.backend.common import global_state
    from keras.src.backend.common.stateless_scope import get_stateless_scope
    from keras.src.backend.common.stateless_scope import in_stateless_scope
    """
)

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
    '"""Synthetic stand-in for keras/src/backend/torch/core.py (Variable.value)."""\n\n'
    + IMPORTS
    + '\nDEFAULT_DEVICE = "cpu"\n\n\n'
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
    '"""Synthetic stand-in for keras/src/backend/torch/core.py (convert_to_tensor)."""\n\n'
    + IMPORTS
    + '\nDEFAULT_DEVICE = "cpu"\n'
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


# -- behaviours: what the cases cannot say, and the synthetic upstream and patched getters side by side --

CORE = "keras/src/backend/torch/core.py"



def _patched(source: str) -> str:
    sources = Sources(lambda p: source if p == CORE else None)
    PATCH.apply(sources)
    return sources.rendered()[CORE]


def _modules(standin: types.ModuleType) -> types.SimpleNamespace:
    """`CORE_PY`, upstream's and patched, run against the stand-ins of `standin` (the fixture
    `keras_variable`: its torch, `KerasVariable`, `global_state` and stateless-scope functions),
    with what the behaviours compare them with: the patched `Variable`'s subclasses and the code
    objects of the getter body's collaborators."""
    stand_ins = {"torch": standin.torch, "keras.src.backend.common": standin,
                 "keras.src.backend.common.stateless_scope": standin}
    upstream = run_module(CORE_PY, "variable_value_upstream", stand_ins)
    patched = run_module(_patched(CORE_PY), "variable_value_patched", stand_ins)
    tensor = standin.Tensor

    class Subclass(patched.Variable):  # type: ignore[misc,name-defined]
        """Like `keras.src.backend.Variable`: a subclass that overrides nothing `.value` uses."""

    class Doubling(patched.Variable):  # type: ignore[misc,name-defined]
        def _maybe_autocast(self, value: Any) -> Any:
            return tensor(value.values * 2 if value.values else value.values, value.dtype, value.device)

    body_codes = {
        standin.in_stateless_scope.__code__: "in_stateless_scope",
        standin.KerasVariable._maybe_autocast.__code__: "_maybe_autocast",
        patched.get_device.__code__: "get_device",
    }
    return types.SimpleNamespace(upstream=upstream, patched=patched, Subclass=Subclass, Doubling=Doubling,
                                 body_codes=body_codes)


def body_calls(body_codes: dict[Any, str], read: Callable[[], Any]) -> set[str]:
    """Which of the body's collaborators `read()` calls (seen by a profiler, no global replaced)."""
    seen: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in body_codes:
            seen.add(body_codes[frame.f_code])

    sys.setprofile(profile)
    try:
        read()
    finally:
        sys.setprofile(None)
    return seen


def the_fast_path_is_taken_for_the_class_and_a_plain_subclass(keras_variable: types.ModuleType) -> None:
    modules = _modules(keras_variable)
    tensor = keras_variable.Tensor
    for cls in (modules.patched.Variable, modules.Subclass):
        variable = cls(tensor((1.0, 2.0)))
        assert body_calls(modules.body_codes, lambda v=variable: v.value) == set()
        assert variable.value is variable._value
    upstream = modules.upstream.Variable(tensor((1.0, 2.0)))
    assert body_calls(modules.body_codes, lambda: upstream.value) == {"in_stateless_scope", "_maybe_autocast", "get_device"}


def a_subclass_overriding_maybe_autocast_runs_the_body(keras_variable: types.ModuleType) -> None:
    modules = _modules(keras_variable)
    variable = modules.Doubling(keras_variable.Tensor((1.0, 2.0)))
    got = variable.value
    assert got is not variable._value and got.values == (1.0, 2.0, 1.0, 2.0)
    assert "in_stateless_scope" in body_calls(modules.body_codes, lambda: variable.value)


def a_replaced_collaborator_runs_the_body(monkeypatch: pytest.MonkeyPatch, keras_variable: types.ModuleType) -> None:
    standin = keras_variable
    modules = _modules(standin)
    replaced: list[tuple[Any, str, Callable[..., Any]]] = [
        (modules.patched, "in_stateless_scope", lambda: False),
        (modules.patched, "get_device", lambda: "cpu"),
        (standin, "get_autocast_scope", lambda: None),
        (standin.global_state, "get_global_attribute", lambda name, default=None: None),
        (standin.KerasVariable, "_maybe_autocast", lambda self, value: value),
    ]
    for target, name, replacement in replaced:
        variable = modules.patched.Variable(standin.Tensor((1.0,)))
        calls: list[str] = []

        def counted(*args: Any, name: str = name, replacement: Callable[..., Any] = replacement,
                    calls: list[str] = calls, **kwargs: Any) -> Any:
            calls.append(name)
            return replacement(*args, **kwargs)

        with monkeypatch.context() as patched:
            patched.setattr(target, name, counted)
            assert variable.value is variable._value, name
            assert calls, name


def a_tracker_of_another_type_runs_the_body(monkeypatch: pytest.MonkeyPatch, keras_variable: types.ModuleType) -> None:
    class Tracker(threading.local):
        pass

    modules = _modules(keras_variable)
    monkeypatch.setattr(keras_variable.global_state, "GLOBAL_STATE_TRACKER", Tracker())
    variable = modules.patched.Variable(keras_variable.Tensor((1.0,)))
    assert variable.value is variable._value
    assert "in_stateless_scope" in body_calls(modules.body_codes, lambda: variable.value)


@contextmanager
def state(standin: types.ModuleType, stateless: str, cast: str | None, device: Any, variables: list[Any]) -> Iterator[None]:
    with ExitStack() as stack:
        if stateless != "none":
            held = standin.Tensor((7.0,), "float32")
            mapping = {id(v): held for v in variables} if stateless == "value" else {}
            stack.enter_context(standin.StatelessScope(mapping))
        if cast is not None:
            stack.enter_context(standin.AutocastScope(cast))
        if device is not None:
            stack.enter_context(standin.DeviceScope(device))
        yield


def outcome(value: Any, variable: Any, scope_value: Any) -> tuple[Any, ...]:
    """What the getter returned, as comparable across the two modules."""
    which = "stored" if value is variable._value else "scope" if value is scope_value else "new"
    return (which, type(value).__name__, value.values, value.dtype, str(value.device), value.requires_grad)


class _Device:
    """A device object that is not a `str` (as a `torch.device` in the global would be): never
    equal to a str, `str()` gives its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


def patched_returns_what_upstream_returns(keras_variable: types.ModuleType) -> None:
    standin = keras_variable
    modules = _modules(standin)

    @settings(max_examples=300, deadline=None)
    @given(
        dtype=st.sampled_from(["float32", "int32"]),
        autocast=st.booleans(),
        trainable=st.booleans(),
        initialised=st.booleans(),
        stateless=st.sampled_from(["none", "empty", "value"]),
        cast=st.sampled_from([None, "float16"]),
        device=st.sampled_from([None, "cpu", "cuda:0", "meta", _Device("cpu"), _Device("meta")]),
        subclass=st.booleans(),
        thread=st.booleans(),
    )
    def returns_what_upstream_returns(dtype: str, autocast: bool, trainable: bool, initialised: bool,
                                      stateless: str, cast: str | None, device: Any, subclass: bool,
                                      thread: bool) -> None:
        stored = standin.Tensor((1.0, 2.0), dtype) if initialised else None
        upstream = modules.upstream.Variable(stored, dtype, autocast, trainable)
        patched = (modules.Subclass if subclass else modules.patched.Variable)(stored, dtype, autocast, trainable)
        results: dict[str, Any] = {}

        def read() -> None:
            with state(standin, stateless, cast, device, [upstream, patched]):
                scope = standin.get_stateless_scope()
                scope_value = scope.get_current_value(patched) if scope is not None else None
                results["upstream"] = outcome(upstream.value, upstream, scope_value)
                results["patched"] = outcome(patched.value, patched, scope_value)

        if thread:
            # Another thread's state: the scopes are entered there, the main thread's stay empty.
            worker = threading.Thread(target=read)
            worker.start()
            worker.join()
        else:
            read()
        assert results["patched"] == results["upstream"]

    returns_what_upstream_returns()


BEHAVIOURS = (
    the_fast_path_is_taken_for_the_class_and_a_plain_subclass,
    a_subclass_overriding_maybe_autocast_runs_the_body,
    a_replaced_collaborator_runs_the_body,
    a_tracker_of_another_type_runs_the_body,
    patched_returns_what_upstream_returns,
)
