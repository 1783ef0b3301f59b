"""Patch torch-tree-flat-fast-paths on the installed fork (torch backend only).

The patch puts a fast path at the top of the torch tree's `flatten(structure)` and
`map_structure(func, *structures, none_is_leaf=True)` (keras/src/tree/torchtree_impl.py) and
keeps upstream's body below it. The oracle is the release under test itself: the same module
with upstream's own `flatten` and `map_structure` (compiled from the unpatched sources,
`tests/equivalence/upstream.py`) in place of the patched ones, i.e. the fork with this patch off.
The fork's `flatten`/`map_structure`, called directly and through `keras.tree`, must give the
same: equal results of the same types at every level, the very leaf objects, the same `func`
calls in the same order, the same exceptions with the same messages, for flat and nested
structures, namedtuples, OrderedDict/defaultdict, subclasses of list/tuple/dict, several
structures, mismatched ones.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import pytree_proof, upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-tree-flat-fast-paths"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-tree-flat-fast-paths"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the torch tree is used on the torch backend only"),
]
ACTIVE = APPLIED and keras.backend.backend() == "torch"

if ACTIVE:
    import torch
    from torch.utils import _pytree as torch_tree

    #: The torch tree module the patch rewrote (keras/src/tree/torchtree_impl.py).
    impl = upstream.patched_module(NAME, "torchtree_impl.py")

#: The functions the patch changes: with upstream's versions of both, the patch is off.
CHANGED = ("flatten", "map_structure")


@contextlib.contextmanager
def patch_off() -> Iterator[None]:
    """The installed torch tree with upstream's `flatten` and `map_structure` (the release under
    test's own, unpatched): `keras.tree` reaches them through the module, as it does the fork's."""
    with contextlib.ExitStack() as stack:
        for name in CHANGED:
            stack.enter_context(upstream.upstream(impl, name))
        yield


def upstream_flatten(structure: Any) -> list[Any]:
    """Upstream's `flatten` of the release under test."""
    with patch_off():
        return impl.flatten(structure)  # type: ignore[no-any-return]


Point = namedtuple("Point", "x y")


class Items(list):  # type: ignore[type-arg]
    pass


class Pair(tuple):  # type: ignore[type-arg]
    pass


class Table(dict):  # type: ignore[type-arg]
    pass


class Thing:
    """A custom object: a leaf."""


class Out:
    """What the recording func returns: tells which call made it."""

    def __init__(self, index: int) -> None:
        self.index = index


def describe(x: Any) -> Any:
    """The result, level by level: the exact type of each node, dict keys in order, a
    defaultdict's factory, and each leaf by identity (a func result by its call index)."""
    kind = type(x)
    if isinstance(x, Out):
        return ("out", x.index)
    if kind in (dict, OrderedDict, defaultdict):
        return (kind, getattr(x, "default_factory", None), [(k, describe(v)) for k, v in x.items()])
    if kind in (list, tuple, Point):
        return (kind, [describe(v) for v in x])
    return ("leaf", kind, id(x))


class Recorder:
    def __init__(self, fail_at: int | None = None, error: type[BaseException] = KeyError) -> None:
        self.calls: list[tuple[int, ...]] = []
        self.fail_at, self.error = fail_at, error

    def __call__(self, *args: Any) -> Out:
        self.calls.append(tuple(id(a) for a in args))
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise self.error("stop here")
        return Out(len(self.calls))


def outcome(function: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "value", describe(function(*args, **kwargs))
    except Exception as error:  # noqa: BLE001 - the same error is part of the behaviour
        return "error", (type(error), str(error))


def symbolic() -> Any:
    return keras.KerasTensor((2, 3))


LEAVES = st.one_of(
    st.integers(),
    st.floats(allow_nan=True),
    st.none(),
    st.text(max_size=3),
    st.booleans(),
    st.builds(lambda n: torch.zeros(n) if ACTIVE else None, st.integers(0, 3)),
    st.builds(lambda n: np.zeros(n), st.integers(0, 3)),
    st.builds(symbolic),
    st.builds(Thing),
    st.builds(Items, st.lists(st.integers(), max_size=2)),  # a list subclass: a leaf for torch
    st.builds(Table, st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)),
)
KEYS = st.one_of(st.text(max_size=3), st.integers(-3, 3))


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=3), children, max_size=4),
        st.dictionaries(st.integers(-3, 3), children, max_size=4),
        st.dictionaries(st.text(max_size=3), children, max_size=3).map(lambda d: OrderedDict(d)),
        st.dictionaries(st.text(max_size=3), children, max_size=3).map(lambda d: defaultdict(list, d)),
        st.tuples(children, children).map(lambda t: Point(*t)),
        st.lists(children, max_size=3).map(Pair),
    )


FLAT = containers(LEAVES)
NESTED = st.recursive(LEAVES, containers, max_leaves=10)


def test_the_fast_paths_are_on_exactly_with_the_pytree_they_were_proven_on() -> None:
    # On iff the node-type gate is, the installed torch's `tree_flatten`, `tree_map`, ...,
    # `TreeSpec.unflatten` and list/tuple/dict flatten functions are the sources the proof read
    # (their digests in the codemod, tests/equivalence/pytree_proof.py), and `SUPPORTED_NODES`
    # maps list, tuple and dict to those functions: whatever torch's version, the branches run
    # with every torch that has that pytree and stay off (upstream's body runs) with any other.
    namespace = vars(torch_tree)
    nodes_are_torchs = all(
        kind in torch_tree.SUPPORTED_NODES
        and getattr(torch_tree.SUPPORTED_NODES[kind], "flatten_fn", None) is namespace.get(f"{prefix}_flatten")
        and getattr(torch_tree.SUPPORTED_NODES[kind], "unflatten_fn", None) is namespace.get(f"{prefix}_unflatten")
        for kind, prefix in ((list, "_list"), (tuple, "_tuple"), (dict, "_dict"))
    )
    proven = pytree_proof.has_proven_sources(torch_tree, "torch_tree_flat_fast_paths")
    expected = impl._FORKGEN_NODE_TYPE_IS_TYPE and proven and nodes_are_torchs
    assert impl._FORKGEN_FLAT_FAST_PATHS is expected


def test_the_gate_decides_whether_torch_walks_a_flat_list(monkeypatch: pytest.MonkeyPatch) -> None:
    # Measured: with the gate on, a flat list of leaves is answered without torch's
    # `tree_flatten`/`tree_map`; with it off, upstream's body calls them.
    calls: list[str] = []
    for name in ("tree_flatten", "tree_map"):
        original = getattr(torch_tree, name)
        monkeypatch.setattr(torch_tree, name, lambda *a, _o=original, _n=name, **k: calls.append(_n) or _o(*a, **k))
    assert impl.flatten([1, 2.5, "s"]) == [1, 2.5, "s"]
    assert impl.map_structure(lambda x: x, [1, 2]) == [1, 2]
    if impl._FORKGEN_FLAT_FAST_PATHS:
        assert calls == []
    else:
        assert {"tree_flatten", "tree_map"} <= set(calls)


def impl_flatten(structure: Any) -> Any:
    return impl.flatten(structure)  # the module's, looked up at the call (the fork's or upstream's)


def impl_map_structure(func: Any, *structures: Any, **kwargs: Any) -> Any:
    return impl.map_structure(func, *structures, **kwargs)


#: Both ways in: the patched function itself, and `keras.tree`'s (whose own short-cuts answer
#: some structures before reaching it).
FLATTENS = (impl_flatten, keras.tree.flatten)
MAPS = (impl_map_structure, keras.tree.map_structure)


def test_the_patch_changes_both_functions() -> None:
    # The oracle differs from the fork in exactly the functions this patch rewrote.
    for name in CHANGED:
        installed = getattr(impl, name)
        assert f"# forkgen: {NAME}" in inspect.getsource(installed)
        assert upstream.original(installed).__code__.co_code != installed.__code__.co_code


def check_flatten(structure: Any) -> None:
    got = [outcome(flatten, structure) for flatten in FLATTENS]
    with patch_off():
        expected = [outcome(flatten, structure) for flatten in FLATTENS]
    assert got == expected


def check_map(*structures: Any, **kwargs: Any) -> None:
    for map_structure in MAPS:
        for fail_at in (None, 1, 2):
            ours, theirs = Recorder(fail_at), Recorder(fail_at)
            got = outcome(map_structure, ours, *structures, **kwargs)
            with patch_off():
                expected = outcome(map_structure, theirs, *structures, **kwargs)
            assert got == expected
            assert ours.calls == theirs.calls


@given(FLAT)
def test_flatten_of_flat_containers(structure: Any) -> None:
    check_flatten(structure)


@given(NESTED)
def test_flatten_of_nested_structures(structure: Any) -> None:
    check_flatten(structure)


@given(FLAT, st.sampled_from([True, False]))
def test_map_structure_of_flat_containers(structure: Any, none_is_leaf: bool) -> None:
    check_map(structure, none_is_leaf=none_is_leaf)


@given(NESTED, st.sampled_from([True, False]))
def test_map_structure_of_nested_structures(structure: Any, none_is_leaf: bool) -> None:
    check_map(structure, none_is_leaf=none_is_leaf)


@given(FLAT, FLAT, st.sampled_from([True, False]))
def test_map_structure_of_several_structures(a: Any, b: Any, none_is_leaf: bool) -> None:
    check_map(a, b, none_is_leaf=none_is_leaf)  # mostly mismatched: the same error
    check_map(a, a, none_is_leaf=none_is_leaf)


@pytest.mark.parametrize(
    "structure",
    [
        (4, 16), [], (), {}, [None], (None, None), [1, (2,)], (Point(1, 2),), [Pair((1,))], ([1],), ({"a": 1},),
        {"b": (1,)}, {"b": 1, "a": 2}, {2: "x", 1: "y"}, {1: 1, "a": 2}, OrderedDict(b=1, a=2),
        defaultdict(int, b=1, a=2), Items([1, 2]), Pair((1, 2)), Table(b=1, a=2), Point(3, 4), 5, None,
        [torch.ones(2) if ACTIVE else 0, np.ones(2), "s", 2.5, True],
        [torch.nn.Parameter(torch.ones(1)) if ACTIVE else 0], [torch.Size([2, 3]) if ACTIVE else 0],
    ],
    ids=repr,
)
def test_examples(structure: Any) -> None:
    check_flatten(structure)
    check_map(structure)
    check_map(structure, none_is_leaf=False)
    check_map(structure, structure)


def test_no_structure_and_a_truthy_non_bool_none_is_leaf() -> None:
    check_map()
    check_map((1, None), none_is_leaf=1)
    check_map((1, None), none_is_leaf=0)


def test_func_stopping_iteration_gets_torchs_length_error() -> None:
    for structure in ([1, 2, 3], (1, 2, 3), {"b": 1, "a": 2, "c": 3}):
        for map_structure in MAPS:
            ours, theirs = Recorder(2, StopIteration), Recorder(2, StopIteration)
            got = outcome(map_structure, ours, structure)
            with patch_off():
                assert got == outcome(map_structure, theirs, structure)
            assert got[0] == "error" and got[1][0] is ValueError
            assert ours.calls == theirs.calls


def test_func_mutating_its_structure_sees_the_snapshot_torch_took() -> None:
    def run(map_structure: Any, structure: Any) -> Any:
        seen = []

        def func(x: Any) -> Any:
            seen.append(x)
            if isinstance(structure, list):
                structure.append(x)
            else:
                structure[f"new{x}"] = x
            return x

        return outcome(map_structure, func, structure), seen, structure

    for map_structure in MAPS:
        for make in (lambda: [1, 2], lambda: {"a": 1, "b": 2}):
            got = run(map_structure, make())[0:2]
            with patch_off():
                assert got == run(map_structure, make())[0:2]


def test_leaves_are_the_objects_given() -> None:
    leaves = [torch.ones(1), np.ones(1), Thing(), symbolic()]
    assert all(a is b for a, b in zip(keras.tree.flatten(tuple(leaves)), leaves, strict=True))
    out = keras.tree.map_structure(lambda x: x, {"z": leaves[0], "a": leaves[1]})
    assert list(out) == ["z", "a"] and out["z"] is leaves[0] and out["a"] is leaves[1]


def test_a_type_registered_at_run_time_is_seen_at_once() -> None:
    class Box:
        def __init__(self, *items: Any) -> None:
            self.items = list(items)

    torch_tree.register_pytree_node(Box, lambda b: (b.items, None), lambda items, _: Box(*items))
    try:
        structure = (1, Box(2, 3))
        assert keras.tree.flatten(structure) == impl.flatten(structure) == upstream_flatten(structure) == [1, 2, 3]
        check_flatten(structure)
        check_flatten([Box(2), 3])
        for map_structure in MAPS:
            mapped = map_structure(lambda x: x * 10, [Box(1), 2])
            assert type(mapped[0]) is Box and mapped[0].items == [10] and mapped[1] == 20
    finally:
        pytree_proof.deregister_pytree_node(torch_tree, Box)
