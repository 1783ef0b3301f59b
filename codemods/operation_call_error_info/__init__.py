"""Patch `operation-call-error-info`: backport of keras-team/keras#23183 (75cd954658, keras-nightly).

With traceback filtering on (the default), every `Operation.__call__` (so every layer call)
and `Cond.__call__` of Keras 3.0.0-3.15.1 wraps the function it is about to call with
`traceback_utils.inject_argument_info_in_traceback`, whose work (a TF import on TensorFlow,
a closure, `functools.wraps`, a second filtering check) is only needed when the call raises:
~3 us per op call, ~2-5 % of an eager `Dense(4)(x)` on torch. The patch calls it directly in
`try:`; `except Exception as e:` calls `traceback_utils.raise_with_argument_info(e, call_fn,
args, kwargs, object_name=...)`, a new function holding the wrapper's error path.

Carried: the speed part only, in the exact-mirror form (backports spec, section 2, option A).
What is raised is what 3.15.1 raises: the same class, message text (argument names from the
same `call_fn`: `symbolic_call`, the remat wrapper, `quantized_call` or `call`), the same
`_keras_call_info_injected` flag, `__cause__`/`__context__`/`__suppress_context__`, the
innermost call's info only. Only Keras-internal traceback frames differ (a
`traceback_utils.py` frame instead of the wrapper's), and `filter_traceback` drops both.
Not carried (keras-nightly behaviour changes): nightly's `inject_argument_info_in_error`
(names from `self.call`, a raw `args=/kwargs=` dump when binding fails, other fallbacks),
the removal of `inject_argument_info_in_traceback` (public to third-party code: it stays,
unchanged), and `Operation._dispatch_call` with its calibration hook.
No kill switch: the equivalence does not depend on runtime state.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.operation_call_error_info.error_path import (
    CORE_PY,
    NAME,
    OPERATION_PY,
    SITES,
    TRACEBACK_UTILS_PY,
    AddErrorPathHelperCommand,
    CallErrorPathCommand,
    Helper,
    Site,
    analyze_helper,
    analyze_site,
    anchors,
)
from codemods.patchlib import AnchorDrift, Check, Headers, Outcome, Patch, Sources


def _site(sources: Sources, path: str) -> Site:
    return sources.analysed(NAME, path, analyze_site)


def _helper(sources: Sources) -> Helper:
    return sources.analysed(NAME, TRACEBACK_UTILS_PY, analyze_helper)


class OperationCallErrorInfo(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description=(
            "Operation.__call__ and Cond.__call__ call their function directly in try and add the "
            "call's arguments to the error only in except (traceback_utils.raise_with_argument_info, "
            "the error path of inject_argument_info_in_traceback, which stays), instead of wrapping "
            "the function on every call."
        ),
        origin="upstream, https://github.com/keras-team/keras/pull/23183",
        bug=None,
        forwarded="https://github.com/keras-team/keras/pull/23183",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    files = (TRACEBACK_UTILS_PY, OPERATION_PY, CORE_PY)
    codemods = (AddErrorPathHelperCommand, CallErrorPathCommand)

    def check(self, sources: Sources) -> Check:
        sites = [_site(sources, path) for path in SITES]
        shapes = {s.shape for s in sites}
        if shapes == {"upstream"}:
            return Check(
                Outcome.UPSTREAM,
                "Operation.__call__ and Cond.__call__ call in try, with traceback_utils."
                "inject_argument_info_in_error in except",
                anchors(None, sites),
            )
        helper = _helper(sources)
        found = anchors(helper, sites)
        if shapes == {"fresh"} and not helper.present:
            return Check(Outcome.APPLIED, "call in try in Operation.__call__ and Cond.__call__", found)
        if shapes == {"ours"} and helper.present:
            return Check(Outcome.APPLIED, "call in try in Operation.__call__ and Cond.__call__", found, True)
        # Only forkgen writes these, and all three at once: a mix is not a tree it made.
        state = ", ".join(f"{s.qualname} {s.shape}" for s in sites)
        raise AnchorDrift(
            TRACEBACK_UTILS_PY, helper.line, "the three pieces",
            "all three upstream 3.x, all three forkgen's, or nightly's call sites",
            f"{state}, helper {'present' if helper.present else 'absent'}",
        )

    def apply(self, sources: Sources) -> None:
        # The check's analyses, taken before any file is replaced (each is of one file, which
        # only its own command rewrites).
        helper = AddErrorPathHelperCommand(CodemodContext(filename=TRACEBACK_UTILS_PY), _helper(sources))
        sites = {path: _site(sources, path) for path in SITES}
        sources.replace(TRACEBACK_UTILS_PY, helper.transform_module(sources.module(TRACEBACK_UTILS_PY)))
        for path in SITES:
            # The shared `ast` of the same text gives the line numbers: no second parse.
            command = CallErrorPathCommand(CodemodContext(filename=path), sources.ast(path), sites[path])
            sources.replace(path, command.transform_module(sources.module(path)))


PATCH = OperationCallErrorInfo()
