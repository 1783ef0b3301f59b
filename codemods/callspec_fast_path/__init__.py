"""Patch `callspec-fast-path`: `layer(x)` builds its CallSpec without `signature.bind`.

Three codemods over `keras/src/layers/layer.py`: the eligibility plan precomputed in
`Layer.__init__` (`precompute_fast_path_eligibility`), the constructor `CallSpec._fast`
(`add_callspec_fast`) and the guard around the construction in `Layer.__call__`
(`guard_callspec_construction`). The inserted code is in `templates/`, one rule module per
CallSpec variant (V1-V4, see `anchors.py`). `callspec-training-fast-path` builds on it.
"""

from __future__ import annotations

from codemods.callspec_fast_path.anchors import BASE_PIECES, LAYER_PY
from codemods.callspec_fast_path.codemods import BASE_CODEMODS
from codemods.callspec_fast_path.shared import run_codemods, sources_analysis
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


class CallSpecFastPath(Patch):
    name = "callspec-fast-path"
    version = "2"
    headers = Headers(
        description=(
            "Layer.__call__ builds the CallSpec of layer(x) directly (CallSpec._fast) instead of through "
            "inspect.Signature.bind, apply_defaults and the classification loop, on layers whose call() "
            "signature makes that binding trivial (decided once, in Layer.__init__)."
        ),
        origin="ours",
        bug="https://github.com/keras-team/keras/issues/23271",
        forwarded="https://github.com/keras-team/keras/pull/23646",
        applied_upstream=None,
        last_update="2026-11-30",
    )
    files = (LAYER_PY,)
    codemods = BASE_CODEMODS
    switch = "KERAS_CALLSPEC_FAST_PATH"

    def check(self, sources: Sources) -> Check:
        # Never merged upstream (#23198 closed, #23646 open): no release can be "upstream";
        # a CallSpec with more than `__init__` that forkgen did not write is drift.
        analysis = sources_analysis(sources)
        present = all(analysis.applied[p] for p in BASE_PIECES)
        return Check(
            Outcome.APPLIED, f"CallSpec variant {analysis.variant}", analysis.anchors, present,
            {"callspec_variant": analysis.variant},
        )

    def apply(self, sources: Sources) -> None:
        run_codemods(sources, BASE_CODEMODS, BASE_PIECES)


PATCH = CallSpecFastPath()
