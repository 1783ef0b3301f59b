"""Whole-model parity of the series on and off: the same models, run once with upstream Keras
and once with the fork installed, must agree bit for bit (nox -s upstream_tests runs it).

    python tests/parity/models.py --out upstream.npz      # in the environment with upstream Keras
    python tests/parity/models.py --out fork.npz          # in the environment with the fork
    python tests/parity/models.py --compare upstream.npz fork.npz

For each model (an MLP with Dropout, a Transformer block with causal attention, Add,
LayerNormalization and Dropout, a CNN with BatchNormalization, a masked Embedding -> LSTM ->
GlobalAveragePooling1D model, and a decoder with a key/value cache run as a greedy generate
loop), with fixed seeds and weights: inference outputs, training-mode outputs, the loss and
every weight after three `train_on_batch` steps (the gradients, through SGD), and the outputs
of the model saved to `.keras` and loaded again. The numpy backend has no training: those
entries are left out there, on both sides alike.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SEED = 1234


def _models() -> dict[str, Callable[[], Any]]:
    import keras
    from keras import layers, ops

    def mlp() -> Any:
        return keras.Sequential([
            keras.Input((12,)),
            layers.Dense(32, activation="relu"),
            layers.Dropout(0.3, seed=3),
            layers.Dense(32, activation="relu"),
            layers.Dense(4),
        ])

    def transformer() -> Any:
        tokens = keras.Input((10,), dtype="int32")
        x = layers.Embedding(50, 16)(tokens)
        # `seed` came in 3.1: 3.0's attention dropout draws from the global seed (set per model).
        seeded = {"seed": 5} if "seed" in inspect.signature(layers.MultiHeadAttention.__init__).parameters else {}
        attended = layers.MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.1, **seeded)(x, x, use_causal_mask=True)
        x = layers.LayerNormalization()(layers.Add()([x, layers.Dropout(0.1, seed=6)(attended)]))
        x = layers.LayerNormalization()(layers.Add()([x, layers.Dense(16)(layers.Dense(32, activation="gelu")(x))]))
        return keras.Model(tokens, layers.Dense(50)(x))

    def cnn() -> Any:
        return keras.Sequential([
            keras.Input((16, 16, 3)),
            layers.Conv2D(8, 3, padding="same"),
            layers.BatchNormalization(),
            layers.ReLU(),
            layers.MaxPooling2D(),
            layers.Conv2D(8, 3),
            layers.BatchNormalization(),
            layers.ReLU(),
            layers.GlobalAveragePooling2D(),
            layers.Dense(5),
        ])

    def masked() -> Any:
        return keras.Sequential([
            keras.Input((9,), dtype="int32"),
            layers.Embedding(30, 8, mask_zero=True),
            layers.LSTM(8, return_sequences=True),
            layers.GlobalAveragePooling1D(),
            layers.Dense(3),
        ])

    class CachedAttention(layers.Layer):
        """Self-attention over a key/value cache, written as model libraries write it."""

        def __init__(self, heads: int, dim: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.heads, self.dim = heads, dim
            self.qkv = layers.Dense(3 * heads * dim)
            self.out = layers.Dense(heads * dim)

        def call(self, x: Any, cache: Any, index: Any) -> Any:
            batch, steps = ops.shape(x)[0], ops.shape(x)[1]
            q, k, v = ops.split(self.qkv(x), 3, axis=-1)

            def heads(t: Any) -> Any:
                return ops.reshape(t, (batch, steps, self.heads, self.dim))

            q, k, v = heads(q), heads(k), heads(v)
            keys = ops.slice_update(cache[:, 0], (0, index, 0, 0), k)
            values = ops.slice_update(cache[:, 1], (0, index, 0, 0), v)
            scores = ops.einsum("bqhd,bkhd->bhqk", q, keys) / np.sqrt(self.dim)
            total = ops.shape(keys)[1]
            allowed = ops.arange(total)[None, :] <= (ops.arange(steps)[:, None] + index)
            scores = ops.where(allowed[None, None], scores, -1e9)
            attended = ops.einsum("bhqk,bkhd->bqhd", ops.softmax(scores, axis=-1), values)
            return self.out(ops.reshape(attended, (batch, steps, self.heads * self.dim))), ops.stack([keys, values], axis=1)

    class Decoder(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.embed = layers.Embedding(40, 16)
            self.attention = CachedAttention(2, 8)
            self.norm = layers.LayerNormalization()
            self.head = layers.Dense(40)

        def call(self, tokens: Any, cache: Any, index: Any) -> Any:
            x = self.embed(tokens)
            attended, cache = self.attention(x, cache=cache, index=index)
            return self.head(self.norm(x + attended)), cache

    return {"mlp": mlp, "transformer": transformer, "cnn": cnn, "masked": masked, "decoder": Decoder}


def _inputs(name: str) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    if name == "mlp":
        return rng.standard_normal((6, 12)).astype("float32")
    if name == "transformer":
        return rng.integers(0, 50, (4, 10)).astype("int32")
    if name == "cnn":
        return rng.standard_normal((4, 16, 16, 3)).astype("float32")
    tokens = rng.integers(1, 30, (5, 9)).astype("int32")
    tokens[:, 6:] = 0  # padding, masked out
    tokens[0, 3:] = 0
    return tokens


def _targets(name: str, outputs: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(SEED + 1)
    return rng.standard_normal(outputs.shape).astype("float32")


def _set_weights(model: Any) -> None:
    rng = np.random.default_rng(SEED + 2)
    model.set_weights([(rng.standard_normal(w.shape) * 0.2).astype(w.dtype) for w in model.get_weights()])


def _numpy(x: Any) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(x))


def _generate(decoder: Any, record: dict[str, np.ndarray]) -> None:
    import keras
    from keras import ops

    prompt = np.random.default_rng(SEED).integers(1, 40, (2, 4)).astype("int32")
    cache = ops.zeros((2, 2, 12, 2, 8))
    logits, cache = decoder(ops.convert_to_tensor(prompt), cache=cache, index=0)
    tokens = [ops.argmax(logits[:, -1], axis=-1)]
    for step in range(4, 11):
        logits, cache = decoder(ops.expand_dims(ops.cast(tokens[-1], "int32"), 1), cache=cache, index=step)
        tokens.append(ops.argmax(logits[:, -1], axis=-1))
    record["decoder/generated"] = np.stack([_numpy(t) for t in tokens], axis=1)
    record["decoder/last_logits"] = _numpy(logits)
    record["decoder/cache"] = _numpy(cache)
    del keras


def run() -> dict[str, np.ndarray]:
    """Every recorded array, keyed `<model>/<what>`."""
    import keras

    trainable = keras.backend.backend() != "numpy"
    record: dict[str, np.ndarray] = {}
    for name, make in _models().items():
        keras.utils.set_random_seed(SEED)
        model = make()
        if name == "decoder":
            model(keras.ops.zeros((1, 1), dtype="int32"), cache=keras.ops.zeros((1, 2, 12, 2, 8)), index=0)
            _set_weights(model)
            _generate(model, record)
            continue
        _set_weights(model)
        x = _inputs(name)
        record[f"{name}/inference"] = _numpy(model(x, training=False))
        record[f"{name}/inference_plain"] = _numpy(model(x))
        if not trainable:
            continue
        keras.utils.set_random_seed(SEED)
        record[f"{name}/training"] = _numpy(model(x, training=True))
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        y = _targets(name, record[f"{name}/inference"])
        for step in range(3):
            keras.utils.set_random_seed(SEED + 10 + step)
            record[f"{name}/loss{step}"] = np.asarray(model.train_on_batch(x, y))
        for i, weight in enumerate(model.get_weights()):
            record[f"{name}/weight{i}"] = np.asarray(weight)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.keras")
            model.save(path)
            reloaded = keras.models.load_model(path)
        record[f"{name}/reloaded"] = _numpy(reloaded(x, training=False))
    return record


def compare(upstream: Path, fork: Path) -> int:
    a, b = np.load(upstream), np.load(fork)
    problems = []
    for key in sorted(set(a.files) | set(b.files)):
        if key not in a.files or key not in b.files:
            problems.append(f"{key}: only in {'the upstream' if key in a.files else 'the fork'} run")
        elif a[key].dtype != b[key].dtype or a[key].shape != b[key].shape:
            problems.append(f"{key}: {a[key].dtype}{a[key].shape} upstream, {b[key].dtype}{b[key].shape} fork")
        elif not np.array_equal(a[key], b[key], equal_nan=True):
            difference = np.max(np.abs(a[key].astype("float64") - b[key].astype("float64")))
            problems.append(f"{key}: differs (max abs difference {difference:.3g})")
    print(f"model parity, {upstream.name} vs {fork.name}: {len(a.files)} arrays compared bit for bit, "
          f"{len(problems)} differ")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="run the models and write every array to this .npz")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("UPSTREAM", "FORK"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("give --out or --compare")
    import keras

    record = run()
    np.savez(args.out, **record)
    print(f"keras {keras.__version__} on {keras.backend.backend()}: {len(record)} arrays -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
