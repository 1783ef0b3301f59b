"""Patch torch-variable-value-fast-path on synthetic torch core modules."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.patchlib import AnchorDrift, Outcome, Sources
from codemods.series import load_series, run
from codemods.torch_variable_value_fast_path import PATCH, TorchVariableValueFastPathCommand
from tests.support import synthetic_torch_variable_value_fast_path as synthetic
from tests.support.synthetic import assert_applies_once, load_module, replace_once

CORE = "keras/src/backend/torch/core.py"
NIGHTLY_CORE = "keras/src/backend/torch/ops/core.py"
MARK = "# forkgen: torch-variable-value-fast-path"
BEFORE = synthetic.CORE_PY

FAST_PATH = """\
        # forkgen: torch-variable-value-fast-path (no scope, no autocast, a non-meta str device: `self._value`)
        if (
            type(self)._maybe_autocast is _forkgen_maybe_autocast
            and in_stateless_scope is _forkgen_in_stateless_scope
            and get_device is _forkgen_get_device
            and _forkgen_autocast_globals["get_autocast_scope"] is _forkgen_get_autocast_scope
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

"""
CAPTURED = """\


# forkgen: torch-variable-value-fast-path (the originals Variable.value's fast path relies on)
from threading import local as _forkgen_local_type
_forkgen_maybe_autocast = KerasVariable._maybe_autocast
_forkgen_autocast_globals = _forkgen_maybe_autocast.__globals__
_forkgen_get_autocast_scope = _forkgen_autocast_globals["get_autocast_scope"]
_forkgen_in_stateless_scope = in_stateless_scope
_forkgen_get_device = get_device
_forkgen_get_global_attribute = global_state.get_global_attribute
"""
CLOSURE = "        def maybe_use_symbolic_tensor(value):\n"
AFTER = replace_once(BEFORE, CLOSURE, FAST_PATH + CLOSURE) + CAPTURED


def line_of(text: str, snippet: str) -> int:
    return text[: text.index(snippet)].count("\n") + 1


GETTER_LINE = line_of(BEFORE, "    def value(self):")
CLASS_LINE = line_of(BEFORE, "class Variable(")
DEVICE_LINE = line_of(BEFORE, "def get_device():")


def check(source: str, path: str = CORE) -> Any:
    return PATCH.check(Sources(lambda p: source if p == path else None))


class TestValueFastPath(CodemodTest):
    TRANSFORM = TorchVariableValueFastPathCommand

    def test_inserts_the_fast_path_and_the_captured_originals(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)


def test_the_body_is_left_as_it_is() -> None:
    assert AFTER.count(MARK) == 2
    assert AFTER.replace(FAST_PATH, "").replace(CAPTURED, "") == BEFORE
    # Upstream's comment stays the getter's first line, above the fast path.
    assert "    def value(self):\n        # A comment above the closure" in AFTER


def test_outcomes() -> None:
    before = check(BEFORE)
    assert before.outcome is Outcome.APPLIED and not before.present
    assert [(a.line, a.path) for a in before.anchors] == [(GETTER_LINE, "")]
    after = check(AFTER)
    assert after.outcome is Outcome.APPLIED and after.present
    # keras-nightly: the same class in torch/ops/core.py; ours, so applied there too.
    nightly = check(BEFORE, NIGHTLY_CORE)
    assert nightly.outcome is Outcome.APPLIED and not nightly.present
    assert nightly.anchors[0].path == NIGHTLY_CORE
    sources = Sources(lambda p: BEFORE if p == NIGHTLY_CORE else None)
    PATCH.apply(sources)
    assert sources.rendered() == {NIGHTLY_CORE: AFTER}


def test_apply_then_check_again_is_present_and_byte_identical() -> None:
    assert_applies_once(PATCH, CORE, BEFORE, AFTER)


def test_release_range_and_no_requirement() -> None:
    assert PATCH.since == "3.5.0" and PATCH.requires == ()
    assert PATCH.name in [p.name for p in load_series()]
    old = run(lambda p: BEFORE if p == CORE else None, [PATCH], release="3.4.1")
    assert old.results[0].outcome is Outcome.NOT_APPLICABLE
    new = run(lambda p: BEFORE if p == CORE else None, [PATCH], release="3.5.0")
    assert new.results[0].outcome is Outcome.APPLIED


def _drifted(source: str) -> AnchorDrift:
    with pytest.raises(AnchorDrift) as caught:
        check(source)
    return caught.value


SECOND_CLASS = "\n\nclass Variable:\n    pass\n"
GETTER_ANCHOR = "Variable.value: def maybe_use_symbolic_tensor(value): / if in_stateless_scope(): / ..."
DEVICE_ANCHOR = "def get_device(): (global 'torch_device', else DEFAULT_DEVICE)"
CAPTURED_NAMES = (
    "_forkgen_local_type, _forkgen_maybe_autocast, _forkgen_autocast_globals, _forkgen_get_autocast_scope, "
    "_forkgen_in_stateless_scope, _forkgen_get_device, _forkgen_get_global_attribute"
)


@pytest.mark.parametrize(
    ("source", "anchor", "found", "line"),
    [
        (BEFORE + SECOND_CLASS, "class Variable", "2", CLASS_LINE),
        (BEFORE.replace("class Variable(KerasVariable):", "class Var(KerasVariable):"), "class Variable", "0", 1),
        (BEFORE.replace("    @property\n    def value(self):", "    def value(self):"),
         "Variable.value", "0", GETTER_LINE - 1),
        (BEFORE.replace("    def value(self):", "    def value(self, default=None):"),
         "Variable.value", "other parameters", GETTER_LINE),
        # 3.0-3.4's getter: no closure, no meta stub.
        (BEFORE.replace(CLOSURE, "        def maybe_stub(value):\n"), GETTER_ANCHOR, "another shape", GETTER_LINE),
        (BEFORE.replace("        if in_stateless_scope():\n", "        if in_stateless_scope(self):\n"),
         GETTER_ANCHOR, "another shape", GETTER_LINE),
        (BEFORE.replace("            value = self._maybe_autocast(self._value)\n",
                        "            value = self._value\n"), GETTER_ANCHOR, "another shape", GETTER_LINE),
        (BEFORE.replace('            if str(get_device()) == "meta" and',
                        '            if get_device() == "meta" and'), GETTER_ANCHOR, "another shape", GETTER_LINE),
        (BEFORE.removesuffix("        return maybe_use_symbolic_tensor(value)\n")
         + "        value = maybe_use_symbolic_tensor(value)\n        return value\n",
         GETTER_ANCHOR, "5 statements", GETTER_LINE),
        (BEFORE.replace("        return DEFAULT_DEVICE\n", '        return "cpu"\n'),
         DEVICE_ANCHOR, "another shape", DEVICE_LINE),
        (BEFORE.replace("def to_torch_dtype(", "def get_device():\n    return DEFAULT_DEVICE\n\n\ndef to_torch_dtype("),
         DEVICE_ANCHOR, "found 2", DEVICE_LINE),
        (BEFORE.replace(f"from {synthetic.MODULE} import in_stateless_scope\n", ""),
         "in_stateless_scope", "not bound", CLASS_LINE - 1),
        (BEFORE + "\n_forkgen_get_device = None\n", CAPTURED_NAMES, "already bound", CLASS_LINE),
        (BEFORE.replace("            value = self._maybe_autocast(self._value)\n",
                        "            value = self._maybe_autocast(self._value)\n"
                        "            fast_value = value\n"), GETTER_ANCHOR, "another shape", GETTER_LINE),
    ],
    ids=["two classes", "no class", "not a property", "parameters", "3.4's getter", "stateless call",
         "no autocast", "device not str()", "return reshaped", "get_device reshaped", "two get_device",
         "in_stateless_scope unbound", "captured name taken", "else reshaped"],
)
def test_drift(source: str, anchor: str, found: str, line: int) -> None:
    error = _drifted(source)
    assert error.anchor == anchor and found in str(error), str(error)
    assert (error.path, error.line) == (CORE, line)
    assert f"{CORE}:{line}" in str(error)


def test_a_local_named_like_the_fast_paths_is_drift() -> None:
    source = BEFORE.replace("            if value is not None:\n",
                            "            fast_state = value\n            if value is not None:\n")
    error = _drifted(source)
    assert error.anchor == "Variable.value: fast_state" and "used" in str(error)
    assert (error.path, error.line) == (CORE, GETTER_LINE)


def test_half_applied_is_drift() -> None:
    error = _drifted(AFTER.replace(CAPTURED, "\n"))
    assert error.anchor == CAPTURED_NAMES and "forkgen's 7 statements" in str(error) and "0 of them" in str(error)
    assert (error.path, error.line) == (CORE, CLASS_LINE)


def test_a_tree_without_the_torch_backend_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == CORE and "no such file" in str(caught.value)


def test_the_synthetic_tree_file_takes_the_patch_after_the_other_torch_core_patches() -> None:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    for patch in load_series():
        if CORE in patch.files:
            assert patch.check(sources).outcome is Outcome.APPLIED, patch.name
            patch.apply(sources)
    patched = sources.rendered()[CORE]
    assert patched.count(MARK) == 2 and "# forkgen: torch-convert-to-tensor-noop-moves" in patched
    assert PATCH.check(Sources(lambda p: patched if p == CORE else None)).present


# -- behaviour: the synthetic upstream and patched modules, side by side -----------------------

UPSTREAM = load_module(BEFORE, "variable_value_upstream")
PATCHED = load_module(AFTER, "variable_value_patched")
Tensor = synthetic.Tensor
BODY_CODES = {
    synthetic.in_stateless_scope.__code__: "in_stateless_scope",
    synthetic.KerasVariable._maybe_autocast.__code__: "_maybe_autocast",
    PATCHED.get_device.__code__: "get_device",
}


def body_calls(read: Callable[[], Any]) -> set[str]:
    """Which of the body's collaborators `read()` calls (seen by a profiler, no global replaced)."""
    seen: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in BODY_CODES:
            seen.add(BODY_CODES[frame.f_code])

    sys.setprofile(profile)
    try:
        read()
    finally:
        sys.setprofile(None)
    return seen


class Subclass(PATCHED.Variable):  # type: ignore[misc,name-defined]
    """Like `keras.src.backend.Variable`: a subclass that overrides nothing `.value` uses."""


class Doubling(PATCHED.Variable):  # type: ignore[misc,name-defined]
    def _maybe_autocast(self, value: Any) -> Any:
        return Tensor(value.values * 2 if value.values else value.values, value.dtype, value.device)


def test_the_fast_path_is_taken_for_the_class_and_a_plain_subclass() -> None:
    for cls in (PATCHED.Variable, Subclass):
        variable = cls(Tensor((1.0, 2.0)))
        assert body_calls(lambda v=variable: v.value) == set()
        assert variable.value is variable._value
    upstream = UPSTREAM.Variable(Tensor((1.0, 2.0)))
    assert body_calls(lambda: upstream.value) == {"in_stateless_scope", "_maybe_autocast", "get_device"}


def test_a_subclass_overriding_maybe_autocast_runs_the_body() -> None:
    variable = Doubling(Tensor((1.0, 2.0)))
    got = variable.value
    assert got is not variable._value and got.values == (1.0, 2.0, 1.0, 2.0)
    assert "in_stateless_scope" in body_calls(lambda: variable.value)


@pytest.mark.parametrize(
    ("target", "name", "replacement"),
    [
        (PATCHED, "in_stateless_scope", lambda: False),
        (PATCHED, "get_device", lambda: "cpu"),
        (synthetic, "get_autocast_scope", lambda: None),
        (synthetic.global_state, "get_global_attribute", lambda name, default=None: None),
        (synthetic.KerasVariable, "_maybe_autocast", lambda self, value: value),
    ],
    ids=["in_stateless_scope", "get_device", "get_autocast_scope", "get_global_attribute", "_maybe_autocast"],
)
def test_a_replaced_collaborator_runs_the_body(monkeypatch: pytest.MonkeyPatch, target: Any, name: str,
                                               replacement: Callable[..., Any]) -> None:
    variable = PATCHED.Variable(Tensor((1.0,)))
    calls: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return replacement(*args, **kwargs)

    monkeypatch.setattr(target, name, counted)
    assert variable.value is variable._value
    assert calls


def test_a_tracker_of_another_type_runs_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tracker(threading.local):
        pass

    monkeypatch.setattr(synthetic.global_state, "GLOBAL_STATE_TRACKER", Tracker())
    variable = PATCHED.Variable(Tensor((1.0,)))
    assert variable.value is variable._value
    assert "in_stateless_scope" in body_calls(lambda: variable.value)


@contextmanager
def state(stateless: str, cast: str | None, device: Any, variables: list[Any]) -> Iterator[None]:
    with ExitStack() as stack:
        if stateless != "none":
            held = Tensor((7.0,), "float32")
            mapping = {id(v): held for v in variables} if stateless == "value" else {}
            stack.enter_context(synthetic.StatelessScope(mapping))
        if cast is not None:
            stack.enter_context(synthetic.AutocastScope(cast))
        if device is not None:
            stack.enter_context(synthetic.DeviceScope(device))
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
def test_patched_returns_what_upstream_returns(dtype: str, autocast: bool, trainable: bool, initialised: bool,
                                               stateless: str, cast: str | None, device: Any, subclass: bool,
                                               thread: bool) -> None:
    stored = Tensor((1.0, 2.0), dtype) if initialised else None
    upstream = UPSTREAM.Variable(stored, dtype, autocast, trainable)
    patched = (Subclass if subclass else PATCHED.Variable)(stored, dtype, autocast, trainable)
    results: dict[str, Any] = {}

    def read() -> None:
        with state(stateless, cast, device, [upstream, patched]):
            scope = synthetic.get_stateless_scope()
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


def test_on_nightlys_layout_the_analysis_names_the_file_it_patched(tmp_path: Any) -> None:
    """keras-nightly keeps the torch core in backend/torch/ops/core.py: the outcome (and so the
    wheel's provenance, which hashes every file an applied patch names) must name that file,
    not the declared 3.15 path the tree lacks (a nightly build failed on it)."""
    from forkgen.patch import analyze_series
    from tests.support.synthetic import write_tree

    root = write_tree(tmp_path)
    nightly = root / "keras/src/backend/torch/ops/core.py"
    nightly.parent.mkdir(parents=True, exist_ok=True)
    (root / "keras/src/backend/torch/core.py").rename(nightly)
    # The device patch is upstream on the real nightly; its synthetic core is 3.15.1's shape.
    selected = [p for p in load_series() if p.name != "torch-convert-to-tensor-device"]
    analysis = analyze_series(root, selected)
    outcomes = {p.name: p for p in analysis.patches}
    for name in (PATCH.name, "torch-convert-to-tensor-noop-moves"):
        assert outcomes[name].outcome == "applied", outcomes[name]
        assert outcomes[name].files == ("keras/src/backend/torch/ops/core.py",), outcomes[name].files
    for patch in analysis.applied:
        for relative in patch.files:
            assert (root / relative).is_file(), (patch.name, relative)
    assert "keras/src/backend/torch/ops/core.py" in analysis.files
