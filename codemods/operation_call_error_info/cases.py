"""What `operation-call-error-info` makes of Keras-shaped traceback_utils, operation and core
modules (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the
equivalence suite must catch. The behaviour tests (upstream's wrapper and the patched call
sites raise the same) execute these modules: tests/unit/test_operation_call_error_info.py."""

from importlib import resources

from codemods.engine import Case, Mutant
from tests.support.synthetic_operation_call_error_info import (
    CORE,
    CORE_PY,
    OPERATION,
    OPERATION_PY,
    TRACEBACK_UTILS,
    TRACEBACK_UTILS_PY,
)

MARK = "  # forkgen: operation-call-error-info"
WRAP_LINES = """\
            call_fn = traceback_utils.inject_argument_info_in_traceback(
                call_fn,
                object_name=(f"{self.__class__.__name__}.call()"),
            )
"""
CALL = "            return call_fn(*args, **kwargs)\n"
TRY = f"""\
            try:{MARK}
                return call_fn(*args, **kwargs)
            except Exception as e:
                traceback_utils.raise_with_argument_info(
                    e, call_fn, args, kwargs, object_name=(f"{{self.__class__.__name__}}.call()")
                )
"""
OPERATION_AFTER = OPERATION.replace(WRAP_LINES + CALL, TRY)
#: Cond's comment line above the wrapper stays above the `try`.
CORE_AFTER = CORE.replace(WRAP_LINES + CALL, TRY)
assert OPERATION_AFTER != OPERATION and CORE_AFTER != CORE and "# Wrap call_fn" in CORE_AFTER


def _helper_source() -> str:
    """The helper as a module-level function: the template's, one level out (its docstring
    is written as it reads there)."""
    template = resources.files(__package__).joinpath("inserted.py").read_text("utf-8")
    body = template[template.index("    def raise_with_argument_info("):template.index("\n\n\ndef call_site(")]
    lines = body.split("\n")
    first = next(i for i, line in enumerate(lines) if '"""' in line)
    last = next(i for i, line in enumerate(lines) if i > first and '"""' in line)
    # The docstring's own lines are string text: as they read at module level already.
    return "\n".join(line if first < i <= last else line[4:] for i, line in enumerate(lines)) + "\n"

TRACEBACK_UTILS_AFTER = TRACEBACK_UTILS.replace(
    "\n\ndef format_argument_value(", "\n\n" + _helper_source() + "\n\ndef format_argument_value("
)
AFTER = {TRACEBACK_UTILS_PY: TRACEBACK_UTILS_AFTER, OPERATION_PY: OPERATION_AFTER, CORE_PY: CORE_AFTER}

# keras-nightly's shape (#23183 as merged): call in try, `inject_argument_info_in_error` in except.
NIGHTLY_TRY = """\
            try:
                return call_fn(*args, **kwargs)
            except Exception as e:
                if not getattr(e, "_keras_call_info_injected", False):
                    raise traceback_utils.inject_argument_info_in_error(
                        e, self.call, args, kwargs, object_name="x"
                    ) from None
                raise
"""
NIGHTLY = {
    TRACEBACK_UTILS_PY: TRACEBACK_UTILS.replace("def inject_argument_info_in_traceback(", "def inject_argument_info_in_error("),
    OPERATION_PY: OPERATION.replace(WRAP_LINES + CALL, NIGHTLY_TRY),
    CORE_PY: CORE.replace(WRAP_LINES + CALL, NIGHTLY_TRY),
}


def tree(**changed: str) -> dict[str, str]:
    paths = {"traceback_utils": TRACEBACK_UTILS_PY, "operation": OPERATION_PY, "core": CORE_PY}
    return {TRACEBACK_UTILS_PY: TRACEBACK_UTILS, OPERATION_PY: OPERATION, CORE_PY: CORE,
            **{paths[k]: v for k, v in changed.items()}}


CASES = (
    Case("calls in try at both sites, the helper after the wrapper (which stays)", tree(), AFTER,
         detail="call in try in Operation.__call__ and Cond.__call__",
         anchors=(("def inject_argument_info_in_traceback", 21), ("Operation.__call__: inject_argument_info_in_traceback", 21),
                  ("Cond.__call__: inject_argument_info_in_traceback", 23))),
    Case("keras-nightly's try with inject_argument_info_in_error", tree(**{k.split("/")[-1][:-3]: v for k, v in NIGHTLY.items()}),
         upstream=True),
    Case("the wrapper gone", tree(operation=OPERATION.replace(WRAP_LINES, "")),
         drift="anchor 'Operation.__call__: inject_argument_info_in_traceback': expected exactly one `Operation.__call__: "
               "inject_argument_info_in_traceback` in Operation.__call__; found 0 not replaced and 0 replaced"),
    Case("wrapped twice", tree(operation=OPERATION.replace(WRAP_LINES, WRAP_LINES + "            return 0\n" + WRAP_LINES)),
         drift="traceback_utils.inject_argument_info_in_traceback(___)` in Operation.__call__; found 2"),
    # Outside the filtering branch: the wrapper's own flag check would be lost.
    Case("outside the filtering if", tree(operation=OPERATION.replace(
        "        if traceback_utils.is_traceback_filtering_enabled():\n", "        if True:\n")),
        drift="anchor 'Operation.__call__: filtering branch'"),
    # object_name passed positionally: not the shape the helper call copies.
    Case("object_name positional", tree(operation=OPERATION.replace("                object_name=(f", "                (f")),
         drift="found 0"),
    Case("call reshaped", tree(operation=OPERATION.replace("return call_fn(*args, **kwargs)\n\n", "return call_fn(*args)\n\n")),
         drift="found 0"),
    Case("no Cond", tree(core=CORE.replace("class Cond(", "class Other(")), drift="exactly one class Cond"),
    Case("forkgen's Operation call site without its helper or Cond's", tree(operation=OPERATION_AFTER),
         drift="all pieces present or none"),
    Case("a helper not ours", tree(traceback_utils=TRACEBACK_UTILS_AFTER.replace(MARK, "")),
         drift="all pieces upstream's or none"),
    Case("no formatter", tree(traceback_utils=TRACEBACK_UTILS.replace("def format_argument_value(", "def format_value(")),
         drift="format_argument_value"),
    Case("no wrapper", tree(traceback_utils="import os\n"), drift="def inject_argument_info_in_traceback"),
)

MUTANTS = (
    Mutant("the arguments described are those of call(), not of the function called",
           "            e, call_fn, args, kwargs, object_name=__object_name\n",
           "            e, self.call, args, kwargs, object_name=__object_name\n"),
    Mutant("a falsy flag no longer counts as described", '        if hasattr(e, "_keras_call_info_injected"):\n',
           '        if getattr(e, "_keras_call_info_injected", False):\n'),
)
