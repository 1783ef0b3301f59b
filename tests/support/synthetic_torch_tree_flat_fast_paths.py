"""The synthetic file `torch-tree-flat-fast-paths` anchors on.

`FILES` holds the synthetic `keras/src/tree/torchtree_impl.py` of
`torch-tree-node-type-fast-path` (itself a superset of `torch-tree-leaf-shortcut`'s) with
`flatten` written in Keras 3.12.0-3.15.1's three statements and `map_structure` shaped like
Keras's added at the end: a superset again, so the series' synthetic tree (where this module
comes last of the three) has the anchors of all three patches in one file. It runs against the
leaf short-cut module's pure-Python `torch_tree`, whose functions are not torch's: there the
patch's import-time gate is off.
"""

from __future__ import annotations

from tests.support import synthetic_torch_tree_node_type_fast_path as node_type

SHORT_FLATTEN = '''def flatten(structure):
    leaves, _ = torch_tree.tree_flatten(_dict_to_ordered_dict(structure))
    return leaves
'''

FLATTEN = '''def flatten(structure):
    # Dicts are sorted first, for the order the other tree implementations give.
    structure = _dict_to_ordered_dict(structure)
    leaves, _ = torch_tree.tree_flatten(structure)
    return leaves
'''

MAP_STRUCTURE = '''

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
'''

assert node_type.TORCHTREE_PY.count(SHORT_FLATTEN) == 1
PATH = node_type.PATH
TORCHTREE_PY = node_type.TORCHTREE_PY.replace(SHORT_FLATTEN, FLATTEN) + MAP_STRUCTURE

#: Only the module: the package markers come from the leaf short-cut's FILES.
FILES: dict[str, str] = {PATH: TORCHTREE_PY}
