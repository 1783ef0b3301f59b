"""What `torch-tree-leaf-shortcut` puts at the top of `traverse_children` in the torch tree's
`_dict_to_ordered_dict`.

Parsed by the codemod, never imported. The piece is the body of `leaf_shortcut`: `structure`
is the argument of the enclosing `_dict_to_ordered_dict` and `_tree_is_leaf` the module's own
helper (the codemod checks both). The comment is the marker that tells the piece is forkgen's.
"""
# ruff: noqa


def leaf_shortcut(structure):
    # forkgen: torch-tree-leaf-shortcut (keras#23201: a leaf would flatten to itself alone)
    if _tree_is_leaf(structure):
        return structure
