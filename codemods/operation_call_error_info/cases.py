"""What `operation-call-error-info` makes of Keras-shaped traceback_utils, operation and core
modules, how the patched call sites raise beside upstream's wrapper (both run by
tests/unit/test_patch_cases.py), the breaks of its inserted code the equivalence suite must
catch, and those synthetic modules (keras-team/keras#23183).

`FILES` holds the three Keras-shaped modules the patch anchors on, reduced to the anchors:
`traceback_utils.py` with the wrapper `inject_argument_info_in_traceback` (written here from
its documented behaviour, in our words) and `format_argument_value`, `operation.py` with
`Operation.__call__` and `core.py` with `Cond.__call__`, both wrapping `call_fn` inside
`if traceback_utils.is_traceback_filtering_enabled():` as Keras 3.0.0-3.15.1 do.

`load(files)` executes such a tree (patched or not) against the stand-ins below for the
Keras modules it imports, so the behaviours at the end (upstream's wrapper and the patched call
sites raise the same) can run upstream's and the patched code side by side.
"""

import functools
import re
import textwrap
import types
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodContext

from codemods.engine import AnchorDrift, Case, Mutant, Outcome, Sources, piece_text, run_module
from codemods.operation_call_error_info import PATCH

TRACEBACK_UTILS = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/utils/traceback_utils.py."""

    import inspect
    from functools import wraps

    from keras.src import backend
    from keras.src import tree

    #: Stands for the global `traceback_filtering` attribute.
    STATE = {"traceback_filtering": True}


    def is_traceback_filtering_enabled():
        return STATE["traceback_filtering"]


    def filter_traceback(fn):
        return fn


    def inject_argument_info_in_traceback(fn, object_name=None):
        """`fn`, re-raising what it raises with the arguments of the call listed."""

        @wraps(fn)
        def error_handler(*args, **kwargs):
            if not is_traceback_filtering_enabled():
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if hasattr(e, "_keras_call_info_injected"):
                    raise e
                signature = inspect.signature(fn)
                try:
                    arguments = signature.bind(*args, **kwargs).arguments
                except TypeError:
                    raise e
                listed = []
                for parameter in signature.parameters.values():
                    if parameter.name in arguments:
                        shown = tree.map_structure(
                            format_argument_value, arguments[parameter.name]
                        )
                    else:
                        shown = parameter.default
                    listed.append(f"  • {parameter.name}={shown}")
                if not listed:
                    raise e.with_traceback(e.__traceback__) from None
                text = e.args[0] if e.args else ""
                who = object_name if object_name else fn.__name__
                message = (
                    f"Exception encountered when calling {who}.\\n\\n"
                    f"\\x1b[1m{text}\\x1b[0m\\n\\n"
                    f"Arguments received by {who}:\\n" + "\\n".join(listed)
                )
                try:
                    new_e = e.__class__(message)
                except TypeError:
                    new_e = RuntimeError(message)
                new_e._keras_call_info_injected = True
                raise new_e.with_traceback(e.__traceback__) from None

        return error_handler


    def format_argument_value(value):
        if backend.is_tensor(value):
            return f"Tensor(shape={value.shape})"
        return repr(value)
    '''
)

OPERATION = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/operation.py."""

    from keras.src.backend.common.keras_tensor import any_symbolic_tensors
    from keras.src.utils import traceback_utils


    class Operation:
        def __init__(self, name=None):
            self.name = name

        @traceback_utils.filter_traceback
        def __call__(self, *args, **kwargs):
            if traceback_utils.is_traceback_filtering_enabled():
                # Pick the function to call.
                if any_symbolic_tensors(args, kwargs):
                    call_fn = self.symbolic_call
                elif getattr(self, "quantization_mode", None) is not None:
                    call_fn = self.quantized_call
                else:
                    call_fn = self.call
                call_fn = traceback_utils.inject_argument_info_in_traceback(
                    call_fn,
                    object_name=(f"{self.__class__.__name__}.call()"),
                )
                return call_fn(*args, **kwargs)

            # Plain flow.
            if any_symbolic_tensors(args, kwargs):
                return self.symbolic_call(*args, **kwargs)
            return self.call(*args, **kwargs)

        def symbolic_call(self, *args, **kwargs):
            return self.compute_output_spec(*args, **kwargs)

        def quantized_call(self, *args, **kwargs):
            return self.call(*args, **kwargs)
    '''
)

CORE = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/core.py."""

    from keras.src.backend.common.keras_tensor import any_symbolic_tensors
    from keras.src.ops.operation import Operation
    from keras.src.utils import traceback_utils


    def helper_before():
        return None


    class Cond(Operation):
        @traceback_utils.filter_traceback
        def __call__(self, *args, **kwargs):
            def call_fn(*args, **kwargs):
                if any_symbolic_tensors(args, kwargs):
                    return self.symbolic_call(*args, **kwargs)
                else:
                    return self.call(*args, **kwargs)

            if traceback_utils.is_traceback_filtering_enabled():
                # Wrap call_fn to describe its arguments in an error.
                call_fn = traceback_utils.inject_argument_info_in_traceback(
                    call_fn,
                    object_name=(f"{self.__class__.__name__}.call()"),
                )
                return call_fn(*args, **kwargs)

            # Plain flow.
            return call_fn(*args, **kwargs)

        def call(self, pred, true_fn, false_fn):
            return true_fn() if pred else false_fn()

        def compute_output_spec(self, pred, true_fn, false_fn):
            return true_fn()
    '''
)

TRACEBACK_UTILS_PY = "keras/src/utils/traceback_utils.py"
OPERATION_PY = "keras/src/ops/operation.py"
CORE_PY = "keras/src/ops/core.py"

FILES: dict[str, str] = {
    "keras/src/ops/__init__.py": "",
    "keras/src/utils/__init__.py": "",
    TRACEBACK_UTILS_PY: TRACEBACK_UTILS,
    OPERATION_PY: OPERATION,
    CORE_PY: CORE,
}


# -- stand-ins for the Keras modules the synthetic files import ---------------------------------


class Tensor:
    """Stands for an eager tensor (`format_argument_value` shows its shape)."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape

    def __repr__(self) -> str:
        return f"Tensor{self.shape}"


class Symbolic:
    """Stands for a KerasTensor: its presence makes `Operation.__call__` call `symbolic_call`."""

    def __repr__(self) -> str:
        return "<Symbolic>"


def _map_structure(fn: Any, x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _map_structure(fn, v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_map_structure(fn, v) for v in x)
    return fn(x)


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def _any_symbolic_tensors(args: Any = None, kwargs: Any = None) -> bool:
    return any(isinstance(leaf, Symbolic) for leaf in _leaves([args or (), kwargs or {}]))


def load(files: Mapping[str, str]) -> dict[str, types.ModuleType]:
    """Execute the synthetic traceback_utils, operation and core modules of `files` (`run_module`),
    each one's Keras imports given the stand-ins above and the modules executed before it."""
    loaded: dict[str, Any] = {
        "keras.src": types.SimpleNamespace(
            backend=types.SimpleNamespace(backend=lambda: "numpy", is_tensor=lambda x: isinstance(x, Tensor)),
            tree=types.SimpleNamespace(map_structure=_map_structure),
        ),
        "keras.src.backend.common.keras_tensor": types.SimpleNamespace(any_symbolic_tensors=_any_symbolic_tensors),
    }

    modules: dict[str, types.ModuleType] = {}
    for dotted, path, attr in (
        ("keras.src.utils", TRACEBACK_UTILS_PY, "traceback_utils"),
        ("keras.src.ops.operation", OPERATION_PY, None),
        ("keras.src.ops.core", CORE_PY, None),
    ):
        module = run_module(files[path], path, loaded)
        modules[path] = module
        loaded[dotted] = types.SimpleNamespace(**{attr: module}) if attr else types.SimpleNamespace(**module.__dict__)
    return modules


# -- the cases ----------------------------------------------------------------------------------

MARK = "  # forkgen: operation-call-error-info"
WRAP_LINES = """\
            call_fn = traceback_utils.inject_argument_info_in_traceback(
                call_fn,
                object_name=(f"{self.__class__.__name__}.call()"),
            )
"""
CALL = "            return call_fn(*args, **kwargs)\n"
#: `call_site`, its `__object_name` the expression upstream passed to the wrapper.
TRY = piece_text(__file__, "call_site", " " * 12).replace("__object_name", '(f"{self.__class__.__name__}.call()")')
assert MARK in TRY
OPERATION_AFTER = OPERATION.replace(WRAP_LINES + CALL, TRY)
#: Cond's comment line above the wrapper stays above the `try`.
CORE_AFTER = CORE.replace(WRAP_LINES + CALL, TRY)
assert OPERATION_AFTER != OPERATION and CORE_AFTER != CORE and "# Wrap call_fn" in CORE_AFTER

#: The helper as a module-level function (`helper`'s body, one level out; its docstring is written
#: as it reads there).
TRACEBACK_UTILS_AFTER = TRACEBACK_UTILS.replace(
    "\n\ndef format_argument_value(", "\n\n" + piece_text(__file__, "helper") + "\n\ndef format_argument_value("
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


# -- behaviours: the patched call sites apply as cased and raise what upstream's wrapper raises ----


def the_synthetic_files_apply_and_are_then_present() -> None:
    tree_ = Sources(FILES.get)
    first = PATCH.check(tree_)
    assert first.outcome is Outcome.APPLIED and not first.present
    assert [(a.path, a.line) for a in first.anchors] == [(TRACEBACK_UTILS_PY, 21), (OPERATION_PY, 21), (CORE_PY, 23)]
    PATCH.apply(tree_)
    rendered = tree_.rendered()
    assert rendered == AFTER
    for path, text in rendered.items():
        compile(text, path, "exec")
    assert TRACEBACK_UTILS_AFTER.count("def inject_argument_info_in_traceback(") == 1
    assert TRACEBACK_UTILS_AFTER.index("def inject_argument_info_in_traceback(") < TRACEBACK_UTILS_AFTER.index(
        "def raise_with_argument_info(") < TRACEBACK_UTILS_AFTER.index("def format_argument_value(")
    again = PATCH.check(Sources({**FILES, **rendered}.get))
    assert again.outcome is Outcome.APPLIED and again.present


def the_codemod_refuses_drift_too() -> None:
    command = PATCH.command(CodemodContext(filename=OPERATION_PY))
    with pytest.raises(AnchorDrift):
        command.transform_module(cst.parse_module(OPERATION.replace(WRAP_LINES, "")))


@functools.cache
def _sides() -> tuple[dict[str, types.ModuleType], dict[str, types.ModuleType]]:
    """Upstream's synthetic modules and the patched ones, loaded once (by the first behaviour
    that runs them)."""
    return load(FILES), load({**FILES, **AFTER})


class NeedsTwo(Exception):
    def __init__(self, a: object, b: object) -> None:
        super().__init__(a, b)


class Exploding(Exception):
    def __init__(self, *args: object) -> None:
        if args and "Exception encountered" in str(args[0]):
            raise KeyError("no rebuilding")
        super().__init__(*args)


class Locked(Exception):
    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"locked {name}")


class Flagged(Exception):
    _keras_call_info_injected = False


ERRORS: dict[str, Callable[[], BaseException]] = {
    "value": lambda: ValueError("bad value"),
    "type": lambda: TypeError("bad type"),
    "empty": lambda: ValueError(),
    "non-str": lambda: KeyError(3),
    "two-args": lambda: NeedsTwo("a", 1),
    "exploding": lambda: Exploding("boom"),
    "locked": lambda: Locked("locked"),
    "flagged": lambda: Flagged("already"),
    "runtime": lambda: RuntimeError("rt"),
}


def _text(value: object) -> str:
    """`str(value)` without object addresses (each run makes new functions)."""
    return re.sub(r" at 0x[0-9a-f]+", " at 0x?", str(value))


def outcome(run: Callable[[], Any]) -> tuple[Any, ...]:
    """What a user observes of a call: its result, or the exception's type, text and links."""
    try:
        return ("returned", run())
    except Exception as error:  # noqa: BLE001 - every exception is compared
        context = error.__context__
        return (
            type(error).__name__, _text(error), _text(error.args), hasattr(error, "_keras_call_info_injected"),
            getattr(error, "_keras_call_info_injected", None), error.__cause__, error.__suppress_context__,
            type(context).__name__, _text(context),
            type(context.__context__).__name__ if context is not None else None,
        )


def scenario(modules: dict[str, Any], kind: str, error: str, args: tuple[Any, ...], kwargs: dict[str, Any],
             filtering: bool) -> tuple[Any, ...]:
    operation = modules[OPERATION_PY].Operation
    cond = modules[CORE_PY].Cond
    make = ERRORS[error]

    class Boom(operation):  # type: ignore[misc,valid-type]
        def call(self, x: Any, y: Any = 2, *rest: Any, scale: float = 1.0) -> Any:
            raise make()

        def compute_output_spec(self, *args: Any, **kwargs: Any) -> Any:
            raise make()

    class NoArgs(operation):  # type: ignore[misc,valid-type]
        def call(self) -> Any:
            raise make()

    class Outer(operation):  # type: ignore[misc,valid-type]
        def call(self, x: Any, y: Any = 2, *rest: Any, scale: float = 1.0) -> Any:
            return Boom()(x, y, *rest, scale=scale)

    class Quantized(Boom):
        quantization_mode = "int8"

    def raising() -> Any:
        raise make()

    runs: dict[str, Callable[[], Any]] = {
        "eager": lambda: Boom()(*args, **kwargs),
        "symbolic": lambda: Boom()(Symbolic(), *args[1:], **kwargs),
        "quantized": lambda: Quantized()(*args, **kwargs),
        "nested": lambda: Outer()(*args, **kwargs),
        "no-args": lambda: NoArgs()(),
        "unbindable": lambda: NoArgs()(*args, **kwargs),
        "cond": lambda: cond()(True, raising, lambda: 0),
        "cond-nested": lambda: cond()(True, lambda: Boom()(*args, **kwargs), lambda: 0),
    }
    state = modules[TRACEBACK_UTILS_PY].STATE
    state["traceback_filtering"] = filtering
    try:
        return outcome(runs[kind])
    finally:
        state["traceback_filtering"] = True


VALUES = st.one_of(
    st.integers(), st.text(max_size=5), st.none(),
    st.builds(Tensor, st.integers(0, 4), st.integers(0, 4)),
    st.lists(st.builds(Tensor, st.integers(0, 3)), max_size=2),
)
KINDS = ["eager", "symbolic", "quantized", "nested", "no-args", "unbindable", "cond", "cond-nested"]


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    error=st.sampled_from(sorted(ERRORS)),
    args=st.lists(VALUES, min_size=1, max_size=3).map(tuple),
    kwargs=st.dictionaries(st.sampled_from(["y", "scale", "extra"]), VALUES, max_size=2),
    filtering=st.booleans(),
)
def same_exception_as_the_wrapper(
    kind: str, error: str, args: tuple[Any, ...], kwargs: dict[str, Any], filtering: bool
) -> None:
    upstream_modules, patched_modules = _sides()
    upstream = scenario(upstream_modules, kind, error, args, kwargs, filtering)
    patched = scenario(patched_modules, kind, error, args, kwargs, filtering)
    assert patched == upstream


def every_kind_and_error() -> None:
    # Every kind with every error (the old test's parametrized product, as a loop).
    upstream_modules, patched_modules = _sides()
    args, kwargs = (Tensor(2, 3), [Tensor(1)]), {"scale": 0.5}
    for kind in KINDS:
        for error in sorted(ERRORS):
            upstream = scenario(upstream_modules, kind, error, args, kwargs, True)
            assert scenario(patched_modules, kind, error, args, kwargs, True) == upstream, (kind, error)
            assert scenario(patched_modules, kind, error, args, kwargs, False) == scenario(
                upstream_modules, kind, error, args, kwargs, False), (kind, error)


def the_message_names_the_arguments_of_the_innermost_call() -> None:
    # A hand-checked instance, so that the comparison above cannot pass on two equal wrongs.
    for modules in _sides():
        result = scenario(modules, "nested", "value", (Tensor(2, 3),), {"scale": 0.5}, True)
        assert result[0] == "ValueError" and result[3] is True and result[4] is True
        assert result[1] == (
            "Exception encountered when calling Boom.call().\n\n\x1b[1mbad value\x1b[0m\n\n"
            "Arguments received by Boom.call():\n  • x=Tensor(shape=(2, 3))\n  • y=2\n"
            "  • rest=<class 'inspect._empty'>\n  • scale=0.5"
        )
        assert result[5] is None and result[6] is True and result[7:9] == ("ValueError", "bad value")
        symbolic = scenario(modules, "symbolic", "type", (Tensor(1),), {}, True)
        assert symbolic[0] == "TypeError" and (
            "  • args=('<Symbolic>',)\n  • kwargs=<class 'inspect._empty'>"  # symbolic_call's own signature
        ) in symbolic[1]
        assert scenario(modules, "eager", "two-args", (1,), {}, True)[0] == "RuntimeError"
        unbindable = scenario(modules, "unbindable", "value", (1,), {}, True)
        assert unbindable[0] == "TypeError" and unbindable[3] is False and unbindable[7] == "TypeError"


def a_call_that_returns_is_untouched() -> None:
    for modules in _sides():
        class Fine(modules[OPERATION_PY].Operation):  # type: ignore[misc,name-defined]
            def call(self, x: Any, y: Any = 2) -> Any:
                return (x, y)

        assert Fine()(1, y=3) == (1, 3)
        assert modules[CORE_PY].Cond()(False, lambda: 1, lambda: 2) == 2


BEHAVIOURS = (
    the_synthetic_files_apply_and_are_then_present,
    the_codemod_refuses_drift_too,
    same_exception_as_the_wrapper,
    every_kind_and_error,
    the_message_names_the_arguments_of_the_innermost_call,
    a_call_that_returns_is_untouched,
)
