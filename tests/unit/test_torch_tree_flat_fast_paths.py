"""Patch torch-tree-flat-fast-paths (ours) on synthetic torch tree modules: before/after,
idempotence, must-not-change, drift, and together with the two other torch tree patches."""

from __future__ import annotations

import ast
import itertools
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import AnchorDrift, Outcome, Sources, ast_function
from codemods.torch_tree_flat_fast_paths import PATCH, AddFlatFastPathsCommand
from codemods.torch_tree_flat_fast_paths.add_fast_paths import FLAG, GATE, pieces
from codemods.torch_tree_leaf_shortcut import PATCH as LEAF_SHORTCUT
from codemods.torch_tree_node_type_fast_path import PATCH as NODE_TYPE
from codemods.torch_tree_node_type_fast_path.add_fast_path import FLAG as NODE_TYPE_FLAG
from tests.support import synthetic_torch_tree_flat_fast_paths as synthetic
from tests.support.synthetic import load_module
from tests.support.synthetic_torch_tree_leaf_shortcut import torch_tree

TORCHTREE = synthetic.PATH
TEXT = synthetic.TORCHTREE_PY
FLATTEN_BRANCH = "    # forkgen: torch-tree-flat-fast-paths (a flat list or tuple of leaves flattens to its items)\n"
MAP_BRANCH = "    # forkgen: torch-tree-flat-fast-paths (func over a flat list, tuple or dict of leaves)\n"


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


def line_of(text: str, start: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(start))


def test_inserts_the_gate_before_map_structure_and_a_branch_on_top_of_each_function() -> None:
    before = with_node_type()
    after = applied(before, PATCH)
    gate = "# forkgen: torch-tree-flat-fast-paths (the gate, checked once at import)\n"
    assert f"\n\n\n{gate}def {GATE}():\n" in after
    assert "def flatten(structure):\n" + FLATTEN_BRANCH in after
    assert (
        f"\n\n\n{FLAG} = {NODE_TYPE_FLAG} and {GATE}()\n\n\n"
        "def map_structure(func, *structures, none_is_leaf=True):\n" + MAP_BRANCH
    ) in after
    # The gate comes after the node-type gate it reads.
    assert after.index(f"{NODE_TYPE_FLAG} = ") < after.index(f"def {GATE}") < after.index("def map_structure(")
    # Nothing else changed: without the inserted pieces, the file is the one before, byte for byte.
    module = cst.parse_module(after)
    _, flatten_branch, map_branch = pieces()
    kept = []
    for statement in module.body:
        code = module.code_for_node(statement)
        if isinstance(statement, cst.FunctionDef) and statement.name.value == GATE:
            continue
        if f"{FLAG} = " in code:
            continue
        if isinstance(statement, cst.FunctionDef) and statement.name.value in ("flatten", "map_structure"):
            block = cst.ensure_type(statement.body, cst.IndentedBlock)
            assert block.body[0].deep_equals(flatten_branch if statement.name.value == "flatten" else map_branch)
            statement = statement.with_changes(body=block.with_changes(body=block.body[1:]))
        kept.append(statement)
    assert module.with_changes(body=kept).code == before


def test_check_reports_both_anchor_lines_then_present_and_a_rerun_is_a_noop() -> None:
    before = with_node_type()
    check = PATCH.check(sources(before))
    assert (check.outcome, check.present) == (Outcome.APPLIED, False)
    assert [a.line for a in check.anchors] == [line_of(before, "def flatten("), line_of(before, "def map_structure(")]
    after = applied(before, PATCH)
    again = PATCH.check(sources(after))
    assert (again.outcome, again.present) == (Outcome.APPLIED, True)
    assert [a.line for a in again.anchors] == [line_of(after, "def flatten("), line_of(after, "def map_structure(")]
    command = AddFlatFastPathsCommand(CodemodContext(filename=TORCHTREE))
    with pytest.raises(SkipFile, match="in already"):
        command.transform_module_impl(cst.parse_module(after))


def test_the_template_pieces() -> None:
    gate, flatten_branch, map_branch = pieces()
    assert isinstance(gate[0], cst.FunctionDef) and gate[0].name.value == GATE
    assert isinstance(flatten_branch, cst.If) and isinstance(map_branch, cst.If)


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


def _drop(text: str, start: str, stop: str) -> str:
    i = text.index(start)
    return text[:i] + text[text.index(stop, i):]


FLAT = with_node_type()
FLATTEN_LINE = line_of(FLAT, "def flatten(")
MAP_LINE = line_of(FLAT, "def map_structure(")


@pytest.mark.parametrize(
    ("source", "anchor", "found", "line"),
    [
        # flatten
        (FLAT.replace("def flatten(structure):", "def flatten(structure, sort=True):"), "def flatten", "another signature", FLATTEN_LINE),
        (FLAT.replace("    leaves, _ = torch_tree.tree_flatten(structure)\n", "    leaves = torch_tree.tree_leaves(structure)\n"),
         "def flatten(structure)", "another statement", FLATTEN_LINE + 3),
        (FLAT.replace("    structure = _dict_to_ordered_dict(structure)\n    leaves", "    leaves"),
         "def flatten(structure)", "another statement", FLATTEN_LINE + 2),
        (FLAT.replace("    return leaves\n", "    return leaves\n    print()\n"), "def flatten(structure)", "4 statements", FLATTEN_LINE + 5),
        # map_structure
        (FLAT.replace("def map_structure(func, *structures, none_is_leaf=True):", "def map_structure(func, *structures, none_is_leaf=False):"),
         "def map_structure", "another signature", MAP_LINE),
        (FLAT.replace("    return torch_tree.tree_map(map_func, *structures)\n", "    return torch_tree.tree_map(func, *structures)\n"),
         "def map_structure(func", "another statement", MAP_LINE + 16),
        (FLAT.replace("    map_func = func\n", "    map_func = functools.partial(func)\n"), "def map_structure(func", "another statement", MAP_LINE + 4),
        (FLAT.replace("    if not none_is_leaf:\n", "    if none_is_leaf is False:\n"), "def map_structure(func", "another statement", MAP_LINE + 5),
        # what flatten's slow path stands for
        (FLAT.replace("is_leaf=lambda x: x is not structure,\n", "is_leaf=None,\n", 1),
         "tree_flatten(structure, ...)", "another statement", 0),
        (FLAT.replace("not in torch_tree.SUPPORTED_NODES", "not in SUPPORTED"), "def _tree_is_leaf", "another body", 0),
        # the node-type gate this patch builds on
        (TEXT, NODE_TYPE_FLAG, "0 assignments", line_of(TEXT, "def map_structure(")),
        (FLAT + f"\n{FLAG} = True\n", f"{GATE} / {FLAG}", "already defined", MAP_LINE),
    ],
)
def test_drift(source: str, anchor: str, found: str, line: int) -> None:
    with pytest.raises(AnchorDrift) as error:
        PATCH.check(sources(source))
    message = str(error.value)
    assert anchor in message and found in message, message
    if line:
        assert f"{TORCHTREE}:{line}" in message, message


def test_half_applied_is_drift() -> None:
    after = applied(FLAT, PATCH)
    with pytest.raises(AnchorDrift, match="one of them only"):
        PATCH.check(sources(_drop(after, MAP_BRANCH, "    if not structures:")))
    module = cst.parse_module(after)
    without_gate = module.with_changes(
        body=[s for s in module.body if not (isinstance(s, cst.FunctionDef) and s.name.value == GATE)]
    ).code
    with pytest.raises(AnchorDrift, match="1 of its 2 statements"):
        PATCH.check(sources(without_gate))


def test_must_not_change_other_functions() -> None:
    after, before = ast.parse(applied(FLAT, PATCH)), ast.parse(FLAT)
    names = ("_tree_is_leaf", "_dict_to_ordered_dict", "traverse", "pack_sequence_as", "is_nested")
    for name in names:
        assert ast.dump(ast_function(after, name)) == ast.dump(ast_function(before, name))


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
