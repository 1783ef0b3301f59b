"""Patch operation-call-error-info on the installed fork: errors are raised as 3.15.1 raises them.

Keras 3.15.1 wraps `call_fn` with `traceback_utils.inject_argument_info_in_traceback` on every
`Operation.__call__` / `Cond.__call__` (traceback filtering on); the patch calls `call_fn` in
`try` and hands the error to `traceback_utils.raise_with_argument_info`. The wrapper stays in
the fork, so the reference here is 3.15.1's `__call__` flow written in this file around that
very wrapper, swapped in for the patched methods (`upstream_calls()`): every scenario runs once
each way and what a user can observe of the error must be the same - its type, message text,
args, the `_keras_call_info_injected` flag, `__cause__` / `__context__` /
`__suppress_context__`, and the frames left in the filtered traceback.
"""

from __future__ import annotations

import contextlib
import re
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

import keras
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence.helpers import patch_applied

PATCH_NAME = "operation-call-error-info"
APPLIED = patch_applied(PATCH_NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason=f"this fork does not apply {PATCH_NAME}")

from keras.src.backend.common.keras_tensor import any_symbolic_tensors  # noqa: E402
from keras.src.ops import core as core_module  # noqa: E402
from keras.src.ops import operation as operation_module  # noqa: E402
from keras.src.utils import traceback_utils  # noqa: E402

BACKEND = keras.backend.backend()


# -- 3.15.1's call flow, around the wrapper the fork keeps --------------------------------------


@traceback_utils.filter_traceback
def reference_operation_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """`Operation.__call__` as Keras 3.15.1 writes it (operation.py:36-81)."""
    if traceback_utils.is_traceback_filtering_enabled():
        if any_symbolic_tensors(args, kwargs):
            call_fn = self.symbolic_call
        elif self._remat_mode:
            if getattr(self, "quantization_mode", None) is not None:
                call_fn = self.rematerialized_call(self.quantized_call, *args, **kwargs)
            else:
                call_fn = self.rematerialized_call(self.call, *args, **kwargs)
        elif getattr(self, "quantization_mode", None) is not None:
            call_fn = self.quantized_call
        else:
            call_fn = self.call
        call_fn = traceback_utils.inject_argument_info_in_traceback(
            call_fn, object_name=f"{self.__class__.__name__}.call()"
        )
        return call_fn(*args, **kwargs)
    if any_symbolic_tensors(args, kwargs):
        return self.symbolic_call(*args, **kwargs)
    if self._remat_mode:
        if getattr(self, "quantization_mode", None) is not None:
            return self.rematerialized_call(self.quantized_call, *args, **kwargs)(*args, **kwargs)
        return self.rematerialized_call(self.call, *args, **kwargs)(*args, **kwargs)
    if getattr(self, "quantization_mode", None) is not None:
        return self.quantized_call(*args, **kwargs)
    return self.call(*args, **kwargs)


@traceback_utils.filter_traceback
def reference_cond_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """`Cond.__call__` as Keras 3.15.1 writes it (core.py:1069-1087)."""

    def call_fn(*args: Any, **kwargs: Any) -> Any:
        if any_symbolic_tensors(args, kwargs):
            return self.symbolic_call(*args, **kwargs)
        return self.call(*args, **kwargs)

    if traceback_utils.is_traceback_filtering_enabled():
        call_fn = traceback_utils.inject_argument_info_in_traceback(
            call_fn, object_name=f"{self.__class__.__name__}.call()"
        )
        return call_fn(*args, **kwargs)
    return call_fn(*args, **kwargs)


def _relocated(code: types.CodeType, filename: str) -> types.CodeType:
    """`code`, and the code of the functions defined in it, as if compiled from `filename`."""
    consts = tuple(_relocated(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


# In 3.15.1 the two flows run from keras/src/ops/operation.py and core.py, and traceback
# filtering treats their frames as Keras's: it drops them, and when it has dropped every frame
# of a traceback it keeps the innermost one (on tensorflow, the frame of the op that raised).
# Written in this file, the reference's frames would be kept instead, and that last rule would
# not fire: they run as code of those modules.
for _reference, _module in ((reference_operation_call, operation_module), (reference_cond_call, core_module)):
    _inner = _reference.__wrapped__  # type: ignore[attr-defined]
    _inner.__code__ = _relocated(_inner.__code__, _module.__file__)


@contextlib.contextmanager
def upstream_calls() -> Iterator[None]:
    """3.15.1's `Operation.__call__` and `Cond.__call__` instead of the patched ones."""
    operation, cond = operation_module.Operation, core_module.Cond
    saved = operation.__dict__["__call__"], cond.__dict__["__call__"]
    operation.__call__ = reference_operation_call  # type: ignore[method-assign]
    cond.__call__ = reference_cond_call  # type: ignore[method-assign]
    try:
        yield
    finally:
        operation.__call__, cond.__call__ = saved  # type: ignore[method-assign]


@contextlib.contextmanager
def filtering(on: bool) -> Iterator[None]:
    was = keras.config.is_traceback_filtering_enabled()
    (keras.config.enable_traceback_filtering if on else keras.config.disable_traceback_filtering)()
    try:
        yield
    finally:
        (keras.config.enable_traceback_filtering if was else keras.config.disable_traceback_filtering)()


def test_the_patch_is_in_the_installed_fork() -> None:
    # The comparison below is only meaningful if the fork runs the patched methods.
    import inspect

    assert "raise_with_argument_info" in inspect.getsource(operation_module.Operation.__call__)
    assert "raise_with_argument_info" in inspect.getsource(core_module.Cond.__call__)
    assert "inject_argument_info_in_traceback" not in inspect.getsource(operation_module.Operation.__call__)
    assert callable(traceback_utils.inject_argument_info_in_traceback)


# -- what a user observes -------------------------------------------------------------------------


def _text(value: object) -> str:
    """`str(value)` without object addresses (scenarios build new functions each run)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", " at 0x?", str(value))


def _frames(error: BaseException) -> list[tuple[str, str]]:
    """The traceback's frames outside Keras (what filtering leaves; the reference's are Keras's)."""
    keras_src = traceback_utils._EXCLUDED_PATHS[0]
    return [
        (frame.filename, frame.name) for frame in traceback.extract_tb(error.__traceback__)
        if keras_src not in frame.filename
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
    """(3.15.1, patched) observations of `run()` with traceback filtering `on`."""
    with filtering(on):
        with upstream_calls():
            upstream = observe(run)
        patched = observe(run)
    return upstream, patched


# -- the errors ---------------------------------------------------------------------------------


class NeedsTwo(Exception):
    """A constructor that takes no single message: 3.15.1 raises a RuntimeError instead."""

    def __init__(self, a: object, b: object) -> None:
        super().__init__(a, b)


class Exploding(Exception):
    """A constructor that fails on the augmented message with a non-TypeError (which escapes)."""

    def __init__(self, *args: object) -> None:
        if args and "Exception encountered" in str(args[0]):
            raise KeyError("cannot rebuild")
        super().__init__(*args)


class Locked(Exception):
    """The flag cannot be set on it: 3.15.1's AttributeError replaces the error."""

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"locked: {name}")


class Flagged(ValueError):
    """Carries a falsy flag: 3.15.1 treats it as already described (hasattr)."""

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
def test_same_error_as_3_15_1(scenario: str, error: str, on: bool) -> None:
    run = make_scenarios(ERRORS[error])[scenario]
    upstream, patched = both(run, on)
    assert upstream[0] != "returned", "the scenario must raise"
    assert patched == upstream


def test_the_reference_is_3_15_1s_message() -> None:
    # Spelled out once, so that the comparisons cannot pass by both sides being wrong alike.
    run = make_scenarios(lambda: ValueError("bad value"))["op nested"]
    upstream, patched = both(run)
    assert patched == upstream
    kind, message, _, has_flag, flag, cause, suppress, context_kind, context, _, frames = patched
    assert kind is ValueError and has_flag and flag is True and cause is None and suppress is True
    tensor = {"torch": "torch.Tensor", "jax": "jnp.ndarray", "tensorflow": "tf.Tensor", "numpy": "np.ndarray"}
    assert message == (
        "Exception encountered when calling Boom.call().\n\n\x1b[1mbad value\x1b[0m\n\n"
        "Arguments received by Boom.call():\n"
        f"  • x={tensor.get(BACKEND, 'array')}(shape={keras.ops.ones((2, 3)).shape}, dtype=float32)\n"
        "  • y=2\n  • rest=<class 'inspect._empty'>\n  • scale=2.0"
    )
    assert context_kind is ValueError and context == "bad value"
    assert [name for _, name in frames][-1] == "call" and all("keras/src" not in f for f, _ in frames)


def test_unbindable_arguments_keep_the_original_error() -> None:
    upstream, patched = both(make_scenarios(lambda: ValueError("x"))["op unbindable"])
    assert patched == upstream
    assert patched[0] is TypeError and patched[3] is False and patched[7] is TypeError


def test_symbolic_calls_describe_symbolic_calls_arguments() -> None:
    # 3.15.1 wraps `symbolic_call(*args, **kwargs)`: its bullets are args= / kwargs=, not
    # call()'s parameter names (nightly's helper changed that; the patch must not).
    upstream, patched = both(make_scenarios(lambda: ValueError("x"))["op symbolic"])
    assert patched == upstream
    assert "  • args=(" in patched[1] and "  • kwargs={'scale': '0.5'}" in patched[1]


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
        upstream, patched = both(lambda: layer(keras.ops.ones((2, 5))), on)
        assert upstream[0] != "returned" and patched == upstream
        # quantized_call(*args, **kwargs) is what 3.15.1 wraps: its bullets are args= / kwargs=.
        assert not on or "  • args=(" in patched[1]
    upstream, patched = both(lambda: layer(keras.ops.ones((2, 3))))
    assert patched[0] == "returned" and patched == upstream


def test_rematerialized_layer() -> None:
    with keras.RematScope(mode="full"):
        layer = keras.layers.Dense(4)
        layer.build((None, 3))
    for on in (True, False):
        upstream, patched = both(lambda: layer(keras.ops.ones((2, 5))), on)
        assert upstream[0] != "returned" and patched == upstream


def test_calls_that_return_are_unchanged() -> None:
    x = keras.ops.ones((2, 3))
    layer = keras.layers.Dense(4, kernel_initializer="ones")
    cond = lambda: keras.ops.cond(keras.ops.convert_to_tensor(True), lambda: x * 2.0, lambda: x)  # noqa: E731
    for run in (lambda: layer(x), cond, lambda: keras.ops.add(x, x)):
        upstream, patched = both(run)
        assert patched[0] == "returned" and patched == upstream


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.errors.OpError exists on the tensorflow backend only")
@pytest.mark.parametrize("on", [True, False], ids=["filtering", "no filtering"])
def test_tensorflow_op_error(on: bool) -> None:
    import tensorflow as tf

    def make() -> BaseException:
        return tf.errors.InvalidArgumentError(None, None, "tf says no")

    for scenario in ("op eager", "layer eager", "op nested", "cond"):
        upstream, patched = both(make_scenarios(make)[scenario], on)
        assert upstream[0] is tf.errors.InvalidArgumentError and patched == upstream


# -- the helper itself against the wrapper, on arbitrary calls ----------------------------------


def _via_wrapper(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None) -> Any:
    return traceback_utils.inject_argument_info_in_traceback(fn, object_name=name)(*args, **kwargs)


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
        upstream = observe(lambda: _via_wrapper(fn, args, kwargs, name))
        patched = observe(lambda: _via_helper(fn, args, kwargs, name))
    # Frames: the wrapper's error_handler vs this test's _via_helper, both Keras-internal or the
    # harness; the rest must match.
    strip = {"_via_wrapper", "_via_helper"}
    assert patched[:-1] == upstream[:-1]
    assert [f for f in patched[-1] if f[1] not in strip] == [f for f in upstream[-1] if f[1] not in strip]
