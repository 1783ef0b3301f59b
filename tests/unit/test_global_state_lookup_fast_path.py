"""Patch global-state-lookup-fast-path (ours): the series run twice, a missing file, and the patched
`get_global_attribute` executed against the unpatched one (what it makes of the code: its cases,
codemods/global_state_lookup_fast_path/cases.py)."""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

import pytest

from codemods import series
from codemods.engine import AnchorDrift, Outcome, Sources
from codemods.global_state_lookup_fast_path import PATCH
from codemods.global_state_lookup_fast_path import cases as synthetic
from codemods.global_state_lookup_fast_path.cases import AFTER, BEFORE
from tests.support.synthetic import load_module

PATH = synthetic.PATH


def test_the_series_run_twice_changes_nothing_the_second_time() -> None:
    first = series.run({PATH: BEFORE}.get, (PATCH,))
    assert first.unswitched_files == {PATH: AFTER} and first.changed
    second = series.run({PATH: AFTER}.get, (PATCH,))
    assert second.files == {} and not second.changed and second.results[0].check.present


def test_a_missing_file_is_drift() -> None:
    with pytest.raises(AnchorDrift, match=f"{PATH}:1: .*no such file"):
        PATCH.check(Sources({}.get))


def test_the_synthetic_file_takes_the_patch() -> None:
    assert synthetic.FILES[PATH] == BEFORE
    assert PATCH.check(Sources(synthetic.FILES.get)).outcome is Outcome.APPLIED


# -- the patched look-up, executed ----------------------------------------------------------------


class Name(str):
    """A str subclass: keeps upstream's getattr."""


class EqualsAll(str):
    """A str subclass equal to every string: `getattr` on a local takes it for `__dict__`."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class Other:
    """Something put in the tracker's place, with names of its own."""

    unset = "from the class"

    @property
    def stateless_scope(self) -> str:
        return "from a property"


class Slotted:
    """A tracker without a `__dict__`."""

    __slots__ = ("x",)


class LocalSubclass(threading.local):
    """A local subclass: the generic look-up, class attributes and descriptors first."""

    unset = "from the class"

    @property
    def stateless_scope(self) -> str:
        return "from a property"


NAMES: list[Any] = [
    "x", "unset", "stateless_scope", "", "__dict__", "__weakref__", "__slots__", "__name__",
    *dir(threading.local), Name("x"), Name("__class__"), EqualsAll("x"), EqualsAll("y"), 1, None, b"x", ("x",), ["x"],
]
VALUES: list[Any] = [None, 0, "", False, [], 5, "v", object()]


def _outcome(call: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        value = call(*args)
    except Exception as error:  # noqa: BLE001 - the error is part of the behaviour
        return "error", type(error)
    # Compare what is comparable without identity: the per-thread dict itself, type objects etc.
    return "value", repr(value) if isinstance(value, (str, int, type(None), bool, list)) else type(value)


def _scenario(module: types.ModuleType, tracker: Callable[[], Any] | None) -> list[Any]:
    """Every name read with every default combination, on a tracker holding a few values; the
    tracker state after each read (set_to_default writes)."""
    module.clear_session(free_memory=False)
    if tracker is not None:
        module.GLOBAL_STATE_TRACKER = tracker()
    results: list[Any] = []
    for index, value in enumerate(VALUES):
        results.append(_outcome(module.set_global_attribute, f"v{index}", value))
    results.append(_outcome(module.set_global_attribute, "x", 1))
    results.append(_outcome(module.set_global_attribute, "__doc__", "shadowed"))
    for name in [*NAMES, *(f"v{i}" for i in range(len(VALUES)))]:
        for set_to_default in (False, True):
            for default in (None, 0, 7):
                results.append(
                    (repr(name), default, set_to_default,
                     _outcome(module.get_global_attribute, name, default, set_to_default))
                )
        state = getattr(module.GLOBAL_STATE_TRACKER, "__dict__", {})
        results.append(sorted((k, repr(v)) for k, v in state.items()))
    return results


def _in_thread(function: Callable[[], Any]) -> Any:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(function()))
    thread.start()
    thread.join()
    return box[0]


@pytest.mark.parametrize("tracker", [None, LocalSubclass, Other, Slotted, types.SimpleNamespace], ids=repr)
def test_patched_lookup_answers_like_upstream(tracker: Any) -> None:
    upstream = load_module(BEFORE, "upstream_global_state")
    patched = load_module(AFTER, "patched_global_state")
    expected = _scenario(upstream, tracker)
    assert _scenario(patched, tracker) == expected
    # The scenario covers hits, misses, falsy values, set_to_default writes and errors.
    outcomes = {r[3] for r in expected if isinstance(r, tuple) and len(r) == 4}
    assert {("value", "None"), ("value", "7"), ("value", "0")} <= outcomes
    assert ("error", TypeError) in outcomes
    # From a thread that never touched the tracker: a fresh per-thread dict on both sides.
    assert _outcome(upstream.set_global_attribute, "main_only", 1) == _outcome(patched.set_global_attribute, "main_only", 1)
    for name in ("main_only", "x", "__dict__", "__class__"):
        assert _outcome(lambda n=name: _in_thread(lambda: patched.get_global_attribute(n))) == _outcome(
            lambda n=name: _in_thread(lambda: upstream.get_global_attribute(n))
        )
    # A thread-local tracker shows another thread none of the main thread's state.
    shared = tracker in (Other, types.SimpleNamespace)
    assert _in_thread(lambda: patched.get_global_attribute("main_only")) == (1 if shared else None)


def test_the_fast_branch_runs_for_plain_names_only() -> None:
    patched = load_module(AFTER, "patched_global_state_probe")

    class Probe(threading.local):
        """A local subclass standing for the local type: counts generic look-ups."""

        reads: list[str] = []  # noqa: RUF012 - shared on purpose

        def __getattribute__(self, name: str) -> Any:
            Probe.reads.append(name)
            return super().__getattribute__(name)

    patched._forkgen_local_type = Probe
    patched.GLOBAL_STATE_TRACKER = Probe()
    patched.set_global_attribute("a", 1)
    Probe.reads.clear()
    assert patched.get_global_attribute("a") == 1 and patched.get_global_attribute("b") is None
    assert Probe.reads == ["__dict__", "__dict__"]
    Probe.reads.clear()
    patched.get_global_attribute("__class__")
    patched.get_global_attribute(Name("a"))
    assert Probe.reads == ["__class__", "a"]
