"""Patch global-state-lookup-fast-path (ours) on synthetic global_state.py modules: the rewrite,
the cases it must leave alone, the upstream shape, drift, idempotence, and the patched
`get_global_attribute` executed against the unpatched one."""

from __future__ import annotations

import textwrap
import threading
import types
from collections.abc import Callable
from typing import Any

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, SkipFile

from codemods import series
from codemods.global_state_lookup_fast_path import PATCH, GlobalStateLookupFastPathCommand
from codemods.global_state_lookup_fast_path.fast_lookup import LOCAL_NAMES, LOCAL_TYPE, pieces
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support import synthetic_global_state_lookup_fast_path as synthetic
from tests.support.synthetic import load_module

PATH = synthetic.PATH
BEFORE = synthetic.GLOBAL_STATE_PY
LOOKUP = "    attr = getattr(GLOBAL_STATE_TRACKER, name, None)\n"
MODULE_LEVEL = (
    "\n"
    "# forkgen: global-state-lookup-fast-path (the names a threading.local answers itself)\n"
    "_forkgen_local_type = threading.local\n"
    '_forkgen_local_names = frozenset((*dir(threading.local), "__dict__"))\n'
)
FAST = (
    "    # forkgen: global-state-lookup-fast-path (any other str name: the calling thread's dict)\n"
    "    tracker = GLOBAL_STATE_TRACKER\n"
    "    if type(tracker) is _forkgen_local_type and type(name) is str and name not in _forkgen_local_names:\n"
    "        attr = tracker.__dict__.get(name)\n"
    "    else:\n"
    "        attr = getattr(GLOBAL_STATE_TRACKER, name, None)\n"
)
AFTER = BEFORE.replace("import threading\n", "import threading\n" + MODULE_LEVEL, 1).replace(LOOKUP, FAST, 1)


def sources(text: str) -> Sources:
    return Sources({PATH: text}.get)


def applied(text: str) -> str:
    src = sources(text)
    check = PATCH.check(src)
    assert (check.outcome, check.present) == (Outcome.APPLIED, False)
    PATCH.apply(src)
    return src.rendered()[PATH]


def drift(text: str) -> str:
    with pytest.raises(AnchorDrift) as error:
        PATCH.check(sources(text))
    return str(error.value)


# -- the rewrite ---------------------------------------------------------------------------------


def test_inserts_the_names_after_the_imports_and_the_lookup_in_place_of_upstreams_statement() -> None:
    assert BEFORE.count(LOOKUP) == 1 and AFTER != BEFORE
    assert applied(BEFORE) == AFTER


def test_check_reports_both_anchors_then_present_and_a_rerun_is_a_noop() -> None:
    check = PATCH.check(sources(BEFORE))
    assert [(a.name, a.line) for a in check.anchors] == [
        ("attr = getattr(GLOBAL_STATE_TRACKER, name, None)", 15),
        ("import threading", 4),
    ]
    again = PATCH.check(sources(AFTER))
    assert (again.outcome, again.present) == (Outcome.APPLIED, True)
    command = GlobalStateLookupFastPathCommand(CodemodContext(filename=PATH))
    with pytest.raises(SkipFile, match="in already"):
        command.transform_module_impl(cst.parse_module(AFTER))


def test_the_series_run_twice_changes_nothing_the_second_time() -> None:
    first = series.run({PATH: BEFORE}.get, (PATCH,))
    assert first.files == {PATH: AFTER} and first.changed
    second = series.run({PATH: AFTER}.get, (PATCH,))
    assert second.files == {} and not second.changed and second.results[0].check.present


def test_the_template_pieces() -> None:
    (local_type, local_names), (assign, branch) = pieces()
    assert cst.Module(body=[local_type, local_names]).code.splitlines()[1:] == [
        f"{LOCAL_TYPE} = threading.local",
        f'{LOCAL_NAMES} = frozenset((*dir(threading.local), "__dict__"))',
    ]
    assert cst.Module(body=[assign]).code.endswith("tracker = GLOBAL_STATE_TRACKER\n")
    assert isinstance(branch, cst.If) and branch.orelse is not None


def test_upstream_comments_and_a_trailing_comment_stay_with_the_statement() -> None:
    commented = BEFORE.replace(LOOKUP, "    # read the state\n" + LOOKUP.replace("\n", "  # may be unset\n"), 1)
    after = applied(commented)
    assert "    # read the state\n    # forkgen: global-state-lookup-fast-path" in after
    assert "    else:\n        attr = getattr(GLOBAL_STATE_TRACKER, name, None)  # may be unset\n" in after


def test_a_docstring_and_future_imports_keep_their_place() -> None:
    text = '"""Doc."""\n\nfrom __future__ import annotations\n\nimport threading\n' + BEFORE.split("import threading\n", 1)[1]
    after = applied(text)
    assert after.startswith('"""Doc."""\n\nfrom __future__ import annotations\n\nimport threading\n' + MODULE_LEVEL)


def test_must_not_change_everything_else() -> None:
    # Other getattr calls on the tracker, the settings tracker and other functions stay as they are.
    extra = textwrap.dedent(
        """\


        def get_setting(name):
            return getattr(GLOBAL_SETTINGS_TRACKER, name, None)


        def has_state(name):
            return getattr(GLOBAL_STATE_TRACKER, name, None) is not None
        """
    )
    after = applied(BEFORE + extra)
    assert after == AFTER + extra
    # Without the inserted pieces, the file is upstream's, byte for byte.
    assert after.replace(MODULE_LEVEL, "", 1).replace(FAST, LOOKUP, 1) == BEFORE + extra


# -- already upstream ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "    attr = GLOBAL_STATE_TRACKER.__dict__.get(name)\n",
        "    attr = vars(GLOBAL_STATE_TRACKER).get(name, None)\n",
        "    tracker = GLOBAL_STATE_TRACKER\n    attr = tracker.__dict__.get(name)\n",
        (
            "    if isinstance(name, str):\n        attr = GLOBAL_STATE_TRACKER.__dict__.get(name)\n"
            "    else:\n        attr = getattr(GLOBAL_STATE_TRACKER, name, None)\n"
        ),
    ],
)
def test_upstream_reading_the_thread_dict(statement: str) -> None:
    text = BEFORE.replace(LOOKUP, statement, 1)
    check = PATCH.check(sources(text))
    assert (check.outcome, check.present) == (Outcome.UPSTREAM, False)
    assert check.anchors[0].name == "GLOBAL_STATE_TRACKER.__dict__.get(name)"
    assert check.anchors[0].line in range(15, 15 + statement.count("\n"))
    command = GlobalStateLookupFastPathCommand(CodemodContext(filename=PATH))
    with pytest.raises(SkipFile, match="upstream"):
        command.transform_module_impl(cst.parse_module(text))


def test_a_dict_lookup_on_another_object_is_not_upstream() -> None:
    text = BEFORE.replace(LOOKUP, "    attr = GLOBAL_SETTINGS_TRACKER.__dict__.get(name)\n", 1)
    assert "expected exactly one" in drift(text)


# -- drift ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "anchor", "expected", "found", "line"),
    [
        (
            BEFORE.replace(LOOKUP, "    attr = getattr(GLOBAL_STATE_TRACKER, name)\n"),
            "attr = getattr(GLOBAL_STATE_TRACKER, name, None)", "exactly one", "found 0", 15,
        ),
        (
            BEFORE.replace(LOOKUP, "    attr = getattr(GLOBAL_STATE_TRACKER, name, default)\n"),
            "attr = getattr(GLOBAL_STATE_TRACKER, name, None)", "exactly one", "found 0", 15,
        ),
        (
            BEFORE.replace(LOOKUP, LOOKUP + LOOKUP),
            "attr = getattr(GLOBAL_STATE_TRACKER, name, None)", "exactly one", "found 2", 15,
        ),
        (
            BEFORE.replace(LOOKUP, "    attr = getattr(GLOBAL_STATE_TRACKER, name, None); x = 1\n"),
            "attr = getattr(GLOBAL_STATE_TRACKER, name, None)", "exactly one", "found 0", 15,
        ),
        (
            BEFORE.replace(LOOKUP, "    value = getattr(GLOBAL_STATE_TRACKER, name, None)\n    attr = value\n"),
            "attr = getattr(GLOBAL_STATE_TRACKER, name, None)", "exactly one", "found 0", 15,
        ),
        (
            BEFORE.replace(LOOKUP, "    tracker = None\n" + LOOKUP),
            "get_global_attribute: tracker", "no name `tracker`", "it used there", 16,
        ),
        (
            BEFORE.replace("def get_global_attribute(", "def get_attribute("),
            "get_global_attribute", "exactly one def get_global_attribute", "found 0", 1,
        ),
        (
            BEFORE.replace("import threading\n", "from threading import local\n").replace("threading.local()", "local()"),
            "import threading", "exactly one `import threading` at module level", "found 0", 1,
        ),
        (
            BEFORE.replace("import gc\n", "import gc\nimport threading\n"),
            "import threading", "exactly one `import threading` at module level", "found 2", 5,
        ),
        (
            BEFORE.replace("import threading\n", "").replace("\n\ndef set_global", "\nimport threading\n\n\ndef set_global"),
            "import threading", "among the module's leading imports", "it after other code", 8,
        ),
        (
            BEFORE.replace("GLOBAL_SETTINGS_TRACKER = threading.local()\n", "_forkgen_local_type = None\n"),
            "_forkgen_local_type / _forkgen_local_names", "no such name before the patch", "already defined", 15,
        ),
    ],
)
def test_drift(text: str, anchor: str, expected: str, found: str, line: int) -> None:
    message = drift(text)
    assert f"{PATH}:{line}: anchor '{anchor}'" in message
    assert f"expected {expected}" in message and found in message


def test_a_marked_lookup_without_its_module_level_names_is_drift() -> None:
    message = drift(AFTER.replace(MODULE_LEVEL, "", 1))
    assert f"{PATH}:20:" in message and "0 of the 2 names" in message


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
