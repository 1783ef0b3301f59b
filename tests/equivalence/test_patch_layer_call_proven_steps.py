"""Patch layer-call-proven-steps on the installed fork: for the classes the build-time analysis
proved, an eager one-tensor `layer(x)` skips the name scope, the call context and the autocast
step, and nothing observable changes.

Each scenario runs twice from the same seed: once as the fork runs it, once with every step taken
(the patch's flag forced to 0, the rest of the fork unchanged). Outputs, variable paths, losses,
what hooks and user code inside the call saw (the current path, whether a call context is open,
the autocast scope) and errors raised inside `call()` (type and message) must be equal; `taken`
checks that the steps really are skipped where the proof allows it, so that equality means
something. Torch only: the table is derived for torch.

The patch proves a class only where the interpreter can watch the modules its proof relies on
(a dict watcher, CPython 3.12 and later). Elsewhere (3.11) nothing is proven, which
`test_without_a_dict_watcher_no_class_is_proven` checks; the other tests then stand in for the
watcher (`watched`: proofs on, with no module written to), so the skips are compared on every
interpreter, and the monkeypatch tests need the real one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import keras
import numpy as np
import pytest
from keras.src.backend.common import global_state
from keras.src.backend.common.name_scope import current_path
from keras.src.layers import layer as layer_module

from tests.equivalence.helpers import patch_applied, to_numpy

NAME = "layer-call-proven-steps"
pytestmark = [
    pytest.mark.skipif(not patch_applied(NAME), reason=f"this fork does not apply {NAME}"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the table is derived for torch"),
]
NAME_SCOPE, CALL_CONTEXT, AUTOCAST = 1, 2, 4
#: Whether this interpreter watches the modules the proofs rely on (the fork decides at import).
WATCHER = bool(getattr(layer_module, "_layer_call_proven_watching", False))
needs_a_watcher = pytest.mark.skipif(not WATCHER, reason="this interpreter has no dict watcher (CPython < 3.12)")


@pytest.fixture(autouse=True)
def watched(request: pytest.FixtureRequest) -> Iterator[None]:
    """Proofs on for the test (on an interpreter without a watcher: as if one watched and saw no
    write), each class met afresh."""
    stand_in = not WATCHER and request.node.get_closest_marker("real_watcher") is None
    layer_module._layer_call_proven_classes.clear()
    if stand_in:
        layer_module._layer_call_proven_watching = True
    try:
        yield
    finally:
        layer_module._layer_call_proven_classes.clear()
        if stand_in:
            layer_module._layer_call_proven_watching = False


def proven(cls: type) -> int:
    """The steps the build proved for `cls` (0 where this release's code proves none: keras-nightly's
    Dense reads what the 3.15 one does not), which a call meeting every run-time condition skips."""
    entry = layer_module._LAYER_CALL_PROVEN_TABLE.get(f"{cls.__module__}.{cls.__qualname__}")
    return int(entry[0]) if entry else 0


def seen() -> tuple[Any, ...]:
    """What code inside a call may observe of the three steps."""
    scope = global_state.get_global_attribute("autocast_scope")
    return (current_path(), global_state.get_global_attribute("current_call_ctx") is not None,
            None if scope is None else scope.dtype)


def described(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(described(v) for v in value)
    if keras.ops.is_tensor(value):
        array = np.asarray(to_numpy(value))
        return (array.dtype.str, array.shape, array.tobytes())
    return value


@contextmanager
def steps_taken() -> Iterator[None]:
    """Every step taken: the patch's flag forced to 0."""
    real = layer_module._layer_call_proven_steps
    layer_module._layer_call_proven_steps = lambda layer: 0
    try:
        yield
    finally:
        layer_module._layer_call_proven_steps = real


@contextmanager
def recording() -> Iterator[dict[str, int]]:
    """The flag each class got on its last call, read from the patch's function as it returns
    (a profile hook: replacing the function would be a write to a module its proofs watch)."""
    flags: dict[str, int] = {}
    code = layer_module._layer_call_proven_steps.__code__

    def profile(frame: Any, event: str, value: Any) -> None:
        if event == "return" and frame.f_code is code:
            flags[type(frame.f_locals["layer"]).__name__] = value

    sys.setprofile(profile)
    try:
        yield flags
    finally:
        sys.setprofile(None)


def both(scenario: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """`scenario()` as the fork runs it and with every step taken, from the same seed: equal
    results (exceptions compared by type and message); the flags of the fork's run."""
    def run() -> Any:
        keras.backend.clear_session()  # the same layer names, hence the same variable paths
        keras.utils.set_random_seed(7)
        try:
            return ("ok", described(scenario()))
        except Exception as error:  # compared by type and message
            return ("raised", type(error).__name__, str(error))
    with recording() as taken:
        fork = run()
    with steps_taken():
        oracle = run()
    assert fork == oracle
    return fork, taken


def x(shape: tuple[int, ...] = (2, 4)) -> Any:
    return keras.ops.convert_to_tensor(np.arange(np.prod(shape), dtype="float32").reshape(shape) * 0.25)


class ReadsTheSteps(keras.layers.Layer):
    """A user layer: its call() reads all three steps (never proven: not a class of the table)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.saw: list[Any] = []

    def call(self, inputs: Any) -> Any:
        self.saw.append(seen())
        return inputs * 2.0


class DenseReadingThePath(keras.layers.Dense):
    """A subclass of a proven class whose call() reads the steps: it gets no proof."""

    def call(self, inputs: Any) -> Any:
        self.saw = [*getattr(self, "saw", []), seen()]
        return super().call(inputs)


def test_a_proven_layer_alone_skips_and_computes_the_same() -> None:
    def scenario() -> Any:
        dense = keras.layers.Dense(3, activation="relu")
        norm = keras.layers.LayerNormalization()
        outputs = [dense(x()), dense(x()), norm(x()), norm(x())]
        return outputs, [v.path for v in dense.weights + norm.weights]

    _, taken = both(scenario)
    both_steps = NAME_SCOPE | CALL_CONTEXT
    assert taken["Dense"] & both_steps == proven(keras.layers.Dense) & both_steps
    assert taken["LayerNormalization"] & both_steps == proven(keras.layers.LayerNormalization) & both_steps


def test_proven_layers_nested_in_models_and_user_layers_see_what_they_saw() -> None:
    def scenario() -> Any:
        probe = ReadsTheSteps(name="probe")
        model = keras.Sequential([keras.layers.Dense(4, activation="relu"), probe, keras.layers.ReLU(),
                                  keras.layers.Dense(2)], name="outer")
        outputs = [model(x()), model(x(), training=True), model(x())]
        return outputs, probe.saw, [v.path for v in model.weights]

    _, taken = both(scenario)
    assert taken.get("ReLU", 0) == proven(keras.layers.ReLU)
    assert proven(keras.layers.ReLU) or proven(keras.layers.Dense)  # the release proves a class used here
    assert taken.get("ReadsTheSteps") == 0 and taken.get("Sequential", 0) == 0


def test_the_outermost_call_still_clears_the_layer_s_losses() -> None:
    def scenario() -> Any:
        dense = keras.layers.Dense(2)
        dense(x())
        dense.add_loss(keras.ops.convert_to_tensor(3.0))
        before = len(dense.losses)
        dense(x())
        return before, len(dense.losses)

    result, taken = both(scenario)
    assert result[1][0] == 1 and taken["Dense"] & CALL_CONTEXT == proven(keras.layers.Dense) & CALL_CONTEXT


def test_hooks_see_the_steps_they_would_see() -> None:
    def scenario() -> Any:
        dense = keras.layers.Dense(2, name="hooked")
        dense(x())
        saw: list[Any] = []
        dense.register_forward_hook(lambda module, args, output: saw.append(seen()))
        dense(x())
        return saw

    result, taken = both(scenario)
    assert result[1] and taken["Dense"] == 0


def test_a_subclass_a_shadowed_call_and_a_stored_function_get_no_proof() -> None:
    def reads_path(value: Any) -> Any:
        saw.append(seen())
        return value

    saw: list[Any] = []

    def scenario() -> Any:
        saw.clear()
        sub = DenseReadingThePath(2, name="sub")
        stored = keras.layers.Dense(2, activation=reads_path, name="stored")
        shadowed = keras.layers.Dense(2, name="shadowed")
        shadowed(x())
        shadowed.call = lambda inputs: (saw.append(seen()), inputs)[1]
        return sub(x()), sub.saw, stored(x()), shadowed(x()), list(saw)

    result, taken = both(scenario)
    assert taken["DenseReadingThePath"] == 0
    assert result[1][4]  # what the stored function and the shadowing call saw


def test_a_subclass_named_as_its_proven_base_gets_no_proof() -> None:
    """The table is keyed by module and qualname; a class that is not the one found there under
    its own name (a subclass renamed to its base's name) is not proven."""
    imposter = type("Dense", (DenseReadingThePath,), {})
    imposter.__module__, imposter.__qualname__ = keras.layers.Dense.__module__, keras.layers.Dense.__qualname__

    def scenario() -> Any:
        layer = imposter(2, name="imposter")
        return layer(x()), layer(x()), layer.saw

    result, taken = both(scenario)
    assert taken["Dense"] == 0 and result[1][2][-1][1]  # its call() saw the open call context


@pytest.mark.real_watcher
@pytest.mark.skipif(WATCHER, reason="this interpreter has a dict watcher")
def test_without_a_dict_watcher_no_class_is_proven() -> None:
    def scenario() -> Any:
        return keras.layers.Dense(2)(x()), keras.layers.ReLU()(x())

    _, taken = both(scenario)
    assert taken["Dense"] == 0 and taken["ReLU"] == 0


@pytest.mark.real_watcher
@needs_a_watcher
def test_a_monkeypatch_made_before_the_first_call_is_seen() -> None:
    from keras.src import ops

    saw: list[Any] = []
    real = ops.matmul

    def spy(a: Any, b: Any) -> Any:
        saw.append(seen())
        return real(a, b)

    def scenario() -> Any:
        saw.clear()
        ops.matmul = spy
        try:
            dense = keras.layers.Dense(2)
            return dense(x()), list(saw)
        finally:
            ops.matmul = real

    result, taken = both(scenario)
    assert taken["Dense"] == 0 and result[1][1] and result[1][1][-1][1]
    # Put back, the module holds again what its import left: the proof holds again.
    steps = layer_module._layer_call_proven_steps(keras.layers.Dense(2))
    assert steps & CALL_CONTEXT == proven(keras.layers.Dense) & CALL_CONTEXT


@pytest.mark.real_watcher
@needs_a_watcher
def test_a_monkeypatched_function_the_proof_relied_on_runs_with_the_steps() -> None:
    from keras.src import ops as ops_numpy  # what Dense.call reads: `ops.matmul`

    saw: list[Any] = []
    real = ops_numpy.matmul

    def spy(a: Any, b: Any) -> Any:
        saw.append(seen())
        return real(a, b)

    def scenario() -> Any:
        saw.clear()
        dense = keras.layers.Dense(2)
        dense(x())
        ops_numpy.matmul = spy
        try:
            return dense(x()), list(saw)
        finally:
            ops_numpy.matmul = real

    result, _ = both(scenario)
    assert result[1][1] and result[1][1][-1][1]  # the spy ran inside an open call context


def test_errors_raised_inside_call_are_the_same() -> None:
    def scenario() -> Any:
        return keras.layers.UnitNormalization(axis=5)(x())  # raised by the op inside call()

    result, taken = both(scenario)
    assert result[0] == "raised" and taken["UnitNormalization"] & (CALL_CONTEXT | AUTOCAST)


def test_mixed_precision_computes_the_same() -> None:
    def scenario() -> Any:
        dense = keras.layers.Dense(3, dtype="mixed_bfloat16")
        relu = keras.layers.ReLU(dtype="mixed_bfloat16")
        return dense(x()), relu(x()), relu(dense(x()))

    both(scenario)
