"""Patch operation-call-error-info on the installed fork: errors are raised as upstream raises them.

Upstream (3.0.0-3.15.1) wraps `call_fn` with `traceback_utils.inject_argument_info_in_traceback`
on every `Operation.__call__` / `Cond.__call__` (traceback filtering on); the patch calls
`call_fn` in `try` and hands the error to `traceback_utils.raise_with_argument_info`. The oracle
is the release under test's own, unpatched `Operation.__call__` and `Cond.__call__` (compiled
from its sources into the installed modules, `tests/equivalence/upstream.py`), swapped in for
the patched methods (`upstream_calls()`: the fork with this patch off, around the wrapper the
fork keeps): every scenario runs once each way and what a user can observe of the error must be
the same - its type, message text, args, the `_keras_call_info_injected` flag, `__cause__` /
`__context__` / `__suppress_context__`, and the frames left in the filtered traceback.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

import keras
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

PATCH_NAME = "operation-call-error-info"
APPLIED = patch_applied(PATCH_NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason=f"this fork does not apply {PATCH_NAME}")

if APPLIED:
    #: The modules the patch rewrote (keras/src/ops/operation.py, ops/core.py, utils/traceback_utils.py).
    operation_module = upstream.patched_module(PATCH_NAME, "ops/operation.py")
    core_module = upstream.patched_module(PATCH_NAME, "ops/core.py")
    traceback_utils = upstream.patched_module(PATCH_NAME, "utils/traceback_utils.py")

BACKEND = keras.backend.backend()


# -- upstream's call flow, around the wrapper the fork keeps ------------------------------------


def _relocated(code: types.CodeType, filename: str) -> types.CodeType:
    """`code`, and the code of the functions defined in it, as if compiled from `filename`."""
    consts = tuple(_relocated(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _as_keras_code(function: Any, module: types.ModuleType) -> Any:
    """`function` (an oracle from `upstream`), its code as if compiled from `module`'s file.

    Upstream's methods run from keras/src/ops/operation.py and core.py, and traceback
    filtering treats their frames as Keras's: it drops them, and when it has dropped every
    frame of a traceback it keeps the innermost one (on tensorflow, the frame of the op that
    raised). Compiled under `<upstream ...>`, the oracle's frames would be kept instead, and
    that last rule would not fire: they must run as code of those modules. Decorated
    functions (`filter_traceback`) are relocated through their `__wrapped__`.
    """
    inner = function
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    inner.__code__ = _relocated(inner.__code__, module.__file__)
    return function


@contextlib.contextmanager
def upstream_calls() -> Iterator[None]:
    """Upstream's `Operation.__call__` and `Cond.__call__` instead of the patched ones."""
    with upstream.upstream(operation_module.Operation, "__call__") as operation_call, \
            upstream.upstream(core_module.Cond, "__call__") as cond_call:
        _as_keras_code(operation_call, operation_module)
        _as_keras_code(cond_call, core_module)
        yield


@functools.cache
def upstream_inject_argument_info_in_traceback() -> Callable[..., Any]:
    """Upstream's wrapper of the release under test (the fork keeps it unchanged)."""
    return _as_keras_code(upstream.original(traceback_utils.inject_argument_info_in_traceback), traceback_utils)


@contextlib.contextmanager
def filtering(on: bool) -> Iterator[None]:
    was = keras.config.is_traceback_filtering_enabled()
    (keras.config.enable_traceback_filtering if on else keras.config.disable_traceback_filtering)()
    try:
        yield
    finally:
        (keras.config.enable_traceback_filtering if was else keras.config.disable_traceback_filtering)()


def test_the_patch_is_in_the_installed_fork() -> None:
    # The comparison below is only meaningful if the fork runs the patched methods and the
    # oracle upstream's: each with its own error path.
    assert "raise_with_argument_info" in inspect.getsource(operation_module.Operation.__call__)
    assert "raise_with_argument_info" in inspect.getsource(core_module.Cond.__call__)
    assert "inject_argument_info_in_traceback" not in inspect.getsource(operation_module.Operation.__call__)
    assert callable(traceback_utils.inject_argument_info_in_traceback)
    installed = operation_module.Operation.__dict__["__call__"], core_module.Cond.__dict__["__call__"]
    with upstream_calls():
        oracles = operation_module.Operation.__dict__["__call__"], core_module.Cond.__dict__["__call__"]
        for oracle in oracles:
            names = set(oracle.__wrapped__.__code__.co_names)
            for const in oracle.__wrapped__.__code__.co_consts:  # Cond's nested call_fn
                if isinstance(const, types.CodeType):
                    names |= set(const.co_names)
            assert "inject_argument_info_in_traceback" in names and "raise_with_argument_info" not in names
            assert keras_src() in oracle.__wrapped__.__code__.co_filename
    assert (operation_module.Operation.__dict__["__call__"], core_module.Cond.__dict__["__call__"]) == installed


# -- what a user observes -------------------------------------------------------------------------


def _text(value: object) -> str:
    """`str(value)` without object addresses (scenarios build new functions each run)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", " at 0x?", str(value))


def keras_src() -> str:
    return str(traceback_utils._EXCLUDED_PATHS[0])


def _frames(error: BaseException) -> list[tuple[str, str]]:
    """The traceback's frames outside Keras (what filtering leaves; the oracle's are Keras's)."""
    return [
        (frame.filename, frame.name) for frame in traceback.extract_tb(error.__traceback__)
        if keras_src() not in frame.filename
    ]


def observe(run: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        result = run()
    except Exception as error:  # noqa: BLE001 - every exception is compared
        context = error.__context__
        return (
            type(error), _text(error), _text(error.args),
            hasattr(error, "_keras_call_info_injected"), getattr(error, "_keras_call_info_injected", None),
            error.__cause__, error.__suppress_context__,
            type(context), _text(context), type(context.__context__) if context is not None else None,
            _frames(error),
        )
    return ("returned", keras.ops.convert_to_numpy(result).tolist() if result is not None else None)


def both(run: Callable[[], Any], on: bool = True) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(unpatched, patched) observations of `run()` with traceback filtering `on`."""
    with filtering(on):
        with upstream_calls():
            unpatched = observe(run)
        patched = observe(run)
    return unpatched, patched


# -- the errors ---------------------------------------------------------------------------------


class NeedsTwo(Exception):
    """A constructor that takes no single message: upstream raises a RuntimeError instead."""

    def __init__(self, a: object, b: object) -> None:
        super().__init__(a, b)


class Exploding(Exception):
    """A constructor that fails on the augmented message with a non-TypeError (which escapes)."""

    def __init__(self, *args: object) -> None:
        if args and "Exception encountered" in str(args[0]):
            raise KeyError("cannot rebuild")
        super().__init__(*args)


class Locked(Exception):
    """The flag cannot be set on it: upstream's AttributeError replaces the error."""

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"locked: {name}")


class Flagged(ValueError):
    """Carries a falsy flag: upstream treats it as already described (hasattr)."""

    _keras_call_info_injected = False


class Custom(ValueError):
    pass


ERRORS: dict[str, Callable[[], BaseException]] = {
    "ValueError": lambda: ValueError("bad value"),
    "TypeError": lambda: TypeError("bad type"),
    "custom": lambda: Custom("custom"),
    "no args": lambda: ValueError(),
    "non-str arg": lambda: KeyError(3),
    "two args": lambda: IndexError("first", "second"),
    "constructor takes two": lambda: NeedsTwo("a", 1),
    "constructor explodes": lambda: Exploding("boom"),
    "flag cannot be set": lambda: Locked("locked"),
    "falsy flag": lambda: Flagged("flagged"),
}


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def make_scenarios(make: Callable[[], BaseException]) -> dict[str, Callable[[], Any]]:
    """Each a call through `Operation.__call__` / `Cond.__call__` that raises `make()`.

    Every layer is named: an auto-generated name differs between the two runs of a scenario.
    """

    class Boom(keras.Operation):
        def call(self, x: Any, y: Any = 2, *rest: Any, scale: float = 1.0) -> Any:
            raise make()

    class NoArgs(keras.Operation):
        def call(self) -> Any:
            raise make()

    class Outer(keras.Operation):
        def call(self, x: Any, scale: float = 1.0) -> Any:
            return Boom(name="boom")(x, scale=scale * 2)

    class BoomLayer(keras.layers.Layer):
        def call(self, inputs: Any, training: Any = None, scale: float = 1.0) -> Any:
            raise make()

    class OuterLayer(keras.layers.Layer):
        def __init__(self) -> None:
            super().__init__(name="outer")
            self.inner = BoomLayer(name="inner")

        def call(self, inputs: Any) -> Any:
            return self.inner(inputs + 1.0, scale=3.0)

    x = keras.ops.ones((2, 3))

    def raising() -> Any:
        raise make()

    scenarios: dict[str, Callable[[], Any]] = {
        "op eager": lambda: Boom(name="boom")(x, [x, 1], scale=0.5),
        "op positional rest": lambda: Boom(name="boom")(x, 3, "a", None),
        "op symbolic": lambda: Boom(name="boom")(keras.KerasTensor((None, 3), name="symbolic"), scale=0.5),
        "op nested": lambda: Outer(name="outer_op")(x),
        "op no parameters": lambda: NoArgs(name="no_args")(),
        "op unbindable": lambda: NoArgs(name="no_args")(x),
        "op unprintable argument": lambda: Boom(name="boom")(x, y=Unprintable()),
        "layer eager": lambda: BoomLayer(name="boom")(x, training=True),
        "layer symbolic": lambda: BoomLayer(name="boom")(keras.Input((3,), name="inputs")),
        "layer nested": lambda: OuterLayer()(x),
        "layer nested symbolic": lambda: OuterLayer()(keras.Input((3,), name="inputs")),
        "cond": lambda: keras.ops.cond(True, raising, lambda: x),
        "cond nested": lambda: keras.ops.cond(False, lambda: x, lambda: Boom(name="boom")(x)),
        "layer in cond": lambda: keras.ops.cond(True, lambda: BoomLayer(name="boom")(x), lambda: x),
    }
    return scenarios


SCENARIOS = sorted(make_scenarios(lambda: ValueError()))


@pytest.mark.parametrize("on", [True, False], ids=["filtering", "no filtering"])
@pytest.mark.parametrize("error", sorted(ERRORS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_error_as_upstream(scenario: str, error: str, on: bool) -> None:
    run = make_scenarios(ERRORS[error])[scenario]
    unpatched, patched = both(run, on)
    assert unpatched[0] != "returned", "the scenario must raise"
    assert patched == unpatched


def test_the_message_is_upstreams_wrappers() -> None:
    # Its parts spelled out once, so that the comparisons cannot pass by both sides being wrong
    # alike (say, the oracle not installed, or describing no argument).
    run = make_scenarios(lambda: ValueError("bad value"))["op nested"]
    unpatched, patched = both(run)
    assert patched == unpatched
    kind, message, _, has_flag, flag, cause, suppress, context_kind, context, _, frames = patched
    assert kind is ValueError and has_flag and flag is True and cause is None and suppress is True
    assert message.startswith("Exception encountered when calling Boom.call().\n\n")
    assert "bad value" in message and "\n\nArguments received by Boom.call():\n" in message
    # Only the innermost call is described: Boom's parameters, with the values Outer passed.
    bullets = message.split("Arguments received by Boom.call():\n", 1)[1].split("\n")
    assert [b.split("=", 1)[0] for b in bullets] == ["  • x", "  • y", "  • rest", "  • scale"]
    assert "  • y=2" in bullets and "  • scale=2.0" in bullets and "Outer" not in message
    assert context_kind is ValueError and context == "bad value"
    assert [name for _, name in frames][-1] == "call" and all("keras/src" not in f for f, _ in frames)


def test_unbindable_arguments_keep_the_original_error() -> None:
    unpatched, patched = both(make_scenarios(lambda: ValueError("x"))["op unbindable"])
    assert patched == unpatched
    assert patched[0] is TypeError and patched[3] is False and patched[7] is TypeError


def _bullets(function: Callable[..., Any]) -> list[str]:
    """The bullet heads upstream's wrapper writes for a call of `function`: its parameters."""
    return [f"  • {name}=" for name in inspect.signature(function).parameters]


def test_symbolic_calls_describe_symbolic_calls_arguments() -> None:
    # Upstream wraps `symbolic_call(*args, **kwargs)`: its bullets name symbolic_call's
    # parameters, not call()'s (nightly's helper changed that; the patch must not).
    unpatched, patched = both(make_scenarios(lambda: ValueError("x"))["op symbolic"])
    assert patched == unpatched
    symbolic, call = _bullets(keras.Operation().symbolic_call), ["  • x=", "  • y=", "  • rest=", "  • scale="]
    assert symbolic != call and all(bullet in patched[1] for bullet in symbolic)
    assert not any(bullet in patched[1] for bullet in call)
    assert "'scale': '0.5'" in patched[1]


def test_quantized_layer() -> None:
    layer = keras.layers.Dense(4)
    layer.build((None, 3))
    try:
        layer.quantize("int8")
    except Exception as error:  # pragma: no cover - a backend without int8 quantization
        pytest.skip(f"int8 quantization unavailable: {error}")
    # Let the wrong shape through to quantized_call (the input spec would refuse it first).
    layer.input_spec = None
    for on in (True, False):
        unpatched, patched = both(lambda: layer(keras.ops.ones((2, 5))), on)
        assert unpatched[0] != "returned" and patched == unpatched
        # quantized_call is what upstream wraps: its bullets name quantized_call's parameters.
        assert not on or all(bullet in patched[1] for bullet in _bullets(layer.quantized_call))
    unpatched, patched = both(lambda: layer(keras.ops.ones((2, 3))))
    assert patched[0] == "returned" and patched == unpatched


@pytest.mark.skipif(not hasattr(keras, "RematScope"), reason="keras.RematScope exists from 3.9 on")
def test_rematerialized_layer() -> None:
    with keras.RematScope(mode="full"):
        layer = keras.layers.Dense(4)
        layer.build((None, 3))
    for on in (True, False):
        unpatched, patched = both(lambda: layer(keras.ops.ones((2, 5))), on)
        assert unpatched[0] != "returned" and patched == unpatched


def test_calls_that_return_are_unchanged() -> None:
    x = keras.ops.ones((2, 3))
    layer = keras.layers.Dense(4, kernel_initializer="ones")
    cond = lambda: keras.ops.cond(keras.ops.convert_to_tensor(True), lambda: x * 2.0, lambda: x)  # noqa: E731
    for run in (lambda: layer(x), cond, lambda: keras.ops.add(x, x)):
        unpatched, patched = both(run)
        assert patched[0] == "returned" and patched == unpatched


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.errors.OpError exists on the tensorflow backend only")
@pytest.mark.parametrize("on", [True, False], ids=["filtering", "no filtering"])
def test_tensorflow_op_error(on: bool) -> None:
    import tensorflow as tf

    def make() -> BaseException:
        return tf.errors.InvalidArgumentError(None, None, "tf says no")

    for scenario in ("op eager", "layer eager", "op nested", "cond"):
        unpatched, patched = both(make_scenarios(make)[scenario], on)
        assert unpatched[0] is tf.errors.InvalidArgumentError and patched == unpatched


# -- the helper itself against upstream's wrapper, on arbitrary calls -------------------------


def _via_wrapper(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None) -> Any:
    return upstream_inject_argument_info_in_traceback()(fn, object_name=name)(*args, **kwargs)


def _via_helper(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        traceback_utils.raise_with_argument_info(e, fn, args, kwargs, object_name=name)


VALUES = st.one_of(
    st.integers(), st.text(max_size=4), st.none(), st.floats(allow_nan=False),
    st.sampled_from([(1, 2), {"a": 1}, [None]]),
    st.tuples(st.integers(1, 3), st.integers(1, 3)).map(keras.ops.ones),
)


@given(
    error=st.sampled_from(sorted(ERRORS)),
    signature=st.sampled_from(["x", "x, y=1", "*args, **kwargs", "x, *rest, k=None", "", "x, /, y"]),
    args=st.lists(VALUES, max_size=3).map(tuple),
    kwargs=st.dictionaries(st.sampled_from(["y", "k", "z"]), VALUES, max_size=2),
    name=st.sampled_from([None, "", "Thing.call()"]),
)
def test_helper_raises_what_the_wrapper_raises(
    error: str, signature: str, args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None
) -> None:
    make = ERRORS[error]
    namespace: dict[str, Any] = {"make": make}
    exec(f"def fn({signature}):\n    raise make()\n", namespace)  # noqa: S102 - a signature under test
    fn = namespace["fn"]
    with filtering(True):
        unpatched = observe(lambda: _via_wrapper(fn, args, kwargs, name))
        patched = observe(lambda: _via_helper(fn, args, kwargs, name))
    # Frames: the wrapper's error_handler vs this test's _via_helper, both Keras-internal or the
    # harness; the rest must match.
    strip = {"_via_wrapper", "_via_helper"}
    assert patched[:-1] == unpatched[:-1]
    assert [f for f in patched[-1] if f[1] not in strip] == [f for f in unpatched[-1] if f[1] not in strip]
