"""Benchmark cases, run inside one benchmark environment (upstream Keras, keras-nightly,
the fork, or the fork built without one patch of its series).

    python cases.py --backend torch --case dense [pyperf options: --processes, --values, --loops, --append FILE]
    python cases.py --backend torch --counts        # prints the CallSpec counts as JSON
    python cases.py --backend torch --case callspec_keywords --processes 1 --values 3   # a quick look
    python cases.py --backend torch --case mlp_fit --twin   # the case's plain-PyTorch twin (twins.py)

Timings go through pyperf (worker processes, warm-ups, calibrated loops); the
driver, tests/bench/run.py, runs each case alternately in every environment.
This module imports nothing of forkgen: the environments hold only Keras, the
backend and pyperf. Only pyperf's worker processes import Keras and the backend.
With `--twin` (torch, TWIN_CASES) a worker times the case's plain-PyTorch twin instead
(tests/bench/twins.py: the same model, weights, loss and optimizer in torch.nn, a plain loop);
`twin_of` gives a case's Keras model and twin, for the bench and for
tests/installed/test_bench_twins.py, which checks they compute the same.

The loop cases (`mlp_*`, `transformer_*`) run `model(x)`, `train_on_batch`, one epoch of
`fit`, `evaluate` and `predict` at Keras's default batch size on issue 26's MLP (5 Dense
layers) and on the Transformer-style model, with NumPy datasets (`loop_data`).

The models are written as model code is written: Sequential and functional models,
and, for `generate`, layer and model subclasses in the manner of KerasHub (a
key/value-cached attention layer taking `cache` and `cache_update_index`, a causal
language model whose `call(token_ids, cache, cache_update_index)` returns the logits
and the updated cache, and a greedy decode loop around it). `kv_decoder`, counted only,
goes further in that manner: keyword-only attention calls, `Softmax(mask=)`, `Dropout`
without `training`, `Add()([a, b])`, a position embedding called with `start_index=`, a
tied LM head, and a model taking a dict `{"token_ids", "padding_mask"}` plus cache keywords.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

CASES = ("callspec", "callspec_keywords", "dense", "mlp", "mlp_inference", "transformer", "train_step", "generate",
         "conv_predict", "mlp_call", "mlp_train_step", "mlp_fit", "mlp_evaluate", "mlp_predict", "transformer_fit",
         "transformer_evaluate", "transformer_predict")
#: The cases that time one CallSpec constructor, which only the fork and upstream share
#: (keras-nightly has upstream's constructor).
MICRO_CASES = ("callspec", "callspec_keywords")
#: The cases that time a model (or layer) as user code calls it.
MODEL_CASES = tuple(case for case in CASES if case not in MICRO_CASES)
DESCRIPTIONS = {
    "callspec": "CallSpec for layer(x): upstream slow constructor, patched CallSpec._fast",
    "callspec_keywords": "CallSpec for block(x, attention_mask=m, cache=c, cache_update_index=8): upstream slow "
    "constructor, patched CallSpec._fast_bound",
    "dense": "eager Dense(4)(x), x of shape (2, 4)",
    "mlp": "4-layer MLP Sequential, model(x), batch 4",
    "mlp_inference": "4-layer MLP Sequential, model(x, training=False), batch 4",
    "transformer": "Transformer-style functional model, forward (inference), batch 4, sequence 16",
    "train_step": "Transformer-style model, one train_on_batch step",
    "generate": "KerasHub-style causal LM with key/value cache (2 blocks, d_model 64, 4 heads, "
    "vocab 256), greedy generation of 16 tokens, batch 2, prompt 8",
    "conv_predict": "ConvNet (Conv2D/BatchNormalization/ReLU/MaxPooling2D x2, GlobalAveragePooling2D, "
    "Dense 10), predict_on_batch, batch 8 of 32x32x3",
    "mlp_call": "5-layer MLP (4 x Dense 64 relu, Dense 10), model(x), batch 32",
    "mlp_train_step": "5-layer MLP, Adam, cross-entropy and accuracy, one train_on_batch step, batch 32",
    "mlp_fit": "5-layer MLP, fit, one epoch of 1,024 samples, batch 32",
    "mlp_evaluate": "5-layer MLP, evaluate on 1,024 samples, batch 32",
    "mlp_predict": "5-layer MLP, predict on 1,024 samples, batch 32",
    "transformer_fit": "Transformer-style model with accuracy, fit, one epoch of 256 sequences of 16, batch 32",
    "transformer_evaluate": "Transformer-style model with accuracy, evaluate on 256 sequences of 16, batch 32",
    "transformer_predict": "Transformer-style model, predict on 256 sequences of 16, batch 32",
}
#: Cases a backend cannot run (the numpy backend has no training).
UNSUPPORTED = {"numpy": {"train_step", "mlp_train_step", "mlp_fit", "transformer_fit"}}
#: The cases with a plain-PyTorch twin (tests/bench/twins.py), timed on the torch backend
#: beside the Keras builds: the same model, weights, loss and optimizer in torch.nn, a plain loop.
TWIN_CASES = ("dense", "mlp_call", "mlp_train_step", "mlp_fit", "mlp_evaluate", "mlp_predict", "transformer",
              "train_step", "transformer_fit", "transformer_evaluate", "transformer_predict")
BATCH, SEQUENCE, VOCAB, WIDTH = 4, 16, 100, 32
#: The causal language model of `generate` and its decode loop.
LM_VOCAB, LM_BLOCKS, LM_WIDTH, LM_HEADS, LM_HIDDEN = 256, 2, 64, 4, 128
LM_BATCH, LM_PROMPT, LM_NEW = 2, 8, 16
LM_MAX_LENGTH = LM_PROMPT + LM_NEW
#: The `kv_decoder` model (the LM_* sizes, a shorter training sequence) and its training batch.
KV_SEQUENCE = 12
#: The `kv_decoder` entries of the counts (tests/bench/run.py checks the issue's target on them).
KV_ONE_TOKEN = "kv_decoder: one generated token, model({token_ids, padding_mask}, cache=..., cache_update_index=8)"
KV_GREEDY_LOOP = f"kv_decoder: greedy loop, {LM_NEW} tokens"
KV_TRAIN_ON_BATCH = "kv_decoder: train_on_batch"
CONV_BATCH, CONV_SIZE = 8, 32
#: The loop cases (fit, evaluate, predict): the samples, Keras's default batch size, and the
#: MLP of issue 26 (input 32, 4 x Dense(64, relu), Dense(10)).
LOOP_SAMPLES, LOOP_SEQUENCES, LOOP_BATCH = 1024, 256, 32
LOOP_INPUT, LOOP_WIDTH, LOOP_DEPTH, LOOP_CLASSES = 32, 64, 4, 10
#: What each loop case does: model(x), train_on_batch, fit, evaluate or predict.
LOOP_KINDS = {"mlp_call": "call", "mlp_train_step": "train_step", "mlp_fit": "fit", "mlp_evaluate": "evaluate",
              "mlp_predict": "predict", "transformer_fit": "fit", "transformer_evaluate": "evaluate",
              "transformer_predict": "predict"}


def backend_argument(argv: list[str]) -> str:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--backend", default="torch")
    return str(parser.parse_known_args(argv)[0].backend)


def setup_backend(backend: str) -> None:
    """Select the backend before Keras is imported; one intra-op thread everywhere, so
    that the two environments do not compete for the cores differently."""
    os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    if backend == "torch":
        import torch

        torch.set_num_threads(1)
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)


def mlp() -> Any:
    import keras

    return keras.Sequential(
        [keras.Input((32,)), *[keras.layers.Dense(64, activation="relu") for _ in range(3)], keras.layers.Dense(10)]
    )


def transformer(metrics: list[str] | None = None) -> Any:
    """Embedding, MultiHeadAttention, LayerNormalization, Dense, Dropout; residuals are ops.
    `metrics`: compiled with these too (the loop cases compile it with accuracy)."""
    import keras

    tokens = keras.Input((SEQUENCE,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, WIDTH)(tokens)
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=WIDTH // 2)(x, x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dropout(0.1)(attended))
    hidden = keras.layers.Dense(2 * WIDTH, activation="relu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dropout(0.1)(keras.layers.Dense(WIDTH)(hidden)))
    outputs = keras.layers.Dense(VOCAB)(x)
    model = keras.Model(tokens, outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=metrics, run_eagerly=True,
                  jit_compile=False)
    return model


def loop_mlp() -> Any:
    """Issue 26's MLP: input 32, 4 x Dense(64, relu), Dense(10), compiled with Adam, sparse
    categorical cross-entropy (from the logits) and accuracy; seed 0."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((LOOP_INPUT,)),
                              *[keras.layers.Dense(LOOP_WIDTH, activation="relu") for _ in range(LOOP_DEPTH)],
                              keras.layers.Dense(LOOP_CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], run_eagerly=True, jit_compile=False)
    return model


def loop_transformer() -> Any:
    """`transformer()` compiled with accuracy too, seed 0: the Transformer loop cases' model."""
    import keras

    keras.utils.set_random_seed(0)
    return transformer(metrics=["accuracy"])


def loop_data() -> dict[str, Any]:
    """The loop cases' datasets, NumPy arrays as users pass them to fit/evaluate/predict:
    the MLP's 1,024 samples and labels, the Transformer's 256 token sequences and labels."""
    import numpy as np

    rng = np.random.default_rng(26)
    return {
        "x": rng.standard_normal((LOOP_SAMPLES, LOOP_INPUT)).astype("float32"),
        "y": rng.integers(0, LOOP_CLASSES, LOOP_SAMPLES).astype("int32"),
        "tokens": rng.integers(0, VOCAB, (LOOP_SEQUENCES, SEQUENCE)).astype("int32"),
        "labels": rng.integers(0, VOCAB, (LOOP_SEQUENCES, SEQUENCE)).astype("int32"),
    }


def causal_lm() -> Any:
    """A small decoder-only Transformer language model, written the way KerasHub writes
    its GPT-2-style models: a cached multi-head attention layer, a pre-norm decoder block,
    and a model whose `call(token_ids, cache, cache_update_index)` returns
    `(logits, cache)`. The cache holds every block's keys and values:
    `(batch, blocks, 2, max_length, heads, head_dim)`."""
    import keras
    from keras import ops

    def causal_mask(batch: int, query_length: int, key_length: int, index: int) -> Any:
        """Query position i (from `index` on) sees key positions 0..i."""
        rows = ops.expand_dims(ops.arange(query_length) + index, axis=1)
        columns = ops.expand_dims(ops.arange(key_length), axis=0)
        return ops.broadcast_to(ops.expand_dims(ops.greater_equal(rows, columns), 0),
                                (batch, query_length, key_length))

    class CachedMultiHeadAttention(keras.layers.Layer):
        """Multi-head attention over a key/value cache, like keras_hub's layer of that name:
        the keys and values of the new positions are written into `cache` at
        `cache_update_index` with `ops.slice_update`, and attention runs over the whole cache."""

        def __init__(self, num_heads: int, key_dim: int, dropout: float = 0.0, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.num_heads, self.key_dim = num_heads, key_dim
            projection = {"output_shape": (None, num_heads, key_dim), "bias_axes": "nh"}
            self._query_dense = keras.layers.EinsumDense("btd,dnh->btnh", name="query", **projection)
            self._key_dense = keras.layers.EinsumDense("btd,dnh->btnh", name="key", **projection)
            self._value_dense = keras.layers.EinsumDense("btd,dnh->btnh", name="value", **projection)
            self._output_dense: Any = None
            self._softmax = keras.layers.Softmax(axis=-1)
            self._dropout_layer = keras.layers.Dropout(dropout)

        def build(self, query_shape: Any) -> None:
            width = query_shape[-1]
            for dense in (self._query_dense, self._key_dense, self._value_dense):
                dense.build(query_shape)
            self._output_dense = keras.layers.EinsumDense(
                "btnh,nhd->btd", output_shape=(None, width), bias_axes="d", name="attention_output")
            self._output_dense.build((*query_shape[:-1], self.num_heads, self.key_dim))

        def call(self, query: Any, value: Any, attention_mask: Any = None, cache: Any = None,
                 cache_update_index: Any = None, training: Any = None) -> Any:
            query = self._query_dense(query)
            key = self._key_dense(value)
            value = self._value_dense(value)
            if cache is not None:
                start = [0, cache_update_index, 0, 0]
                key = ops.slice_update(cache[:, 0, ...], start, key)
                value = ops.slice_update(cache[:, 1, ...], start, value)
                cache = ops.stack((key, value), axis=1)
            query = ops.multiply(query, ops.cast(1.0 / math.sqrt(self.key_dim), query.dtype))
            scores = ops.einsum("bqnh,bknh->bnqk", query, key)
            mask = None if attention_mask is None else ops.expand_dims(attention_mask, axis=1)
            weights = self._dropout_layer(self._softmax(scores, mask=mask), training=training)
            output = self._output_dense(ops.einsum("bnqk,bknh->bqnh", weights, value))
            return output if cache is None else (output, cache)

    class TransformerDecoder(keras.layers.Layer):
        """Pre-norm decoder block: cached causal self-attention, then a GELU feedforward."""

        def __init__(self, num_heads: int, intermediate_dim: int, dropout: float = 0.1, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.num_heads, self.intermediate_dim, self.dropout = num_heads, intermediate_dim, dropout

        def build(self, decoder_sequence_shape: Any) -> None:
            width = decoder_sequence_shape[-1]
            self._self_attention_layer_norm = keras.layers.LayerNormalization(epsilon=1e-5)
            self._self_attention_layer_norm.build(decoder_sequence_shape)
            self._self_attention_layer = CachedMultiHeadAttention(
                self.num_heads, width // self.num_heads, dropout=self.dropout, name="self_attention")
            self._self_attention_layer.build(decoder_sequence_shape)
            self._self_attention_dropout = keras.layers.Dropout(self.dropout)
            self._feedforward_layer_norm = keras.layers.LayerNormalization(epsilon=1e-5)
            self._feedforward_layer_norm.build(decoder_sequence_shape)
            self._feedforward_intermediate_dense = keras.layers.Dense(self.intermediate_dim, activation="gelu")
            self._feedforward_intermediate_dense.build(decoder_sequence_shape)
            self._feedforward_output_dense = keras.layers.Dense(width)
            self._feedforward_output_dense.build((*decoder_sequence_shape[:-1], self.intermediate_dim))
            self._feedforward_dropout = keras.layers.Dropout(self.dropout)

        def call(self, decoder_sequence: Any, self_attention_cache: Any = None,
                 self_attention_cache_update_index: Any = None, training: Any = None) -> Any:
            x = decoder_sequence
            batch, length = ops.shape(x)[0], ops.shape(x)[1]
            index = self_attention_cache_update_index or 0
            key_length = length if self_attention_cache is None else ops.shape(self_attention_cache)[2]
            mask = causal_mask(batch, length, key_length, index)
            residual = x
            x = self._self_attention_layer_norm(x)
            attended = self._self_attention_layer(
                query=x, value=x, attention_mask=mask, cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index, training=training)
            if self_attention_cache is not None:
                attended, self_attention_cache = attended
            x = residual + self._self_attention_dropout(attended, training=training)
            residual = x
            x = self._feedforward_layer_norm(x)
            x = self._feedforward_output_dense(self._feedforward_intermediate_dense(x))
            x = residual + self._feedforward_dropout(x, training=training)
            return x if self_attention_cache is None else (x, self_attention_cache)

    class CausalLM(keras.Model):
        """Token and position embeddings, decoder blocks, a final norm and the LM head."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.token_embedding = keras.layers.Embedding(LM_VOCAB, LM_WIDTH, name="token_embedding")
            self.position_embedding = keras.layers.Embedding(LM_MAX_LENGTH, LM_WIDTH, name="position_embedding")
            self.transformer_layers = [TransformerDecoder(LM_HEADS, LM_HIDDEN, name=f"transformer_layer_{i}")
                                       for i in range(LM_BLOCKS)]
            self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="layer_norm")
            self.lm_head = keras.layers.Dense(LM_VOCAB, use_bias=False, name="lm_head")

        def build(self, token_ids_shape: Any) -> None:
            hidden_shape = (*token_ids_shape, LM_WIDTH)
            self.token_embedding.build(token_ids_shape)
            self.position_embedding.build((token_ids_shape[-1],))
            for layer in self.transformer_layers:
                layer.build(hidden_shape)
            self.layer_norm.build(hidden_shape)
            self.lm_head.build(hidden_shape)

        def call(self, token_ids: Any, cache: Any, cache_update_index: Any) -> Any:
            length = ops.shape(token_ids)[1]
            positions = ops.arange(cache_update_index, cache_update_index + length)
            x = self.token_embedding(token_ids) + self.position_embedding(positions)
            caches = []
            for i, layer in enumerate(self.transformer_layers):
                x, layer_cache = layer(x, self_attention_cache=cache[:, i, ...],
                                       self_attention_cache_update_index=cache_update_index)
                caches.append(layer_cache)
            logits = self.lm_head(self.layer_norm(x))
            return logits, ops.stack(caches, axis=1)

    keras.utils.set_random_seed(0)
    return CausalLM(name="causal_lm")


def greedy_generate(model: Any, prompt: Any) -> Any:
    """Greedy decoding of LM_NEW tokens, one forward per token: the prompt fills an empty
    cache (the first new token), then every new token is fed back alone at its index."""
    from keras import ops

    head_dim = LM_WIDTH // LM_HEADS
    cache = ops.zeros((LM_BATCH, LM_BLOCKS, 2, LM_MAX_LENGTH, LM_HEADS, head_dim))
    tokens, inputs, index = prompt, prompt, 0
    for _ in range(LM_NEW):
        logits, cache = model(inputs, cache=cache, cache_update_index=index)
        index += ops.shape(inputs)[1]
        inputs = ops.expand_dims(ops.cast(ops.argmax(logits[:, -1, :], axis=-1), "int32"), axis=1)
        tokens = ops.concatenate([tokens, inputs], axis=1)
    return tokens


def kv_decoder() -> Any:
    """A decoder-only Transformer language model written as KerasHub writes one today
    (GPT-2/Gemma style), for the CallSpec counts: every layer call that binds is one user
    code makes.

    - `TokenAndPositionEmbedding`: a `ReversibleEmbedding` (an `Embedding` whose
      `call(inputs, reverse=False)` also serves as the tied LM head) and a `PositionEmbedding`
      called as `position_embedding(x, start_index=...)`;
    - `CachedAttention`, called with keywords only (`query=`, `value=`, `attention_mask=`,
      `cache=`, `cache_update_index=`), `Softmax` called as `softmax(scores, mask=m)`,
      `Dropout` without `training` (it comes from the call context);
    - `DecoderBlock`, called as `block(x, decoder_padding_mask=,
      self_attention_cache=, self_attention_cache_update_index=)`, residuals through
      `keras.layers.Add()([a, b])`;
    - the model, `call(inputs, cache=None, cache_update_index=None, training=None)` with
      `inputs = {"token_ids": ..., "padding_mask": ...}`: logits without a cache (training,
      `train_on_batch`), `(logits, cache)` with one (generation). `padding_mask` marks the key
      positions that hold tokens: the sequence's without a cache, the cache's with one
      `(batch, LM_MAX_LENGTH)`. The cache is `(batch, blocks, 2, max_length, heads, head_dim)`.

    Compiled as the `train_step` Transformer is (adam, sparse categorical crossentropy,
    eager)."""
    import keras
    from keras import ops

    def causal_mask(batch: int, query_length: int, key_length: int, index: int) -> Any:
        rows = ops.expand_dims(ops.arange(query_length) + index, axis=1)
        columns = ops.expand_dims(ops.arange(key_length), axis=0)
        return ops.broadcast_to(ops.expand_dims(ops.greater_equal(rows, columns), 0),
                                (batch, query_length, key_length))

    class ReversibleEmbedding(keras.layers.Embedding):
        """keras_hub's layer of that name: `reverse=True` maps hidden states to logits with
        the transposed embedding matrix (the tied LM head)."""

        def call(self, inputs: Any, reverse: bool = False) -> Any:
            if reverse:
                return ops.matmul(inputs, ops.transpose(ops.convert_to_tensor(self.embeddings)))
            return super().call(inputs)

    class PositionEmbedding(keras.layers.Layer):
        """Learned positions, sliced from `start_index` on (the cache index in generation)."""

        def __init__(self, sequence_length: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.sequence_length = sequence_length

        def build(self, inputs_shape: Any) -> None:
            self.position_embeddings = self.add_weight(
                name="embeddings", shape=(self.sequence_length, inputs_shape[-1]), initializer="glorot_uniform")

        def call(self, inputs: Any, start_index: Any = 0) -> Any:
            shape = ops.shape(inputs)
            positions = ops.slice(ops.convert_to_tensor(self.position_embeddings), (start_index, 0),
                                  (shape[-2], shape[-1]))
            return ops.broadcast_to(positions, shape)

    class TokenAndPositionEmbedding(keras.layers.Layer):
        def __init__(self, vocabulary_size: int, sequence_length: int, embedding_dim: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.embedding_dim = embedding_dim
            self.token_embedding = ReversibleEmbedding(vocabulary_size, embedding_dim, name="token_embedding")
            self.position_embedding = PositionEmbedding(sequence_length, name="position_embedding")

        def build(self, inputs_shape: Any) -> None:
            self.token_embedding.build(inputs_shape)
            self.position_embedding.build((*inputs_shape, self.embedding_dim))

        def call(self, inputs: Any, start_index: Any = 0) -> Any:
            embedded_tokens = self.token_embedding(inputs)
            embedded_positions = self.position_embedding(embedded_tokens, start_index=start_index)
            return embedded_tokens + embedded_positions

    class CachedAttention(keras.layers.Layer):
        """keras_hub's CachedMultiHeadAttention, reduced: the new keys and values go into
        `cache` at `cache_update_index`; attention runs over the whole cache."""

        def __init__(self, num_heads: int, key_dim: int, dropout: float = 0.0, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.num_heads, self.key_dim = num_heads, key_dim
            projection = {"output_shape": (None, num_heads, key_dim), "bias_axes": "nh"}
            self._query_dense = keras.layers.EinsumDense("btd,dnh->btnh", name="query", **projection)
            self._key_dense = keras.layers.EinsumDense("btd,dnh->btnh", name="key", **projection)
            self._value_dense = keras.layers.EinsumDense("btd,dnh->btnh", name="value", **projection)
            self._output_dense: Any = None
            self._softmax = keras.layers.Softmax(axis=-1)
            self._dropout_layer = keras.layers.Dropout(dropout)

        def build(self, query_shape: Any, value_shape: Any = None) -> None:
            width = query_shape[-1]
            for dense in (self._query_dense, self._key_dense, self._value_dense):
                dense.build(query_shape)
            self._output_dense = keras.layers.EinsumDense(
                "btnh,nhd->btd", output_shape=(None, width), bias_axes="d", name="attention_output")
            self._output_dense.build((*query_shape[:-1], self.num_heads, self.key_dim))

        def call(self, query: Any, value: Any, attention_mask: Any = None, cache: Any = None,
                 cache_update_index: Any = None, training: Any = None) -> Any:
            query = self._query_dense(query)
            key = self._key_dense(value)
            value = self._value_dense(value)
            if cache is not None:
                start = [0, cache_update_index, 0, 0]
                key = ops.slice_update(cache[:, 0, ...], start, key)
                value = ops.slice_update(cache[:, 1, ...], start, value)
                cache = ops.stack((key, value), axis=1)
            query = ops.multiply(query, ops.cast(1.0 / math.sqrt(self.key_dim), query.dtype))
            scores = ops.einsum("bqnh,bknh->bnqk", query, key)
            mask = None if attention_mask is None else ops.expand_dims(attention_mask, axis=1)
            weights = self._dropout_layer(self._softmax(scores, mask=mask))
            output = self._output_dense(ops.einsum("bnqk,bknh->bqnh", weights, value))
            return output if cache is None else (output, cache)

    class DecoderBlock(keras.layers.Layer):
        """keras_hub's TransformerDecoder without cross-attention, pre-norm."""

        def __init__(self, num_heads: int, intermediate_dim: int, dropout: float = 0.1, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.num_heads, self.intermediate_dim, self.dropout = num_heads, intermediate_dim, dropout

        def build(self, decoder_sequence_shape: Any) -> None:
            width = decoder_sequence_shape[-1]
            self._self_attention_layer_norm = keras.layers.LayerNormalization(epsilon=1e-5)
            self._self_attention_layer_norm.build(decoder_sequence_shape)
            self._self_attention_layer = CachedAttention(
                self.num_heads, width // self.num_heads, dropout=self.dropout, name="self_attention")
            self._self_attention_layer.build(decoder_sequence_shape)
            self._self_attention_dropout = keras.layers.Dropout(self.dropout)
            self._self_attention_residual = keras.layers.Add()
            self._feedforward_layer_norm = keras.layers.LayerNormalization(epsilon=1e-5)
            self._feedforward_layer_norm.build(decoder_sequence_shape)
            self._feedforward_intermediate_dense = keras.layers.Dense(self.intermediate_dim, activation="gelu")
            self._feedforward_intermediate_dense.build(decoder_sequence_shape)
            self._feedforward_output_dense = keras.layers.Dense(width)
            self._feedforward_output_dense.build((*decoder_sequence_shape[:-1], self.intermediate_dim))
            self._feedforward_dropout = keras.layers.Dropout(self.dropout)
            self._feedforward_residual = keras.layers.Add()

        def call(self, decoder_sequence: Any, decoder_padding_mask: Any = None, self_attention_cache: Any = None,
                 self_attention_cache_update_index: Any = None, training: Any = None) -> Any:
            x = decoder_sequence
            batch, length = ops.shape(x)[0], ops.shape(x)[1]
            index = self_attention_cache_update_index or 0
            key_length = length if self_attention_cache is None else ops.shape(self_attention_cache)[2]
            mask = causal_mask(batch, length, key_length, index)
            if decoder_padding_mask is not None:
                mask = ops.logical_and(mask, ops.expand_dims(ops.cast(decoder_padding_mask, "bool"), axis=1))
            residual = x
            x = self._self_attention_layer_norm(x)
            attended = self._self_attention_layer(
                query=x, value=x, attention_mask=mask, cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index)
            if self_attention_cache is not None:
                attended, self_attention_cache = attended
            x = self._self_attention_residual([residual, self._self_attention_dropout(attended)])
            residual = x
            x = self._feedforward_layer_norm(x)
            x = self._feedforward_output_dense(self._feedforward_intermediate_dense(x))
            x = self._feedforward_residual([residual, self._feedforward_dropout(x)])
            return x if self_attention_cache is None else (x, self_attention_cache)

    class KVDecoderLM(keras.Model):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.embeddings = TokenAndPositionEmbedding(LM_VOCAB, LM_MAX_LENGTH, LM_WIDTH, name="embeddings")
            self.embeddings_dropout = keras.layers.Dropout(0.1, name="embeddings_dropout")
            self.transformer_layers = [DecoderBlock(LM_HEADS, LM_HIDDEN, name=f"transformer_layer_{i}")
                                       for i in range(LM_BLOCKS)]
            self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="layer_norm")

        def build(self, inputs_shape: Any) -> None:
            token_ids_shape = tuple(inputs_shape["token_ids"])
            hidden_shape = (*token_ids_shape, LM_WIDTH)
            self.embeddings.build(token_ids_shape)
            for layer in self.transformer_layers:
                layer.build(hidden_shape)
            self.layer_norm.build(hidden_shape)

        def call(self, inputs: Any, cache: Any = None, cache_update_index: Any = None, training: Any = None) -> Any:
            token_ids, padding_mask = inputs["token_ids"], inputs["padding_mask"]
            x = self.embeddings(token_ids, start_index=cache_update_index or 0)
            x = self.embeddings_dropout(x)
            caches = []
            for i, layer in enumerate(self.transformer_layers):
                output = layer(x, decoder_padding_mask=padding_mask,
                               self_attention_cache=None if cache is None else cache[:, i, ...],
                               self_attention_cache_update_index=cache_update_index)
                if cache is None:
                    x = output
                else:
                    x, layer_cache = output
                    caches.append(layer_cache)
            logits = self.embeddings.token_embedding(self.layer_norm(x), reverse=True)
            return logits if cache is None else (logits, ops.stack(caches, axis=1))

    keras.utils.set_random_seed(0)
    model = KVDecoderLM(name="kv_decoder")
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=True, jit_compile=False)
    return model


def kv_cache() -> Any:
    """An empty key/value cache for `kv_decoder` (and `causal_lm`)."""
    from keras import ops

    return ops.zeros((LM_BATCH, LM_BLOCKS, 2, LM_MAX_LENGTH, LM_HEADS, LM_WIDTH // LM_HEADS))


def kv_padding_mask(filled: int) -> Any:
    """`kv_decoder`'s padding mask over the cache: the first `filled` positions hold tokens."""
    from keras import ops

    row = ops.less(ops.arange(LM_MAX_LENGTH), filled)
    return ops.broadcast_to(ops.expand_dims(row, 0), (LM_BATCH, LM_MAX_LENGTH))


def kv_generate(model: Any, prompt: Any, new_tokens: int = LM_NEW) -> Any:
    """Greedy decoding with `kv_decoder`, as `greedy_generate`: the prompt fills the cache,
    then each new token is fed back alone, the model called with a dict and cache keywords."""
    from keras import ops

    cache = kv_cache()
    tokens, inputs, index = prompt, prompt, 0
    for _ in range(new_tokens):
        length = ops.shape(inputs)[1]
        logits, cache = model({"token_ids": inputs, "padding_mask": kv_padding_mask(index + length)},
                              cache=cache, cache_update_index=index)
        index += length
        inputs = ops.expand_dims(ops.cast(ops.argmax(logits[:, -1, :], axis=-1), "int32"), axis=1)
        tokens = ops.concatenate([tokens, inputs], axis=1)
    return tokens


def kv_training_batch() -> tuple[dict[str, Any], Any]:
    """`kv_decoder`'s training batch: `x = {"token_ids", "padding_mask"}` (the second
    sequence padded after 9 tokens) and the next-token labels, NumPy arrays as
    `train_on_batch` takes them."""
    import numpy as np

    rng = np.random.default_rng(1)
    tokens = rng.integers(0, LM_VOCAB, (LM_BATCH, KV_SEQUENCE + 1)).astype("int32")
    padding_mask = np.ones((LM_BATCH, KV_SEQUENCE), dtype="int32")
    padding_mask[1, 9:] = 0
    return {"token_ids": tokens[:, :-1], "padding_mask": padding_mask}, tokens[:, 1:]


def keyword_call() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """`callspec_keywords`: a layer with a KerasHub-style call signature, its positional
    arguments and its keyword arguments, for `block(x, attention_mask=m, cache=c,
    cache_update_index=8)` (backend tensors, the index a Python int); called once."""
    import keras
    from keras import ops

    class KeywordBlock(keras.layers.Layer):
        def call(self, inputs: Any, attention_mask: Any = None, cache: Any = None, cache_update_index: Any = None,
                 training: Any = None) -> Any:
            return inputs

    block = KeywordBlock(name="keyword_block")
    x = ops.zeros((LM_BATCH, 1, LM_WIDTH))
    kwargs = {"attention_mask": ops.ones((LM_BATCH, 1, LM_MAX_LENGTH), dtype="bool"), "cache": kv_cache(),
              "cache_update_index": LM_PROMPT}
    block(x, **kwargs)
    return block, (x,), kwargs


def convnet() -> Any:
    """(Conv2D, BatchNormalization, ReLU, MaxPooling2D) x 2, GlobalAveragePooling2D, Dense(10)."""
    import keras

    layers = keras.layers
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((CONV_SIZE, CONV_SIZE, 3)),
        layers.Conv2D(16, 3, padding="same"), layers.BatchNormalization(), layers.ReLU(), layers.MaxPooling2D(),
        layers.Conv2D(32, 3, padding="same"), layers.BatchNormalization(), layers.ReLU(), layers.MaxPooling2D(),
        layers.GlobalAveragePooling2D(), layers.Dense(10),
    ])
    model.compile(run_eagerly=True, jit_compile=False)  # eager on every backend, as torch is
    return model


def data() -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return {
        "dense": rng.standard_normal((2, 4)).astype("float32"),
        "mlp": rng.standard_normal((BATCH, 32)).astype("float32"),
        "tokens": rng.integers(0, VOCAB, (BATCH, SEQUENCE)).astype("int32"),
        "labels": rng.integers(0, VOCAB, (BATCH, SEQUENCE)).astype("int32"),
        "prompt": rng.integers(0, LM_VOCAB, (LM_BATCH, LM_PROMPT)).astype("int32"),
        "images": rng.standard_normal((CONV_BATCH, CONV_SIZE, CONV_SIZE, 3)).astype("float32"),
    }


def slow_callspec(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Callable[[], Any]:
    """Upstream's constructor for `layer(*args, **kwargs)`, as tests/equivalence/helpers.slow_spec
    builds it, but with the arity decided once: the timed callable calls `CallSpec` and nothing
    else. Without `kwargs` every call gets a new empty dict, as `layer(x)` does; `kwargs`, when
    given, must hold no call-context argument the layer's `call()` lacks (the constructor would
    pop it, and the next call would differ)."""
    from keras.src.layers.layer import CallSpec

    signature = layer._call_signature
    if "call_context_args" in inspect.signature(CallSpec.__init__).parameters:  # 3.10+
        context = layer._call_context_args
        if kwargs is None:
            return lambda: CallSpec(signature, context, args, {})
        return lambda: CallSpec(signature, context, args, kwargs)
    if kwargs is None:
        return lambda: CallSpec(signature, args, {})
    return lambda: CallSpec(signature, args, kwargs)


def fast_bound_method(callspec: type) -> Callable[..., Any] | None:
    """`CallSpec._fast_bound` when it has the extension's current form, `(bindings, layer, args,
    kwargs)`, returning a CallSpec or None (not fast); None when this Keras has no `_fast_bound`
    (upstream, keras-nightly) or the older `(bindings, args, kwargs)`, which needs its caller's
    eligibility check first."""
    method: Callable[..., Any] | None = getattr(callspec, "_fast_bound", None)
    if method is None:
        return None
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return None
    if len(parameters) != 4 or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                   for p in parameters.values()):
        return None
    return method


def spec_summary(spec: Any) -> dict[str, Any]:
    """What a CallSpec holds, its values by identity (tensors have no usable `==`)."""
    def shown(value: Any) -> Any:
        if isinstance(value, dict):
            return [(key, id(item)) for key, item in value.items()]
        if isinstance(value, list):
            return list(value)
        return id(value) if not isinstance(value, bool) else value

    return {name: shown(getattr(spec, name)) for name in (
        "user_arguments_dict", "arguments_dict", "argument_names", "tensor_arguments_dict",
        "tensor_arguments_names", "nested_tensor_argument_names", "first_arg", "eager")}


def fast_bound_callspec(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any] | None:
    """The fork's `CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, kwargs)`
    as a zero-argument callable, or None when this build cannot take it for this call: no
    `_fast_bound` of the current form, no bindings for the layer, or a None result (the fork
    then builds the CallSpec with upstream's constructor). The fast CallSpec must hold what
    upstream's constructor builds; a `_fast_bound` that pops from `kwargs` is timed with a
    new copy of them per call."""
    from keras.src.layers.layer import CallSpec

    method = fast_bound_method(CallSpec)
    bindings = getattr(layer, "_call_spec_fast_bindings", None)
    if method is None or bindings is None:
        return None
    trial = dict(kwargs)
    spec = method(bindings, layer, args, trial)
    if spec is None:
        return None
    expected = slow_callspec(layer, args, dict(kwargs))()
    if spec_summary(spec) != spec_summary(expected):
        raise AssertionError(f"CallSpec._fast_bound built another CallSpec than upstream's constructor for "
                             f"{type(layer).__name__}: {spec_summary(spec)} != {spec_summary(expected)}")
    if trial != kwargs:
        return lambda: method(bindings, layer, args, dict(kwargs))
    return lambda: method(bindings, layer, args, kwargs)


def workload(case: str) -> Callable[[], Any]:
    """`case` as a zero-argument callable, its objects built and warmed up."""
    import keras

    arrays = data()
    run: Callable[[], Any]
    if case in ("callspec", "dense"):
        dense = keras.layers.Dense(4)
        x = keras.ops.convert_to_tensor(arrays["dense"])
        dense(x)
        from keras.src.layers.layer import CallSpec

        if case == "dense":
            run = lambda: dense(x)  # noqa: E731
        elif hasattr(CallSpec, "_fast") and dense._call_spec_fast_path:
            plan = dense._call_spec_fast_plan
            run = lambda: CallSpec._fast(plan, x)  # noqa: E731
        else:
            run = slow_callspec(dense, (x,))
    elif case == "callspec_keywords":
        block, block_args, block_kwargs = keyword_call()
        run = fast_bound_callspec(block, block_args, block_kwargs) or slow_callspec(block, block_args, block_kwargs)
    elif case == "mlp":
        sequential, mlp_x = mlp(), keras.ops.convert_to_tensor(arrays["mlp"])
        run = lambda: sequential(mlp_x)  # noqa: E731
    elif case == "mlp_inference":
        sequential, mlp_x = mlp(), keras.ops.convert_to_tensor(arrays["mlp"])
        run = lambda: sequential(mlp_x, training=False)  # noqa: E731
    elif case == "transformer":
        model, tokens = transformer(), keras.ops.convert_to_tensor(arrays["tokens"])
        run = lambda: model(tokens, training=False)  # noqa: E731
    elif case == "train_step":
        model = transformer()
        run = lambda: model.train_on_batch(arrays["tokens"], arrays["labels"])  # noqa: E731
    elif case == "generate":
        language_model, prompt = causal_lm(), keras.ops.convert_to_tensor(arrays["prompt"])
        run = lambda: greedy_generate(language_model, prompt)  # noqa: E731
    elif case == "conv_predict":
        conv_model = convnet()
        run = lambda: conv_model.predict_on_batch(arrays["images"])  # noqa: E731
    elif case in LOOP_KINDS and case.startswith("mlp_"):
        loops = loop_data()
        run = loop_workload(case, loop_mlp(), loops["x"], loops["y"])
    elif case in LOOP_KINDS:
        loops = loop_data()
        run = loop_workload(case, loop_transformer(), loops["tokens"], loops["labels"])
    else:
        raise ValueError(f"unknown case {case!r}")
    run()
    run()
    return run


def loop_workload(case: str, model: Any, x: Any, y: Any) -> Callable[[], Any]:
    """An `mlp_*` or `transformer_*` loop case on `model`: the NumPy arrays as users pass them,
    the default batch size (32), verbose=0; `call` and `train_step` on the first batch."""
    import keras

    kind = LOOP_KINDS[case]
    if kind == "call":
        batch = keras.ops.convert_to_tensor(x[:LOOP_BATCH])
        return lambda: model(batch)
    if kind == "train_step":
        return lambda: model.train_on_batch(x[:LOOP_BATCH], y[:LOOP_BATCH])
    if kind == "fit":
        return lambda: model.fit(x, y, epochs=1, verbose=0)
    if kind == "evaluate":
        return lambda: model.evaluate(x, y, verbose=0)
    if kind == "predict":
        return lambda: model.predict(x, verbose=0)
    raise ValueError(f"unknown case {case!r}")


def twin_of(case: str) -> tuple[Any, Any, Any]:
    """The Keras model of `case` (built as `workload` builds it) and its plain-PyTorch twin
    (tests/bench/twins.py, the Keras model's weights copied), and the case's inputs: the arrays
    (or backend tensors) the Keras case passes. Torch backend only."""
    import keras
    import twins

    if case not in TWIN_CASES:
        raise ValueError(f"{case!r} has no plain-PyTorch twin")
    arrays, loops = data(), loop_data()
    if case == "dense":
        keras.utils.set_random_seed(0)
        dense = keras.layers.Dense(4)
        x = keras.ops.convert_to_tensor(arrays["dense"])
        dense(x)
        return dense, twins.linear(dense), (x,)
    if case.startswith("mlp_"):
        model = loop_mlp()
        return model, twins.Twin(twins.mlp(model), twins.logits_crossentropy, accuracy=True), (loops["x"], loops["y"])
    if case in ("transformer", "train_step"):
        keras.utils.set_random_seed(0)
        model = transformer()
        return (model, twins.Twin(twins.transformer(model), twins.probability_crossentropy, accuracy=False),
                (arrays["tokens"], arrays["labels"]))
    if case.startswith("transformer_"):
        model = loop_transformer()
        return (model, twins.Twin(twins.transformer(model), twins.probability_crossentropy, accuracy=True),
                (loops["tokens"], loops["labels"]))
    raise ValueError(f"{case!r} has no plain-PyTorch twin")


def twin_workload(case: str, device: str | None = None,
                  compile_module: Callable[[Any], Any] | None = None) -> Callable[[], Any]:
    """`case`'s plain-PyTorch twin as a zero-argument callable: the same work as `workload(case)`
    in torch.nn, its inputs torch tensors made once (labels int64, as torch's losses take them),
    warmed up. The Keras model only gives the twin its weights; it is not called. `device`: the
    module and inputs go there (tests/gpu); `compile_module`: applied to the module (`torch.compile`)."""
    import torch

    _, twin, inputs = twin_of(case)
    module = twin if case == "dense" else twin.module
    if device is not None:
        module.to(device)
    if compile_module is not None:
        module = compile_module(module)
        if case != "dense":
            twin.module = module
    run: Callable[[], Any]
    if case == "dense":
        x = torch.as_tensor(inputs[0], device=device)
        run = lambda: module(x)  # noqa: E731
        run()
        run()
        return run
    x, y = torch.as_tensor(inputs[0], device=device), torch.as_tensor(inputs[1], device=device).long()
    kind = {"transformer": "call", "train_step": "train_step"}.get(case) or LOOP_KINDS[case]
    if kind == "call":
        twin.module.eval()  # the Keras call runs in inference mode (training defaults to False)
        batch = x[:LOOP_BATCH] if case == "mlp_call" else x
        run = lambda: twin.module(batch)  # noqa: E731
    elif kind == "train_step":
        batch_x, batch_y = (x[:LOOP_BATCH], y[:LOOP_BATCH]) if case == "mlp_train_step" else (x, y)
        run = lambda: twin.train_step(batch_x, batch_y)  # noqa: E731
    elif kind == "fit":
        run = lambda: twin.fit(x, y)  # noqa: E731
    elif kind == "evaluate":
        run = lambda: twin.evaluate(x, y)  # noqa: E731
    elif kind == "predict":
        run = lambda: twin.predict(x)  # noqa: E731
    else:
        raise ValueError(f"{case!r} has no plain-PyTorch twin")
    run()
    run()
    return run


@contextmanager
def counting() -> Iterator[dict[str, int]]:
    """Count CallSpecs built by the slow constructor and by the fast ones
    (`CallSpec._fast`, and `CallSpec._fast_bound` when the wheel has the extension).

    A fast constructor counts only when it returned a CallSpec: `_fast_bound` returns None
    for a call it cannot take, and `Layer.__call__` then builds the CallSpec with the slow
    constructor, which counts it. One count per CallSpec: a fast constructor called from
    inside another is not counted again, and one that ran the slow constructor itself counts
    as slow (the slow one counted it)."""
    import functools

    from keras.src.layers.layer import CallSpec

    counts = {"slow": 0, "fast": 0}
    depth = {"slow": 0, "fast": 0}
    original_init = CallSpec.__init__
    originals = {name: CallSpec.__dict__[name] for name in ("_fast", "_fast_bound") if name in CallSpec.__dict__}

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        if depth["slow"] == 0:
            counts["slow"] += 1
        depth["slow"] += 1
        try:
            original_init(self, *args, **kwargs)
        finally:
            depth["slow"] -= 1

    def counted(function: Callable[..., Any]) -> classmethod[Any, ..., Any]:
        @functools.wraps(function)
        def fast(cls: type, *args: Any, **kwargs: Any) -> Any:
            slow_before = counts["slow"]
            depth["fast"] += 1
            try:
                spec = function(cls, *args, **kwargs)
            finally:
                depth["fast"] -= 1
            if spec is not None and depth["fast"] == 0 and depth["slow"] == 0 and counts["slow"] == slow_before:
                counts["fast"] += 1
            return spec

        return classmethod(fast)

    CallSpec.__init__ = init
    for name, method in originals.items():
        setattr(CallSpec, name, counted(method.__func__))
    try:
        yield counts
    finally:
        CallSpec.__init__ = original_init
        for name, method in originals.items():
            setattr(CallSpec, name, method)


def call_counts(backend: str) -> dict[str, dict[str, Any]] | None:
    """CallSpecs per call, slow and fast, after a warm-up call of each; None when this Keras
    has no `keras.src.layers.layer.CallSpec` to count (another internal layout). The
    greedy loops also give them per generated token (`tokens`, `slow_per_token`,
    `fast_per_token`)."""
    import keras

    try:
        from keras.src.layers.layer import CallSpec
    except ImportError:
        return None
    if not isinstance(CallSpec, type) or "__init__" not in CallSpec.__dict__:
        return None
    arrays = data()
    tokens = keras.ops.convert_to_tensor(arrays["tokens"])
    sequential, model = mlp(), transformer()
    mlp_x = keras.ops.convert_to_tensor(arrays["mlp"])
    dense, dense_x = keras.layers.Dense(4), keras.ops.convert_to_tensor(arrays["dense"])
    language_model, prompt = causal_lm(), keras.ops.convert_to_tensor(arrays["prompt"])
    conv_model = convnet()
    cache = kv_cache()
    step = prompt[:, :1]
    decoder = kv_decoder()
    step_inputs = {"token_ids": step, "padding_mask": kv_padding_mask(LM_PROMPT + 1)}
    kv_batch = kv_training_batch()
    shapes: dict[str, Callable[[], Any]] = {
        "dense: layer(x)": lambda: dense(dense_x),
        "mlp: model(x)": lambda: sequential(mlp_x),
        "mlp: model(x, training=False)": lambda: sequential(mlp_x, training=False),
        "mlp: model(x, training=True)": lambda: sequential(mlp_x, training=True),
        "transformer: model(x)": lambda: model(tokens),
        "transformer: model(x, training=False)": lambda: model(tokens, training=False),
        "transformer: model(x, training=True)": lambda: model(tokens, training=True),
        "transformer: train_on_batch": lambda: model.train_on_batch(arrays["tokens"], arrays["labels"]),
        "generate: one decode step, model(token_ids, cache=..., cache_update_index=8)":
            lambda: language_model(step, cache=cache, cache_update_index=LM_PROMPT),
        f"generate: greedy loop, {LM_NEW} tokens": lambda: greedy_generate(language_model, prompt),
        "conv_predict: predict_on_batch(x)": lambda: conv_model.predict_on_batch(arrays["images"]),
        KV_ONE_TOKEN: lambda: decoder(step_inputs, cache=cache, cache_update_index=LM_PROMPT),
        KV_GREEDY_LOOP: lambda: kv_generate(decoder, prompt),
        KV_TRAIN_ON_BATCH: lambda: decoder.train_on_batch(*kv_batch),
    }
    if "train_step" in UNSUPPORTED.get(backend, ()):
        del shapes["transformer: train_on_batch"], shapes[KV_TRAIN_ON_BATCH]
    result: dict[str, dict[str, Any]] = {}
    for name, run in shapes.items():
        run()
        with counting() as counts:
            run()
        result[name] = dict(counts)
    for name in (f"generate: greedy loop, {LM_NEW} tokens", KV_GREEDY_LOOP):
        counted = result[name]
        counted.update(tokens=LM_NEW, slow_per_token=counted["slow"] / LM_NEW,
                       fast_per_token=counted["fast"] / LM_NEW)
    return result


def environment() -> dict[str, Any]:
    """Versions of Python, the backend's packages, and which distribution provides `keras`
    (`keras` or `keras-nightly`: the driver checks each environment holds the build it times)."""
    from importlib import metadata

    import keras

    found: dict[str, Any] = {"keras": keras.__version__, "python": sys.version.split()[0]}
    for name in ("torch", "jax", "jaxlib", "tensorflow-cpu", "tensorflow", "numpy"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    distributions = {}
    for name in ("keras", "keras-nightly"):
        try:
            distributions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    found["keras_distributions"] = distributions
    return found


def main() -> None:
    backend = backend_argument(sys.argv[1:])
    if "--counts" in sys.argv:
        setup_backend(backend)
        print(json.dumps({"counts": call_counts(backend), "environment": environment()}))
        return
    import pyperf

    def add_cmdline_args(cmd: list[str], args: argparse.Namespace) -> None:
        cmd.extend(["--backend", args.backend, "--case", args.case])
        if args.twin:
            cmd.append("--twin")

    runner = pyperf.Runner(add_cmdline_args=add_cmdline_args)
    runner.argparser.add_argument("--backend", default="torch")
    runner.argparser.add_argument("--case", choices=CASES, required=True)
    runner.argparser.add_argument("--twin", action="store_true",
                                  help="time the case's plain-PyTorch twin (tests/bench/twins.py) instead")
    args = runner.parse_args()
    if args.twin and (backend != "torch" or args.case not in TWIN_CASES):
        runner.argparser.error(f"--twin: {args.case} on {backend} has no plain-PyTorch twin "
                               f"(torch backend only; {', '.join(TWIN_CASES)})")
    run: Callable[[], Any] | None = None
    if args.worker:
        # Only the worker processes (calibration included) import Keras and build the model:
        # the manager process only spawns them and collects their values.
        setup_backend(backend)
        run = twin_workload(args.case) if args.twin else workload(args.case)

    def timed(loops: int) -> float:
        assert run is not None, "pyperf called the benchmark outside a worker process"
        started = time.perf_counter()
        for _ in range(loops):
            run()
        return time.perf_counter() - started

    runner.bench_time_func(args.case, timed)


if __name__ == "__main__":
    main()
