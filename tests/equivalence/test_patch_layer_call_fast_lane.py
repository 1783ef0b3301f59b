"""Patch layer-call-fast-lane on the installed fork: an eager one-tensor `layer(x)` skips the
steps of `Layer.__call__` that cannot apply to it, and nothing observable changes.

The oracle is upstream's own `Layer.__call__` of the release under test, installed in place of
the patched one for a block (`upstream.upstream(Layer, "__call__")`). Each scenario runs twice
from the same seed, once per `__call__`, calling its layers several times (the lane needs a
first call to record a passing input spec): outputs, masks on outputs, what `call()` received
(`training`, `mask`), losses, warnings, Nodes recorded, exceptions (type and message) must be
equal. `lane_taken` checks that the lane really runs where it should (and not where it must not).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
from keras.src.layers import layer as layer_module

from tests.equivalence import upstream
from tests.equivalence.helpers import get_mask, patch_applied, set_mask, to_numpy

NAME = "layer-call-fast-lane"
BACKEND = keras.backend.backend()
pytestmark = [
    pytest.mark.skipif(not patch_applied(NAME), reason=f"this fork does not apply {NAME}"),
    pytest.mark.skipif(BACKEND == "tensorflow", reason="the lane is off on tensorflow"),
]
Layer = layer_module.Layer


def described(value: Any) -> Any:
    if isinstance(value, keras.KerasTensor):
        history = getattr(value, "_keras_history", None)
        where = (history.operation.name, history.node_index) if history else None
        return ("KerasTensor", tuple(value.shape), value.dtype, where, described(get_mask(value)))
    if isinstance(value, dict):
        return {k: described(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(described(v) for v in value)
    if keras.ops.is_tensor(value):
        array = np.asarray(to_numpy(value))
        mask = get_mask(value)
        return ("tensor", array.dtype.str, array.shape, array.tobytes(), described(mask) if mask is not None else None)
    return value


def t(shape: tuple[int, ...] = (2, 4), dtype: str = "float32", value: float = 0.5) -> Any:
    return keras.ops.convert_to_tensor(np.arange(np.prod(shape), dtype=dtype).reshape(shape) * value)


class Recorder(keras.layers.Layer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[Any] = []

    def call(self, x: Any, training: Any = None) -> Any:
        self.seen.append(("training", training))
        return x * 2.0


class NoTraining(keras.layers.Layer):
    def call(self, x: Any) -> Any:
        return x + 1.0


class MaskArg(keras.layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.supports_masking = True
        self.seen: list[Any] = []

    def call(self, x: Any, mask: Any = None) -> Any:
        self.seen.append(("mask", described(mask)))
        return x - 1.0


class Passthrough(keras.layers.Layer):
    """Supports masking with Layer's compute_mask: the input's mask goes to the output."""

    def __init__(self) -> None:
        super().__init__()
        self.supports_masking = True

    def call(self, x: Any) -> Any:
        return x * 3.0


class Pair(keras.layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.supports_masking = True

    def call(self, x: Any) -> Any:
        return (x, x + 1.0)


class Specced(keras.layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.input_spec = keras.layers.InputSpec(ndim=2, axes={-1: 4})

    def call(self, x: Any) -> Any:
        return x * 0.5


class OwnAssert(Specced):
    calls = 0

    def _assert_input_compatibility(self, arg_0: Any) -> None:
        OwnAssert.calls += 1
        if arg_0.shape[0] > 3:
            raise ValueError("OwnAssert refuses")


class OwnComputeMask(keras.layers.Layer):
    def call(self, x: Any) -> Any:
        return x + 2.0

    def compute_mask(self, inputs: Any, previous_mask: Any) -> Any:
        return keras.ops.greater(inputs, 1.0)


class OwnSetMask(keras.layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.supports_masking = True
        self.calls = 0

    def call(self, x: Any) -> Any:
        return x + 2.0

    def _set_mask_metadata(self, inputs: Any, outputs: Any, previous_mask: Any) -> None:
        self.calls += 1
        set_mask(outputs, keras.ops.ones_like(outputs, dtype="bool"))


class Outer(keras.layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Recorder()

    def call(self, x: Any, training: Any = None) -> Any:
        return self.inner(x)


def masked(x: Any) -> Any:
    set_mask(x, keras.ops.convert_to_tensor(np.array([True, False] * (x.shape[0] // 2))[: x.shape[0]]))
    return x


def run(scenario: Callable[[], list[Any]]) -> list[Any]:
    keras.backend.clear_session()  # the same layer names in both runs
    keras.utils.set_random_seed(0)
    observed: list[Any] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            observed.extend(scenario())
        except Exception as error:  # noqa: BLE001 - compared with upstream's
            observed.append(("raised", type(error).__name__, str(error)))
    observed.append(("warnings", [str(w.message) for w in caught if "mask" in str(w.message)]))
    return observed


def calls(layer: Any, inputs: Callable[[], Any], n: int = 3, **kwargs: Any) -> list[Any]:
    out = [described(layer(inputs(), **kwargs)) for _ in range(n)]
    return [*out, described(getattr(layer, "seen", None)), described([described(x) for x in layer.losses])]


SCENARIOS: dict[str, Callable[[], list[Any]]] = {
    "dense": lambda: calls(keras.layers.Dense(3, kernel_initializer="ones"), t),
    "dense training=True": lambda: calls(keras.layers.Dense(3), t, training=True),
    "recorder": lambda: calls(Recorder(), t),
    "recorder training=False": lambda: calls(Recorder(), t, training=False),
    "recorder training tensor": lambda: calls(Recorder(), t, training=keras.ops.convert_to_tensor(True)),
    "no training, training=True": lambda: calls(NoTraining(), t, training=True),
    "outer passes training": lambda: [*calls(Outer(), t, training=True), described(Outer().inner.seen)],
    "dropout training": lambda: calls(keras.layers.Dropout(0.5, seed=1), t, training=True),
    "mask argument, masked input": lambda: calls(MaskArg(), lambda: masked(t())),
    "mask argument": lambda: calls(MaskArg(), t),
    "passthrough, masked input": lambda: calls(Passthrough(), lambda: masked(t())),
    "passthrough": lambda: calls(Passthrough(), t),
    "nested outputs, masked": lambda: calls(Pair(), lambda: masked(t())),
    "no masking, masked input (warns)": lambda: calls(NoTraining(), lambda: masked(t())),
    "masking then dense": lambda: calls(keras.Sequential([keras.layers.Masking(0.0), keras.layers.Dense(2)]), t),
    "embedding mask_zero": lambda: calls(keras.layers.Embedding(5, 2, mask_zero=True),
                                         lambda: keras.ops.convert_to_tensor(np.array([[0, 1], [2, 0]]))),
    "input spec": lambda: calls(Specced(), t),
    "input spec, wrong axis": lambda: [*calls(Specced(), t), described(Specced()(t((2, 5))))],
    "input spec, wrong axis after passing": lambda: _spec_then(lambda layer: layer(t((2, 5)))),
    "input spec changed in place": lambda: _spec_then(lambda layer: (layer.input_spec.axes.update({-1: 5}), layer(t()))),
    "input spec replaced": lambda: _spec_then(lambda layer: (setattr(layer, "input_spec", keras.layers.InputSpec(ndim=3)),
                                                             layer(t()))),
    "input spec, dtype": lambda: _spec_then(lambda layer: layer(t(dtype="float64"))),
    "own assert": lambda: [*calls(OwnAssert(), t), described(OwnAssert()(t((5, 4))))],
    "own compute_mask": lambda: calls(OwnComputeMask(), t),
    "own set_mask_metadata": lambda: calls(OwnSetMask(), t),
    "activity regularizer": lambda: calls(keras.layers.Dense(3, activity_regularizer="l2"), t),
    "mixed precision": lambda: calls(keras.layers.Dense(3, dtype="mixed_float16"), t),
    "numpy input": lambda: calls(keras.layers.Dense(3), lambda: np.ones((2, 4), "float32")),
    "float64 input": lambda: calls(keras.layers.Dense(3), lambda: t(dtype="float64")),
    "autocast scope": lambda: _in(lambda: keras.src.backend.AutocastScope("float16"), keras.layers.Dense(3)),
    "stateless scope": lambda: _stateless(),
    "functional model": lambda: _functional(),
    "symbolic": lambda: _symbolic(),
    "non-tensor positional": lambda: calls(keras.layers.Dense(3), lambda: 3.0),
    "two positional": lambda: [described(Recorder()(t(), True))],
}


def _spec_then(then: Callable[[Any], Any]) -> list[Any]:
    layer = Specced()
    return [*calls(layer, t), described(then(layer))]


def _in(scope: Callable[[], Any], layer: Any) -> list[Any]:
    layer(t())
    with scope():
        return calls(layer, t)


def _stateless() -> list[Any]:
    layer = keras.layers.Dense(3)
    layer(t())
    replaced = [(v, keras.ops.zeros_like(v)) for v in layer.trainable_variables]
    with keras.src.backend.StatelessScope(state_mapping=replaced):
        return calls(layer, t)


def _functional() -> list[Any]:
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dropout(0.3, seed=2)(hidden)))
    return [*calls(model, t), *calls(model, t, training=True), described([len(n) for n in [model.operations]])]


def _symbolic() -> list[Any]:
    layer = keras.layers.Dense(3)
    x = keras.Input((4,))
    return [described(layer(x)), described(layer(x)), len(layer._inbound_nodes), described(layer(t()))]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_as_upstream(name: str) -> None:
    patched = run(SCENARIOS[name])
    with upstream.upstream(Layer, "__call__"):
        original = run(SCENARIOS[name])
    assert patched == original


def lane_results(fn: Callable[[], Any]) -> list[bool]:
    results: list[bool] = []
    real = layer_module._layer_call_fast_lane

    def spy(layer: Any, args: Any, call_spec: Any) -> bool:
        results.append(real(layer, args, call_spec) and layer_module._layer_call_fast_lane_spec_passes(
            layer, call_spec.first_arg))
        return results[-1] and real(layer, args, call_spec)

    layer_module._layer_call_fast_lane = spy
    try:
        fn()
    finally:
        layer_module._layer_call_fast_lane = real
    return results


@pytest.mark.parametrize(("make", "expected"), [
    (lambda: keras.layers.Dense(3), [False, False, True, True]),
    (lambda: Recorder(), [True, True, True, True]),
    (lambda: MaskArg(), [False] * 4),
    (lambda: OwnComputeMask(), [False] * 4),
    (lambda: OwnAssert(), [False] * 4),
])
def test_lane_taken(make: Callable[[], Any], expected: list[bool]) -> None:
    layer = make()
    assert lane_results(lambda: [layer(t()) for _ in range(4)]) == expected


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
def test_torch_compile_traces_upstreams_steps() -> None:
    """While torch.compile traces, the lane stands aside: dynamo traces upstream's steps and
    records nothing in (so guards on nothing of) the lane's weak-keyed spec records, whose
    entries may be gone before its guards are built (that failed the compile of a second
    call); the compiled model gives the eager outputs, twice, in as many frames as upstream."""
    import torch
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    def run() -> tuple[int, list[Any]]:
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])
        x = torch.ones(5, 4)
        eager = to_numpy(model(x)).tolist()
        torch._dynamo.reset()
        counter = CompileCounter()
        compiled = torch.compile(model, backend=counter)
        before = len(layer_module._layer_call_fast_lane_specs)
        try:
            outputs = [to_numpy(compiled(x)).tolist() for _ in range(2)]
            assert len(layer_module._layer_call_fast_lane_specs) <= before
        finally:
            torch._dynamo.reset()
        assert outputs == [eager, eager]
        return int(counter.frame_count), outputs

    patched = run()
    # The lane forced off (upstream's steps everywhere) compiles the same way.
    real = layer_module._layer_call_fast_lane
    layer_module._layer_call_fast_lane = lambda layer, args, call_spec: False
    try:
        off = run()
    finally:
        layer_module._layer_call_fast_lane = real
    assert patched == off


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
def test_the_lane_stands_aside_while_torch_compile_traces() -> None:
    import torch
    import torch._dynamo

    layer = keras.layers.Dense(3)
    x = torch.ones(2, 4)
    eager = [to_numpy(layer(x)).tolist() for _ in range(3)][-1]
    assert lane_results(lambda: layer(x)) == [True]  # eagerly, this call takes the lane
    seen: list[bool] = []
    real = layer_module._layer_call_fast_lane

    def spy(layer: Any, args: Any, call_spec: Any) -> Any:
        taken = real(layer, args, call_spec)
        seen.append(bool(taken))
        return taken

    layer_module._layer_call_fast_lane = spy
    torch._dynamo.reset()
    try:
        compiled = to_numpy(torch.compile(layer, backend="eager")(x)).tolist()
    finally:
        layer_module._layer_call_fast_lane = real
        torch._dynamo.reset()
    assert seen and not any(seen)
    assert compiled == eager


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
def test_a_compiled_call_records_no_spec_and_compiles_once() -> None:
    """While torch.compile traces, no input spec is recorded (a traced store is a write dynamo
    replays after every compiled call; and a record missing at trace time is a guard that
    recompiles the next call): a Dense whose spec record is dropped after its eager call
    compiles once for three calls and leaves its spec unrecorded."""
    import torch
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    layer = keras.layers.Dense(3)
    x = torch.ones(2, 4)
    eager = to_numpy(layer(x)).tolist()
    layer_module._layer_call_fast_lane_specs.pop(layer._input_spec, None)
    torch._dynamo.reset()
    counter = CompileCounter()
    try:
        compiled = torch.compile(lambda t: layer(t), backend=counter)
        outputs = [to_numpy(compiled(x)).tolist() for _ in range(3)]
    finally:
        torch._dynamo.reset()
    assert layer._input_spec is not None and layer._input_spec not in layer_module._layer_call_fast_lane_specs
    assert counter.frame_count == 1
    assert outputs == [eager] * 3
