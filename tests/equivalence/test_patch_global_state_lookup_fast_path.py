"""Patch global-state-lookup-fast-path on the installed fork (every backend).

Upstream's `get_global_attribute(name, default=None, set_to_default=False)` starts with
`attr = getattr(GLOBAL_STATE_TRACKER, name, None)`; the patch reads a plain `str` name of an
exact `threading.local` tracker from the calling thread's dict instead. The installed function
must return what the release under test's own, unpatched `get_global_attribute` (compiled from
its sources into the installed module, `tests/equivalence/upstream.py`, so that it reads the
same tracker and stores through the same `set_global_attribute`) returns, and leave the tracker
as it leaves it: for plain names, the names Keras reads, every name of
`dir(threading.local)` and `__dict__`, `str` subclasses and non-`str` names (the same error);
set, unset, `None` and falsy values; every `default`/`set_to_default`; after `clear_session()`,
from a fresh thread, and with the tracker replaced by something that is not a `threading.local`.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import re
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import keras
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "global-state-lookup-fast-path"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply global-state-lookup-fast-path")

if APPLIED:
    #: The module the patch rewrote (keras/src/backend/common/global_state.py).
    global_state = upstream.patched_module(NAME, "global_state.py")


def _names_read_by_keras() -> list[str]:
    """The names the release under test reads through `get_global_attribute` (outside its
    tests), found in its unpatched sources."""
    try:
        root = upstream.source_root() / "keras" / "src"
    except upstream.NoUpstreamSource:
        return []
    found: set[str] = set()
    for path in root.rglob("*.py"):
        if not path.name.endswith("_test.py"):
            found.update(re.findall(r"get_global_attribute\(\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']",
                                    path.read_text(encoding="utf-8")))
    return sorted(found)


#: The names Keras reads through `get_global_attribute`: those Keras 3.15.1 reads, and whatever
#: else the release under test reads.
KERAS_NAMES = list(dict.fromkeys([
    "remat_scope_stack", "name_scope_stack", "use_legacy_config", "torch_device", "symbolic_scope",
    "stateless_scope", "custom_objects_scope_dict", "current_call_ctx", "uninitialized_variables",
    "tracking_on", "traceback_filtering", "safe_mode_saving", "interactive_logging", "in_tf_graph_scope",
    "flash_attention", "dtype_policy", "distribution", "autocast_scope",
    *(_names_read_by_keras() if APPLIED else []),
]))
#: The names a `threading.local` answers itself (upstream's getattr must keep answering them).
LOCAL_NAMES = [*sorted(dir(threading.local)), "__dict__"]


@functools.cache
def _upstream_get_global_attribute() -> Callable[..., Any]:
    return upstream.original(global_state.get_global_attribute)


def reference(name: Any, default: Any = None, set_to_default: bool = False) -> Any:
    """Upstream's `get_global_attribute` of the release under test: run in the installed
    module, it reads the tracker the test put there and stores through its
    `set_global_attribute`."""
    return _upstream_get_global_attribute()(name, default, set_to_default)


class Name(str):
    """A str subclass (keeps upstream's getattr)."""


class EqualsAll(str):
    """A str subclass equal to every string: a local's getattr takes it for `__dict__`."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class LocalSubclass(threading.local):
    """A local subclass: generic look-up, the class's own names first."""

    stateless_scope = "from the class"

    @property
    def torch_device(self) -> str:
        return "from a property"


class Other:
    """An object someone put in the tracker's place, with names of its own."""

    stateless_scope = "from the class"

    @property
    def torch_device(self) -> str:
        return "from a property"


class Slotted:
    """A replacement without a `__dict__`."""

    __slots__ = ("autocast_scope",)


TRACKERS: dict[str, Callable[[], Any]] = {
    "local": threading.local,
    "local subclass": LocalSubclass,
    "namespace": types.SimpleNamespace,
    "object": Other,
    "slotted": Slotted,
}


@pytest.fixture
def keep_tracker() -> Iterator[None]:
    """Put Keras's own tracker back when the test ends."""
    saved = global_state.GLOBAL_STATE_TRACKER
    try:
        yield
    finally:
        global_state.GLOBAL_STATE_TRACKER = saved


def describe(value: Any, tracker: Any) -> Any:
    """`value` in terms that do not depend on which tracker object answered: the tracker's own
    dict, methods bound to the tracker, the tracker itself; anything else is itself."""
    if value is getattr(tracker, "__dict__", object()):
        return ("the tracker's dict", sorted(value))
    if value is tracker:
        return ("the tracker",)
    if getattr(value, "__self__", None) is tracker:
        return ("bound to the tracker", type(value), value.__name__)
    return ("value", value)


def state(tracker: Any) -> Any:
    """The tracker's values as the calling thread sees them, in insertion order (None: it has
    no `__dict__`). Keys by type and text: a key may be a str subclass equal to everything."""
    mapping = getattr(tracker, "__dict__", None)
    return None if mapping is None else [(type(k), str(k), describe(v, tracker)) for k, v in mapping.items()]


def run(function: Callable[..., Any], tracker: Any, name: Any, default: Any, set_to_default: bool) -> Any:
    """What `function(name, default, set_to_default)` returns or raises, and the tracker after."""
    global_state.GLOBAL_STATE_TRACKER = tracker
    try:
        result = ("returns", describe(function(name, default, set_to_default), tracker))
    except Exception as error:  # noqa: BLE001 - the same error is part of the behaviour
        result = ("raises", type(error), str(error))
    return result, state(tracker)


def fresh(kind: str, values: dict[str, Any]) -> Any:
    """A new tracker of `kind` holding `values` (set the way Keras sets them; the ones the
    tracker refuses are left out, identically for both runs)."""
    tracker = TRACKERS[kind]()
    global_state.GLOBAL_STATE_TRACKER = tracker
    for key, value in values.items():
        try:
            global_state.set_global_attribute(key, value)
        except (AttributeError, TypeError):
            pass
    return tracker


def compare(kind: str, values: dict[str, Any], name: Any, default: Any, set_to_default: bool) -> Any:
    expected = run(reference, fresh(kind, values), name, default, set_to_default)
    actual = run(global_state.get_global_attribute, fresh(kind, values), name, default, set_to_default)
    assert actual == expected, (kind, values, name, default, set_to_default)
    return expected


# -- the patch is live ---------------------------------------------------------------------------


def test_the_installed_function_carries_the_fast_path() -> None:
    assert {"_forkgen_local_type", "__dict__"} <= set(global_state.get_global_attribute.__code__.co_names)
    # The oracle differs from the fork in exactly the function this patch rewrote.
    assert f"# forkgen: {NAME}" in inspect.getsource(global_state.get_global_attribute)
    assert "_forkgen_local_type" not in _upstream_get_global_attribute().__code__.co_names
    assert len(KERAS_NAMES) >= 18
    assert global_state._forkgen_local_type is threading.local
    assert global_state._forkgen_local_names == frozenset(LOCAL_NAMES)
    # Keras's readers call this very function.
    from keras.src.backend.common import stateless_scope

    assert stateless_scope.global_state.get_global_attribute is global_state.get_global_attribute


# -- fixed cases ---------------------------------------------------------------------------------

VALUES = [None, 0, "", False, [], (), 5, "cpu", object()]
FIXED_NAMES: list[Any] = [
    *KERAS_NAMES, *LOCAL_NAMES, "unset", "", "__weakref__", "__slots__", "__name__", "__getattr__",
    Name("stateless_scope"), Name("__class__"), EqualsAll("stateless_scope"), EqualsAll("unset"),
    1, None, b"stateless_scope", ("stateless_scope",), 1.5,
]


@pytest.mark.usefixtures("keep_tracker")
@pytest.mark.parametrize("kind", list(TRACKERS))
def test_fixed_names_values_and_defaults_answer_like_upstream(kind: str) -> None:
    values = dict(zip(KERAS_NAMES, VALUES, strict=False))
    values.update({"__doc__": "shadowed", "__init__": 3, "__module__": None})
    results = [
        compare(kind, values, name, default, set_to_default)[0]
        for name in FIXED_NAMES
        for set_to_default in (False, True)
        for default in (None, 0, "", 7, VALUES[-1])
    ]
    # The cases cover set values, defaults, None and errors.
    assert ("returns", ("value", 7)) in results and ("returns", ("value", None)) in results
    assert ("returns", ("value", 0)) in results and any(r[0] == "raises" for r in results)
    if kind != "slotted":
        assert ("returns", ("value", "cpu")) in results


def test_after_clear_session() -> None:
    global_state.set_global_attribute("stateless_scope", "before")
    keras.utils.clear_session()
    tracker = global_state.GLOBAL_STATE_TRACKER
    try:
        assert type(tracker) is threading.local
        assert global_state.get_global_attribute("stateless_scope") is None is reference("stateless_scope")
        for name in ["stateless_scope", "torch_device", "__dict__", "__class__", Name("x"), 3]:
            for default, set_to_default in [(None, False), (7, False), (7, True)]:
                expected = run(reference, tracker, name, default, set_to_default)
                actual = run(global_state.get_global_attribute, tracker, name, default, set_to_default)
                assert actual == expected
        assert global_state.get_global_attribute("torch_device") == 7  # stored by set_to_default above
    finally:
        # set_to_default stored 7 as Keras's stateless scope and torch device: left there, the
        # next test on this worker would fail on them (3.0's add_loss on `7.collect_losses`,
        # torch's "Cannot access accelerator device" for device 7).
        keras.utils.clear_session()
    assert global_state.get_global_attribute("stateless_scope") is None
    assert global_state.get_global_attribute("torch_device") is None


def _in_thread(function: Callable[[], Any]) -> Any:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(function()))
    thread.start()
    thread.join()
    return box[0]


@pytest.mark.usefixtures("keep_tracker")
@pytest.mark.parametrize("kind", ["local", "local subclass", "namespace"])
def test_from_a_fresh_thread(kind: str) -> None:
    names: list[Any] = ["stateless_scope", "unset", "__dict__", "__class__", "__doc__", Name("stateless_scope"), 3]
    for name in names:
        for default, set_to_default in [(None, False), (7, True)]:
            values = {"stateless_scope": "main thread's", "__doc__": "shadowed"}
            results = []
            for function in (reference, global_state.get_global_attribute):
                tracker = fresh(kind, values)
                # The thread's answer and its view of the tracker, then the main thread's view.
                answer = _in_thread(functools.partial(run, function, tracker, name, default, set_to_default))
                results.append((answer, state(tracker)))
            assert results[1] == results[0], (kind, name, default, set_to_default)
    # A thread sees none of the main thread's values in a threading.local.
    tracker = fresh("local", {"stateless_scope": "main thread's"})
    assert _in_thread(lambda: global_state.get_global_attribute("stateless_scope")) is None
    assert global_state.get_global_attribute("stateless_scope") == "main thread's"
    assert global_state.GLOBAL_STATE_TRACKER is tracker


_HAS_SYMBOLIC_SCOPE = importlib.util.find_spec("keras.src.backend.common.symbolic_scope") is not None


def test_keras_readers_in_and_out_of_their_scopes() -> None:
    from keras.src.backend.common.stateless_scope import in_stateless_scope

    # symbolic_scope (3.1+) is absent from 3.0: then nothing of it can be in scope either.
    symbolic = importlib.import_module("keras.src.backend.common.symbolic_scope") if _HAS_SYMBOLIC_SCOPE else None
    in_symbolic_scope = symbolic.in_symbolic_scope if symbolic is not None else (lambda: False)

    keras.utils.clear_session()
    assert not in_stateless_scope() and not in_symbolic_scope()
    assert reference("stateless_scope") is None is global_state.get_global_attribute("stateless_scope")
    with keras.StatelessScope() as scope:
        assert in_stateless_scope()
        assert global_state.get_global_attribute("stateless_scope") is scope is reference("stateless_scope")
    with keras.name_scope("outer"):
        stack = global_state.get_global_attribute("name_scope_stack")
        assert stack is reference("name_scope_stack") and [s.name for s in stack] == ["outer"]
    assert not in_stateless_scope()


# -- generated cases -----------------------------------------------------------------------------

_PLAIN = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
_KNOWN = st.sampled_from([*KERAS_NAMES, *LOCAL_NAMES, "__weakref__", "__slots__", "__getattr__"])
NAMES = st.one_of(
    _PLAIN,
    _KNOWN,
    st.text(max_size=4),
    st.one_of(_PLAIN, _KNOWN).map(Name),
    st.one_of(_PLAIN, _KNOWN).map(EqualsAll),
    st.one_of(st.integers(), st.none(), st.binary(max_size=3), st.tuples(_PLAIN), st.booleans()),
)
_VALUES = st.one_of(
    st.none(), st.sampled_from([0, "", False, [], (), 0.0]), st.integers(), st.text(max_size=3),
    st.builds(object),
)


@given(
    kind=st.sampled_from(list(TRACKERS)),
    values=st.dictionaries(st.one_of(_PLAIN, _KNOWN), _VALUES, max_size=6),
    name=NAMES,
    default=_VALUES,
    set_to_default=st.booleans(),
)
def test_generated_lookups_answer_like_upstream(
    kind: str, values: dict[str, Any], name: Any, default: Any, set_to_default: bool
) -> None:
    saved = global_state.GLOBAL_STATE_TRACKER  # not a fixture: hypothesis runs the body many times
    try:
        compare(kind, values, name, default, set_to_default)
    finally:
        global_state.GLOBAL_STATE_TRACKER = saved


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile: torch backend only")
def test_compiled_lookups_trace_no_worse_than_upstreams() -> None:
    """Under `torch.compile`, look-ups (a hit, a miss with a default, a miss) compile no worse
    than upstream's under this torch (one graph wherever upstream's is one graph, never more
    frames), and answer as eager ones do."""
    import torch

    from tests.equivalence.helpers import compiled, require_dynamo_reading_keras_state

    require_dynamo_reading_keras_state()
    global_state.set_global_attribute("forkgen_compiled_hit", 2)

    def lookups(x: Any) -> Any:
        hit = global_state.get_global_attribute("forkgen_compiled_hit")
        default = global_state.get_global_attribute("forkgen_compiled_missing", 3)
        missing = global_state.get_global_attribute("forkgen_compiled_missing")
        return x * hit + default + (0 if missing is None else 100)

    try:
        fork = compiled(lookups, torch.ones(2))
        with upstream.upstream(global_state, "get_global_attribute"):
            theirs = compiled(lookups, torch.ones(2))
    finally:
        global_state.set_global_attribute("forkgen_compiled_hit", None)
    fork.no_worse_than(theirs)
    assert torch.equal(fork.result, theirs.result) and torch.equal(fork.result, torch.full((2,), 5.0))
