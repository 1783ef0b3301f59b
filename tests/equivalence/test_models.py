"""Whole models: the same outputs, masks and training steps, bit for bit, with the fast path on and off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest

from tests.equivalence.helpers import disable_fast_path, get_mask, recording, to_numpy

VOCAB, SEQ, BATCH = 20, 6, 8
TRAINABLE = keras.backend.backend() != "numpy"  # the numpy backend has no fit()


def sequential() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((SEQ,), dtype="int32"),
            keras.layers.Embedding(VOCAB, 8, mask_zero=True),
            keras.layers.LSTM(8, return_sequences=True),
            keras.layers.LayerNormalization(),
            keras.layers.Dropout(0.3, seed=7),
            keras.layers.BatchNormalization(),
            keras.layers.Dense(3),
        ]
    )


def functional() -> keras.Model:
    tokens = keras.Input((SEQ,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, attended]))
    x = keras.layers.Dense(16, activation="relu")(x)
    x = keras.layers.Dropout(0.2, seed=7)(x)
    x = keras.layers.BatchNormalization()(x)
    return keras.Model(tokens, keras.layers.Dense(3)(x))


class Subclassed(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = keras.layers.Embedding(VOCAB, 8, mask_zero=True)
        self.lstm = keras.layers.LSTM(8, return_sequences=True)
        self.attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
        self.norm = keras.layers.LayerNormalization()
        self.dropout = keras.layers.Dropout(0.25, seed=7)
        self.batch_norm = keras.layers.BatchNormalization()
        self.head = keras.layers.Dense(3)

    def call(self, tokens: Any, training: Any = None) -> Any:
        x = self.embedding(tokens)
        x = self.lstm(x)
        x = self.norm(x + self.attention(x, x))
        x = self.dropout(x, training=training)
        return self.head(self.batch_norm(x))


MODELS: dict[str, Callable[[], keras.Model]] = {"sequential": sequential, "functional": functional, "subclassed": Subclassed}


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, size=(BATCH, SEQ)).astype("int32")
    tokens[:, -2:] = 0  # padding, masked by Embedding(mask_zero=True)
    return tokens, rng.normal(size=(BATCH, SEQ, 3)).astype("float32")


def twins(name: str) -> tuple[keras.Model, keras.Model]:
    """Two identically built and seeded models; the second never takes the fast path."""
    tokens, _ = data()
    models = []
    for _ in range(2):
        keras.utils.set_random_seed(1234)
        with recording() as built:
            model = MODELS[name]()
            model(tokens)  # build
        # Building calls layers as layer(x), on KerasTensors or tensors.
        assert built.fast, "building the model must use the fast path"
        models.append(model)
    models[1].set_weights(models[0].get_weights())
    disable_fast_path(models[1])
    return models[0], models[1]


def same_arrays(a: Any, b: Any) -> bool:
    a, b = np.asarray(to_numpy(a)), np.asarray(to_numpy(b))
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_and_masks(name: str) -> None:
    fast_model, slow_model = twins(name)
    tokens, _ = data()
    for kwargs in ({}, {"training": False}, {"training": True}):
        keras.utils.set_random_seed(99)  # the global RNGs some backends' dropout uses
        with recording() as on:
            fast_out = fast_model(tokens, **kwargs)
        keras.utils.set_random_seed(99)
        with recording() as off:
            slow_out = slow_model(tokens, **kwargs)
        assert not off.fast, "the slow model must not use the fast path"
        # Sequential and Functional pass `training`/`mask` to their layers (slow
        # path by design); the subclassed model calls its layers as layer(x).
        assert on.fast or name != "subclassed"
        assert len(on.specs) == len(off.specs)
        assert same_arrays(fast_out, slow_out), kwargs
        fast_mask = get_mask(fast_out)
        slow_mask = get_mask(slow_out)
        assert (fast_mask is None) == (slow_mask is None)
        if fast_mask is not None:
            assert same_arrays(fast_mask, slow_mask)


@pytest.mark.skipif(not TRAINABLE, reason="the numpy backend does not implement fit()")
@pytest.mark.parametrize("name", list(MODELS))
def test_two_fit_steps(name: str) -> None:
    fast_model, slow_model = twins(name)
    tokens, targets = data()
    for model in (fast_model, slow_model):
        keras.utils.set_random_seed(99)
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        history = model.fit(tokens, targets, batch_size=BATCH // 2, epochs=1, shuffle=False, verbose=0)
        assert len(history.history["loss"]) == 1
    for fast_weight, slow_weight in zip(fast_model.get_weights(), slow_model.get_weights(), strict=True):
        assert same_arrays(fast_weight, slow_weight)
    assert same_arrays(fast_model(tokens), slow_model(tokens))
