"""Patch `torch-tree-flat-fast-paths` (ours, forkgen issue 13's `train_step` target): the torch
tree's `flatten` and `map_structure` answer a flat container of leaves without walking it
through torch's pytree.

On the torch backend `keras.tree` is `keras/src/tree/torchtree_impl.py` (3.12.0 on). `flatten`
rebuilds the structure with `_dict_to_ordered_dict` and then runs `torch_tree.tree_flatten` on the
copy (`keras.tree.flatten((4, 16))`: about 8 us; the loss reduction flattens such tuples three
times per `train_on_batch` step); `map_structure(func, *structures, none_is_leaf=True)` is one
`torch_tree.tree_map`, several microseconds even for a flat tuple.

Carried, each an exact short-cut at the top of the function, upstream's body below it:
- `flatten`: a structure of exact type `list` or `tuple` whose every item is a leaf for torch
  (`type(item)` not a tuple subclass and not in `SUPPORTED_NODES`) returns `list(structure)`:
  `_dict_to_ordered_dict` (3.12.0-3.15.1's, with or without `torch-tree-leaf-shortcut`, or
  keras-nightly's, which returns such a structure itself) rebuilds it from the same leaves, whose
  `tree_flatten` gives them back as a new list in order.
- `map_structure`: one structure, `none_is_leaf is True`, of exact type `tuple`, `list` or `dict`,
  whose items/values are all leaves (the same test): `func` over a snapshot of the leaves in order
  (`list(map(func, leaves))`, as torch's `TreeSpec.unflatten(map(...))` consumes it), then a new
  list, a tuple, or a dict over a snapshot of the keys in the dict's own order (torch's
  `_dict_flatten`/`_dict_unflatten`: insertion order, no sorting). The leaves are checked before
  `func` runs, as torch's flatten does; a `func` raising StopIteration gets torch's length error.
Everything else (nested items, namedtuples and other tuple subclasses, list/dict subclasses,
OrderedDict/defaultdict at the top, several structures, `none_is_leaf` other than True) takes
the unchanged body. The leaf test makes torch's calls (`type(x)`, `issubclass(type(x), tuple)`,
the `SUPPORTED_NODES` lookup): a type registered at run time is seen at once, an exception is
raised at the same item.

The gate. Both branches run only when `_FORKGEN_FLAT_FAST_PATHS`, computed once at import:
`torch-tree-node-type-fast-path`'s `_FORKGEN_NODE_TYPE_IS_TYPE` (hence `requires`) and the sha256
of the source of torch's `tree_flatten`, `tree_is_leaf`, `tree_unflatten`, `tree_map`,
`TreeSpec.unflatten` and the list/tuple/dict flatten/unflatten functions are torch 2.13.0's,
those are plain functions of that module, and `SUPPORTED_NODES` maps `list`/`tuple`/`dict` to them.

Not carried: nested structures, `flatten_with_path`, `pack_sequence_as`, `traverse`, and
keras-nightly's behaviour changes in `_dict_to_ordered_dict`. Applies to 3.12.0-3.15.1 (`since`;
`flatten` and `map_structure` are the same text since, and in keras-nightly 3.16.0.dev2026102704,
which has no such short-cut: no "already upstream" shape). No switch: exact, gated at import.
"""

from __future__ import annotations

from codemods.engine import (
    TORCHTREE_PY,
    Analysis,
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    Prepend,
    Sources,
)
from codemods.torch_tree_node_type_fast_path import FLAG as NODE_TYPE_FLAG

FLAG = "_FORKGEN_FLAT_FAST_PATHS"
FLATTEN = """\
def flatten(structure):
    {}structure = _dict_to_ordered_dict(structure)
    leaves, _ = torch_tree.tree_flatten(structure)
    return leaves"""
MAP_STRUCTURE = """\
def map_structure(func, *structures, none_is_leaf=True):
    {}if not structures: raise __
    map_func = func
    if not none_is_leaf: ___
    return torch_tree.tree_map(map_func, *structures)"""
MAP_BRANCH = f"if {FLAG} and none_is_leaf is True and len(structures) == 1: ___\n    "
NODE_TYPE_GATE = Anchor("", f"{NODE_TYPE_FLAG} = __", name=NODE_TYPE_FLAG, reported=False)


class TorchTreeFlatFastPaths(DeclaredPatch):
    name = "torch-tree-flat-fast-paths"
    version = "1"
    headers = Headers(
        description="torch tree: flatten and map_structure answer a flat list/tuple (map_structure: "
        "and dict) of leaves without torch pytree walks, behind an import-time check of torch's pytree.",
        origin="ours",
        bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed",
        applied_upstream=None,
        last_update="2026-12-01",
    )
    files = (TORCHTREE_PY,)
    # keras/src/tree/torchtree_impl.py first ships in 3.12.0; flatten/map_structure are the same
    # text in 3.12.0-3.15.1 (and in keras-nightly 3.16.0.dev2026102704).
    since = "3.12.0"
    requires = ("torch-tree-node-type-fast-path",)
    #: Its verify runs torch-tree-leaf-shortcut's check (`_dict_to_ordered_dict` in a form it knows).
    tolerates = ("torch-tree-leaf-shortcut",)
    codemod = "AddFlatFastPathsCommand"
    #: A branch first in each function, above upstream's statements; the gate (a function and the
    #: flag) at module level right before `def map_structure` (below the node-type gate).
    edits = (
        Prepend("flatten", "flatten_fast_path", reported=False, keep_comments=True),
        Prepend("map_structure", "map_structure_fast_path", reported=False, keep_comments=True),
        Helper(Anchor("", "def map_structure(___): ___", reported=False), "module_level", before=True),
    )
    #: What the branches stand for: upstream's bodies (below forkgen's branch, once in), the node-type gate.
    relies_on = (
        Anchor("", FLATTEN.format(""), alternatives=(FLATTEN.format(f"if {FLAG} and __: ___\n    "),),
               name="def flatten(structure): _dict_to_ordered_dict, then torch_tree.tree_flatten",
               description="a flat list/tuple of leaves: list(structure)"),
        Anchor("", MAP_STRUCTURE.format(""), alternatives=(MAP_STRUCTURE.format(MAP_BRANCH),),
               name="def map_structure(func, *structures, none_is_leaf=True): ... torch_tree.tree_map(map_func, *structures)",
               description="one flat list/tuple/dict of leaves: func over its leaves in order"),
        NODE_TYPE_GATE,
    )
    details = Details("flatten/map_structure: flat containers of leaves without tree walks",
                      "the flat fast paths are in (forkgen)", "upstream has the flat fast paths (no release does)")

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        """Semantic rules: flatten's slow path hands a flat list/tuple of leaves back as the same
        leaves only in a `_dict_to_ordered_dict` the leaf short-cut knows (its check is drift
        otherwise); the gate reads the node-type flag at import, so that flag is assigned above."""
        self.tolerated("torch-tree-leaf-shortcut").check(sources)
        ((_, flag),), ((_, target),) = (self.matches(sources, a) for a in (NODE_TYPE_GATE, self.edits[2].anchor))
        if flag > target:
            raise AnchorDrift(TORCHTREE_PY, target, NODE_TYPE_FLAG, "torch-tree-node-type-fast-path's gate assigned "
                              "once above `def map_structure` (that patch first)", "one below it")


PATCH = TorchTreeFlatFastPaths()
AddFlatFastPathsCommand = PATCH.command
