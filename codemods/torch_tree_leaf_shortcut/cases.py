"""What `torch-tree-leaf-shortcut` makes of torch tree modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant, piece_text

ANCHOR = "children, treedef = torch_tree.tree_flatten(structure, ...)"
SHORTCUT = piece_text(__file__, "leaf_shortcut", " " * 8)
MARK = SHORTCUT.splitlines(True)[0]  # the piece's first line: forkgen's marker
HELPER = textwrap.dedent(
    """\
    def _tree_is_leaf(tree, is_leaf=None):
        if is_leaf is not None and is_leaf(tree):
            return True
        return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES


    """
)
BEFORE = HELPER + textwrap.dedent(
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
FIRST = "        children, treedef = torch_tree.tree_flatten(\n"
AFTER = BEFORE.replace(FIRST, SHORTCUT + FIRST)
#: master after keras#23111 (no release): `id()` in the lambda, after `structure_id = id(structure)`.
MASTER_BEFORE = BEFORE.replace(FIRST, "        structure_id = id(structure)\n" + FIRST).replace(
    "is_leaf=lambda x: x is not structure,", "is_leaf=lambda x: id(x) != structure_id,"
)
MASTER_AFTER = MASTER_BEFORE.replace("        structure_id = id(structure)\n", SHORTCUT + "        structure_id = id(structure)\n")
#: keras-nightly's shape (#23201 as merged): a helper returns a leaf with `changed=False`.
NIGHTLY = HELPER + textwrap.dedent(
    """\
    def _dict_to_ordered_dict(structure):
        return _dict_to_ordered_dict_with_changed(structure)[0]


    def _dict_to_ordered_dict_with_changed(structure):
        if type(structure) is dict:
            return {k: structure[k] for k in sorted(structure)}, True
        node_def = torch_tree.SUPPORTED_NODES.get(torch_tree._get_node_type(structure))
        if node_def is None:
            return structure, False
        return structure, False
    """
)
#: The form the PR first proposed: the short-cut heads _dict_to_ordered_dict itself.
FIRST_FORM = BEFORE.replace(
    "def _dict_to_ordered_dict(structure):\n",
    "def _dict_to_ordered_dict(structure):\n    if _tree_is_leaf(structure):\n        return structure\n\n",
)
#: The same nested shape in another function (3.15.1's `traverse` has one) stays as it is.
OTHER = BEFORE.replace("def _dict_to_ordered_dict(structure):", "def traverse(structure):", 1)
_TAIL = BEFORE.split("\n\n\n", 1)[1]
LAMBDA = "is_leaf=lambda x: x is not structure,"
FLATTEN_DRIFT = "found 0"  # the flatten, or traverse_children's shape, not found

CASES = (
    Case("inserts the short-cut above the flatten", BEFORE, AFTER,
         detail="return a leaf before traverse_children's tree_flatten", anchors=((ANCHOR, 14),)),
    Case("master's shape, with id()", MASTER_BEFORE, MASTER_AFTER, anchors=((ANCHOR, 15),)),
    Case("traverse and other functions are not touched", OTHER + "\n\n" + _TAIL,
         OTHER + "\n\n" + AFTER.split("\n\n\n", 1)[1]),
    Case("keras-nightly's shape", NIGHTLY, upstream=True,
         detail="_dict_to_ordered_dict_with_changed returns a leaf as it is (keras-nightly's shape)",
         anchors=(("def _dict_to_ordered_dict", 7),)),
    Case("the PR's first form", FIRST_FORM, upstream=True,
         detail="_dict_to_ordered_dict returns a leaf first (keras#23201's first form)"),
    Case("no function", BEFORE.replace("def _dict_to_ordered_dict(", "def _dict_to_sorted(", 1),
         drift=":1: anchor '_dict_to_ordered_dict.traverse_children': expected exactly one def _dict_to_ordered_dict; found 0"),
    Case("another signature", BEFORE.replace("_dict_to_ordered_dict(structure):", "_dict_to_ordered_dict(structure, top=True):", 1),
         drift="anchor 'def _dict_to_ordered_dict(structure)': expected exactly one `def _dict_to_ordered_dict(structure)` "
         "at module level; found 0"),
    Case("no traverse_children", BEFORE.replace("    def traverse_children():", "    def visit_children():"),
         drift=":7: anchor '_dict_to_ordered_dict.traverse_children': expected exactly one def traverse_children; found 0"),
    Case("two traverse_children", BEFORE.replace(
        "    ret = func(structure)\n", "    def traverse_children():\n        pass\n\n    ret = func(structure)\n"),
         drift=":7: anchor '_dict_to_ordered_dict.traverse_children': expected exactly one def traverse_children; found 2"),
    Case("another lambda", BEFORE.replace(LAMBDA, "is_leaf=lambda x: x is structure,"),
         drift=f":13: anchor '{ANCHOR}': expected exactly one `{ANCHOR}` in _dict_to_ordered_dict.traverse_children; found 0"),
    Case("the id lambda alone", BEFORE.replace(LAMBDA, "is_leaf=lambda x: id(x) != structure_id,"),
         drift="anchor 'traverse_children: the flatten (lambda x: x is not structure) then `if treedef.num_nodes == 1 and "
         "treedef.num_leaves == 1: return structure`': expected exactly one"),
    Case("a statement before the flatten", BEFORE.replace(FIRST, "        structure = list(structure)\n" + FIRST),
         drift="anchor 'traverse_children: the flatten"),
    Case("another single-leaf test", BEFORE.replace("treedef.num_leaves == 1", "treedef.num_leaves == 0"),
         drift="anchor 'traverse_children: the flatten"),
    Case("an unmarked short-cut", BEFORE.replace(FIRST, SHORTCUT.replace(MARK, "") + FIRST),
         drift=":14: anchor '_dict_to_ordered_dict.traverse_children: first statement': expected to edit, or edited by "
         "forkgen; found an edited form without forkgen's marker"),
    Case("another _tree_is_leaf", BEFORE.replace("not in torch_tree.SUPPORTED_NODES", "in torch_tree.LEAF_TYPES"),
         drift=":1: anchor 'def _tree_is_leaf': expected exactly one `def _tree_is_leaf` at module level; found 0"),
    Case("no _tree_is_leaf", BEFORE.replace("def _tree_is_leaf(", "def _is_leaf(", 1),
         drift="anchor '_tree_is_leaf': expected bound where leaf_shortcut goes"),
)

MUTANTS = (
    Mutant("tuples are handed back unrebuilt, as nightly's rewrite does", "    if _tree_is_leaf(structure):\n",
           "    if _tree_is_leaf(structure) or type(structure) is tuple:\n"),
    Mutant("dict-like nodes (OrderedDict, TrackedDict) count as leaves", "    if _tree_is_leaf(structure):\n",
           "    if _tree_is_leaf(structure, is_leaf=lambda x: isinstance(x, dict)):\n"),
)


# -- the synthetic module: a whole torchtree_impl.py, for tests/unit/test_torch_tree_leaf_shortcut.py
#: A minimal `keras/src/tree/torchtree_impl.py` shaped like Keras 3.12.0-3.15.1's: `_tree_is_leaf`,
#: `_dict_to_ordered_dict` (a top-level dict sort, else a nested `traverse_children` that flattens
#: one level and returns a single-leaf structure as it is), `traverse`, `flatten` and
#: `pack_sequence_as` (written for these tests; only the anchored statements follow Keras). It
#: runs against the stand-in pytree of tests/support/torch_pytree.py, which counts its flattens, so
#: the upstream and patched modules can be executed side by side offline.
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
)

PATH = "keras/src/tree/torchtree_impl.py"

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too. The
#: synthetic files of the series' whole synthetic tree (tests/support/synthetic.py).
FILES: dict[str, str] = {
    "keras/src/tree/__init__.py": "",
    PATH: TORCHTREE_PY,
}
