"""Patch torch-tree-flat-fast-paths (ours): what its cases (codemods/torch_tree_flat_fast_paths/cases.py)
cannot say: with the two other torch tree patches in every order, functions it must not change,
and the patched functions executed beside upstream's."""

from __future__ import annotations

import ast
import itertools
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import pytest

from codemods.engine import Outcome, Sources
from codemods.torch_tree_flat_fast_paths import FLAG, PATCH
from codemods.torch_tree_flat_fast_paths import cases as synthetic
from codemods.torch_tree_leaf_shortcut import PATCH as LEAF_SHORTCUT
from codemods.torch_tree_node_type_fast_path import FLAG as NODE_TYPE_FLAG
from codemods.torch_tree_node_type_fast_path import PATCH as NODE_TYPE
from tests.support.synthetic import load_module
from tests.support.torch_pytree import torch_tree

TORCHTREE = synthetic.PATH
TEXT = synthetic.TORCHTREE_PY
GATE = "_forkgen_flat_nodes_are_torchs"


def sources(text: str) -> Sources:
    return Sources({TORCHTREE: text}.get)


def applied(text: str, *patches: Any) -> str:
    src = sources(text)
    for patch in patches:
        check = patch.check(src)
        assert check.outcome is Outcome.APPLIED and not check.present
        patch.apply(src)
    return src.rendered()[TORCHTREE]


def with_node_type(text: str = TEXT) -> str:
    """The tree `torch-tree-flat-fast-paths` builds on (its `requires`)."""
    return applied(text, NODE_TYPE)


def test_all_three_torch_tree_patches_compose_in_every_order_the_series_allows() -> None:
    results = set()
    # The node-type patch must come before this one (`requires`); the leaf short-cut anywhere.
    for order in itertools.permutations((LEAF_SHORTCUT, NODE_TYPE, PATCH)):
        if order.index(NODE_TYPE) > order.index(PATCH):
            continue
        text = applied(TEXT, *order)
        for patch in (LEAF_SHORTCUT, NODE_TYPE, PATCH):
            assert patch.check(sources(text)).present, (patch.name, [p.name for p in order])
        results.add(text)
    assert len(results) == 1
    text = results.pop()
    for name in ("torch-tree-leaf-shortcut", "torch-tree-node-type-fast-path", "torch-tree-flat-fast-paths"):
        assert f"# forkgen: {name}" in text


FLAT = with_node_type()


def function(tree: ast.Module, name: str) -> ast.FunctionDef:
    (found,) = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name]
    return found


def test_must_not_change_other_functions() -> None:
    after, before = ast.parse(applied(FLAT, PATCH)), ast.parse(FLAT)
    names = ("_tree_is_leaf", "_dict_to_ordered_dict", "traverse", "pack_sequence_as", "is_nested")
    for name in names:
        assert ast.dump(function(after, name)) == ast.dump(function(before, name))


Point = namedtuple("Point", "x y")


class Items(list):  # a list subclass: a leaf for torch's registry
    pass


class Pair(tuple):  # a tuple subclass that is no namedtuple: a leaf for torch, not for the test
    pass


STRUCTURES: list[Any] = [
    (4, 16), [1, 2.5, None, "s"], (), [], (1, (2, 3)), [1, [2]], (Point(1, 2),), [Pair((1,))], (Items([1]),),
    {"b": 1, "a": 2}, {"a": {"c": 1, "b": 2}}, OrderedDict(b=1, a=2), defaultdict(list, b=1, a=2), Point(1, 2),
    Items([1, 2]), Pair((1, 2)), [{"b": 1, "a": 2}], 5, None,
]


def _modules(gate: bool) -> tuple[Any, Any]:
    upstream = load_module(TEXT, "flat_upstream_tree")
    patched = load_module(applied(FLAT, PATCH).replace(f"{FLAG} = {NODE_TYPE_FLAG} and {GATE}()", f"{FLAG} = {gate}"),
                          "flat_patched_tree")
    return upstream, patched


@pytest.mark.parametrize("gate", [False, True])
def test_patched_functions_answer_like_upstream_on_the_synthetic_pytree(gate: bool) -> None:
    upstream, patched = _modules(gate)
    for structure in STRUCTURES:
        expected, got = upstream.flatten(structure), patched.flatten(structure)
        assert got == expected and [id(x) for x in got] == [id(x) for x in expected], structure
        calls: dict[str, list[Any]] = {"up": [], "fork": []}
        results = []
        for key, module in (("up", upstream), ("fork", patched)):
            seen = calls[key]
            results.append(module.map_structure(lambda x, seen=seen: seen.append(x) or (x, 1), structure))
        assert results[0] == results[1] and type(results[0]) is type(results[1]), structure
        assert calls["up"] == calls["fork"]
    # The fast paths are taken (no flatten at all) only with the gate on.
    torch_tree.flattens = 0
    patched.flatten((4, 16))
    patched.map_structure(str, {"b": 1, "a": 2})
    assert (torch_tree.flattens == 0) is gate


def test_the_synthetic_tree_file_takes_the_patch_after_the_node_type_patch() -> None:
    assert synthetic.FILES[synthetic.PATH] == TEXT
    src = Sources(synthetic.FILES.get)
    NODE_TYPE.apply(src)
    assert PATCH.check(src).outcome is Outcome.APPLIED
    module = load_module(applied(FLAT, PATCH), "flat_synthetic_patched_tree")
    assert getattr(module, FLAG) is False  # the stand-in pytree is no torch
