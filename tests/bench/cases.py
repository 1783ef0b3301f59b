"""Benchmark cases, run inside one benchmark environment (upstream or patched Keras).

    python cases.py --backend torch --case dense [pyperf options: --processes, --values, --append FILE]
    python cases.py --backend torch --counts        # prints the CallSpec counts as JSON

Timings go through pyperf (worker processes, warm-ups, calibrated loops); the
driver, tests/bench/run.py, runs each case alternately in the two environments.
This module imports nothing of forkgen: the environments hold only Keras, the
backend and pyperf.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

CASES = ("callspec", "dense", "mlp", "transformer", "train_step")
DESCRIPTIONS = {
    "callspec": "CallSpec for layer(x): upstream slow constructor, patched CallSpec._fast",
    "dense": "eager Dense(4)(x), x of shape (2, 4)",
    "mlp": "4-layer MLP Sequential, forward (inference)",
    "transformer": "Transformer-style functional model, forward (inference), batch 4, sequence 16",
    "train_step": "Transformer-style model, one train_on_batch step",
}
BATCH, SEQUENCE, VOCAB, WIDTH = 4, 16, 100, 32


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


def transformer() -> Any:
    """Embedding, MultiHeadAttention, LayerNormalization, Dense, Dropout; residuals are ops."""
    import keras

    tokens = keras.Input((SEQUENCE,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, WIDTH)(tokens)
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=WIDTH // 2)(x, x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dropout(0.1)(attended))
    hidden = keras.layers.Dense(2 * WIDTH, activation="relu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dropout(0.1)(keras.layers.Dense(WIDTH)(hidden)))
    outputs = keras.layers.Dense(VOCAB)(x)
    model = keras.Model(tokens, outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", run_eagerly=True, jit_compile=False)
    return model


def data() -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return {
        "dense": rng.standard_normal((2, 4)).astype("float32"),
        "mlp": rng.standard_normal((BATCH, 32)).astype("float32"),
        "tokens": rng.integers(0, VOCAB, (BATCH, SEQUENCE)).astype("int32"),
        "labels": rng.integers(0, VOCAB, (BATCH, SEQUENCE)).astype("int32"),
    }


def slow_callspec(layer: Any, x: Any) -> Callable[[], Any]:
    """Upstream's constructor for `layer(x)`, as tests/equivalence/helpers.slow_spec builds it,
    but with the arity decided once: the timed callable calls `CallSpec` and nothing else."""
    from keras.src.layers.layer import CallSpec

    if "call_context_args" in inspect.signature(CallSpec.__init__).parameters:  # 3.10+
        context = layer._call_context_args
        return lambda: CallSpec(layer._call_signature, context, (x,), {})
    return lambda: CallSpec(layer._call_signature, (x,), {})


def workload(case: str) -> Callable[[], Any]:
    """`case` as a zero-argument callable, its objects built and warmed up."""
    import keras
    from keras.src.layers.layer import CallSpec

    arrays = data()
    run: Callable[[], Any]
    if case in ("callspec", "dense"):
        dense = keras.layers.Dense(4)
        x = keras.ops.convert_to_tensor(arrays["dense"])
        dense(x)
        if case == "dense":
            run = lambda: dense(x)  # noqa: E731
        elif hasattr(CallSpec, "_fast") and dense._call_spec_fast_path:
            plan = dense._call_spec_fast_plan
            run = lambda: CallSpec._fast(plan, x)  # noqa: E731
        else:
            run = slow_callspec(dense, x)
    elif case == "mlp":
        sequential, mlp_x = mlp(), keras.ops.convert_to_tensor(arrays["mlp"])
        run = lambda: sequential(mlp_x)  # noqa: E731
    elif case == "transformer":
        model, tokens = transformer(), keras.ops.convert_to_tensor(arrays["tokens"])
        run = lambda: model(tokens, training=False)  # noqa: E731
    else:
        model = transformer()
        run = lambda: model.train_on_batch(arrays["tokens"], arrays["labels"])  # noqa: E731
    run()
    run()
    return run


@contextmanager
def counting() -> Iterator[dict[str, int]]:
    """Count CallSpecs built by the slow constructor and by the fast ones
    (`CallSpec._fast`, and `CallSpec._fast_bound` when the wheel has the extension)."""
    from keras.src.layers.layer import CallSpec

    counts = {"slow": 0, "fast": 0}
    original_init = CallSpec.__init__
    originals = {name: CallSpec.__dict__[name] for name in ("_fast", "_fast_bound") if name in CallSpec.__dict__}

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        counts["slow"] += 1
        original_init(self, *args, **kwargs)

    def counted(function: Callable[..., Any]) -> classmethod[Any, ..., Any]:
        def fast(cls: type, *args: Any) -> Any:
            counts["fast"] += 1
            return function(cls, *args)

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


def call_counts() -> dict[str, dict[str, int]]:
    """CallSpecs per call, slow and fast, after a warm-up call of each."""
    import keras

    arrays = data()
    tokens = keras.ops.convert_to_tensor(arrays["tokens"])
    sequential, model = mlp(), transformer()
    mlp_x = keras.ops.convert_to_tensor(arrays["mlp"])
    dense, dense_x = keras.layers.Dense(4), keras.ops.convert_to_tensor(arrays["dense"])
    shapes: dict[str, Callable[[], Any]] = {
        "dense: layer(x)": lambda: dense(dense_x),
        "mlp: model(x)": lambda: sequential(mlp_x),
        "mlp: model(x, training=False)": lambda: sequential(mlp_x, training=False),
        "mlp: model(x, training=True)": lambda: sequential(mlp_x, training=True),
        "transformer: model(x)": lambda: model(tokens),
        "transformer: model(x, training=False)": lambda: model(tokens, training=False),
        "transformer: model(x, training=True)": lambda: model(tokens, training=True),
        "transformer: train_on_batch": lambda: model.train_on_batch(arrays["tokens"], arrays["labels"]),
    }
    result = {}
    for name, run in shapes.items():
        run()
        with counting() as counts:
            run()
        result[name] = dict(counts)
    return result


def environment() -> dict[str, str]:
    from importlib import metadata

    import keras

    found = {"keras": keras.__version__, "python": sys.version.split()[0]}
    for name in ("torch", "jax", "jaxlib", "tensorflow-cpu", "tensorflow", "numpy"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def main() -> None:
    backend = backend_argument(sys.argv[1:])
    setup_backend(backend)
    if "--counts" in sys.argv:
        print(json.dumps({"counts": call_counts(), "environment": environment()}))
        return
    import pyperf

    def add_cmdline_args(cmd: list[str], args: argparse.Namespace) -> None:
        cmd.extend(["--backend", args.backend, "--case", args.case])

    runner = pyperf.Runner(add_cmdline_args=add_cmdline_args)
    runner.argparser.add_argument("--backend", default="torch")
    runner.argparser.add_argument("--case", choices=CASES, required=True)
    args = runner.parse_args()
    run = workload(args.case)

    def timed(loops: int) -> float:
        started = time.perf_counter()
        for _ in range(loops):
            run()
        return time.perf_counter() - started

    runner.bench_time_func(args.case, timed)


if __name__ == "__main__":
    main()
