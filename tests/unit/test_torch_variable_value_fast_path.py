"""Patch torch-variable-value-fast-path on synthetic torch core modules: what its cases
(codemods/torch_variable_value_fast_path/cases.py) cannot say, and the synthetic upstream and
patched modules executed side by side."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import AnchorDrift, Outcome, Sources
from codemods.series import load_series, run
from codemods.torch_variable_value_fast_path import PATCH
from codemods.torch_variable_value_fast_path import cases as synthetic
from tests.support import keras_variable as standin
from tests.support.synthetic import load_module

CORE = "keras/src/backend/torch/core.py"
MARK = "# forkgen: torch-variable-value-fast-path"
BEFORE = synthetic.CORE_PY


def _patched(source: str) -> str:
    sources = Sources(lambda p: source if p == CORE else None)
    PATCH.apply(sources)
    return sources.rendered()[CORE]


AFTER = _patched(BEFORE)


def test_release_range_and_no_requirement() -> None:
    assert PATCH.since == "3.5.0" and PATCH.requires == ()
    assert PATCH.name in [p.name for p in load_series()]
    old = run(lambda p: BEFORE if p == CORE else None, [PATCH], release="3.4.1")
    assert old.results[0].outcome is Outcome.NOT_APPLICABLE
    new = run(lambda p: BEFORE if p == CORE else None, [PATCH], release="3.5.0")
    assert new.results[0].outcome is Outcome.APPLIED


def test_a_tree_without_the_torch_backend_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == CORE and "no such file" in str(caught.value)


def test_the_synthetic_tree_file_takes_the_patch_after_the_other_torch_core_patches() -> None:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    for patch in load_series():
        # The patches of torch's core alone (standardize-dtype-memo edits variables.py too).
        if CORE in patch.files and all(synthetic.FILES.get(path) is not None for path in patch.files):
            assert patch.check(sources).outcome is Outcome.APPLIED, patch.name
            patch.apply(sources)
    patched = sources.rendered()[CORE]
    assert patched.count(MARK) == 2 and "# forkgen: torch-convert-to-tensor-noop-moves" in patched
    assert PATCH.check(Sources(lambda p: patched if p == CORE else None)).present


# -- behaviour: the synthetic upstream and patched modules, side by side -----------------------

UPSTREAM = load_module(BEFORE, "variable_value_upstream")
PATCHED = load_module(AFTER, "variable_value_patched")
Tensor = standin.Tensor
BODY_CODES = {
    standin.in_stateless_scope.__code__: "in_stateless_scope",
    standin.KerasVariable._maybe_autocast.__code__: "_maybe_autocast",
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
        (standin, "get_autocast_scope", lambda: None),
        (standin.global_state, "get_global_attribute", lambda name, default=None: None),
        (standin.KerasVariable, "_maybe_autocast", lambda self, value: value),
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

    monkeypatch.setattr(standin.global_state, "GLOBAL_STATE_TRACKER", Tracker())
    variable = PATCHED.Variable(Tensor((1.0,)))
    assert variable.value is variable._value
    assert "in_stateless_scope" in body_calls(lambda: variable.value)


@contextmanager
def state(stateless: str, cast: str | None, device: Any, variables: list[Any]) -> Iterator[None]:
    with ExitStack() as stack:
        if stateless != "none":
            held = Tensor((7.0,), "float32")
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
