"""What changes a result must still change it under `torch.compile` (torch backend only).

The series takes work out of the compiled region (memos not written while dynamo traces, empty
loss containers not cleared) and must never take out a read that a result depends on: dynamo
guards on what the traced code reads, and only those guards make a compiled call follow a
change. Each test compiles a Keras call, then changes what the result depends on (the training
flag, a layer's `trainable`, a layer's dtype policy, a Keras global setting) and checks the
compiled call gives what the eager call gives after the change, within torch's float32
tolerances (dynamo's "eager" backend: the guards are dynamo's, whatever the backend).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import pytest

from tests.equivalence.helpers import to_numpy

pytestmark = pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile")

if keras.backend.backend() == "torch":
    import torch
    import torch._dynamo


@pytest.fixture
def compile_eager() -> Iterator[Callable[[Callable[..., Any]], Callable[..., Any]]]:
    """`torch.compile(fn, backend="eager")`, dynamo's caches reset before and after."""
    torch._dynamo.reset()
    yield lambda fn: torch.compile(fn, backend="eager")
    torch._dynamo.reset()


def close(a: Any, b: Any) -> None:
    a, b = to_numpy(a), to_numpy(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(a.astype("float64"), b.astype("float64"), rtol=1.3e-6 if a.dtype == np.float32 else 1e-2,
                               atol=1e-5 if a.dtype == np.float32 else 1e-2)


def inputs(seed: int = 0, shape: tuple[int, ...] = (8, 4)) -> Any:
    return torch.tensor(np.random.default_rng(seed).standard_normal(shape).astype("float32"))


def batch_norm_model() -> Any:
    keras.utils.set_random_seed(5)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(6), keras.layers.BatchNormalization(momentum=0.5),
                             keras.layers.Dense(3)])


def test_the_training_flag_flipped_between_compiled_calls(compile_eager: Any) -> None:
    model = batch_norm_model()
    compiled = compile_eager(lambda t, training: model(t, training=training))
    for step, training in enumerate([False, True, False, True, True, False]):
        x = inputs(step)
        close(compiled(x, training), model(x, training=training))


def test_trainable_flipped_after_compiling(compile_eager: Any) -> None:
    """A BatchNormalization that is not trainable runs in inference mode even with
    `training=True`: the compiled call must see the flip."""
    model = batch_norm_model()
    compiled = compile_eager(lambda t: model(t, training=True))
    x = inputs(1)
    close(compiled(x), model(x, training=True))
    norm = model.layers[1]
    before = to_numpy(compiled(x))
    norm.trainable = False
    after = compiled(x)
    close(after, model(x, training=True))
    assert not np.allclose(before, to_numpy(after)), "the flip changes the result"
    norm.trainable = True
    close(compiled(x), model(x, training=True))


def test_a_layer_s_dtype_policy_changed_after_compiling(compile_eager: Any) -> None:
    setter = getattr(getattr(keras.layers.Layer, "dtype_policy", None), "fset", None)
    if setter is None:
        pytest.skip("this release's Layer has no dtype_policy setter")
    keras.utils.set_random_seed(6)
    layer = keras.layers.Dense(3)
    x = inputs(2)
    layer(x)
    compiled = compile_eager(lambda t: layer(t))
    before = to_numpy(compiled(x))
    close(before, layer(x))
    layer.dtype_policy = "bfloat16"  # the inputs are cast to bfloat16 (the float32 kernel stays)
    got, expected = compiled(x), layer(x)
    close(got, expected)
    assert not np.array_equal(before, to_numpy(got)), "the policy changes the result"
    layer.dtype_policy = "float32"
    close(compiled(x), layer(x))


def test_a_keras_global_setting_changed_after_compiling(compile_eager: Any) -> None:
    """`keras.config.set_epsilon` moves the clipping of binary crossentropy's probabilities."""
    saved = keras.config.epsilon()
    y = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    p = torch.tensor([[0.0, 1.0, 0.5, 0.25]])
    compiled = compile_eager(lambda a, b: keras.losses.binary_crossentropy(a, b))
    try:
        keras.config.set_epsilon(1e-7)
        first = compiled(y, p)
        close(first, keras.losses.binary_crossentropy(y, p))
        keras.config.set_epsilon(1e-2)
        second = compiled(y, p)
        close(second, keras.losses.binary_crossentropy(y, p))
        assert not np.allclose(to_numpy(first), to_numpy(second)), "the setting changes the result"
    finally:
        keras.config.set_epsilon(saved)


def test_a_sublayer_replaced_activation_after_compiling(compile_eager: Any) -> None:
    """An attribute `call()` reads (Dense's activation) set anew after compiling."""
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="relu"), keras.layers.Dense(2)])
    compiled = compile_eager(lambda t: model(t, training=False))
    x = inputs(3)
    close(compiled(x), model(x, training=False))
    model.layers[0].activation = keras.activations.tanh
    close(compiled(x), model(x, training=False))
