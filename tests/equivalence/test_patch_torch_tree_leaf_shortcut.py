"""Patch torch-tree-leaf-shortcut on the installed fork (torch backend only).

The torch tree's `_dict_to_ordered_dict` (keras/src/tree/torchtree_impl.py) sorts a top-level
dict and otherwise flattens the structure one level with `torch_tree.tree_flatten`, returning a
leaf as it is; the patch returns a leaf before that flatten. The oracle is the release under
test: upstream's own `_dict_to_ordered_dict`, compiled from the unpatched sources into the
installed module (`tests/equivalence/upstream.py`), in the patched one's place. The patched
function must give what it gives: the same node types, the same key order at every level, the
same leaf objects, fresh copies where upstream makes them, the same errors; and so must every
`keras.tree` function built on it.
"""

from __future__ import annotations

import ast
import inspect
from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-tree-leaf-shortcut"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-tree-leaf-shortcut"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the torch tree is used on the torch backend only"),
]
ACTIVE = APPLIED and keras.backend.backend() == "torch"

if ACTIVE:
    import torch
    from keras.src.utils import tracking
    from torch.utils import _pytree as torch_tree

    #: The torch tree module the patch rewrote (keras/src/tree/torchtree_impl.py).
    impl = upstream.patched_module(NAME, "torchtree_impl.py")

Pair = namedtuple("Pair", ["right", "left"])


class Subdict(dict):  # type: ignore[type-arg]
    """A dict subclass: not a registered pytree node, so a leaf."""


def upstream_ordering() -> Any:
    """For a `with` block: the installed keras.tree with upstream's `_dict_to_ordered_dict` (the
    release under test's own, whose recursion then reaches itself) in place of the fork's."""
    return upstream.upstream(impl, "_dict_to_ordered_dict")


def reference(structure: Any) -> Any:
    """Upstream's `_dict_to_ordered_dict(structure)`, all the way down."""
    with upstream_ordering() as ordered:
        return ordered(structure)


def names(structure: Any) -> dict[int, str]:
    """A name (its path) for every object of `structure`, by id: what the outputs are told apart by."""
    found: dict[int, str] = {}

    def walk(node: Any, path: str) -> None:
        if id(node) in found:
            return
        found[id(node)] = path
        if impl._tree_is_leaf(node):
            return
        children, _ = torch_tree.tree_flatten(node, is_leaf=lambda x: x is not node)
        for index, child in enumerate(children):
            walk(child, f"{path}/{index}")

    walk(structure, "")
    return found


def describe(out: Any, inputs: dict[int, str]) -> Any:
    """`out` as comparable facts: each node's type, keys in order (and default_factory), and which
    input object each node or leaf is ("new" for a fresh one)."""
    name = inputs.get(id(out), "new")
    if isinstance(out, (dict, OrderedDict)) and not isinstance(out, Subdict):
        extra = (out.default_factory,) if isinstance(out, defaultdict) else ()
        return (type(out), name, *extra, [(key, describe(value, inputs)) for key, value in out.items()])
    if isinstance(out, (list, tuple, deque, set)) and not isinstance(out, torch.Size):
        return (type(out), name, [describe(value, inputs) for value in out])
    if isinstance(out, torch.Tensor):
        return ("tensor", name, out.dtype, tuple(out.shape))
    return ("leaf", type(out), name, repr(out) if name == "new" else None)


def outcome(call: Callable[[], Any], structure: Any) -> tuple[object, ...]:
    try:
        out = call()
    except Exception as error:
        return ("raised", type(error), str(error))
    return ("returned", describe(out, names(structure)))


def both(call: Callable[[], Any], structure: Any) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """(the fork's outcome, upstream's outcome) of `call`."""
    fork = outcome(call, structure)
    with upstream_ordering():
        upstream = outcome(call, structure)
    return fork, upstream


# -- inputs --------------------------------------------------------------------------------------

def leaf_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(-2, 2), st.floats(allow_nan=False, width=32), st.text(max_size=2), st.none(),
        st.booleans(), st.builds(object),
        st.integers(0, 3).map(lambda n: torch.arange(n, dtype=torch.float32)),
        st.integers(0, 3).map(lambda n: np.ones((n,), "float32")),
        st.integers(0, 2).map(lambda n: torch.Size([n, 2])),
        st.dictionaries(st.sampled_from("ba"), st.integers(0, 1), max_size=2).map(Subdict),
    )


KEYS = st.sampled_from(["b", "a", "d", "c"])


def node_values(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(KEYS, children, max_size=3),
        st.dictionaries(KEYS, children, max_size=3).map(lambda d: defaultdict(list, d)),
        st.dictionaries(KEYS, children, max_size=3).map(OrderedDict),
        st.tuples(children, children).map(lambda t: Pair(*t)),
        st.lists(children, max_size=2).map(deque),
        st.lists(children, max_size=3).map(lambda v: tracking.TrackedList(v)),
        st.dictionaries(KEYS, children, max_size=3).map(lambda d: tracking.TrackedDict(d)),
    )


STRUCTURES = st.recursive(leaf_values(), node_values, max_leaves=10) if ACTIVE else st.nothing()


def leaves() -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("tensor", lambda: torch.ones(2, 3)),
        ("scalar tensor", lambda: torch.tensor(1.5)),
        ("parameter", lambda: torch.nn.Parameter(torch.ones(2))),
        ("variable", lambda: keras.Variable(np.ones((2,)))),
        ("keras tensor", lambda: keras.KerasTensor((None, 3))),
        ("numpy array", lambda: np.zeros((2, 2))),
        ("int", lambda: 3),
        ("None", lambda: None),
        ("str", lambda: "x"),
        ("torch.Size", lambda: torch.Size([2, 3])),
        ("dict subclass", lambda: Subdict(b=1, a=2)),
        ("tracked set (a node)", lambda: tracking.TrackedSet({1, 2})),
    ]


LEAVES = leaves() if ACTIVE else []


# -- tests ---------------------------------------------------------------------------------------

def functions(source: str) -> set[str]:
    return {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}


def test_the_patch_is_in() -> None:
    source = inspect.getsource(impl._dict_to_ordered_dict)
    assert f"# forkgen: {NAME}" in source
    assert f"# forkgen: {NAME}" not in upstream.upstream_source(impl)
    # Only the short-cut: no function the release lacks (e.g. a helper of a later release's
    # rewrite, which also sorts nested dicts); forkgen's own helpers are `_forkgen_*`.
    installed = {name for name in functions(inspect.getsource(impl)) if not name.startswith("_forkgen")}
    assert installed == functions(upstream.upstream_source(impl))


@pytest.mark.parametrize(("kind", "make"), LEAVES, ids=[kind for kind, _ in LEAVES])
def test_a_leaf_comes_back_as_it_is_like_upstream(kind: str, make: Callable[[], Any]) -> None:
    value = make()
    fork, upstream = both(lambda: impl._dict_to_ordered_dict(value), value)
    assert fork == upstream
    if impl._tree_is_leaf(value):
        assert impl._dict_to_ordered_dict(value) is value


@given(structure=STRUCTURES)
def test_dict_to_ordered_dict_like_upstream(structure: Any) -> None:
    expected = outcome(lambda: reference(structure), structure)
    assert expected[0] == "returned"  # every key is a str: nothing to refuse
    assert outcome(lambda: impl._dict_to_ordered_dict(structure), structure) == expected


def recurse(x: Any) -> None:
    return None


def swap_dicts(x: Any) -> Any:
    return OrderedDict(reversed(list(x.items()))) if type(x) is dict else None


def keep_lists(x: Any) -> Any:
    return x if isinstance(x, list) else None


@given(structure=STRUCTURES)
def test_keras_tree_functions_like_upstream(structure: Any) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: keras.tree.flatten(structure),
        lambda: keras.tree.flatten_with_path(structure),
        lambda: keras.tree.lists_to_tuples(structure),
        lambda: keras.tree.map_shape_structure(lambda s: s, structure),
        lambda: keras.tree.pack_sequence_as(structure, keras.tree.flatten(structure)),
    ]
    for func in (recurse, swap_dicts, keep_lists):
        for top_down in (True, False):
            calls.append(lambda func=func, top_down=top_down: keras.tree.traverse(func, structure, top_down))
    for call in calls:
        fork, upstream = both(call, structure)
        assert upstream[0] == "returned", upstream
        assert fork == upstream


def test_nested_dicts_keep_upstreams_order_and_nodes_are_fresh_copies_where_upstreams_are() -> None:
    # #23201 as merged sorts every level and hands unchanged nodes back as they are: not carried.
    # Which input objects come back (and which are fresh copies) is part of what is compared.
    inner = {"d": 1, "c": 2}
    structure = {"b": inner, "a": [inner, (torch.ones(1),)]}
    listed = [structure["a"][1]]
    for call, given_to in (
        (lambda: impl._dict_to_ordered_dict(structure), structure),
        (lambda: keras.tree.flatten(structure), structure),
        (lambda: keras.tree.pack_sequence_as(structure, keras.tree.flatten(structure)), structure),
        (lambda: impl._dict_to_ordered_dict(listed), listed),
        (lambda: impl._dict_to_ordered_dict(inner), inner),
    ):
        fork, upstream = both(call, given_to)
        assert upstream[0] == "returned", upstream
        assert fork == upstream


def test_errors_are_the_same() -> None:
    for structure in ({"a": 1, 2: 0}, [{"b": 1, 3: 2}], (torch.ones(1), {None: 1, "a": 2})):
        fork, upstream = both(lambda s=structure: keras.tree.flatten(s), structure)
        assert upstream[0] == "raised" and upstream[1] is TypeError
        assert fork == upstream


def test_dicts_are_sorted_when_torch_registers_no_defaultdict() -> None:
    # Older torch releases register no defaultdict (a leaf for tree_flatten): upstream sorts it all
    # the same, its dict test coming first, and so does the fork, whose short-cut comes after it.
    node = torch_tree.SUPPORTED_NODES.pop(defaultdict, None)
    try:
        value = defaultdict(int, b=1, a=2)
        fork, upstream = both(lambda: impl._dict_to_ordered_dict(value), value)
        assert fork == upstream and list(impl._dict_to_ordered_dict(value)) == ["a", "b"]
    finally:
        if node is not None:
            torch_tree.SUPPORTED_NODES[defaultdict] = node


def test_a_leaf_skips_the_flatten() -> None:
    # The speed-up itself: upstream flattens a leaf one level; the fork does not flatten it at all.
    counted: list[Any] = []
    flatten = torch_tree.tree_flatten

    def counting(tree: Any, is_leaf: Any = None) -> Any:
        counted.append(tree)
        return flatten(tree, is_leaf=is_leaf)

    torch_tree.tree_flatten = counting
    try:
        value = torch.ones(2)
        assert impl._dict_to_ordered_dict(value) is value and counted == []
        assert reference(value) is value and counted and all(tree is value for tree in counted)
        counted.clear()
        structure = [value, (1, None)]
        impl._dict_to_ordered_dict(structure)
        # Its nodes go through tree_flatten one level each, unless torch-tree-one-level-flatten
        # (later in the series) flattens them through their own flatten_fn.
        direct = patch_applied("torch-tree-one-level-flatten")
        assert [type(t) for t in counted] == ([] if direct else [list, tuple])
    finally:
        torch_tree.tree_flatten = flatten
