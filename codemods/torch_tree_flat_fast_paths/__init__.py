"""Patch `torch-tree-flat-fast-paths` (ours, forkgen issue 13's `train_step` target): the torch
tree's `flatten` and `map_structure` answer a flat container of leaves without walking it
through torch's pytree.

On the torch backend `keras.tree` is `keras/src/tree/torchtree_impl.py` (3.12.0 on). Its
`flatten(structure)` first rebuilds the structure with `_dict_to_ordered_dict` (a one-level
`torch_tree.tree_flatten` with an `is_leaf` lambda, a recursive call per child, a
`tree_unflatten`) and then runs `torch_tree.tree_flatten` on the copy: `keras.tree.flatten((4,
16))` costs about 8 us, and the loss reduction (`reduce_values`: `convert_to_tensor(shape(...))`
through `any_symbolic_tensors` and the torch `convert_to_tensor`) flattens such tuples three
times per `train_on_batch` step. `map_structure(func, *structures, none_is_leaf=True)` is one
`torch_tree.tree_map`, several microseconds even for a flat tuple (`SymbolicArguments.convert`
maps `args` and `kwargs` for every node of a functional model).

Carried, each an exact short-cut, at the top of the function with upstream's body below it:
- `flatten`: a structure whose type is exactly `list` or `tuple` and whose every item is a leaf
  for torch (`type(item)` not a tuple subclass and not in `SUPPORTED_NODES`) returns
  `list(structure)`. Why that is 3.15.1's answer: `_dict_to_ordered_dict` sorts only a top-level
  `dict`/`defaultdict`; for the list/tuple it flattens one level (every child is a leaf through
  the lambda) and hands each child to `_dict_to_ordered_dict`, which returns a leaf as it is
  (single-leaf spec, or `torch-tree-leaf-shortcut`'s short-cut); `tree_unflatten` rebuilds a
  list/tuple of the same objects, whose `tree_flatten` gives them back as a new list in order.
  keras-nightly 3.16.0.dev2026102704's rewritten `_dict_to_ordered_dict` returns such a
  structure itself (`changed` is False), so the answer is the same there, and so the patch
  applies there as it is (nightly's sorting of nested dicts is not brought: nested structures
  take the unchanged body).
- `map_structure`: one structure, `none_is_leaf is True` (for which upstream maps `func`
  itself), of exact type `tuple`, `list` or `dict`, whose items/values are all leaves (the same
  test): `func` over a snapshot of the leaves, in order (`list(map(func, leaves))`, as torch's
  `TreeSpec.unflatten(map(...))` consumes it), then a new list, a tuple, or a dict over a
  snapshot of the keys in the dict's own order (torch's `_dict_flatten`/`_dict_unflatten`:
  `list(d.values()), list(d.keys())` and `dict(zip(keys, values))`, insertion order, no
  sorting). The leaves are checked before `func` runs, as torch's flatten does. A `func` that
  raises StopIteration ends torch's `map` early too: the branch then raises torch's own length
  error, from the spec of the same flat container.
Everything else (nested items, namedtuples and other tuple subclasses, list/dict subclasses,
OrderedDict/defaultdict at the top, several structures, `none_is_leaf` other than True) takes
the unchanged body. The leaf test computes what torch computes, by the same calls
(`type(x)`, `issubclass(type(x), tuple)`, the `SUPPORTED_NODES` lookup), so a type registered
at run time is seen at once; an exception those calls raise is raised at the same item.

The gate. The proof reads torch 2.13.0's `_pytree`, so both branches run only when
`_FORKGEN_FLAT_FAST_PATHS`, computed once at import: `torch-tree-node-type-fast-path`'s
`_FORKGEN_NODE_TYPE_IS_TYPE` (torch's `_get_node_type` is `type(x)` for a non-tuple type; hence
`requires`) and, checked by this patch, the sha256 of the source of `tree_flatten`,
`tree_is_leaf`, `tree_unflatten`, `tree_map`, `TreeSpec.unflatten` and the list/tuple/dict
flatten/unflatten functions are torch 2.13.0's, those are plain functions of that module, and
`SUPPORTED_NODES` maps `list`/`tuple`/`dict` to them. Any other torch leaves 3.15.1's code as it
is. (`None` is a leaf in torch 2.13.0's registry; the test does not single it out, so it follows
whatever the registry says.)

Not carried: nested structures (they would need torch's traversal or Keras's dict sort), the
other functions of the module (`flatten_with_path`, `pack_sequence_as`, `traverse`), and
keras-nightly's behaviour changes in `_dict_to_ordered_dict` (nested dict sorting, unrebuilt
nodes).

Applies to 3.12.0-3.15.1 (`since`: the module is new in 3.12.0; `flatten` and `map_structure`
are the same text in every release since, and in keras-nightly 3.16.0.dev2026102704, which has
no such short-cut, so there is no "already upstream" shape). No switch: exact for every input,
and the gate decides at import.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.patchlib import Check, Headers, Outcome, Patch, Sources
from codemods.torch_tree_flat_fast_paths.add_fast_paths import (
    NAME,
    TORCHTREE_PY,
    AddFlatFastPathsCommand,
    Site,
    analyze,
    anchors,
)


def _site(sources: Sources) -> Site:
    return sources.analysed(NAME, TORCHTREE_PY, analyze)


class TorchTreeFlatFastPaths(Patch):
    name = NAME
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
    codemods = (AddFlatFastPathsCommand,)

    def check(self, sources: Sources) -> Check:
        site = _site(sources)
        if site.ours:
            return Check(Outcome.APPLIED, "the flat fast paths are in (forkgen)", anchors(site), present=True)
        return Check(Outcome.APPLIED, "flatten/map_structure: flat containers of leaves without tree walks", anchors(site))

    def apply(self, sources: Sources) -> None:
        command = AddFlatFastPathsCommand(CodemodContext(filename=TORCHTREE_PY), sources.ast(TORCHTREE_PY), _site(sources))
        sources.replace(TORCHTREE_PY, command.transform_module(sources.module(TORCHTREE_PY)))


PATCH = TorchTreeFlatFastPaths()
