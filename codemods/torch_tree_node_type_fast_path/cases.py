"""What `torch-tree-node-type-fast-path` makes of torch tree modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant, piece_text

HELPER = textwrap.dedent(
    """\
    from torch.utils import _pytree as torch_tree


    def _tree_is_leaf(tree, is_leaf=None):
        if is_leaf is not None and is_leaf(tree):
            return True
        return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES


    """
)
IS_NESTED = "def is_nested(structure):\n    return not _tree_is_leaf(structure)\n"
TAIL = "\n\ndef traverse(func, structure):\n    return func(structure)\n"
BEFORE = HELPER + IS_NESTED + TAIL
#: What goes right before `def is_nested` (the gate, at module level).
GATE = piece_text(__file__, "module_level").rstrip("\n")
BRANCH = piece_text(__file__, "is_nested_fast_path", "    ")
AFTER = HELPER + GATE + "\n\n\ndef is_nested(structure):\n" + BRANCH + IS_NESTED.split("\n", 1)[1] + TAIL
ANCHOR = "def is_nested(structure): return not _tree_is_leaf(structure)"
FOUND_0 = f"expected exactly one `{ANCHOR}` at module level; found 0"

CASES = (
    Case("the gate before is_nested, the branch on top of it", BEFORE, AFTER,
         detail="is_nested: type(x) in SUPPORTED_NODES for non-tuple types", anchors=((ANCHOR, 10),)),
    Case("another statement", HELPER + "def is_nested(structure):\n    return _tree_is_leaf(structure) is False\n",
         drift=FOUND_0),
    Case("another signature", HELPER + "def is_nested(x):\n    return not _tree_is_leaf(x)\n",
         drift=":10: anchor 'structure': expected bound where is_nested_fast_path goes (in is_nested or at module level); "
         "found not bound"),
    Case("two statements", HELPER + IS_NESTED.replace("    return", "    print()\n    return"), drift=FOUND_0),
    Case("another _tree_is_leaf", BEFORE.replace("not in torch_tree.SUPPORTED_NODES", "not in SUPPORTED"),
         drift="anchor 'def _tree_is_leaf': expected exactly one `def _tree_is_leaf` at module level; found 0"),
    Case("the flag already defined", BEFORE + "\n_FORKGEN_NODE_TYPE_IS_TYPE = True\n",
         drift=":17: anchor '_FORKGEN_NODE_TYPE_IS_TYPE': expected names free for module_level (forkgen's helper); "
         "found already bound"),
    Case("no is_nested", HELPER + "def other(structure):\n    return 1\n",
         drift=":1: anchor 'is_nested': expected exactly one def is_nested; found 0"),
    Case("a marked branch without its gate", HELPER + "def is_nested(structure):\n" + BRANCH + IS_NESTED.split("\n", 1)[1],
         drift=":10: anchor 'torch-tree-node-type-fast-path': expected all pieces present or none; found is_nested: "
         "first statement forkgen's, def is_nested(___): ___ missing"),
)

MUTANTS = (
    Mutant("the node type read from __class__ (a mock's or proxy's claim)", "        node_type = type(structure)\n",
           "        node_type = structure.__class__\n"),
    Mutant("namedtuples and tuple subclasses take the fast path too", "        if not issubclass(node_type, tuple):\n",
           "        if True:\n"),
)


# -- the synthetic module: a whole torchtree_impl.py, for tests/unit/test_torch_tree_node_type_fast_path.py
#: A minimal `keras/src/tree/torchtree_impl.py` shaped like Keras 3.12.0-3.15.1's (only the
#: anchored statements follow Keras): the anchors of `torch-tree-leaf-shortcut` too (the same
#: module as that patch's cases have, a copy: the patches do not require each other), and
#: `is_nested` at the end, so the series' synthetic tree (where this package comes after that one)
#: has the anchors of both patches in one file. It runs against the stand-in pytree of
#: tests/support/torch_pytree.py, whose `_get_node_type` is not torch's function: there the
#: patch's import-time gate is off.
TORCHTREE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/tree/torchtree_impl.py (the dict-ordering part)."""

    from collections import defaultdict

    from tests.support.torch_pytree import torch_tree


    def _tree_is_leaf(tree, is_leaf=None):
        if is_leaf is not None and is_leaf(tree):
            return True
        return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES


    def _sorted_copy(x):
        keys = sorted(x.keys())
        if type(x) is dict:
            return {key: x[key] for key in keys}
        if type(x) is defaultdict:
            return defaultdict(x.default_factory, {key: x[key] for key in keys})
        return None


    def _dict_to_ordered_dict(structure):
        # Only a dict or defaultdict at the top is sorted; anything else is rebuilt one level
        # down, with each child ordered in turn.
        def traverse_children():
            children, treedef = torch_tree.tree_flatten(
                structure,
                is_leaf=lambda x: x is not structure,
            )
            if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                return structure
            else:
                return torch_tree.tree_unflatten(
                    [_dict_to_ordered_dict(child) for child in children],
                    treedef,
                )

        if type(structure) in (dict, defaultdict):
            return _sorted_copy(structure)
        return traverse_children()


    def traverse(func, structure, top_down=True):
        structure = _dict_to_ordered_dict(structure)

        def visit_children():
            if _tree_is_leaf(structure):
                return structure
            items, treedef = torch_tree.tree_flatten(
                structure, is_leaf=lambda x: x is not structure
            )
            return torch_tree.tree_unflatten(
                [traverse(func, item, top_down) for item in items], treedef
            )

        if top_down:
            ret = func(structure)
            return visit_children() if ret is None else ret
        rebuilt = visit_children()
        ret = func(rebuilt)
        return rebuilt if ret is None else ret


    def flatten(structure):
        leaves, _ = torch_tree.tree_flatten(_dict_to_ordered_dict(structure))
        return leaves


    def pack_sequence_as(structure, flat_sequence):
        _, treespec = torch_tree.tree_flatten(_dict_to_ordered_dict(structure))
        return torch_tree.tree_unflatten(flat_sequence, treespec)
    '''
) + "\n\n" + IS_NESTED

PATH = "keras/src/tree/torchtree_impl.py"
#: Only the module: the package markers come from the leaf short-cut's FILES (and
#: `keras/src/tree/__init__.py` from torch-trainer-batch-size's, which anchors on it).
FILES: dict[str, str] = {PATH: TORCHTREE_PY}
