"""What `torch-tree-flat-fast-paths` makes of torch tree modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant, piece_text, replace_once
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


# -- the synthetic module: a whole torchtree_impl.py, for tests/unit/test_torch_tree_flat_fast_paths.py
#: torch-tree-node-type-fast-path's synthetic `keras/src/tree/torchtree_impl.py` (itself with
#: torch-tree-leaf-shortcut's anchors) with `flatten` written in Keras 3.12.0-3.15.1's three
#: statements, and `map_structure` and `map_structure_up_to` shaped like Keras's added at the end:
#: a superset again. The series' synthetic tree takes its torchtree_impl.py from here (the last
#: package whose `FILES` holds one), so it carries the anchors of every patch on that file. It runs
#: against the stand-in pytree of tests/support/torch_pytree.py, whose functions are not torch's:
#: there the patch's import-time gate is off.
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
