"""Patch `callspec-training-fast-path`: the CallSpec fast path for every call that binds, on top
of `callspec-fast-path` (which keeps `layer(x)`).

Version 1 covered `layer(x1, ..., xn)` and `layer(..., training=<bool>)`; version 2 (issue
"every call shape") binds any call from a plan precomputed per layer (`_CallSpecFastBindings`:
names, kinds, defaults, `*args`/`**kwargs`), classifies each value as the release's constructor
does, and hands every call that would not bind, or whose classification raises, to upstream's
unchanged constructor. The name stays (configurations, `--no-training-fast-path`). Version 3
binds the same calls to the same CallSpecs with a cheaper loop (issue "every call shape", the
5x target): keyword-only and variadic parameters carry a position larger than any argument
count (`position < len(args)` is one comparison), the fill codes a keyword may take are tested
first, and the plan keeps the first parameter's name; about 7% off `_fast_bound` for
`block(x, attention_mask=m, cache=c, cache_update_index=8)`.

Its edits, per CallSpec variant as the base's (`ByVariant`): the bindings after the base's flag in
`Layer.__init__`, an `elif` between the base's fast branch and upstream's `else` in
`Layer.__call__`, `CallSpec._fast_bound` after `_fast`, its helpers between the base's and `class
CallSpec`. Its inserted code is in `codemods/callspec_fast_path/templates/callspec_bound_*.py`.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from codemods.callspec_fast_path import CALLSPEC_CLASS, ByVariant, foreign, templates
from codemods.callspec_fast_path.variants import Variant
from codemods.engine import AddElse, Analysis, Anchor, Headers, Helper, InsertAfter, Sources

FLAG = "self._call_spec_fast_path = self._call_spec_fast_plan is not None"


class CallSpecTrainingFastPath(ByVariant):
    name = "callspec-training-fast-path"
    version = "3"
    headers = Headers(
        description=(
            "Extends the CallSpec fast path to every call that binds (CallSpec._fast_bound): any "
            "keyword, training=None, several positional, nested and non-tensor arguments, "
            "*args/**kwargs, through a binding plan precomputed per layer instead of "
            "signature.bind; calls that would not bind keep upstream's constructor."
        ),
        origin="ours",
        bug="https://github.com/keras-team/keras/issues/23271",
        forwarded="https://github.com/keras-team/keras/pull/23288 (closed unmerged); binder idea of #23198",
        applied_upstream=None,
        last_update="2026-12-01",
    )
    requires = ("callspec-fast-path",)
    codemod = "CallSpecTrainingFastPathCommand"
    codemod_version = "2"
    edits = (
        Helper(CALLSPEC_CLASS, "helpers", before=True, blank_lines=0, keep_comments=True),
        # Right after the base's flag: the bindings read the plan's kill switch and may widen it.
        InsertAfter(Anchor("Layer.__init__", FLAG, reported=False), "bindings"),
        InsertAfter(Anchor("CallSpec", "def _fast(___): ___", reported=False), "fast_bound"),
    )

    @classmethod
    def declare(cls, variant: Variant) -> dict[str, Any]:
        # The base's guard: its fast branch stays first (`layer(x)` pays nothing more), the
        # extension's `elif` goes before upstream's `else`.
        guard = templates.base_pieces(variant.name)["guard"][0]
        test = cst.Module([]).code_for_node(cst.ensure_type(guard, cst.If).test)
        branch = AddElse(Anchor("Layer.__call__", f"if {test}:\n    ___\nelse:\n    ___", reported=False,
                                name="the base's guard"), "branch")
        return {
            "edits": (*cls.edits, branch),
            "pieces": classmethod(lambda _: templates.extension_pieces(variant.name)),
        }

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        foreign(sources, analysis, any(o.edit.piece == "fast_bound" for f in analysis.files for o in f.todo),
                "_fast_bound", "extension")


PATCH = CallSpecTrainingFastPath()
CallSpecTrainingFastPathCommand = PATCH.command
