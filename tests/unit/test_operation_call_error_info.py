"""Patch operation-call-error-info (keras-team/keras#23183) on synthetic Keras-shaped modules."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodContext

from codemods.engine import AnchorDrift, Outcome, Sources
from codemods.operation_call_error_info import PATCH
from codemods.operation_call_error_info.cases import (
    AFTER,
    CORE_PY,
    FILES,
    OPERATION,
    OPERATION_PY,
    TRACEBACK_UTILS_AFTER,
    TRACEBACK_UTILS_PY,
    WRAP_LINES,
    Symbolic,
    Tensor,
    load,
)

# The changes, the upstream shape and the drift: codemods/operation_call_error_info/cases.py.


def test_synthetic_files_apply_and_are_then_present() -> None:
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


def test_codemod_refuses_drift_too() -> None:
    command = PATCH.command(CodemodContext(filename=OPERATION_PY))
    with pytest.raises(AnchorDrift):
        command.transform_module(cst.parse_module(OPERATION.replace(WRAP_LINES, "")))


# -- behaviour: upstream's wrapper and the patched call site raise the same ---------------------

UPSTREAM = load(FILES)
PATCHED = load({**FILES, **AFTER})


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
def test_same_exception_as_the_wrapper(
    kind: str, error: str, args: tuple[Any, ...], kwargs: dict[str, Any], filtering: bool
) -> None:
    upstream = scenario(UPSTREAM, kind, error, args, kwargs, filtering)
    patched = scenario(PATCHED, kind, error, args, kwargs, filtering)
    assert patched == upstream


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("error", sorted(ERRORS))
def test_every_kind_and_error(kind: str, error: str) -> None:
    args, kwargs = (Tensor(2, 3), [Tensor(1)]), {"scale": 0.5}
    upstream = scenario(UPSTREAM, kind, error, args, kwargs, True)
    assert scenario(PATCHED, kind, error, args, kwargs, True) == upstream
    assert scenario(PATCHED, kind, error, args, kwargs, False) == scenario(UPSTREAM, kind, error, args, kwargs, False)


def test_the_message_names_the_arguments_of_the_innermost_call() -> None:
    # A hand-checked instance, so that the comparison above cannot pass on two equal wrongs.
    for modules in (UPSTREAM, PATCHED):
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


def test_a_call_that_returns_is_untouched() -> None:
    for modules in (UPSTREAM, PATCHED):
        class Fine(modules[OPERATION_PY].Operation):  # type: ignore[misc,name-defined]
            def call(self, x: Any, y: Any = 2) -> Any:
                return (x, y)

        assert Fine()(1, y=3) == (1, 3)
        assert modules[CORE_PY].Cond()(False, lambda: 1, lambda: 2) == 2
