"""Patch torch-tree-one-level-flatten on the installed fork (torch backend only).

The torch tree's `_dict_to_ordered_dict` flattens a node one level through the node's own
`flatten_fn`/`unflatten_fn` instead of `tree_flatten` with `is_leaf=lambda x: x is not
structure`. Eager results must be what the release under test's own, unpatched function gives
(`upstream.upstream`): the same structure, container types, key order and leaves (by identity),
on generated nested structures; and under `torch.compile` a tree flatten of nested tuples must
trace as one graph (upstream's breaks at the lambda) and give the eager leaves.
"""

from __future__ import annotations

import collections
from typing import Any

import keras
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-tree-one-level-flatten"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-tree-one-level-flatten"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the patch changes the torch tree only"),
]

if APPLIED and keras.backend.backend() == "torch":
    import torch
    import torch._dynamo

    tree_impl = upstream.patched_module(NAME, "torchtree_impl.py")

Point = collections.namedtuple("Point", ["y", "x"])


def shape(value: Any) -> Any:
    """The structure as comparable data: container types, key order, leaves by identity."""
    if isinstance(value, dict):
        return (type(value).__name__, [(k, shape(v)) for k, v in value.items()],
                getattr(value, "default_factory", None))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [shape(v) for v in value])
    return ("leaf", id(value))


leaves = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=2),
                   st.builds(lambda n: torch.full((2,), float(n)), st.integers(0, 5)))
keys = st.sampled_from(["b", "a", "c", "d"])
structures = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.tuples(children, children).map(lambda t: Point(*t)),
        st.dictionaries(keys, children, max_size=3),
        st.dictionaries(keys, children, max_size=3).map(collections.OrderedDict),
        st.dictionaries(keys, children, max_size=3).map(lambda d: collections.defaultdict(list, d)),
    ),
    max_leaves=8,
)


@given(structures)
def test_ordered_structures_are_upstream_s(structure: Any) -> None:
    got = tree_impl._dict_to_ordered_dict(structure)
    with upstream.upstream(tree_impl, "_dict_to_ordered_dict"):
        expected = tree_impl._dict_to_ordered_dict(structure)
    assert shape(got) == shape(expected)


@given(structures)
def test_flatten_and_map_structure_are_upstream_s(structure: Any) -> None:
    def run() -> Any:
        return [id(x) for x in keras.tree.flatten(structure)], shape(keras.tree.map_structure(lambda x: x, structure))

    got = run()
    with upstream.upstream(tree_impl, "_dict_to_ordered_dict"):
        expected = run()
    assert got == expected


def test_a_list_holding_itself_fails_as_upstream_s() -> None:
    looped: list[Any] = [1]
    looped.append(looped)
    with pytest.raises(RecursionError):
        tree_impl._dict_to_ordered_dict([looped])
    with upstream.upstream(tree_impl, "_dict_to_ordered_dict"), pytest.raises(RecursionError):
        tree_impl._dict_to_ordered_dict([looped])


def test_a_compiled_flatten_of_nested_tuples_is_one_graph() -> None:
    def fn(x: Any) -> Any:
        return sum(keras.tree.flatten(((x, x + 1), (x * 2, {"b": x - 1, "a": x}))))

    x = torch.arange(3.0)
    torch._dynamo.reset()
    try:
        got = torch.compile(fn, fullgraph=True, backend="eager")(x)
    finally:
        torch._dynamo.reset()
    assert torch.equal(got, fn(x))
