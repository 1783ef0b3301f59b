"""Patch `input-spec-single-fast-path`: backport of the fast path of keras-team/keras#23184
("single-InputSpec fast path in assert_input_compatibility"), without its behaviour changes.

`Layer.__call__` checks its first argument against `input_spec` on every call; for the usual
single `InputSpec` and single tensor, `assert_input_compatibility` still flattens both with
`tree.flatten` before one round of checks (about 5.5 us of which ~1.7 us is saved on torch).
The patch returns early, after the leading `if not input_spec: return`, when the spec is one
`InputSpec` (exactly that class), the input is neither nested nor a dict, and
`_single_input_spec_passes` (appended after the function) finds that the checks pass.

Not carried (keras-nightly has them, spec section 10/13): the ValueError for an out-of-range
`axes` key (3.15.1 raises IndexError) and nightly's removal of the trailing-1 squeeze under
`allow_last_axis_squeeze`. The helper mirrors 3.15.1's checks in order, and every failing case
falls through to upstream's unchanged body, so which inputs pass, which exceptions are raised
and their messages stay exactly 3.15.1's. The analysis pins the checks it mirrors (a
normalised fingerprint of the function, identical in 3.4.0-3.15.1): other checks are drift.
No kill switch: nothing depends on runtime state.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.input_spec_single_fast_path.single_fast_path import (
    INPUT_SPEC_PY,
    NAME,
    Analysis,
    InputSpecSingleFastPathCommand,
    analyze,
)
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


def _analysis(sources: Sources) -> Analysis:
    return sources.analysed(NAME, INPUT_SPEC_PY, analyze)


class InputSpecSingleFastPath(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description=(
            "assert_input_compatibility returns early, without tree.flatten, for a single InputSpec and a "
            "single unnested input that pass its checks; every other case runs the unchanged checks."
        ),
        origin="upstream, https://github.com/keras-team/keras/pull/23184",
        bug="https://github.com/keras-team/keras/issues/23275",
        forwarded="https://github.com/keras-team/keras/pull/23184",
        applied_upstream="keras-nightly 3.16.0.dev2026102704 (with behaviour changes not carried here)",
        last_update="2026-12-01",
    )
    files = (INPUT_SPEC_PY,)
    # 3.4.0 is the first release whose checks skip a None input for an optional spec and take
    # the shape the fast path mirrors (3.0.0-3.3.3 check every input for a shape first).
    since = "3.4.0"
    codemods = (InputSpecSingleFastPathCommand,)

    def check(self, sources: Sources) -> Check:
        analysis = _analysis(sources)
        if analysis.state == "upstream":
            return Check(Outcome.UPSTREAM, analysis.detail, analysis.anchors)
        return Check(Outcome.APPLIED, analysis.detail, analysis.anchors, analysis.state == "present")

    def apply(self, sources: Sources) -> None:
        command = InputSpecSingleFastPathCommand(
            CodemodContext(filename=INPUT_SPEC_PY), sources.ast(INPUT_SPEC_PY), _analysis(sources)
        )
        sources.replace(INPUT_SPEC_PY, command.transform_module(sources.module(INPUT_SPEC_PY)))


PATCH = InputSpecSingleFastPath()
