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
- dynamo's guards (`out_guards` of the explain): their count, by kind (`Guard.create_fn_name()`,
  e.g. TYPE_MATCH) and by source (`guard_source`: the guard's name cut to its leading object and
  two attributes or items);
- timing (unless --no-timing; inductor, one thread): compile time (the first compiled call, with
  empty inductor caches: `fresh_inductor_cache`) and the median step time compiled and eager,
  over alternating rounds; a breakdown of a compiled call from torch.profiler's CPU events
  (`breakdown`: dynamo's cache lookup, where the guards run; the compiled graphs; the rest).

A workload with a plain-PyTorch twin (tests/bench/twins.py: the forwards of Dense(4), the MLP,
the Transformer, the ConvNet and the KV-cached decoder, and the decoder's decode step) measures
the twin the same way in the same process: its explain and guards, its compile time (compiled
after the Keras model's, without a `dynamo.reset()` between them, which would drop the Keras
model's compiled code; each with its own empty inductor caches), and its eager and compiled
calls in the same alternating rounds as the Keras model's; then the compiled Keras model over
the compiled twin. Both are called with autograd on (the Keras model's parameters require
gradients, the twin's too), the twin in eval mode as the Keras model runs with training=False.

tests/bench/run.py --compile runs this in the upstream and fork environments and prints
them side by side. Like cases.py it imports nothing of forkgen.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import cases  # noqa: E402

MODELS = ("dense", "mlp", "transformer", "kv_decoder", "convnet")


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


#: (name, function, arguments for a batch size, how its compiled function is called, the
#: plain-PyTorch twin's function of the same arguments or None).
Workload = tuple[str, Callable[..., Any], Callable[[int], tuple[Any, ...]], Outer, Callable[..., Any] | None]

#: Names of torch.profiler's CPU events around a compiled call (torch 2.13): dynamo's cache
#: lookup (the guards of every cached entry of the frame run inside it), the compiled frame, and
#: in it an inductor graph's call (`## Call CompiledFxGraph <key>`), inside `CompiledFunction`
#: when autograd records. What a compiled frame runs besides its graphs shows as its own events
#: ("Pregraph bytecode", "AOTDispatcher Runtime Wrapper Prologue") or as its self time.
LOOKUP_EVENT = "TorchDynamo Cache Lookup"
REGION_EVENT = "Torch-Compiled Region"
GRAPH_EVENT = "## Call CompiledFxGraph"
#: The profiler range each measured call runs in.
CALL_EVENT = "forkgen: compiled call"


def as_is(compiled: Callable[..., Any]) -> Callable[..., Any]:
    return compiled


_CALL = re.compile(r"([A-Za-z_][\w.]*)\(")
#: One step of a source: a closure cell (one step, not three), an attribute, a method call, an item.
_COMPONENT = re.compile(r"\.__closure__\[\d+\]\.cell_contents|\.[A-Za-z_]\w*(?:\(\))?|\[[^\[\]]*\]")
_ROOT = re.compile(r"(?:[LG]\[(['\"])(.*?)\1\]|[A-Za-z_]\w*)")


def _arguments(text: str, start: int) -> tuple[list[str], int]:
    """The top-level comma-separated arguments of the call whose '(' is at `start`, and the
    index just after its ')'."""
    depth, pieces, begin = 0, [], start + 1
    for index in range(start, len(text)):
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                pieces.append(text[begin:index].strip())
                return [p for p in pieces if p], index + 1
        elif char == "," and depth == 1:
            pieces.append(text[begin:index].strip())
            begin = index + 1
    return [text[start + 1:].strip()], len(text)


def guard_source(name: str, depth: int = 2) -> str:
    """A guard's `name` (its source, as dynamo writes it) cut to its leading object and `depth`
    attributes or items: `list.__getitem__(G['model']._layers, 4).bias._value` ->
    `model._layers[4]`, `G['__import_keras_dot_src_dot_ops_dot_numpy'].any_symbolic_tensors.__defaults__`
    -> `keras.src.ops.numpy.any_symbolic_tensors.__defaults__`; a closure cell
    (`.__closure__[0].cell_contents`) is one step. Of the calls dynamo wraps a
    source in, `list.__getitem__(x, i)` reads `x[i]`, `type(x)` reads `x.__class__`, the others
    (`dict(...)`, `len(...)`) are dropped. A guard without a name (grad mode, default device,
    ...) is `(global state)`."""
    text = name.strip()
    while (call := _CALL.match(text)) is not None:
        arguments, end = _arguments(text, call.end() - 1)
        inner = arguments[0] if arguments else ""
        if "getitem" in call.group(1) and len(arguments) > 1:
            inner = f"{inner}[{arguments[1]}]"
        elif call.group(1) == "type":
            inner = f"{inner}.__class__"
        text = inner + text[end:]
    if not text:
        return "(global state)"
    root = _ROOT.match(text)
    if root is None:
        return text[:60]
    head = root.group(2) if root.group(2) is not None else root.group(0)
    if head.startswith("__import_"):
        head = head[len("__import_"):].replace("_dot_", ".")
    head = re.sub(r"^_\d+_c\d+$", "(constant)", head)
    components = _COMPONENT.findall(text, root.end())[:depth]
    return head + "".join(components)


def guard_summary(guards: Iterable[tuple[str, str]], top: int = 10) -> dict[str, Any]:
    """`guards`: (name, kind) of each guard. Their count; the count of every kind, most first;
    the `top` sources (`guard_source`), most first."""
    listed = list(guards)
    kinds = collections.Counter(kind for _, kind in listed)
    sources = collections.Counter(guard_source(name) for name, _ in listed)
    return {"count": len(listed), "kinds": [[k, n] for k, n in kinds.most_common()],
            "sources": [[s, n] for s, n in sources.most_common(top)]}


def guard_kind(guard: Any) -> str:
    """A `torch._guards.Guard`'s kind: the name of the function that makes its check."""
    try:
        return str(guard.create_fn_name())
    except Exception:  # noqa: BLE001 - an unexpected guard is counted, not fatal
        return "unknown"


def explain(fn: Callable[..., Any], *args: Any, outer: Outer = as_is) -> dict[str, Any]:
    import torch._dynamo as dynamo

    dynamo.reset()
    result = outer(dynamo.explain(fn))(*args)
    reasons: collections.Counter[tuple[str, str]] = collections.Counter()
    for entry in result.break_reasons:
        lines = entry.reason.strip().splitlines()
        reasons[(lines[0][:200] if lines else "", keras_frame(entry.user_stack))] += 1
    return {"graphs": result.graph_count, "breaks": result.graph_break_count,
            "reasons": [{"reason": r, "where": w, "count": n} for (r, w), n in reasons.most_common()],
            "guards": guard_summary((str(g.name), guard_kind(g)) for g in result.out_guards)}


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


#: Where `fresh_inductor_cache` makes its empty cache directories (removed at exit).
_CACHE_ROOT: list[tempfile.TemporaryDirectory[str]] = []


@contextlib.contextmanager
def fresh_inductor_cache() -> Iterator[str]:
    """Empty inductor caches for a compile: torch's own `torch._inductor.utils.fresh_cache`
    (torch 2.13) points TORCHINDUCTOR_CACHE_DIR (and TRITON_CACHE_DIR) at a new directory, where
    the FX graph cache (`<dir>/fxgraph`), the AOTAutograd cache (`<dir>/aotautograd`), dynamo's
    local profiles and the compiled kernels live, so none of them hits; and it clears the
    in-memory caches registered with it (CppCodeCache, PyCodeCache, the local autotune cache's
    path...), which would otherwise hand a second model the kernels a first one built from the
    same source. The remote caches are off unless configured. The directory outlives the block
    (compiled code may load from it later) and goes at exit. Yields the directory."""
    if not _CACHE_ROOT:
        _CACHE_ROOT.append(tempfile.TemporaryDirectory(prefix="forkgen-inductor-"))
    root = _CACHE_ROOT[0].name
    try:
        from torch._inductor.utils import fresh_cache
    except ImportError:  # an older torch: a new directory, without the in-memory clearing
        directory = tempfile.mkdtemp(dir=root)
        previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
        try:
            yield directory
        finally:
            if previous is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous
        return
    with fresh_cache(dir=root, delete=False):
        yield os.environ["TORCHINDUCTOR_CACHE_DIR"]


def warm_up_compiler() -> None:
    """Compile and run a small torch.nn function once, with empty caches, so that what the first
    compile of a process pays once (imports, the C++ compiler's probes) is paid here and not by
    whichever workload compiles first."""
    import torch
    import torch._dynamo as dynamo

    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.LayerNorm(8))
    dynamo.reset()
    with fresh_inductor_cache():
        torch.compile(module)(torch.ones(2, 8))
    dynamo.reset()


#: The counters (`torch._dynamo.utils.counters`) of inductor's FX graph cache and the
#: AOTAutograd cache that `compile_first_call` reports: a hit would mean the compile was not fresh.
CACHE_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
                  ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))


def compile_first_call(fn: Callable[..., Any], args: tuple[Any, ...], outer: Outer = as_is,
                       reset: bool = True) -> tuple[Callable[..., Any], float, dict[str, int]]:
    """`fn` compiled with inductor and called once on `args` with empty inductor caches (after
    `dynamo.reset()` unless `reset` is False): the compiled function, that call's seconds, and
    the cache counters it moved (CACHE_COUNTERS)."""
    import torch
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    if reset:
        dynamo.reset()
    compiled = outer(torch.compile(fn))
    before = {name: counters[group][name] for group, name in CACHE_COUNTERS}
    with fresh_inductor_cache():
        started = time.perf_counter()
        compiled(*args)
        seconds = time.perf_counter() - started
    return compiled, seconds, {name: counters[group][name] - before[name] for group, name in CACHE_COUNTERS}


def interleaved(targets: dict[str, Callable[..., Any]], args: tuple[Any, ...], rounds: int,
                calls: int) -> dict[str, float]:
    """The median seconds per call of each target, over `rounds` rounds in each of which every
    target runs `calls` times, one after the other."""
    times: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, target in targets.items():
            started = time.perf_counter()
            for _ in range(calls):
                target(*args)
            times[name].append((time.perf_counter() - started) / calls)
    return {name: statistics.median(values) for name, values in times.items()}


def timing(fn: Callable[..., Any], args: tuple[Any, ...], rounds: int, calls: int,
           outer: Outer = as_is, twin: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Compile times and per-call times of `fn`, and of `twin` (same arguments) when given: the
    compiled functions of both are timed in the same alternating rounds as their eager calls."""
    compiled, compile_seconds, caches = compile_first_call(fn, args, outer)
    targets = {"eager": fn, "compiled": compiled}
    twin_compiled = None
    if twin is not None:
        twin_compiled, twin_seconds, twin_caches = compile_first_call(twin, args, reset=False)
        targets.update({"twin eager": twin, "twin compiled": twin_compiled})
    for target in targets.values():
        target(*args)  # every compiled function has compiled before the clock runs
    seconds = interleaved(targets, args, rounds, calls)
    result: dict[str, Any] = {
        "compile_s": compile_seconds, "eager_us": seconds["eager"] * 1e6, "compiled_us": seconds["compiled"] * 1e6,
        "compiled_over_eager": seconds["compiled"] / seconds["eager"], "caches": caches,
        "breakdown": profiled_breakdown(compiled, args, calls),
    }
    if twin_compiled is not None:
        result["twin"] = {
            "compile_s": twin_seconds, "eager_us": seconds["twin eager"] * 1e6,
            "compiled_us": seconds["twin compiled"] * 1e6,
            "compiled_over_eager": seconds["twin compiled"] / seconds["twin eager"], "caches": twin_caches,
            "breakdown": profiled_breakdown(twin_compiled, args, calls),
        }
        result["compiled_over_twin"] = seconds["compiled"] / seconds["twin compiled"]
        result["eager_over_twin"] = seconds["eager"] / seconds["twin eager"]
    return result


#: A profiler event as `breakdown` reads it: (name, start us, end us).
Event = tuple[str, float, float]


def _outermost(events: list[Event], matches: Callable[[str], bool]) -> list[Event]:
    """The events whose name `matches`, without those inside another such event."""
    chosen = sorted((e for e in events if matches(e[0])), key=lambda e: (e[1], -e[2]))
    outermost: list[Event] = []
    for event in chosen:
        if outermost and event[1] >= outermost[-1][1] and event[2] <= outermost[-1][2]:
            continue
        outermost.append(event)
    return outermost


def breakdown(events: Iterable[Event], call: str = CALL_EVENT) -> dict[str, float]:
    """Where the time of the calls marked `call` went (us, under the profiler), each the median
    over the calls: `total`; `lookup`, dynamo's cache lookups (the guards run there); `graph`,
    the compiled graphs' calls; `region`, the compiled frames' time besides their graphs and the
    lookups in them (the bytecode before and after a graph: the inputs, the runtime wrappers, the
    side effects replayed after it, the outputs rebuilt; and the code a graph break runs between
    two graphs of the frame); `outside`, the rest (the Python outside any compiled frame, the
    callers); and `lookups`, `graphs`, their counts per call."""
    listed = list(events)
    calls = sorted((e for e in listed if e[0] == call), key=lambda e: e[1])
    if not calls:
        raise ValueError(f"no {call!r} event among the profiler's events")
    others = sorted((e for e in listed if e[0] != call), key=lambda e: e[1])

    def total(matching: list[Event]) -> float:
        return sum(e[2] - e[1] for e in matching)

    per_call: dict[str, list[float]] = collections.defaultdict(list)
    for marker in calls:
        within = [e for e in others if marker[1] <= e[1] and e[2] <= marker[2]]
        lookups = _outermost(within, lambda name: name == LOOKUP_EVENT)
        graphs = _outermost(within, lambda name: name.startswith(GRAPH_EVENT))
        regions = _outermost(within, lambda name: name.startswith(REGION_EVENT))
        # A lookup inside a compiled frame (of a frame it calls after a graph break) is the lookup's.
        nested = total([e for e in lookups if any(r[1] <= e[1] and e[2] <= r[2] for r in regions)])
        spent, lookup, graph = marker[2] - marker[1], total(lookups), total(graphs)
        region = max(total(regions) - graph - nested, 0.0)
        for key, value in (("total", spent), ("lookup", lookup), ("graph", graph), ("region", region),
                           ("outside", max(spent - lookup - graph - region, 0.0)),
                           ("lookups", float(len(lookups))), ("graphs", float(len(graphs)))):
            per_call[key].append(value)
    return {key: statistics.median(values) for key, values in per_call.items()}


def profiled_breakdown(compiled: Callable[..., Any], args: tuple[Any, ...], calls: int) -> dict[str, float]:
    """`breakdown` of `calls` calls of `compiled` (already compiled) under torch.profiler (CPU)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(3):  # the profiler's first calls pay for its own start
            compiled(*args)
        for _ in range(calls):
            with record_function(CALL_EVENT):
                compiled(*args)
    return breakdown((e.name, float(e.time_range.start), float(e.time_range.end)) for e in profiler.events()
                     if e.device_type == torch.autograd.DeviceType.CPU)


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


def twin_module(module: Any) -> Any:
    """A twin's module in eval mode (dropout off, BatchNorm's moving statistics), as the Keras
    model runs with training=False."""
    return module.eval()


def workloads(model_name: str) -> list[Workload]:
    """(name, function, arguments for a batch size, how its compiled function is called, its
    twin's function or None) for each workload of `model_name`. A twin is made from the Keras
    model's weights when the workload's function is first called (the eager call that builds
    the model): `lazy_twin`."""
    import keras
    import numpy as np
    from keras import ops

    rng = np.random.default_rng(0)

    def tensors(*arrays: Any) -> tuple[Any, ...]:
        return tuple(ops.convert_to_tensor(a) for a in arrays)

    def train(model: Any, arguments: Callable[[int], tuple[Any, ...]],
              batch: Callable[..., Any] = lambda x, y: (x, y)) -> Workload:
        step, outer = keras_train_step(model, batch)
        return ("train step", step, arguments, outer, None)

    def lazy_twin(make: Callable[[], Any], call: Callable[..., Any]) -> Callable[..., Any]:
        """`call(module, *args)`, the module made by `make()` at the first call."""
        made: list[Any] = []

        def run(*args: Any) -> Any:
            if not made:
                made.append(twin_module(make()))
            return call(made[0], *args)

        return run

    import twins

    def forward_twin(model: Any, to_module: Callable[[Any], Any]) -> Callable[..., Any]:
        return lazy_twin(lambda: to_module(model), lambda module, t: module(t))

    if model_name == "dense":
        layer = keras.layers.Dense(4)
        x = lambda n: rng.standard_normal((n, 4)).astype("float32")  # noqa: E731
        return [("forward", lambda t: layer(t), lambda n: tensors(x(n)), as_is, forward_twin(layer, twins.linear))]
    if model_name == "mlp":
        model = cases.mlp()
        model.compile(optimizer="adam", loss="mse", run_eagerly=True, jit_compile=False)
        x = lambda n: rng.standard_normal((n, 32)).astype("float32")  # noqa: E731
        y = lambda n: rng.standard_normal((n, 10)).astype("float32")  # noqa: E731
        return [("forward", lambda t: model(t, training=False), lambda n: tensors(x(n)), as_is,
                 forward_twin(model, twins.mlp)),
                train(model, lambda n: tensors(x(n), y(n)))]
    if model_name == "transformer":
        model = cases.transformer()
        tok = lambda n: rng.integers(0, cases.VOCAB, (n, cases.SEQUENCE)).astype("int32")  # noqa: E731
        return [("forward", lambda t: model(t, training=False), lambda n: tensors(tok(n)), as_is,
                 forward_twin(model, twins.transformer)),
                train(model, lambda n: tensors(tok(n), tok(n)))]
    if model_name == "convnet":
        model = cases.convnet()
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      run_eagerly=True, jit_compile=False)
        img = lambda n: rng.standard_normal((n, cases.CONV_SIZE, cases.CONV_SIZE, 3)).astype("float32")  # noqa: E731
        lab = lambda n: rng.integers(0, 10, (n,)).astype("int32")  # noqa: E731
        return [("forward", lambda t: model(t, training=False), lambda n: tensors(img(n)), as_is,
                 forward_twin(model, twins.convnet)),
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

        twin_forward = lazy_twin(lambda: twins.kv_decoder(model),
                                 lambda module, tokens, mask, labels: module(tokens, mask))
        twin_decode = lazy_twin(lambda: twins.kv_decoder(model),
                                lambda module, token, mask, cache: module(token, mask, cache=cache,
                                                                          cache_update_index=cases.LM_PROMPT))
        return [("forward", forward, sequence, as_is, twin_forward),
                ("decode step", decode, decode_args, as_is, twin_decode),
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

    batch = {"dense": 2, "mlp": cases.BATCH * 8, "transformer": cases.BATCH, "convnet": cases.CONV_BATCH,
             "kv_decoder": cases.LM_BATCH}
    report: dict[str, Any] = {"keras": keras.__version__, "torch": torch.__version__, "workloads": []}
    if not args.no_timing:
        started = time.perf_counter()
        warm_up_compiler()
        report["warm_up_s"] = time.perf_counter() - started
    for model_name in args.models.split(","):
        keras.utils.set_random_seed(0)
        for name, fn, arguments, outer, twin in workloads(model_name):
            n = batch[model_name]
            entry: dict[str, Any] = {"model": model_name, "workload": name, "batch": n}
            print(f"compile: {model_name} {name}", file=sys.stderr, flush=True)
            try:
                first = arguments(n)
                fn(*first)  # built and warm, eagerly
                if twin is not None:
                    twin(*first)  # made from the built model's weights, warm
                entry["explain"] = explain(fn, *first, outer=outer)
                if twin is not None:
                    entry["twin_explain"] = explain(twin, *first)
                entry["fullgraph"] = fullgraph(fn, *first, outer=outer)
                entry["recompiles"] = recompiles(fn, first, arguments(n + 1), arguments(n + 2), outer=outer)
                if not args.no_timing:
                    entry["timing"] = timing(fn, first, args.rounds, args.calls, outer=outer, twin=twin)
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
