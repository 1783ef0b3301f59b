"""Patch torch-tree-leaf-shortcut (keras-team/keras#23201's leaf short-cut): what its cases
(codemods/torch_tree_leaf_shortcut/cases.py) cannot say, the synthetic upstream and patched
modules executed side by side."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import AnchorDrift, Outcome, Sources
from codemods.torch_tree_leaf_shortcut import PATCH
from codemods.torch_tree_leaf_shortcut import cases as synthetic
from tests.support.synthetic import load_module
from tests.support.torch_pytree import torch_tree

TORCHTREE = "keras/src/tree/torchtree_impl.py"


def test_since_and_files() -> None:
    assert PATCH.since == "3.12.0" and PATCH.files == (TORCHTREE,)


def test_a_tree_without_the_torch_tree_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == TORCHTREE and "no such file" in str(caught.value)


def test_the_synthetic_tree_file_takes_the_patch() -> None:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    first = PATCH.check(sources)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(sources)
    patched = sources.rendered()[TORCHTREE]
    assert patched.count("# forkgen: torch-tree-leaf-shortcut") == 1
    assert PATCH.check(Sources(lambda p: patched if p == TORCHTREE else None)).present


# -- behaviour: the synthetic upstream and patched modules, side by side -----------------------

def _patched_module_text() -> str:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    PATCH.apply(sources)
    return sources.rendered()[TORCHTREE]


UPSTREAM = load_module(synthetic.TORCHTREE_PY, "torchtree_upstream")
PATCHED = load_module(_patched_module_text(), "torchtree_patched")
Point = namedtuple("Point", ["y", "x"])


class Leafy(dict):  # type: ignore[type-arg]
    """A dict subclass: a leaf for torch's pytree (not registered)."""


class Unsortable:
    """A key `sorted` rejects next to a str."""

    def __repr__(self) -> str:
        return "Unsortable()"


def describe(out: Any, inputs: dict[int, str]) -> Any:
    """`out` as comparable facts: node types, key order, and each object's identity relative to
    the input (the name of the input object it is, or "new")."""
    name = inputs.get(id(out), "new")
    if type(out) in (dict, defaultdict, OrderedDict):
        extra = (out.default_factory,) if type(out) is defaultdict else ()
        return (type(out), name, *extra, [(k, describe(v, inputs)) for k, v in out.items()])
    if type(out) in (list, tuple) or isinstance(out, Point):
        return (type(out), name, [describe(v, inputs) for v in out])
    return ("leaf", name)


def names(structure: Any) -> dict[int, str]:
    """A name for every object in `structure` (by id), its path from the root."""
    found: dict[int, str] = {}

    def walk(node: Any, path: str) -> None:
        found.setdefault(id(node), path)
        if isinstance(node, dict) and type(node) is not Leafy:
            for key, value in node.items():
                walk(value, f"{path}/{key!r}")
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(value, f"{path}/{index}")

    walk(structure, "")
    return found


def outcome(module: Any, function: str, structure: Any, *args: Any, func: Any = None) -> tuple[object, ...]:
    """What `module.<function>` gives for `structure`, as comparable facts (or its error)."""
    call = getattr(module, function)
    try:
        out = call(func, structure, *args) if func is not None else call(structure, *args)
    except Exception as error:
        return ("raised", type(error), str(error))
    return ("returned", describe(out, names(structure)))


def recurse(x: Any) -> None:
    return None


def list_to_tuple(x: Any) -> Any:
    return tuple(x) if isinstance(x, list) else None


def keep_dicts(x: Any) -> Any:
    return x if isinstance(x, dict) else None


leaves = st.one_of(
    st.integers(-3, 3), st.text(max_size=2), st.none(), st.floats(allow_nan=False),
    st.builds(object), st.builds(lambda d: Leafy(d), st.dictionaries(st.sampled_from("ab"), st.integers(0, 2))),
)
keys = st.sampled_from(["c", "a", "b", "d"])


def nodes(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=3),
        st.dictionaries(keys, children, max_size=3).map(lambda d: defaultdict(list, d)),
        st.dictionaries(keys, children, max_size=3).map(OrderedDict),
        st.tuples(children, children).map(lambda t: Point(*t)),
    )


structures = st.recursive(leaves, nodes, max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(structure=structures)
def test_patched_orders_like_upstream(structure: Any) -> None:
    for function in ("_dict_to_ordered_dict", "flatten"):
        assert outcome(PATCHED, function, structure) == outcome(UPSTREAM, function, structure)
    for func in (recurse, list_to_tuple, keep_dicts):
        for top_down in (True, False):
            assert outcome(PATCHED, "traverse", structure, top_down, func=func) == outcome(
                UPSTREAM, "traverse", structure, top_down, func=func
            )
    flat = UPSTREAM.flatten(structure)
    assert outcome(PATCHED, "pack_sequence_as", structure, flat) == outcome(
        UPSTREAM, "pack_sequence_as", structure, flat
    )


@contextmanager
def flattens() -> Iterator[list[int]]:
    counted: list[int] = []
    start = torch_tree.flattens
    yield counted
    counted.append(torch_tree.flattens - start)


@pytest.mark.parametrize("leaf", [1, None, "s", object(), Leafy(b=1)], ids=["int", "None", "str", "object", "dict subclass"])
def test_a_leaf_is_returned_as_it_is_without_a_flatten(leaf: Any) -> None:
    with flattens() as upstream:
        assert UPSTREAM._dict_to_ordered_dict(leaf) is leaf
    with flattens() as patched:
        assert PATCHED._dict_to_ordered_dict(leaf) is leaf
    assert upstream == [1] and patched == [0]


def test_nodes_still_take_the_round_trip_and_come_back_as_fresh_copies() -> None:
    inner = {"b": 1, "a": 2}
    structure = [inner, (3, Point(4, 5)), OrderedDict(z=1, y=2)]
    for module in (UPSTREAM, PATCHED):
        with flattens() as counted:
            out = module._dict_to_ordered_dict(structure)
        assert out == structure and out is not structure and out[1] is not structure[1]
        # Only the top-level dict of each subtree is sorted; below a dict nothing is (3.15.1).
        assert list(out[0]) == ["a", "b"] and list(out[2]) == ["z", "y"]
        nested = module._dict_to_ordered_dict({"b": {"d": 1, "c": 2}, "a": 0})
        assert list(nested) == ["a", "b"] and list(nested["b"]) == ["d", "c"]
        # One flatten for each of the list, tuple, Point and OrderedDict; upstream also one for
        # each of the five leaves below them, the fork none.
        assert counted == [4 if module is PATCHED else 9]


def test_dicts_are_sorted_even_when_torch_does_not_register_defaultdict() -> None:
    # Older torch releases register no defaultdict: it is a leaf for tree_flatten. 3.15.1 sorts
    # it all the same (its dict test comes first) and so does the fork: the short-cut sits after it.
    removed = torch_tree.SUPPORTED_NODES.pop(defaultdict)
    try:
        value = defaultdict(int, b=1, a=2)
        for module in (UPSTREAM, PATCHED):
            out = module._dict_to_ordered_dict(value)
            assert type(out) is defaultdict and list(out) == ["a", "b"] and out is not value
    finally:
        torch_tree.SUPPORTED_NODES[defaultdict] = removed


def test_errors_are_the_same() -> None:
    for structure in ({"a": 1, Unsortable(): 2}, [{"a": 1, 3: 2}], (1, {2: 0, "b": 1})):
        expected = outcome(UPSTREAM, "_dict_to_ordered_dict", structure)
        assert expected[0] == "raised" and expected[1] is TypeError
        assert outcome(PATCHED, "_dict_to_ordered_dict", structure) == expected
