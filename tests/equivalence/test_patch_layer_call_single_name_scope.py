"""Patch layer-call-single-name-scope on the installed fork: names and paths stay as upstream's.

Upstream opens the layer's name scope around `self._maybe_build(call_spec)` on every
`Layer.__call__`. The patch skips that scope once the layer is built, except on TensorFlow.
The oracle is upstream's own `Layer.__call__` of the release under test, installed in place of
the patched one for a block (`upstream.upstream(Layer, "__call__")`: the fork with its
`__call__` patches off). Every scenario runs once with upstream's `__call__` and once with the
fork's, after `clear_session()`, and what users can see must be the same: variable paths and
names, `current_path()` inside every build and call, `_parent_path`, outputs, and, on
TensorFlow, the op names of traced graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import keras
import numpy as np
import pytest
from keras.src.backend.common.name_scope import current_path
from keras.src.layers import layer as layer_module

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied, to_numpy

APPLIED = patch_applied("layer-call-single-name-scope")
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply layer-call-single-name-scope")

Layer = layer_module.Layer


@contextmanager
def upstream_scopes() -> Iterator[None]:
    """Layer.__call__ as upstream's: the build step always inside the layer's name scope."""
    with upstream.upstream(Layer, "__call__"):
        yield


#: What the layers of a scenario saw, in order: (event, layer name, current_path()).
SEEN: list[tuple[str, str, str]] = []


class Probe(keras.layers.Layer):
    """Records the path it sees in build and call; creates one weight in build."""

    def build(self, input_shape: Any) -> None:
        SEEN.append(("build", self.name, current_path()))
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")

    def call(self, x: Any) -> Any:
        SEEN.append(("call", self.name, current_path()))
        return x * self.w


class Lazy(keras.layers.Layer):
    """Built from the start; creates its weight on the first call (inside the call scope)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.built = True
        self.v: Any = None

    def call(self, x: Any) -> Any:
        SEEN.append(("call", self.name, current_path()))
        if self.v is None:
            self.v = self.add_weight(shape=(), initializer="zeros", name="v")
        return x + self.v


class NoBuild(keras.layers.Layer):
    """No build(): Keras builds it by tracing call() symbolically (inside the build scope)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(3, name="inner_dense")
        self.probe = Probe(name="probe_in_nobuild")
        self.drop = keras.layers.Dropout(0.0)

    def call(self, x: Any, training: Any = None) -> Any:
        SEEN.append(("call", self.name, current_path()))
        return self.drop(self.probe(self.inner(x)), training=training)


class Outer(keras.layers.Layer):
    def __init__(self, prebuilt: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nobuild = NoBuild(name="nobuild")
        self.lazy = Lazy(name="lazy")
        self.dense = keras.layers.Dense(3, name="dense")
        self.probe = Probe(name="probe")
        self.norm = keras.layers.LayerNormalization()
        if prebuilt:
            self.dense.build((None, 4))
            self.probe.build((None, 3))

    def call(self, x: Any, training: Any = None) -> Any:
        SEEN.append(("call", self.name, current_path()))
        y = self.probe(self.dense(x))
        y = self.nobuild(y, training=training)
        return self.norm(self.lazy(y))


def facts(model: Any, outputs: list[Any]) -> tuple[object, ...]:
    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    return (
        [to_numpy(o).round(5).tolist() for o in outputs],
        [(v.path, v.name) for v in model.weights],
        [w.path for w in model.trainable_weights],
        sorted((layer.name, str(getattr(layer, "_parent_path", None)), str(getattr(layer, "_path", None)))
               for layer in layers),
        list(SEEN),
    )


def run(scenario: Callable[[], tuple[Any, list[Any]]], reference: bool) -> tuple[object, ...]:
    keras.backend.clear_session()
    keras.utils.set_random_seed(1234)
    SEEN.clear()
    if reference:
        with upstream_scopes():
            return facts(*scenario())
    return facts(*scenario())


X = np.arange(8, dtype="float32").reshape(2, 4) / 8.0


def eager_nested(prebuilt: bool) -> Callable[[], tuple[Any, list[Any]]]:
    def scenario() -> tuple[Any, list[Any]]:
        outer = Outer(prebuilt, name="outer")
        return outer, [outer(X), outer(X, training=True), outer(X)]

    return scenario


def functional() -> tuple[Any, list[Any]]:
    inputs = keras.Input((4,))
    outer = Outer(False, name="outer")
    y = outer(inputs)
    y = keras.layers.Dense(2, name="head")(y)
    model = keras.Model(inputs, y, name="model")
    return model, [model(X), model(X, training=True), model.predict(X, verbose=0)]


def nested_models() -> tuple[Any, list[Any]]:
    block = keras.Sequential([keras.layers.Dense(4), Probe(name="seq_probe"), keras.layers.BatchNormalization()],
                             name="block")
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(1)(block(block(inputs))), name="twice")
    outer = keras.Sequential([keras.layers.Dense(4, name="pre"), model], name="outer_seq")
    return outer, [outer(X), outer(X), outer(X, training=True)]


def trained() -> tuple[Any, list[Any]]:
    model = keras.Sequential([keras.Input((4,)), Outer(False, name="outer"), keras.layers.Dense(1)], name="fit")
    if keras.backend.backend() != "numpy":  # the numpy backend has no fit (inference only)
        model.compile(optimizer="sgd", loss="mse")
        model.fit(X, np.ones((2, 1), "float32"), epochs=2, verbose=0)
    return model, [model.predict(X, verbose=0), model(X)]


SCENARIOS = {
    "eager nested, built by the first call": eager_nested(False),
    "eager nested, sublayers built ahead": eager_nested(True),
    "functional": functional,
    "nested models, a block called twice": nested_models,
    "fit and predict": trained,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_paths_names_and_outputs_are_upstream_s(name: str) -> None:
    expected = run(SCENARIOS[name], reference=True)
    got = run(SCENARIOS[name], reference=False)
    assert got[0] == expected[0], "outputs"
    assert got[1] == expected[1], "variable paths and names"
    assert got[2] == expected[2], "trainable weights"
    assert got[3] == expected[3], "_parent_path and _path of every layer"
    assert got[4] == expected[4], "current_path() seen in every build and call"


def test_the_paths_are_the_expected_ones() -> None:
    _, _, trainable, _, seen = run(eager_nested(False), reference=False)
    assert "outer/dense/kernel" in trainable and "outer/probe/w" in trainable
    assert "outer/nobuild/inner_dense/kernel" in trainable and "outer/nobuild/probe_in_nobuild/w" in trainable
    assert "outer/lazy/v" in trainable
    assert ("build", "probe", "outer/probe") in seen and ("call", "probe", "outer/probe") in seen
    assert ("call", "probe_in_nobuild", "outer/nobuild/probe_in_nobuild") in seen


def count_scopes(layer: Any, calls: int) -> int:
    """How many name scopes of `layer` are pushed on the scope stack by `calls` calls."""
    from keras.src import backend

    scope_class = backend.name_scope
    original = scope_class.__enter__
    pushed = 0

    def counting(self: Any) -> Any:
        nonlocal pushed
        result = original(self)
        if self.caller is layer and self._pop_on_exit:
            pushed += 1
        return result

    scope_class.__enter__ = counting
    try:
        for _ in range(calls):
            layer(X)
    finally:
        scope_class.__enter__ = original
    return pushed


def test_a_built_layer_opens_one_scope_less_per_call_except_on_tensorflow() -> None:
    class Counted(keras.layers.Dense):
        pass

    layer = Counted(3)
    layer(X)
    with upstream_scopes():
        upstream = count_scopes(layer, 3)
    saved = 0 if keras.backend.backend() == "tensorflow" else 3
    assert count_scopes(layer, 3) == upstream - saved


def test_an_unbuilt_layer_still_builds_inside_its_scope() -> None:
    keras.backend.clear_session()
    SEEN.clear()
    outer = keras.Sequential([NoBuild(name="nb")], name="wrapper")
    outer(X)
    assert [w.path for w in outer.weights][:2] == ["wrapper/nb/inner_dense/kernel", "wrapper/nb/inner_dense/bias"]


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="graph op names: TensorFlow only")
def test_tensorflow_graph_op_names_are_upstream_s() -> None:
    import tensorflow as tf

    def op_names(reference: bool) -> list[str]:
        keras.backend.clear_session()
        model = keras.Sequential([keras.Input((4,)), Outer(True, name="outer"), keras.layers.Dense(2, name="head")],
                                 name="seq")
        model(X)

        def trace() -> list[str]:
            graph = tf.function(lambda x: model(x)).get_concrete_function(tf.TensorSpec((2, 4), tf.float32)).graph
            return [op.name for op in graph.get_operations()]

        if reference:
            with upstream_scopes():
                return trace()
        return trace()

    expected = op_names(reference=True)
    assert op_names(reference=False) == expected
    # What the patch keeps: upstream names a built layer's ops `<scope>_1/...` in a graph.
    assert any("head_1/" in name for name in expected), expected[:20]
