"""Patch `torch-tree-leaf-shortcut`: the leaf short-cut of keras-team/keras#23201 (issue #23281),
merged upstream and in keras-nightly 3.16.0.dev2026102704, without the rest of that PR.

On the torch backend `keras.tree` is `keras/src/tree/torchtree_impl.py` (3.12.0 on), whose
`_dict_to_ordered_dict` runs for the root of `flatten`, `flatten_with_path`, `pack_sequence_as`
and `map_shape_structure`, and for every node `traverse` (so `lists_to_tuples`) visits. For
anything that is not a `dict`/`defaultdict` it calls `traverse_children()`, which flattens the
structure one level with `torch_tree.tree_flatten` and, for a leaf (a tensor, a number, `None`),
returns the structure itself after building a one-leaf `TreeSpec`. The patch puts
`if _tree_is_leaf(structure): return structure` at the top of `traverse_children`: the same
object back, without the round trip (best of 40 interleaved runs, 2-core CPU under load, torch
2.13: a tensor 0.81 -> 0.36 us; a list of 12 tensors 18 -> 12 us, `traverse` of it 86 -> 49 us,
`lists_to_tuples` of a 7-leaf nested dict 95 -> 67 us).

Carried: only that short-cut. It sits after the `dict`/`defaultdict` branch, where nightly
checks for a leaf too, so dicts are sorted exactly as before, whatever torch registers. The
test is the one `tree_flatten` applies to the root (`_get_node_type(structure) not in
SUPPORTED_NODES`; the `is_leaf` lambda is False for the root): exactly when it holds, 3.15.1 got
the single-leaf spec and returned `structure`. Same object, same exceptions, for every input.
(The only trace is a shorter stack: a structure nested within a frame or two of the recursion
limit, which 3.15.1 reached at its leaves' flatten, no longer reaches it there.)

Not carried, as behaviour changes: #23201 as merged also sorts `dict` keys at every level of
nesting (3.15.1 sorts only a top-level dict's keys, and `traverse` re-sorts each subtree it
visits), so `flatten`/`pack_sequence_as` of nested dicts would change order; it returns
non-dict nodes (lists, tuples, namedtuples, tracked containers) unrebuilt when nothing below
changed (3.15.1 hands back fresh copies, so aliasing would change); and `traverse` sorts once at
the root. Nor nightly's other rewrites of the module (`traverse` flattening one level through
`SUPPORTED_NODES[...].flatten_fn` and the `changed` flags, for torch.compile, keras#23647) or
master's `id()`-based lambda (keras#23111), which the analysis accepts but does not bring.

Applies to 3.12.0-3.15.1 (`since`: the torch tree implementation is new in 3.12.0 and the
function is the same in every release since); recognised as upstream in keras-nightly, where
`_dict_to_ordered_dict_with_changed` returns a leaf as it is. No switch: nothing depends on
run-time state.
"""

from __future__ import annotations

from codemods.engine import TORCHTREE_PY, Anchor, DeclaredPatch, Details, Headers, Prepend

FUNCTION = "_dict_to_ordered_dict"
FLATTEN = "children, treedef = torch_tree.tree_flatten(structure, is_leaf=lambda x: x is not structure)"
#: master after keras#23111 (in no release): `id()` in the lambda, after `structure_id = id(structure)`.
MASTER = "structure_id = id(structure)\n" + FLATTEN.replace("x is not structure", "id(x) != structure_id")
#: `return structure` for the single-leaf spec: what the short-cut stands for.
SINGLE_LEAF = "if treedef.num_nodes == 1 and treedef.num_leaves == 1: return structure"
#: `_tree_is_leaf`, which the piece calls, is torch's leaf test (what `tree_flatten` applies).
TREE_IS_LEAF = Anchor("", """\
def _tree_is_leaf(tree, is_leaf=None):
    if is_leaf is not None and is_leaf(tree): return True
    return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES""", name="def _tree_is_leaf", reported=False)
NIGHTLY = f"{FUNCTION}_with_changed returns a leaf as it is (keras-nightly's shape)"
FIRST_FORM = f"{FUNCTION} returns a leaf first (keras#23201's first form)"


#: What may stand above the flatten: forkgen's short-cut, and torch-tree-one-level-flatten's
#: direct flatten (`node_def = ...` and its `if`), each if in.
_HEADS = ("", "if __: return structure\n", "node_def = __\nif __: ___\n",
          "if __: return structure\nnode_def = __\nif __: ___\n")


def _traverse_children(*forms: str) -> tuple[str, ...]:
    """`traverse_children` in each form: the flatten, then the single-leaf test (forkgen's
    short-cut, and torch-tree-one-level-flatten's piece, if in, above them)."""
    return tuple(f"def traverse_children():\n{head}{form}\n{SINGLE_LEAF}\nelse: ___\n___".replace("\n", "\n    ")
                 for form in forms for head in _HEADS)


TRAVERSE_CHILDREN = _traverse_children(FLATTEN, MASTER)


class TorchTreeLeafShortcut(DeclaredPatch):
    name = "torch-tree-leaf-shortcut"
    version = "1"
    headers = Headers(
        description="torch tree: _dict_to_ordered_dict returns a leaf as it is, without a one-level "
        "tree_flatten/TreeSpec round trip.",
        origin="upstream, https://github.com/keras-team/keras/pull/23201 (its leaf short-cut only)",
        bug="https://github.com/keras-team/keras/issues/23281",
        forwarded="https://github.com/keras-team/keras/pull/23201",
        applied_upstream="keras-nightly 3.16.0.dev2026102704 (with the nested dict-order fix, not carried here)",
        last_update="2026-12-01",
    )
    files = (TORCHTREE_PY,)
    # keras/src/tree/torchtree_impl.py first ships in 3.12.0 (3.0.0-3.11.3 use optree or dm-tree
    # on torch too); its _dict_to_ordered_dict is byte-identical in 3.12.0-3.15.1.
    since = "3.12.0"
    codemod = "AddLeafShortcutCommand"
    #: The short-cut goes first in the nested `traverse_children`, above its one-level flatten.
    edits = (Prepend(f"{FUNCTION}.traverse_children", "leaf_shortcut", reported=False, keep_comments=True),)
    #: `structure` is the argument of the enclosing `_dict_to_ordered_dict`.
    names = {"structure": f"the argument of {FUNCTION}, which encloses traverse_children"}
    relies_on = (
        Anchor(f"{FUNCTION}.traverse_children", FLATTEN, alternatives=(FLATTEN.replace("x is not structure", "id(x) != structure_id"),),
               name="children, treedef = torch_tree.tree_flatten(structure, ...)",
               description=f"in {FUNCTION}'s traverse_children: the round trip a leaf skips"),
        Anchor("", f"def {FUNCTION}(structure): ___", name=f"def {FUNCTION}(structure)", reported=False),
        Anchor(FUNCTION, TRAVERSE_CHILDREN[0], alternatives=TRAVERSE_CHILDREN[1:], reported=False,
               name=f"traverse_children: the flatten (lambda x: x is not structure) then `{SINGLE_LEAF}`"),
        TREE_IS_LEAF,
    )
    upstream_shapes = (
        (FIRST_FORM, (Anchor("", f"def {FUNCTION}(structure):\n    if _tree_is_leaf(structure): return structure\n    ___",
                             name=f"def {FUNCTION}", description=FIRST_FORM),)),
        (NIGHTLY, (Anchor("", f"def {FUNCTION}(___): ___", name=f"def {FUNCTION}", description=NIGHTLY),
                   Anchor(f"{FUNCTION}_with_changed", "if __ is None: return structure, ___", reported=False))),
    )
    details = Details("return a leaf before traverse_children's tree_flatten", "the leaf short-cut is in (forkgen)",
                      "upstream returns a leaf as it is")


PATCH = TorchTreeLeafShortcut()
AddLeafShortcutCommand = PATCH.command
