"""Patch `torch-tree-one-level-flatten` (ours; keras-nightly reworked the same function for
compile, keras-team/keras#23201 and #23648, with a behaviour change this patch does not carry):
the torch tree's `_dict_to_ordered_dict` takes a node's children from the node's own
`flatten_fn` and rebuilds it with its `unflatten_fn`, instead of a `tree_flatten` whose `is_leaf`
compares every child with the node (`lambda x: x is not structure`).

Upstream (3.12.0-3.15.1): for a structure that is not a dict or defaultdict, `traverse_children`
flattens one level, `torch_tree.tree_flatten(structure, is_leaf=lambda x: x is not structure)`,
and rebuilds the node from its children each passed through `_dict_to_ordered_dict`,
`torch_tree.tree_unflatten([...], treedef)`. Under `torch.compile` dynamo cannot trace the
lambda's `is not` between two tuples: keras-hub 0.32's `GPT2Backbone` compiles into 7 graphs
with 6 breaks there, on upstream and on the fork, and `fullgraph=True` fails.

The patch puts before the flatten: `node_def = torch_tree.SUPPORTED_NODES.get(
torch_tree._get_node_type(structure))`; for a registered node, `node_children, node_context =
node_def.flatten_fn(structure)` and, when the structure is a tuple or none of its children is
the structure itself, `return node_def.unflatten_fn([_dict_to_ordered_dict(c) for c in children],
context)`. Otherwise upstream's flatten runs as it is.

Why that is upstream's result. `tree_flatten(tree, is_leaf)` asks `is_leaf(tree)` (False for the
root), then `_get_node_type(tree)`: not in `SUPPORTED_NODES`, the root is a leaf (the leaf
short-cut of `torch-tree-leaf-shortcut` returns it before, and upstream's single-leaf test would
return it: the piece leaves that case to upstream's code); in it, the node's `flatten_fn(tree)`
gives `children, context`, and each child is a leaf because `is_leaf(child)` holds when the
child is not the root. So the spec is the root's type and context over one leaf per child, and
`tree_unflatten(leaves, spec)` calls the same node's `unflatten_fn(leaves, context)`; the leaves
are `_dict_to_ordered_dict(c)` for the same children in the same order. The piece calls exactly
those: `flatten_fn` once, `_dict_to_ordered_dict` per child, `unflatten_fn` once. A child that
is the root itself (a list holding itself) is flattened further by upstream: the piece then
leaves the node to upstream's code. A tuple cannot hold itself, so for a tuple the piece does
not compare (that comparison is the one dynamo cannot trace).

Applies from 3.12.0 (the first release with `torchtree_impl.py`) through 3.15.1; keras-nightly's
`_dict_to_ordered_dict_with_changed` already flattens one level through `flatten_fn` (its
outcome is upstream's). `traverse`'s own `traverse_children` has the same flatten and is left
as it is (no model call reaches it).
"""

from __future__ import annotations

from codemods.engine import TORCHTREE_PY, Anchor, DeclaredPatch, Details, Headers, InsertBefore

FUNCTION = "_dict_to_ordered_dict"
FLATTEN = "children, treedef = torch_tree.tree_flatten(structure, is_leaf=lambda x: x is not structure)"
#: keras master after keras#23111 (in no release): `id()` in the lambda.
MASTER_FLATTEN = FLATTEN.replace("x is not structure", "id(x) != structure_id")
REBUILD = ("if treedef.num_nodes == 1 and treedef.num_leaves == 1: return structure\n"
           "else: return torch_tree.tree_unflatten([_dict_to_ordered_dict(c) for c in children], treedef)")
NIGHTLY = f"{FUNCTION}_with_changed flattens one level through the node's flatten_fn (keras-nightly's shape)"


class TorchTreeOneLevelFlatten(DeclaredPatch):
    name = "torch-tree-one-level-flatten"
    version = "1"
    headers = Headers(
        description="torch tree: _dict_to_ordered_dict flattens a node one level through its own flatten_fn and "
        "unflatten_fn, without the is_leaf comparison dynamo cannot trace (keras-hub GPT-2: 7 graphs -> 1).",
        origin="ours", bug="https://github.com/keras-team/keras/issues/23648",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-08",
    )
    files = (TORCHTREE_PY,)
    since = "3.12.0"
    edits = (
        InsertBefore(Anchor(f"{FUNCTION}.traverse_children", FLATTEN, alternatives=(MASTER_FLATTEN,),
                            name="children, treedef = torch_tree.tree_flatten(structure, ...)",
                            description=f"in {FUNCTION}'s traverse_children: the one-level flatten"),
                     "direct_children", label="the one-level flatten"),
    )
    #: `structure` is the argument of the enclosing `_dict_to_ordered_dict`.
    names = {"structure": f"the argument of {FUNCTION}, which encloses traverse_children"}
    #: What the piece stands for: upstream's rebuild from the flattened children.
    relies_on = (
        Anchor(f"{FUNCTION}.traverse_children", REBUILD, alternatives=(REBUILD.replace("(c) for c", "(child) for child"),),
               name="the rebuild with tree_unflatten", reported=False),
        Anchor("", f"def {FUNCTION}(structure): ___", name=f"def {FUNCTION}(structure)", reported=False),
    )
    upstream_shapes = (
        (NIGHTLY, (Anchor("", f"def {FUNCTION}(___): ___", name=f"def {FUNCTION}", description=NIGHTLY),
                   Anchor(f"{FUNCTION}_with_changed", "children, context = node_def.flatten_fn(structure)",
                          reported=False))),
    )
    details = Details("a node's children from its flatten_fn, without tree_flatten's is_leaf",
                      "the one-level flatten is direct (forkgen)",
                      "upstream flattens one level through the node's flatten_fn")


PATCH = TorchTreeOneLevelFlatten()
TorchTreeOneLevelFlattenCommand = PATCH.command
