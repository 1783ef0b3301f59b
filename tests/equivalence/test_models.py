"""Whole models: the same outputs, masks and training steps, bit for bit, with the fast path on and off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest

from tests.equivalence.helpers import (
    CALLSPEC_RUNS,
    HAS_EXTENSION,
    Built,
    attention_layer,
    comparable,
    disable_fast_path,
    get_mask,
    recording,
    spec_values,
    to_numpy,
)

pytestmark = pytest.mark.skipif(
    not CALLSPEC_RUNS, reason="the CallSpec fast path does not run here (not in this fork, or KERAS_FORKGEN_DISABLE)"
)

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


def attention() -> keras.Model:
    """Embedding, MultiHeadAttention(q, v), Dropout, LayerNormalization, Dense: inside a
    Functional model every layer is called with `training=<bool>` when the model is, and
    the attention layer with two positional tensors."""
    tokens = keras.Input((SEQ,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    attended = attention_layer(dropout=0.1)(x, x)
    x = keras.layers.Dropout(0.2, seed=7)(attended)
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(tokens, keras.layers.Dense(3)(x))


MODELS: dict[str, Callable[[], keras.Model]] = {
    "sequential": sequential, "functional": functional, "subclassed": Subclassed, "attention": attention,
}


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
        assert not off.fast and not off.bound, "the slow model must not use a fast path"
        # Every model calls some of its layers as layer(x) (base fast path); with the
        # extension, Sequential and Functional pass `training=<bool>` (bound path).
        assert on.fast or on.bound, (name, kwargs, on.paths)
        if HAS_EXTENSION and kwargs and name != "subclassed":
            assert on.bound, (name, kwargs, on.paths)
        if HAS_EXTENSION:
            # Every call binds: no CallSpec is built by upstream's constructor.
            assert fast_model_trace(on, fast_model) == [], (name, kwargs, on.paths)
        assert len(on.specs) == len(off.specs)
        for a, b in zip(on.built, off.built, strict=True):
            assert spec_values(a.spec) == spec_values(b.spec), (name, kwargs, type(a.layer).__name__, a.path)
        assert same_arrays(fast_out, slow_out), kwargs
        fast_mask = get_mask(fast_out)
        slow_mask = get_mask(slow_out)
        assert (fast_mask is None) == (slow_mask is None)
        if fast_mask is not None:
            assert same_arrays(fast_mask, slow_mask)


@pytest.mark.skipif(not TRAINABLE, reason="the numpy backend does not implement fit()")
@pytest.mark.parametrize("name", [name for name in MODELS if name != "attention"])  # see test_attention_model_train_on_batch
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


# -- the extension: multi-input layers and training=<bool> inside a model ---------------


def slow_by_design(built: Built, model: keras.Model) -> bool:
    """A slow CallSpec the fast paths are not meant to replace: that of a layer the
    extension gives no bindings (a positional-only `training`). Every call these models
    make binds (keywords such as `mask=` or `training=None`, nested and dict inputs,
    `**kwargs`), so none of them is slow by design."""
    return getattr(built.layer, "_call_spec_fast_bindings", None) is None


def fast_model_trace(recorder: Any, model: keras.Model) -> list[str]:
    """The slow CallSpecs of `model`'s sublayers that a fast path should have replaced."""
    return [f"{type(b.layer).__name__}({sorted(b.kwargs_before)})" for b in recorder.built
            if b.path == "slow" and not slow_by_design(b, model)]


@pytest.mark.skipif(not HAS_EXTENSION, reason="this fork was built without the extension")
@pytest.mark.parametrize("training", [None, False, True])
def test_attention_model_forward_uses_the_bound_path(training: Any) -> None:
    fast_model, slow_model = twins("attention")
    tokens, _ = data()
    kwargs = {} if training is None else {"training": training}
    keras.utils.set_random_seed(99)
    with recording() as on:
        fast_out = fast_model(tokens, **kwargs)
    keras.utils.set_random_seed(99)
    with recording() as off:
        slow_out = slow_model(tokens, **kwargs)
    assert set(off.paths) == {"slow"}
    assert same_arrays(fast_out, slow_out), kwargs
    assert same_arrays(get_mask(fast_out), get_mask(slow_out)) if get_mask(fast_out) is not None else get_mask(slow_out) is None
    assert len(on.built) == len(off.built), (on.paths, off.paths)
    # Every sublayer call binds, so none is slow ...
    assert fast_model_trace(on, fast_model) == [], kwargs
    # ... the attention layer's mha(x, x[, masks][, training=...]) and its Softmax(scores,
    # mask=...) among them.
    mha = next(b for b in on.built if isinstance(b.layer, keras.layers.MultiHeadAttention))
    assert mha.path == "bound", (mha.path, mha.kwargs_before)
    softmax = [b for b in on.built if isinstance(b.layer, keras.layers.Softmax)]
    assert softmax and all(b.path == "bound" for b in softmax), [(b.path, sorted(b.kwargs_before)) for b in softmax]
    if training is not None:
        # Models hand every sublayer training=<bool>.
        assert on.bound, on.paths
    # Layer by layer, the same CallSpecs (as values: each model holds its own tensors).
    for a, b in zip(on.built, off.built, strict=True):
        assert type(a.layer) is type(b.layer), (a.layer, b.layer)
        assert spec_values(a.spec) == spec_values(b.spec), (type(a.layer).__name__, a.path, a.keywords)
        assert comparable(a.kwargs_after) == comparable(b.kwargs_after), (type(a.layer).__name__, a.path, a.keywords)


@pytest.mark.skipif(not TRAINABLE, reason="the numpy backend does not implement training")
@pytest.mark.skipif(not HAS_EXTENSION, reason="this fork was built without the extension")
def test_attention_model_train_on_batch() -> None:
    fast_model, slow_model = twins("attention")
    tokens, targets = data()
    for model in (fast_model, slow_model):
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    for step in range(3):
        keras.utils.set_random_seed(100 + step)
        with recording() as on:
            fast_loss = fast_model.train_on_batch(tokens, targets)
        keras.utils.set_random_seed(100 + step)
        with recording() as off:
            slow_loss = slow_model.train_on_batch(tokens, targets)
        assert not off.fast and not off.bound
        assert fast_loss == slow_loss, (step, fast_loss, slow_loss)  # tolerance 0
        # jax and tensorflow trace the step once; torch runs it eagerly every time.
        if on.built:
            assert on.bound, (step, on.paths)
            # No slow CallSpec: the model's own and the Softmax(scores, mask=...) bind too.
            assert fast_model_trace(on, fast_model) == [], (step, on.paths)
            assert "slow" not in on.paths, (step, [(type(b.layer).__name__, b.path) for b in on.built])
    for fast_weight, slow_weight in zip(fast_model.get_weights(), slow_model.get_weights(), strict=True):
        assert same_arrays(fast_weight, slow_weight)


# -- a KerasHub-style decoder: keywords, keyword-only calls, Add()([a, b]), dict inputs ----


def kv_twins() -> tuple[keras.Model, keras.Model]:
    """Two `tests.bench.cases.kv_decoder` models (each built from the same global seed, so
    their dropout seed generators agree) with the same weights; the second never takes
    the fast path."""
    from tests.bench.cases import kv_decoder, kv_training_batch

    x, _ = kv_training_batch()
    models = []
    for _ in range(2):
        model = kv_decoder()
        model(x)  # build
        models.append(model)
    models[1].set_weights(models[0].get_weights())
    disable_fast_path(models[1])
    return models[0], models[1]


def assert_kv_paths(on: Any, off: Any, model: keras.Model) -> None:
    assert off.built and set(off.paths) == {"slow"}, off.paths
    assert len(on.built) == len(off.built), (on.paths, off.paths)
    # Every call binds: the model's own (a dict input, cache keywords), the blocks'
    # (mask and cache keywords), the attention's (keyword-only), Softmax(mask=),
    # Add()([a, b]), Dropout without training, the embeddings' start_index=/reverse=.
    assert fast_model_trace(on, model) == [], [(type(b.layer).__name__, b.path) for b in on.built]
    assert "slow" not in on.paths, [(type(b.layer).__name__, b.path) for b in on.built]
    bound = {type(b.layer).__name__ for b in on.built if b.path == "bound"}
    assert {"KVDecoderLM", "DecoderBlock", "CachedAttention", "Softmax", "Add", "PositionEmbedding",
            "ReversibleEmbedding"} <= bound, sorted(bound)
    for a, b in zip(on.built, off.built, strict=True):
        # (kv_decoder defines its classes afresh for every model: compare their names)
        assert type(a.layer).__name__ == type(b.layer).__name__, (a.layer, b.layer)
        assert spec_values(a.spec) == spec_values(b.spec), (type(a.layer).__name__, a.path)
        assert comparable(a.kwargs_after) == comparable(b.kwargs_after), (type(a.layer).__name__, a.path)


@pytest.mark.skipif(not HAS_EXTENSION, reason="this fork was built without the extension")
@pytest.mark.parametrize("training", [None, False, True])
def test_kv_decoder_forward(training: Any) -> None:
    from tests.bench.cases import kv_training_batch

    fast_model, slow_model = kv_twins()
    x, _ = kv_training_batch()
    kwargs = {} if training is None else {"training": training}
    outs = []
    for model in (fast_model, slow_model):
        keras.utils.set_random_seed(99)
        with recording() as recorder:
            outs.append((model(x, **kwargs), recorder))
    (fast_out, on), (slow_out, off) = outs
    assert same_arrays(fast_out, slow_out), kwargs
    assert_kv_paths(on, off, fast_model)


@pytest.mark.skipif(not HAS_EXTENSION, reason="this fork was built without the extension")
def test_kv_decoder_generation_with_a_cache() -> None:
    """Prompt then one token at a time: the model called with a dict, `cache=` and an int
    `cache_update_index=`, the blocks with cache slices, the attention layer keyword-only."""
    from tests.bench.cases import LM_BATCH, LM_PROMPT, kv_cache, kv_padding_mask, kv_training_batch

    fast_model, slow_model = kv_twins()
    x, _ = kv_training_batch()
    prompt = keras.ops.convert_to_tensor(x["token_ids"][:LM_BATCH, :LM_PROMPT])
    results = []
    for model in (fast_model, slow_model):
        cache, inputs, index, logits_seen, recorders = kv_cache(), prompt, 0, [], []
        for _ in range(3):
            length = int(keras.ops.shape(inputs)[1])
            with recording() as recorder:
                logits, cache = model({"token_ids": inputs, "padding_mask": kv_padding_mask(index + length)},
                                      cache=cache, cache_update_index=index)
            recorders.append(recorder)
            logits_seen.append(logits)
            index += length
            inputs = keras.ops.expand_dims(keras.ops.cast(keras.ops.argmax(logits[:, -1, :], axis=-1), "int32"), 1)
        results.append((logits_seen, cache, recorders))
    (fast_logits, fast_cache, on), (slow_logits, slow_cache, off) = results
    for a, b in zip(fast_logits, slow_logits, strict=True):
        assert same_arrays(a, b)
    assert same_arrays(fast_cache, slow_cache)
    for step_on, step_off in zip(on, off, strict=True):
        assert_kv_paths(step_on, step_off, fast_model)


@pytest.mark.skipif(not TRAINABLE, reason="the numpy backend does not implement training")
@pytest.mark.skipif(not HAS_EXTENSION, reason="this fork was built without the extension")
def test_kv_decoder_train_on_batch() -> None:
    """Three train_on_batch steps (adam, dropout active): losses and every weight, bit for bit."""
    from tests.bench.cases import kv_training_batch

    fast_model, slow_model = kv_twins()
    x, y = kv_training_batch()
    for step in range(3):
        losses = []
        for model in (fast_model, slow_model):
            keras.utils.set_random_seed(100 + step)
            with recording() as recorder:
                losses.append((model.train_on_batch(x, y), recorder))
        (fast_loss, on), (slow_loss, off) = losses
        assert fast_loss == slow_loss, (step, fast_loss, slow_loss)  # tolerance 0
        assert not off.fast and not off.bound
        if on.built:  # jax and tensorflow trace the step once; torch runs it eagerly every time
            assert "slow" not in on.paths, (step, [(type(b.layer).__name__, b.path) for b in on.built])
    for fast_weight, slow_weight in zip(fast_model.get_weights(), slow_model.get_weights(), strict=True):
        assert same_arrays(fast_weight, slow_weight)
    assert same_arrays(fast_model(x), slow_model(x))
