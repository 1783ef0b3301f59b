"""`torch.compile` on the bench models, run inside one benchmark environment (upstream Keras
or the fork): what dynamo makes of each workload, and what compiling buys.

    python compile.py                          # every model and workload, JSON on stdout
    python compile.py --models mlp,kv_decoder --no-timing

For each workload (a model's forward; the KV-cached decoder's forward, one decode step and
train step; every model's train step as `model.compile(jit_compile=True)` builds it: the
function Keras's `make_train_function` hands `torch.compile`, compiled here by each measurement
and called through whatever Keras builds around the compiled step, `keras_train_step`):

- `torch._dynamo.explain` (backend "eager"): graphs, graph breaks and their reasons, each
  with the innermost Keras frame it was raised in;
- `torch.compile(fullgraph=True)` (backend "eager"): whether it traces, else dynamo's first line;
- recompiles: graphs dynamo compiles for a second batch size, then for a third (with torch's
  automatic dynamic shapes, a second size should cost one recompile and a third none);
- timing (unless --no-timing; inductor, one thread): compile time (the first compiled call) and
  the median step time compiled and eager, over alternating rounds.

tests/bench/run.py --compile runs this in the upstream and fork environments and prints
them side by side. Like cases.py it imports nothing of forkgen.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import cases  # noqa: E402

MODELS = ("mlp", "transformer", "kv_decoder", "convnet")


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def keras_frame(stack: Any) -> str:
    """The innermost frame of `stack` in Keras (else the innermost one), as `path:line (function)`."""
    frames = list(stack or [])
    chosen = next((f for f in reversed(frames) if "/keras/" in f.filename), frames[-1] if frames else None)
    if chosen is None:
        return ""
    return f"{chosen.filename.split('site-packages/')[-1]}:{chosen.lineno} ({chosen.name})"


#: How a workload's compiled function is called: as it is (a forward), or through what Keras
#: builds around its compiled train step (`keras_train_step`).
Outer = Callable[[Callable[..., Any]], Callable[..., Any]]


#: (name, function, arguments for a batch size, how its compiled function is called).
Workload = tuple[str, Callable[..., Any], Callable[[int], tuple[Any, ...]], Outer]


def as_is(compiled: Callable[..., Any]) -> Callable[..., Any]:
    return compiled


def explain(fn: Callable[..., Any], *args: Any, outer: Outer = as_is) -> dict[str, Any]:
    import torch._dynamo as dynamo

    dynamo.reset()
    result = outer(dynamo.explain(fn))(*args)
    reasons: collections.Counter[tuple[str, str]] = collections.Counter()
    for entry in result.break_reasons:
        lines = entry.reason.strip().splitlines()
        reasons[(lines[0][:200] if lines else "", keras_frame(entry.user_stack))] += 1
    return {"graphs": result.graph_count, "breaks": result.graph_break_count,
            "reasons": [{"reason": r, "where": w, "count": n} for (r, w), n in reasons.most_common()]}


def fullgraph(fn: Callable[..., Any], *args: Any, outer: Outer = as_is) -> str:
    import torch
    import torch._dynamo as dynamo

    dynamo.reset()
    try:
        outer(torch.compile(fn, fullgraph=True, backend="eager"))(*args)
    except Exception as error:  # noqa: BLE001 - reported, not raised
        return first_line(error)
    return "ok"


def recompiles(fn: Callable[..., Any], *sizes: tuple[Any, ...], outer: Outer = as_is) -> list[int]:
    """Graphs compiled for each argument tuple in turn (the first: the initial compile)."""
    import torch
    import torch._dynamo as dynamo

    dynamo.reset()
    compiled_graphs = [0]

    def counting(graph: Any, example_inputs: Any) -> Any:
        compiled_graphs[0] += 1
        return graph.forward

    compiled = outer(torch.compile(fn, backend=counting))
    counts = []
    for args in sizes:
        before = compiled_graphs[0]
        compiled(*args)
        counts.append(compiled_graphs[0] - before)
    return counts


def timing(fn: Callable[..., Any], args: tuple[Any, ...], rounds: int, calls: int,
           outer: Outer = as_is) -> dict[str, float]:
    import torch
    import torch._dynamo as dynamo

    dynamo.reset()
    compiled = outer(torch.compile(fn))
    started = time.perf_counter()
    compiled(*args)
    compile_seconds = time.perf_counter() - started
    compiled(*args)
    eager_times, compiled_times = [], []
    for _ in range(rounds):
        for target, into in ((fn, eager_times), (compiled, compiled_times)):
            started = time.perf_counter()
            for _ in range(calls):
                target(*args)
            into.append((time.perf_counter() - started) / calls)
    eager, fast = statistics.median(eager_times), statistics.median(compiled_times)
    return {"compile_s": compile_seconds, "eager_us": eager * 1e6, "compiled_us": fast * 1e6,
            "compiled_over_eager": fast / eager}


def keras_train_step(model: Any, batch: Callable[..., Any]) -> tuple[Callable[..., Any], Outer]:
    """`model`'s train step as `model.compile(jit_compile=True)` builds it, its `torch.compile`
    call left to the caller: `(step, outer)`, where `step(*args)` is the function Keras hands
    `torch.compile` run on `batch(*args)` (the train step itself, eager), and `outer(compiled)`
    calls whatever Keras builds around the compiled step (the fork: a dynamo option for its
    calls) with `compiled` in its place."""
    import torch

    made: dict[str, Callable[..., Any]] = {}

    def compile_later(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        made["function"] = function
        return lambda *a, **k: made["compiled"](*a, **k)

    model.jit_compile, model.run_eagerly = True, False
    real, torch.compile = torch.compile, compile_later
    try:
        model.make_train_function(force=True)
    finally:
        torch.compile = real
    keras_function, one_step = model.train_function, made["function"]

    def step(*args: Any) -> Any:
        return one_step([batch(*args)])

    def outer(compiled: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            made["compiled"] = lambda data: compiled(*args)
            return keras_function([batch(*args)])

        return run

    return step, outer


def workloads(model_name: str) -> list[Workload]:
    """(name, function, arguments for a batch size, how its compiled function is called) for each
    workload of `model_name`."""
    import keras
    import numpy as np
    from keras import ops

    rng = np.random.default_rng(0)

    def tensors(*arrays: Any) -> tuple[Any, ...]:
        return tuple(ops.convert_to_tensor(a) for a in arrays)

    def train(model: Any, arguments: Callable[[int], tuple[Any, ...]],
              batch: Callable[..., Any] = lambda x, y: (x, y)) -> Workload:
        step, outer = keras_train_step(model, batch)
        return ("train step", step, arguments, outer)

    if model_name == "mlp":
        model = cases.mlp()
        model.compile(optimizer="adam", loss="mse", run_eagerly=True, jit_compile=False)
        x = lambda n: rng.standard_normal((n, 32)).astype("float32")  # noqa: E731
        y = lambda n: rng.standard_normal((n, 10)).astype("float32")  # noqa: E731
        return [("forward", lambda t: model(t, training=False), lambda n: tensors(x(n)), as_is),
                train(model, lambda n: tensors(x(n), y(n)))]
    if model_name == "transformer":
        model = cases.transformer()
        tok = lambda n: rng.integers(0, cases.VOCAB, (n, cases.SEQUENCE)).astype("int32")  # noqa: E731
        return [("forward", lambda t: model(t, training=False), lambda n: tensors(tok(n)), as_is),
                train(model, lambda n: tensors(tok(n), tok(n)))]
    if model_name == "convnet":
        model = cases.convnet()
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      run_eagerly=True, jit_compile=False)
        img = lambda n: rng.standard_normal((n, cases.CONV_SIZE, cases.CONV_SIZE, 3)).astype("float32")  # noqa: E731
        lab = lambda n: rng.integers(0, 10, (n,)).astype("int32")  # noqa: E731
        return [("forward", lambda t: model(t, training=False), lambda n: tensors(img(n)), as_is),
                train(model, lambda n: tensors(img(n), lab(n)))]
    if model_name == "kv_decoder":
        model = cases.kv_decoder()
        seq = cases.KV_SEQUENCE

        def sequence(n: int) -> tuple[Any, ...]:
            tokens = rng.integers(0, cases.LM_VOCAB, (n, seq + 1)).astype("int32")
            mask = np.ones((n, seq), dtype="int32")
            return tensors(tokens[:, :-1], mask, tokens[:, 1:])

        def decode_args(n: int) -> tuple[Any, ...]:
            token = rng.integers(0, cases.LM_VOCAB, (n, 1)).astype("int32")
            cache = ops.zeros((n, cases.LM_BLOCKS, 2, cases.LM_MAX_LENGTH, cases.LM_HEADS,
                               cases.LM_WIDTH // cases.LM_HEADS))
            row = np.arange(cases.LM_MAX_LENGTH) < cases.LM_PROMPT + 1
            mask = np.broadcast_to(row, (n, cases.LM_MAX_LENGTH)).astype("bool")
            return (*tensors(token, mask), cache)

        def forward(tokens: Any, mask: Any, labels: Any) -> Any:
            return model({"token_ids": tokens, "padding_mask": mask}, training=False)

        def decode(token: Any, mask: Any, cache: Any) -> Any:
            return model({"token_ids": token, "padding_mask": mask}, cache=cache,
                         cache_update_index=cases.LM_PROMPT, training=False)

        def batch(tokens: Any, mask: Any, labels: Any) -> Any:
            return ({"token_ids": tokens, "padding_mask": mask}, labels)

        return [("forward", forward, sequence, as_is), ("decode step", decode, decode_args, as_is),
                train(model, sequence, batch)]
    raise ValueError(f"unknown model {model_name!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--no-timing", action="store_true", help="skip inductor compile and step timings")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    cases.setup_backend("torch")
    import keras
    import torch

    batch = {"mlp": cases.BATCH * 8, "transformer": cases.BATCH, "convnet": cases.CONV_BATCH,
             "kv_decoder": cases.LM_BATCH}
    report: dict[str, Any] = {"keras": keras.__version__, "torch": torch.__version__, "workloads": []}
    for model_name in args.models.split(","):
        keras.utils.set_random_seed(0)
        for name, fn, arguments, outer in workloads(model_name):
            n = batch[model_name]
            entry: dict[str, Any] = {"model": model_name, "workload": name, "batch": n}
            print(f"compile: {model_name} {name}", file=sys.stderr, flush=True)
            try:
                first = arguments(n)
                fn(*first)  # built and warm, eagerly
                entry["explain"] = explain(fn, *first, outer=outer)
                entry["fullgraph"] = fullgraph(fn, *first, outer=outer)
                entry["recompiles"] = recompiles(fn, first, arguments(n + 1), arguments(n + 2), outer=outer)
                if not args.no_timing:
                    entry["timing"] = timing(fn, first, args.rounds, args.calls, outer=outer)
            except Exception as error:  # noqa: BLE001 - one workload's failure is reported, the rest run
                entry["error"] = first_line(error)
                entry["traceback"] = traceback.format_exc(limit=-8)
            report["workloads"].append(entry)
    json.dump(report, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("KERAS_BACKEND", "torch")
    sys.exit(main())
