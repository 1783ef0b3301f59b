"""What `global-state-lookup-fast-path` makes of global_state.py modules shaped like Keras's, how
the patched `get_global_attribute` answers beside upstream's (both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch.

`FILES` holds a small `keras/src/backend/common/global_state.py` shaped like Keras's (written
for these tests; only the anchored statements follow Keras): `import threading` among the
leading imports, the tracker as a `threading.local()`, `set_global_attribute`,
`get_global_attribute` starting with `attr = getattr(GLOBAL_STATE_TRACKER, name, None)`, and a
`clear_session` that puts a new local in the tracker's place. It imports nothing from Keras, so
the behaviours at the end execute it, patched or not, with `run_module`.
"""

import textwrap
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest

from codemods.engine import AnchorDrift, Case, Mutant, Outcome, Sources, piece_text, run_module
from codemods.global_state_lookup_fast_path import PATCH

PATH = "keras/src/backend/common/global_state.py"

GLOBAL_STATE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/common/global_state.py."""

    import gc
    import threading

    GLOBAL_STATE_TRACKER = threading.local()
    GLOBAL_SETTINGS_TRACKER = threading.local()


    def set_global_attribute(name, value):
        setattr(GLOBAL_STATE_TRACKER, name, value)


    def get_global_attribute(name, default=None, set_to_default=False):
        attr = getattr(GLOBAL_STATE_TRACKER, name, None)
        if attr is None and default is not None:
            attr = default
            if set_to_default:
                set_global_attribute(name, attr)
        return attr


    def clear_session(free_memory=True):
        # Every piece of state goes with the old trackers.
        global GLOBAL_STATE_TRACKER
        global GLOBAL_SETTINGS_TRACKER

        GLOBAL_STATE_TRACKER = threading.local()
        GLOBAL_SETTINGS_TRACKER = threading.local()
        if free_memory:
            gc.collect()
    '''
)

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/common/__init__.py": "",
    PATH: GLOBAL_STATE_PY,
}

BEFORE = GLOBAL_STATE_PY

LOOKUP = "    attr = getattr(GLOBAL_STATE_TRACKER, name, None)\n"
MODULE_LEVEL = "\n" + piece_text(__file__, "module_level")
FAST = piece_text(__file__, "get_global_attribute_lookup", "    ", upstream=LOOKUP)
AFTER = BEFORE.replace("import threading\n", "import threading\n" + MODULE_LEVEL, 1).replace(LOOKUP, FAST, 1)
#: Other getattr calls on the tracker, the settings tracker and other functions stay as they are.
EXTRA = '''

def get_setting(name):
    return getattr(GLOBAL_SETTINGS_TRACKER, name, None)


def has_state(name):
    return getattr(GLOBAL_STATE_TRACKER, name, None) is not None
'''
COMMENTED = BEFORE.replace(LOOKUP, "    # read the state\n" + LOOKUP.replace("\n", "  # may be unset\n"), 1)
DOC = '"""Doc."""\n\nfrom __future__ import annotations\n\nimport threading\n'
FUTURE = DOC + BEFORE.split("import threading\n", 1)[1]


def _lookup(statement: str) -> str:
    return BEFORE.replace(LOOKUP, statement, 1)


CASES = (
    Case("the names before the tracker, the look-up in place of upstream's statement", BEFORE, AFTER,
         detail="get_global_attribute: a plain name from the per-thread dict",
         anchors=(("attr = getattr(GLOBAL_STATE_TRACKER, name, None)", 15), ("import threading", 4))),
    Case("nothing else changes", BEFORE + EXTRA, AFTER + EXTRA),
    Case("upstream's comments and a trailing comment stay with the statement", COMMENTED,
         AFTER.replace(FAST, "    # read the state\n" + FAST.replace(", None)\n", ", None)  # may be unset\n"), 1)),
    Case("a docstring and future imports keep their place", FUTURE,
         FUTURE.replace("import threading\n", "import threading\n" + MODULE_LEVEL, 1).replace(LOOKUP, FAST, 1)),
    *(Case(f"upstream reads the thread dict: {statement.strip()}", _lookup(statement), upstream=True) for statement in (
        "    attr = GLOBAL_STATE_TRACKER.__dict__.get(name)\n",
        "    attr = vars(GLOBAL_STATE_TRACKER).get(name, None)\n",
        "    tracker = GLOBAL_STATE_TRACKER\n    attr = tracker.__dict__.get(name)\n",
        "    if isinstance(name, str):\n        attr = GLOBAL_STATE_TRACKER.__dict__.get(name)\n"
        "    else:\n        attr = getattr(GLOBAL_STATE_TRACKER, name, None)\n",
    )),
    Case("a dict look-up on another object is not upstream's",
         _lookup("    attr = GLOBAL_SETTINGS_TRACKER.__dict__.get(name)\n"), drift="expected exactly one"),
    *(Case(f"drift: {name}", text, drift=drift) for name, text, drift in (
        ("no default", _lookup("    attr = getattr(GLOBAL_STATE_TRACKER, name)\n"),
         ":14: anchor 'attr = getattr(GLOBAL_STATE_TRACKER, name, None)': expected exactly one"),
        ("another default", _lookup("    attr = getattr(GLOBAL_STATE_TRACKER, name, default)\n"), ":14: anchor 'attr"),
        ("twice", _lookup(LOOKUP + LOOKUP), ":15: anchor 'attr = getattr(GLOBAL_STATE_TRACKER, name, None)'"),
        ("another statement on its line", _lookup("    attr = getattr(GLOBAL_STATE_TRACKER, name, None); x = 1\n"),
         ":14: anchor 'attr"),
        ("through another name", _lookup("    value = getattr(GLOBAL_STATE_TRACKER, name, None)\n    attr = value\n"),
         ":14: anchor 'attr"),
        ("tracker in use", _lookup("    tracker = None\n" + LOOKUP),
         ":16: anchor 'get_global_attribute: tracker': expected names free"),
        ("the function renamed", BEFORE.replace("def get_global_attribute(", "def get_attribute("),
         ":1: anchor 'get_global_attribute': expected exactly one def get_global_attribute"),
        ("no import threading", BEFORE.replace("import threading\n", "from threading import local\n")
         .replace("threading.local()", "local()"), "anchor 'GLOBAL_STATE_TRACKER = threading.local()'"),
        ("import threading twice", BEFORE.replace("import gc\n", "import gc\nimport threading\n"),
         ":4: anchor 'import threading': expected exactly one `import threading` at module level; found 2"),
        ("a name of forkgen's defined", BEFORE.replace("GLOBAL_SETTINGS_TRACKER = threading.local()\n",
                                                       "_forkgen_local_type = None\n"),
         ":7: anchor '_forkgen_local_type': expected names free for module_level"),
        ("the look-up without its names", AFTER.replace(MODULE_LEVEL, "", 1), "all pieces present or none"),
    )),
)

MUTANTS = (
    Mutant("the names a threading.local answers itself are read from its dict",
           "    if type(tracker) is _forkgen_local_type and type(name) is str and name not in _forkgen_local_names:\n",
           "    if type(tracker) is _forkgen_local_type and type(name) is str:\n"),
    Mutant("a missing name answers the default (set_to_default then stores nothing)",
           "        attr = tracker.__dict__.get(name)\n", "        attr = tracker.__dict__.get(name, default)\n"),
)


# -- behaviours: a missing file, the synthetic tree's file, the patched look-up executed -----------


def a_missing_file_is_drift() -> None:
    with pytest.raises(AnchorDrift, match=f"{PATH}:1: .*no such file"):
        PATCH.check(Sources({}.get))


def the_synthetic_file_takes_the_patch() -> None:
    assert FILES[PATH] == BEFORE
    assert PATCH.check(Sources(FILES.get)).outcome is Outcome.APPLIED


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


def _answers_like_upstream(tracker: Any) -> None:
    upstream = run_module(BEFORE, "upstream_global_state")
    patched = run_module(AFTER, "patched_global_state")
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
        ), name
    # A thread-local tracker shows another thread none of the main thread's state.
    shared = tracker in (Other, types.SimpleNamespace)
    assert _in_thread(lambda: patched.get_global_attribute("main_only")) == (1 if shared else None)


def patched_lookup_answers_like_upstream() -> None:
    # Each tracker on fresh modules (was @pytest.mark.parametrize over the trackers).
    for tracker in (None, LocalSubclass, Other, Slotted, types.SimpleNamespace):
        try:
            _answers_like_upstream(tracker)
        except AssertionError as failed:
            raise AssertionError(f"tracker {tracker!r}: {failed}") from failed


def the_fast_branch_runs_for_plain_names_only() -> None:
    patched = run_module(AFTER, "patched_global_state_probe")

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


BEHAVIOURS = (a_missing_file_is_drift, the_synthetic_file_takes_the_patch, patched_lookup_answers_like_upstream,
              the_fast_branch_runs_for_plain_names_only)
