"""What `torch-tree-flat-fast-paths` makes of torch tree modules shaped like Keras's, how the
patched functions behave beside upstream's and with the two other torch tree patches (both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch."""

from __future__ import annotations

import ast
import itertools
import textwrap
import types
from collections import OrderedDict, defaultdict, namedtuple
from functools import cache
from typing import Any

from codemods.engine import (
    Case,
    Mutant,
    Outcome,
    Patch,
    Sources,
    piece_text,
    replace_once,
    run_module,
)
from codemods.torch_tree_flat_fast_paths import FLAG, PATCH
from codemods.torch_tree_node_type_fast_path import FLAG as NODE_TYPE_FLAG
from codemods.torch_tree_node_type_fast_path import PATCH as NODE_TYPE
from codemods.torch_tree_node_type_fast_path import cases as node_type

FLATTEN = """\
def flatten(structure):
    # Dicts are sorted first, for the order the other tree implementations give.
    structure = _dict_to_ordered_dict(structure)
    leaves, _ = torch_tree.tree_flatten(structure)
    return leaves
"""
MAP_STRUCTURE = """\
def map_structure(func, *structures, none_is_leaf=True):
    if not structures:
        raise ValueError("Must provide at least one structure")

    map_func = func
    if not none_is_leaf:

        def skip_none(*args):
            if args[0] is None:
                if any(arg is not None for arg in args):
                    raise ValueError(f"None against a value: {args}.")
                return None
            return func(*args)

        map_func = skip_none

    return torch_tree.tree_map(map_func, *structures)
"""
NODE_TYPE_GATE = "_FORKGEN_NODE_TYPE_IS_TYPE = False\n"
#: `_dict_to_ordered_dict` as torch-tree-leaf-shortcut's cases have it (a copy: this patch does not
#: require that one).
DICT_TO_ORDERED_DICT = textwrap.dedent(
    """\
    def _dict_to_ordered_dict(structure):
        def func(x):
            if type(x) is dict:
                return {k: x[k] for k in sorted(x)}
            return None

        def traverse_children():
            children, treedef = torch_tree.tree_flatten(
                structure,
                is_leaf=lambda x: x is not structure,
            )
            if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                return structure
            else:
                return torch_tree.tree_unflatten(
                    [_dict_to_ordered_dict(c) for c in children], treedef
                )

        ret = func(structure)
        if ret is None:
            return traverse_children()
        return ret
    """
)
#: The import and `_tree_is_leaf` (torch-tree-node-type-fast-path's cases), `_dict_to_ordered_dict`,
#: the node-type gate's flag (that patch comes first), `flatten`, `map_structure`.
BEFORE = (f"{node_type.HELPER}{DICT_TO_ORDERED_DICT}\n\n{NODE_TYPE_GATE}\n\n"
          f"{FLATTEN}\n\n{MAP_STRUCTURE}")
#: What goes first in `flatten`, what goes first in `map_structure`, and what goes right before
#: `def map_structure` (the gate).
FLATTEN_BRANCH = piece_text(__file__, "flatten_fast_path", "    ")
MAP_BRANCH = piece_text(__file__, "map_structure_fast_path", "    ")
GATE = piece_text(__file__, "module_level")
FLATTEN_AT, MAP_AT = "def flatten(structure):\n", "def map_structure(func, *structures, none_is_leaf=True):\n"
AFTER = BEFORE.replace(FLATTEN_AT, FLATTEN_AT + FLATTEN_BRANCH).replace(MAP_AT, GATE + "\n\n" + MAP_AT + MAP_BRANCH)
FLATTEN_ANCHOR = "def flatten(structure): _dict_to_ordered_dict, then torch_tree.tree_flatten"
MAP_ANCHOR = "def map_structure(func, *structures, none_is_leaf=True): ... torch_tree.tree_map(map_func, *structures)"
NO_FLATTEN = f":1: anchor '{FLATTEN_ANCHOR}': expected exactly one `{FLATTEN_ANCHOR}` at module level; found 0"
NO_MAP = f":1: anchor '{MAP_ANCHOR}': expected exactly one `{MAP_ANCHOR}` at module level; found 0"
FREE = "anchor '_FORKGEN_FLAT_FAST_PATHS': expected names free for module_level (forkgen's helper); found already bound"

CASES = (
    Case("a branch on top of each function, the gate before map_structure", BEFORE, AFTER,
         detail="flatten/map_structure: flat containers of leaves without tree walks", anchors=((FLATTEN_ANCHOR, 37), (MAP_ANCHOR, 44))),
    Case("flatten's signature", BEFORE.replace("def flatten(structure):", "def flatten(structure, sort=True):"),
         drift=NO_FLATTEN),
    Case("flatten's flatten", BEFORE.replace("    leaves, _ = torch_tree.tree_flatten(structure)\n",
                                             "    leaves = torch_tree.tree_leaves(structure)\n"), drift=NO_FLATTEN),
    Case("flatten without the dict sort", BEFORE.replace("    structure = _dict_to_ordered_dict(structure)\n", ""),
         drift=NO_FLATTEN),
    Case("flatten's fourth statement", BEFORE.replace("    return leaves\n", "    return leaves\n    print()\n"),
         drift=NO_FLATTEN),
    Case("map_structure's signature", BEFORE.replace("none_is_leaf=True):", "none_is_leaf=False):"), drift=NO_MAP),
    Case("map_structure's tree_map", BEFORE.replace("tree_map(map_func, *structures)", "tree_map(func, *structures)"),
         drift=NO_MAP),
    Case("map_structure's map_func", BEFORE.replace("    map_func = func\n", "    map_func = functools.partial(func)\n"),
         drift=NO_MAP),
    Case("map_structure's none test", BEFORE.replace("    if not none_is_leaf:\n", "    if none_is_leaf is False:\n"),
         drift=NO_MAP),
    Case("a _dict_to_ordered_dict the leaf short-cut does not know",
         BEFORE.replace("is_leaf=lambda x: x is not structure,\n", "is_leaf=None,\n", 1),
         drift="anchor 'children, treedef = torch_tree.tree_flatten(structure, ...)': expected exactly one"),
    Case("another _tree_is_leaf", BEFORE.replace("not in torch_tree.SUPPORTED_NODES", "not in SUPPORTED"),
         drift=":1: anchor 'def _tree_is_leaf': expected exactly one `def _tree_is_leaf` at module level; found 0"),
    Case("no node-type gate", BEFORE.replace(NODE_TYPE_GATE, ""),
         drift="anchor '_FORKGEN_NODE_TYPE_IS_TYPE': expected bound where module_level goes"),
    Case("the node-type gate below map_structure", BEFORE.replace(NODE_TYPE_GATE, "") + "\n\n" + NODE_TYPE_GATE,
         drift="anchor '_FORKGEN_NODE_TYPE_IS_TYPE': expected torch-tree-node-type-fast-path's gate assigned once "
         "above `def map_structure` (that patch first); found one below it"),
    Case("the flag already defined", BEFORE + "\n_FORKGEN_FLAT_FAST_PATHS = True\n", drift=FREE),
    Case("half applied", AFTER.replace(MAP_BRANCH, ""), drift="anchor 'torch-tree-flat-fast-paths': expected all pieces "
         "present or none; found flatten: first statement, def map_structure(___): ___ forkgen's, map_structure: "
         "first statement missing"),
    Case("the flag without its gate function", AFTER.replace(GATE.split("\n\n\n")[0] + "\n\n\n", ""), drift=FREE),
)

MUTANTS = (
    Mutant("flatten takes namedtuples and tuple subclasses for leaves",
           "            if issubclass(item_type, tuple) or item_type in nodes:\n", "            if item_type in nodes:\n"),
    Mutant("map_structure sorts a dict's keys (torch keeps insertion order)",
           "            keys = list(structure.keys()) if kind is dict else None\n",
           "            keys = sorted(structure.keys()) if kind is dict else None\n"),
)


# -- the synthetic module: a whole torchtree_impl.py, for the behaviours below -----------------
#: torch-tree-node-type-fast-path's synthetic `keras/src/tree/torchtree_impl.py` (itself with
#: torch-tree-leaf-shortcut's anchors) with `flatten` written in Keras 3.12.0-3.15.1's three
#: statements, and `map_structure` and `map_structure_up_to` shaped like Keras's added at the end:
#: a superset again. The series' synthetic tree takes its torchtree_impl.py from here (the last
#: package whose `FILES` holds one), so it carries the anchors of every patch on that file. It
#: imports torch's pytree as Keras does; the behaviours run it (`run_module`) against the
#: stand-in pytree they are handed (the `torch_pytree` fixture, tests/support/torch_pytree.py),
#: whose functions are not torch's: there the patch's import-time gate is off.
SHORT_FLATTEN = '''def flatten(structure):
    leaves, _ = torch_tree.tree_flatten(_dict_to_ordered_dict(structure))
    return leaves
'''
MAP_STRUCTURE_UP_TO = '''

def map_structure_up_to(shallow_structure, func, *structures):
    if not structures:
        raise ValueError("Must provide at least one structure")

    # The shallow structure's leaves must be leaves.
    def func_with_check_without_shallow_structure(shallow, *args):
        if not _tree_is_leaf(shallow):
            raise ValueError("Structures don't have the same nested structure.")
        return func(*args)

    return torch_tree.tree_map(
        func_with_check_without_shallow_structure,
        shallow_structure,
        *structures,
    )
'''
PATH = node_type.PATH
TORCHTREE_PY = replace_once(node_type.TORCHTREE_PY, SHORT_FLATTEN, FLATTEN) + "\n\n" + MAP_STRUCTURE + MAP_STRUCTURE_UP_TO
#: Only the module: the package markers come from the leaf short-cut's FILES.
FILES: dict[str, str] = {PATH: TORCHTREE_PY}


# -- behaviours: with the two other torch tree patches in every order, functions it must not ------
# -- change, and the patched functions executed beside upstream's

TORCHTREE = PATH
TEXT = TORCHTREE_PY
GATE_FUNCTION = "_forkgen_flat_nodes_are_torchs"
#: The leaf short-cut, read through the series (this patch `tolerates` it; it does not require it).
LEAF_SHORTCUT_NAME = "torch-tree-leaf-shortcut"


def sources(text: str) -> Sources:
    return Sources({TORCHTREE: text}.get)


def applied(text: str, *patches: Patch) -> str:
    src = sources(text)
    for patch in patches:
        check = patch.check(src)
        assert check.outcome is Outcome.APPLIED and not check.present
        patch.apply(src)
    return src.rendered()[TORCHTREE]


@cache
def with_node_type(text: str = TEXT) -> str:
    """The tree `torch-tree-flat-fast-paths` builds on (its `requires`)."""
    return applied(text, NODE_TYPE)


def all_three_torch_tree_patches_compose_in_every_order_the_series_allows() -> None:
    leaf_shortcut = PATCH.tolerated(LEAF_SHORTCUT_NAME)
    results = set()
    # The node-type patch must come before this one (`requires`); the leaf short-cut anywhere.
    for order in itertools.permutations((leaf_shortcut, NODE_TYPE, PATCH)):
        if order.index(NODE_TYPE) > order.index(PATCH):
            continue
        text = applied(TEXT, *order)
        for patch in (leaf_shortcut, NODE_TYPE, PATCH):
            assert patch.check(sources(text)).present, (patch.name, [p.name for p in order])
        results.add(text)
    assert len(results) == 1
    text = results.pop()
    for name in ("torch-tree-leaf-shortcut", "torch-tree-node-type-fast-path", "torch-tree-flat-fast-paths"):
        assert f"# forkgen: {name}" in text


def function(tree: ast.Module, name: str) -> ast.FunctionDef:
    (found,) = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name]
    return found


def must_not_change_other_functions() -> None:
    flat = with_node_type()
    after, before = ast.parse(applied(flat, PATCH)), ast.parse(flat)
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


def _stand_ins(torch_pytree: types.ModuleType) -> dict[str, object]:
    """`from torch.utils import _pytree as torch_tree` gets the stand-in pytree."""
    return {"torch.utils": types.SimpleNamespace(_pytree=torch_pytree.torch_tree)}


def _modules(torch_pytree: types.ModuleType, gate: bool) -> tuple[Any, Any]:
    upstream = run_module(TEXT, "flat_upstream_tree", _stand_ins(torch_pytree))
    patched = run_module(
        replace_once(applied(with_node_type(), PATCH), f"{FLAG} = {NODE_TYPE_FLAG} and {GATE_FUNCTION}()", f"{FLAG} = {gate}"),
        "flat_patched_tree", _stand_ins(torch_pytree))
    return upstream, patched


def patched_functions_answer_like_upstream_on_the_synthetic_pytree(torch_pytree: types.ModuleType) -> None:
    torch_tree = torch_pytree.torch_tree
    for gate in (False, True):
        upstream, patched = _modules(torch_pytree, gate)
        for structure in STRUCTURES:
            expected, got = upstream.flatten(structure), patched.flatten(structure)
            assert got == expected and [id(x) for x in got] == [id(x) for x in expected], (gate, structure)
            calls: dict[str, list[Any]] = {"up": [], "fork": []}
            results = []
            for key, module in (("up", upstream), ("fork", patched)):
                seen = calls[key]
                results.append(module.map_structure(lambda x, seen=seen: seen.append(x) or (x, 1), structure))
            assert results[0] == results[1] and type(results[0]) is type(results[1]), (gate, structure)
            assert calls["up"] == calls["fork"]
        # The fast paths are taken (no flatten at all) only with the gate on.
        torch_tree.flattens = 0
        patched.flatten((4, 16))
        patched.map_structure(str, {"b": 1, "a": 2})
        assert (torch_tree.flattens == 0) is gate


def the_synthetic_tree_file_takes_the_patch_after_the_node_type_patch(torch_pytree: types.ModuleType) -> None:
    assert FILES[PATH] == TEXT
    src = Sources(FILES.get)
    NODE_TYPE.apply(src)
    assert PATCH.check(src).outcome is Outcome.APPLIED
    module = run_module(applied(with_node_type(), PATCH), "flat_synthetic_patched_tree", _stand_ins(torch_pytree))
    assert getattr(module, FLAG) is False  # the stand-in pytree is no torch


BEHAVIOURS = (
    all_three_torch_tree_patches_compose_in_every_order_the_series_allows,
    must_not_change_other_functions,
    patched_functions_answer_like_upstream_on_the_synthetic_pytree,
    the_synthetic_tree_file_takes_the_patch_after_the_node_type_patch,
)
