"""Patch `dtype-fast-paths`: backport of keras-team/keras#23182 (merged, in keras-nightly).

`standardize_dtype` runs on every dtype Keras handles (layer and policy dtypes, tensor
conversion, `result_type`); for a canonical string such as "float32" 3.15.1 does a dict
lookup, two `hasattr`, two `str()` substring tests and a linear scan of the 18-string
`ALLOWED_DTYPES` tuple, only to return its argument. The patch adds
`ALLOWED_DTYPES_SET = frozenset(ALLOWED_DTYPES)` to dtypes.py, a first statement returning an
exact `str` that is in the set, and asks the set first in the final membership test.

Only the speed part of the upstream change is carried, exactly equivalent:
- not nightly's `dtype.name.lower()` nor its `"mlx" in str(dtype)` clause (MLX backend
  support, #23410: behaviour changes);
- the fast path tests `type(dtype) is str`, not nightly's `isinstance(dtype, str)`: a str
  subclass (e.g. a `(str, Enum)` member) keeps upstream's path, which may use its `.name`;
- the final test consults the set only for an exact `str` (for which set and tuple membership
  are the same) and otherwise still runs upstream's tuple test: the value there may come from
  `.name`/`__name__` and be unhashable, or compare equal without hashing equal.
The analysis checks on each tree that the fast path returns what upstream's body would: no
allowed string is a key of `PYTHON_DTYPES_MAP`, and no test of the `hasattr`/`str()` chain holds
for one (else: drift). `ALLOWED_DTYPES` is taken to be a constant, as upstream's own set does.
No switch: nothing depends on run-time state.

Keras 3.0.0-3.1.1 keep `ALLOWED_DTYPES` in variables.py and test it bare: not applicable
(`since = "3.2.0"`, the first release with `dtypes.ALLOWED_DTYPES`).
"""

from __future__ import annotations

from libcst.codemod import CodemodContext, SkipFile

from codemods.dtype_fast_paths.fast_paths import (
    ABSENT,
    DTYPES_PY,
    NAME,
    OURS,
    THEIRS,
    VARIABLES_PY,
    AllowedDtypesSetCommand,
    Analysis,
    StandardizeDtypeFastPathCommand,
    analyze,
    anchors,
)
from codemods.patchlib import AnchorDrift, Check, Headers, Outcome, Patch, Sources


def sources_analysis(sources: Sources) -> Analysis:
    return sources.memoised(NAME, lambda: analyze(sources.module(DTYPES_PY), sources.ast(DTYPES_PY),
                                                  sources.module(VARIABLES_PY), sources.ast(VARIABLES_PY)))


class DtypeFastPaths(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description=(
            "standardize_dtype returns an exact canonical dtype str at once, and tests membership in "
            "ALLOWED_DTYPES through a frozenset (speed part of #23182 only)."
        ),
        origin="upstream, https://github.com/keras-team/keras/pull/23182",
        bug="https://github.com/keras-team/keras/issues/23272",
        forwarded="https://github.com/keras-team/keras/pull/23182",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    files = (DTYPES_PY, VARIABLES_PY)
    codemods = (AllowedDtypesSetCommand, StandardizeDtypeFastPathCommand)
    since = "3.2.0"

    def check(self, sources: Sources) -> Check:
        analysis = sources_analysis(sources)
        states = analysis.states
        found = anchors(analysis)
        if states[0] == THEIRS and states[1] == THEIRS:
            return Check(Outcome.UPSTREAM, "ALLOWED_DTYPES_SET and the str fast path are upstream's", found)
        if states == (OURS, OURS, OURS):
            return Check(Outcome.APPLIED, "set, fast path and final test present", found, True)
        if states == (ABSENT, ABSENT, ABSENT):
            return Check(Outcome.APPLIED, "add ALLOWED_DTYPES_SET, the fast path and the set test", found)
        raise AnchorDrift(VARIABLES_PY, analysis.variables.line, "dtype fast paths",
                          "all three pieces absent, all ours, or set and fast path upstream's",
                          "set {}, fast path {}, final test {}".format(*states))

    def apply(self, sources: Sources) -> None:
        # The check's analysis of both files: each command gets its side (variables.py is not
        # changed by the first, so its side still holds after dtypes.py is replaced).
        analysis = sources_analysis(sources)
        allowed = analysis.dtypes.allowed
        for path, command in ((DTYPES_PY, AllowedDtypesSetCommand(CodemodContext(filename=DTYPES_PY), analysis.dtypes)),
                              (VARIABLES_PY, StandardizeDtypeFastPathCommand(CodemodContext(filename=VARIABLES_PY),
                                                                             allowed, analysis.variables))):
            try:
                sources.replace(path, command.transform_module(sources.module(path)))
            except SkipFile:
                continue


PATCH = DtypeFastPaths()
__all__ = ["PATCH", "AllowedDtypesSetCommand", "StandardizeDtypeFastPathCommand"]
