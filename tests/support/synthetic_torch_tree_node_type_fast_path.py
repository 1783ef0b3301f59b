"""The synthetic file `torch-tree-node-type-fast-path` anchors on.

`FILES` holds the synthetic `keras/src/tree/torchtree_impl.py` of `torch-tree-leaf-shortcut`
(whose `_tree_is_leaf` is shaped like Keras 3.12.0-3.15.1's) with `is_nested`, shaped like
Keras's, added at the end: a superset, so the series' synthetic tree (where this module comes
after that one) has the anchors of both patches in one file. It runs against that module's
pure-Python `torch_tree`, whose `_get_node_type` is not torch's function: there the patch's
import-time gate is off.
"""

from __future__ import annotations

from tests.support import synthetic_torch_tree_leaf_shortcut as leaf_shortcut

IS_NESTED = '''

def is_nested(structure):
    return not _tree_is_leaf(structure)
'''

PATH = leaf_shortcut.PATH
TORCHTREE_PY = leaf_shortcut.TORCHTREE_PY + IS_NESTED

#: Only the module: the package markers come from the leaf short-cut's FILES (and
#: `keras/src/tree/__init__.py` from torch-trainer-batch-size's, which anchors on it).
FILES: dict[str, str] = {PATH: TORCHTREE_PY}
