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

from codemods.engine import Anchor, DeclaredPatch, Details, Headers, Helper, Replace

TRACEBACK_UTILS_PY = "keras/src/utils/traceback_utils.py"
OPERATION_PY = "keras/src/ops/operation.py"
CORE_PY = "keras/src/ops/core.py"
#: The two methods that wrap their call_fn, by file (same in Keras 3.0.0-3.15.1).
SITES = {OPERATION_PY: "Operation.__call__", CORE_PY: "Cond.__call__"}
WRAPPER = "inject_argument_info_in_traceback"
#: The wrapped call: exactly these two arguments (the helper gets the same `fn` and
#: `object_name`), then the call itself, which stays in `try:`.
WRAP = f"""call_fn = traceback_utils.{WRAPPER}(call_fn, object_name=__object_name)
return call_fn(*args, **kwargs)"""
#: The wrapper re-checks the filtering flag and calls plainly when it is off; the `try` has no
#: such check, so the pair must sit in the branch where the flag is known to be on (all 3.x).
FILTERING = "if traceback_utils.is_traceback_filtering_enabled():\n    ___\n    {}"
OURS = "try: return call_fn(*args, **kwargs)\nexcept Exception as e: traceback_utils.raise_with_argument_info(___)"


def _site(path: str, qualname: str) -> tuple[Anchor, ...]:
    """The anchors the call site relies on: its pair (or forkgen's `try`) in the filtering
    branch, and no other use of the wrapper there (forkgen's helper call in its place)."""
    return (
        Anchor(qualname, FILTERING.format(WRAP.replace("\n", "\n    ").replace("__object_name", "__")), path=path, name=f"{qualname}: filtering branch",
               alternatives=(FILTERING.format(OURS.replace("\n", "\n    ").replace(": t", ":\n        t")),),
               reported=False),
        Anchor(qualname, f"traceback_utils.{WRAPPER}(___)", expression=True, path=path, reported=False,
               alternatives=("traceback_utils.raise_with_argument_info(___)",)),
    )


class OperationCallErrorInfo(DeclaredPatch):
    name = "operation-call-error-info"
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
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    edits = (
        Helper(Anchor("", f"def {WRAPPER}(___): ___", path=TRACEBACK_UTILS_PY, name=f"def {WRAPPER}",
                      description="raise_with_argument_info goes after it"), "helper"),
        *(Replace(Anchor(q, WRAP, path=p, name=f"{q}: {WRAPPER}", description="call in try (fresh)"), "call_site")
          for p, q in SITES.items()),
    )
    relies_on = tuple(a for p, q in SITES.items() for a in _site(p, q))
    #: keras-nightly (#23183 as merged): the call in `try:`, `except Exception as e:` hands `e`
    #: to `traceback_utils.inject_argument_info_in_error`; the wrapper is gone.
    upstream_patterns = tuple(a for p, q in SITES.items() for a in (
        Anchor(q, "traceback_utils.inject_argument_info_in_error(___)", expression=True, path=p,
               name=f"{q}: {WRAPPER}", description="call in try (upstream)"),
        Anchor(q, f"traceback_utils.{WRAPPER}(___)", 0, expression=True, path=p, reported=False)))
    report_paths = True
    details = Details(
        apply="call in try in Operation.__call__ and Cond.__call__",
        present="call in try in Operation.__call__ and Cond.__call__",
        upstream="Operation.__call__ and Cond.__call__ call in try, with traceback_utils.inject_argument_info_in_error "
        "in except",
    )


PATCH = OperationCallErrorInfo()
OperationCallErrorInfoCommand = PATCH.command
