"""Patch `callspec-training-fast-path`: the CallSpec fast path for `layer(x1, ..., xn)` and
`layer(..., training=<bool>)`, on top of `callspec-fast-path`.

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
    version = "1"
    headers = Headers(
        description=(
            "Extends the CallSpec fast path to calls with several positional tensors and to "
            "training=<bool> (CallSpec._fast_bound), so that Functional's training calls and "
            "MultiHeadAttention(q, v) skip signature.bind too."
        ),
        origin="ours",
        bug="https://github.com/keras-team/keras/issues/23271",
        forwarded="https://github.com/keras-team/keras/pull/23288 (closed unmerged)",
        applied_upstream=None,
        last_update="2026-11-30",
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
