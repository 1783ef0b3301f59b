"""What `torch-tree-one-level-flatten` makes of torch tree modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch. The series' synthetic torchtree_impl.py is `torch-tree-leaf-shortcut`'s (`FILES` there)."""

import textwrap

from codemods.engine import Case, Mutant, piece_text

HEAD = textwrap.dedent(
    """\
    from torch.utils import _pytree as torch_tree


    def _dict_to_ordered_dict(structure):
        def func(x):
            if type(x) is dict:
                return {k: x[k] for k in sorted(x)}
            return None

        def traverse_children():
    """
)
SHORTCUT = "        if _tree_is_leaf(structure):\n            return structure\n"
FLATTEN = textwrap.indent(textwrap.dedent(
    """\
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
    """
), " " * 8)
TAIL = textwrap.dedent(
    """\

        ret = func(structure)
        if ret is None:
            return traverse_children()
        return ret
    """
)
PIECE = piece_text(__file__, "direct_children", " " * 8)
BEFORE = HEAD + FLATTEN + TAIL
AFTER = HEAD + PIECE + FLATTEN + TAIL
#: With torch-tree-leaf-shortcut's piece first in traverse_children (the series' order).
WITH_SHORTCUT = HEAD + SHORTCUT + FLATTEN + TAIL
WITH_SHORTCUT_AFTER = HEAD + SHORTCUT + PIECE + FLATTEN + TAIL
#: keras master after keras#23111 (in no release): `id()` in the lambda.
MASTER = BEFORE.replace("is_leaf=lambda x: x is not structure,", "is_leaf=lambda x: id(x) != structure_id,")
MASTER_AFTER = AFTER.replace("is_leaf=lambda x: x is not structure,", "is_leaf=lambda x: id(x) != structure_id,")
#: keras-nightly's shape (keras#23201 as merged).
NIGHTLY = textwrap.dedent(
    """\
    from torch.utils import _pytree as torch_tree


    def _dict_to_ordered_dict(structure):
        return _dict_to_ordered_dict_with_changed(structure)[0]


    def _dict_to_ordered_dict_with_changed(structure):
        node_def = torch_tree.SUPPORTED_NODES.get(torch_tree._get_node_type(structure))
        if node_def is None:
            return structure, False
        children, context = node_def.flatten_fn(structure)
        return node_def.unflatten_fn(children, context), True
    """
)

CASES = (
    Case("the direct one-level flatten goes before upstream's", BEFORE, AFTER,
         anchors=(("children, treedef = torch_tree.tree_flatten(structure, ...)", 11),)),
    Case("after the leaf short-cut", WITH_SHORTCUT, WITH_SHORTCUT_AFTER),
    Case("master's flatten, with id()", MASTER, MASTER_AFTER),
    Case("keras-nightly's shape is upstream's", NIGHTLY, upstream=True),
    Case("a release that rebuilds otherwise",
         BEFORE.replace("[_dict_to_ordered_dict(c) for c in children], treedef", "list(children), treedef"),
         drift="the rebuild with tree_unflatten"),
    Case("another is_leaf", BEFORE.replace("is_leaf=lambda x: x is not structure,", "is_leaf=None,"),
         drift="tree_flatten"),
    Case("no traverse_children", BEFORE.replace("def traverse_children():", "def visit_children():")
         .replace("return traverse_children()", "return visit_children()"), drift="traverse_children"),
)

MUTANTS = (
    Mutant("the children rebuilt without ordering their dicts",
           "[_dict_to_ordered_dict(node_child) for node_child in node_children]", "list(node_children)"),
    Mutant("the node's context not passed on (an OrderedDict loses its keys)",
           "for node_child in node_children], node_context)", "for node_child in node_children], None)"),
)
#: Not a mutant: the piece taken for a list holding itself too. Upstream's flatten recurses into
#: it and the piece's recursion does as well: both end in a RecursionError (the piece leaves
#: such a node to upstream's code so that the error is upstream's own).
