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

One codemod (`extend_callspec_fast_path`): per-layer bindings after the base's flag in
`Layer.__init__`, an `elif` between the base's fast branch and upstream's `else` in
`Layer.__call__`, `CallSpec._fast_bound` after `_fast`. Its inserted code is in
`codemods/callspec_fast_path/templates/callspec_bound_*.py`, beside the base's: the base's
analysis reads both, to tell a tree with part of the extension (drift) from one without.
"""

from __future__ import annotations

from codemods.callspec_fast_path.anchors import LAYER_PY
from codemods.callspec_fast_path.shared import run_codemods, sources_analysis
from codemods.callspec_training_fast_path.extend_callspec_fast_path import (
    ExtendCallSpecFastPathCommand,
)
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


class CallSpecTrainingFastPath(Patch):
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
    files = (LAYER_PY,)
    requires = ("callspec-fast-path",)
    codemods = (ExtendCallSpecFastPathCommand,)
    switch = "KERAS_CALLSPEC_FAST_PATH"

    def check(self, sources: Sources) -> Check:
        analysis = sources_analysis(sources)
        return Check(Outcome.APPLIED, f"CallSpec variant {analysis.variant}", (), analysis.applied["extension"])

    def apply(self, sources: Sources) -> None:
        run_codemods(sources, self.codemods, ("extension",))


PATCH = CallSpecTrainingFastPath()
