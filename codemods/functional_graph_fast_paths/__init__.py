"""Patch `functional-graph-fast-paths` (ours, not upstream): two `tree` walks of a Functional
model's call whose result is known are skipped.

Running a Functional (or Sequential) model (`model(x)`, `predict`, `*_on_batch`) goes through
`Functional._standardize_inputs` and, per node of the graph, `SymbolicArguments.fill_in`.

(a) keras/src/ops/symbolic_arguments.py, `SymbolicArguments.fill_in`: 3.15.1 has a fast path
for one positional KerasTensor only; a node with several (`x + y`, `MultiHeadAttention()(x, x)`)
pays `self.convert(switch_fn)`, two `tree.map_structure` walks. Inserted right after upstream's
fast path: when `type(self.args) is tuple`, `type(self.kwargs) is dict`, `not self.kwargs` and
every item of `self.args` is exactly a `KerasTensor`, return
`(tuple(tensor_dict.get(id(x), None) for x in self.args), {})`. Exact: on each backend's tree
(torchtree_impl for torch, optree_impl otherwise, dmtree_impl without optree) a KerasTensor is a
leaf (no implementation registers it as a node), `map_structure` over a plain tuple of leaves
returns a new plain tuple of `switch_fn`'s values, and over `{}` a new `{}`; `switch_fn` returns
`tensor_dict.get(id(x), None)` for a KerasTensor and calls nothing else. The fast path does not
call `switch_fn`: the result is the same objects in the same (fresh) containers.

(b) keras/src/models/functional.py, `Functional._standardize_inputs`: inserted at the top: when
`self._inputs_struct` is exactly a `backend.KerasTensor`, `_maybe_warn_inputs_struct_mismatch`
is Functional's own (not overridden by the class), and `inputs` is neither a list nor a dict
(subclasses included) nor `tree.is_nested`, return
`self._adjust_input_rank(self._convert_inputs_to_tensors([inputs]))`. Exact: for such inputs
3.15.1 takes none of its branches, its `_maybe_warn_inputs_struct_mismatch` compares two leaves
(`lists_to_tuples` changes no leaf that is not a list; that is why list subclasses, which the
torch and optree trees take for leaves but `lists_to_tuples` turns into tuples and then warns
about, keep upstream's path), which neither warns nor raises, and `tree.flatten(inputs)` is
`[inputs]` (None included: every implementation treats None as a leaf here). The same two
methods are called, so their overrides run. Not covered: a `_maybe_warn_inputs_struct_mismatch`
replaced on the instance itself (its replacement would not be called for such inputs).

Measured on the built fork (2-core CPU, CPython 3.11, torch 2.13 CPU, one process, 3.15.1's
logic restated as the "off" state, medians of interleaved rounds): `fill_in` of a two-tensor
node 8.95 us -> 0.68 us; `_standardize_inputs` of one tensor 9.24 us -> 3.84 us; the bench's
`mlp` case (`model(x)`, 4-layer Sequential) 304.8 us -> 288.9 us (-5.2%), `transformer`
(inference) 1274 us -> 1209 us (-5.1%).

Not carried: nothing upstream (no upstream shape is known: only forkgen's marker counts as
present); list/dict inputs, several inputs and nested values keep upstream's code.
The patch needs both anchors: a release where one is missing or has moved is drift for the
whole patch (every release it targets has both).

Release range (`tests/matrix.py --analyze-only --nightly`): 3.6.0-3.15.1 and keras-nightly
3.16.0.dev2026102704 (whose `_standardize_inputs` has a new branch for dict inputs only, which
the guard leaves to upstream). `since = "3.6.0"`: 3.4.0-3.5.0 have no
`_maybe_warn_inputs_struct_mismatch`, and 3.0.0-3.3.3's `switch_fn` reads `tensor_dict` another
way; both older shapes differ in what the fast paths rest on, so the whole patch starts at 3.6.0.
No switch: the fast paths keep no state.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.functional_graph_fast_paths.fast_paths import (
    FUNCTIONAL_PY,
    NAME,
    SYMBOLIC_ARGUMENTS_PY,
    FunctionalGraphFastPathsCommand,
    analyze_fill_in,
    analyze_standardize,
    anchors,
)
from codemods.patchlib import AnchorDrift, Check, Headers, Outcome, Patch, Sources


class FunctionalGraphFastPaths(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description="SymbolicArguments.fill_in fills a tuple of positional KerasTensors without tree walks; "
        "Functional._standardize_inputs skips its tree walks for one KerasTensor input and a leaf value.",
        origin="ours",
        bug=None,
        forwarded="not-needed",
        applied_upstream=None,
        last_update="2026-12-01",
    )
    files = (SYMBOLIC_ARGUMENTS_PY, FUNCTIONAL_PY)
    since = "3.6.0"
    codemods = (FunctionalGraphFastPathsCommand,)

    def check(self, sources: Sources) -> Check:
        fill_in = analyze_fill_in(sources.module(SYMBOLIC_ARGUMENTS_PY), sources.ast(SYMBOLIC_ARGUMENTS_PY))
        standardize = analyze_standardize(sources.module(FUNCTIONAL_PY), sources.ast(FUNCTIONAL_PY))
        found = anchors(fill_in, standardize)
        if fill_in.ours != standardize.ours:
            half = fill_in if fill_in.ours else standardize
            raise AnchorDrift(half.path, half.line, half.qualname, "both fast paths or neither",
                              f"only the one in {half.qualname}")
        if fill_in.ours and standardize.ours:
            return Check(Outcome.APPLIED, "the Functional graph fast paths are in (forkgen)", found, present=True)
        return Check(Outcome.APPLIED, "fill_in and _standardize_inputs: fast paths for the common cases", found)

    def apply(self, sources: Sources) -> None:
        for path in self.files:
            command = FunctionalGraphFastPathsCommand(CodemodContext(filename=path), sources.ast(path))
            sources.replace(path, command.transform_module(sources.module(path)))


PATCH = FunctionalGraphFastPaths()
__all__ = ["PATCH", "FunctionalGraphFastPathsCommand"]
