"""Patch torch-tree-flat-fast-paths on the installed fork (torch backend only).

Keras 3.15.1's torch `flatten(structure)` sorts a top-level dict through `_dict_to_ordered_dict`
(which rebuilds every other node one level at a time) and then runs torch's `tree_flatten`; its
`map_structure(func, *structures, none_is_leaf=True)` is one torch `tree_map` (with a wrapper
that skips `None` when `none_is_leaf` is false). Both are restated below from that release. The
fork's `keras.tree.flatten` and `keras.tree.map_structure` must give the same: equal results of
the same types at every level, the very leaf objects, the same `func` calls in the same order,
the same exceptions with the same messages, for flat and nested structures, namedtuples,
OrderedDict/defaultdict, subclasses of list/tuple/dict, several structures, mismatched ones.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence.helpers import patch_applied

APPLIED = patch_applied("torch-tree-flat-fast-paths")
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-tree-flat-fast-paths"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the torch tree is used on the torch backend only"),
]
ACTIVE = APPLIED and keras.backend.backend() == "torch"

if ACTIVE:
    import torch
    from keras.src.tree import torchtree_impl as impl
    from torch.utils import _pytree as torch_tree


# Keras 3.15.1's logic (keras/src/tree/torchtree_impl.py: _dict_to_ordered_dict 23-54, flatten
# 91-96, map_structure 126-146), restated.
def reference_ordered(structure: Any) -> Any:
    if type(structure) is dict:
        return {key: structure[key] for key in sorted(structure.keys())}
    if type(structure) is defaultdict:
        return defaultdict(structure.default_factory, {key: structure[key] for key in sorted(structure.keys())})
    children, spec = torch_tree.tree_flatten(structure, is_leaf=lambda x: x is not structure)
    if spec.num_nodes == 1 and spec.num_leaves == 1:
        return structure
    return torch_tree.tree_unflatten([reference_ordered(child) for child in children], spec)


def reference_flatten(structure: Any) -> list[Any]:
    return torch_tree.tree_flatten(reference_ordered(structure))[0]


def reference_map_structure(func: Any, *structures: Any, none_is_leaf: bool = True) -> Any:
    if not structures:
        raise ValueError("Must provide at least one structure")
    mapped = func
    if not none_is_leaf:

        def skipping_none(*args: Any) -> Any:
            if args[0] is None:
                if not all(arg is None for arg in args):
                    raise ValueError(
                        "Structure mismatch: some arguments are None, others "
                        f"are not. Received arguments: {args}."
                    )
                return None
            return func(*args)

        mapped = skipping_none
    return torch_tree.tree_map(mapped, *structures)


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


def test_the_fast_paths_are_on_exactly_with_the_torch_they_were_proven_on() -> None:
    # The gate holds for torch 2.13.0's pytree (the sources the proof read) and for no other:
    # with another torch (FORKGEN_TORCH_SPEC) the branches stay off and upstream's body runs.
    on = torch.__version__.startswith("2.13.0")
    assert impl._FORKGEN_NODE_TYPE_IS_TYPE is True
    assert impl._FORKGEN_FLAT_FAST_PATHS is on


def check_flatten(structure: Any) -> None:
    assert outcome(keras.tree.flatten, structure) == outcome(reference_flatten, structure)


def check_map(*structures: Any, **kwargs: Any) -> None:
    for fail_at in (None, 1, 2):
        ours, theirs = Recorder(fail_at), Recorder(fail_at)
        got = outcome(keras.tree.map_structure, ours, *structures, **kwargs)
        expected = outcome(reference_map_structure, theirs, *structures, **kwargs)
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
        ours, theirs = Recorder(2, StopIteration), Recorder(2, StopIteration)
        got = outcome(keras.tree.map_structure, ours, structure)
        assert got == outcome(reference_map_structure, theirs, structure)
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

    for make in (lambda: [1, 2], lambda: {"a": 1, "b": 2}):
        assert run(keras.tree.map_structure, make())[0:2] == run(reference_map_structure, make())[0:2]


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
        assert keras.tree.flatten(structure) == reference_flatten(structure) == [1, 2, 3]
        mapped = keras.tree.map_structure(lambda x: x * 10, [Box(1), 2])
        assert type(mapped[0]) is Box and mapped[0].items == [10] and mapped[1] == 20
    finally:
        torch_tree._deregister_pytree_node(Box)
