"""What tests/gpu/run.py runs inside one build's environment (upstream Keras, keras-nightly or the
fork, with the machine's torch): whole-model parity with torch's deterministic algorithms, the
bench cases timed on the device, and the CUDA-graph smoke test of the decode step.

    python worker.py parity --out FILE.npz [--warn-only]
    python worker.py bench --device cuda --mode eager|compiled --cases dense,mlp_call [--twin]
        [--rounds 7] [--min-round 0.05] [--deadline EPOCH] --out FILE.jsonl
    python worker.py smoke --device cuda --out FILE.json [--backend eager]

`bench` appends one JSON line per case to --out as it goes (a line `{"started": case}` first), so
that what was timed survives a crash or a kill. A case is timed after the warm-up calls of
tests/bench/cases.py (`workload`, `twin_workload`): the number of calls per round is calibrated
to last at least --min-round seconds, then --rounds rounds are timed, the device synchronised
before each reading of the clock; the median per call is reported (and the minimum).

Compiled (`--mode compiled`): a case that calls a model or layer (COMPILED_CALLS) times
`torch.compile` of that call; a case that runs Keras's loops or `train_on_batch`/`predict_on_batch`
(COMPILED_STEPS) times the model compiled with `jit_compile=True`, which hands Keras's train, test
and predict steps to `torch.compile`; a twin times its `torch.compile`d module in the same loop.
The CallSpec micro cases and `generate` have no compiled form here (the decode step compiled with
CUDA graphs is `smoke`). Imports nothing of forkgen: the environment holds Keras and its needs.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

#: Cases whose compiled form is `torch.compile` of the call the case makes.
COMPILED_CALLS = ("dense", "mlp", "mlp_inference", "transformer", "mlp_call")
#: Cases whose compiled form is the model compiled with `jit_compile=True` (Keras compiles its steps).
COMPILED_STEPS = ("train_step", "conv_predict", "mlp_train_step", "mlp_fit", "mlp_evaluate", "mlp_predict",
                  "transformer_fit", "transformer_evaluate", "transformer_predict")


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def synchronizer(device: str) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def timed(run: Callable[[], Any], sync: Callable[[], None], rounds: int, min_round: float) -> dict[str, Any]:
    """Median and minimum seconds per call of `run` over `rounds` rounds of a calibrated number of calls."""

    def one_round(calls: int) -> float:
        sync()
        started = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        return time.perf_counter() - started

    calls = 1
    while True:
        took = one_round(calls)
        if took >= min_round or calls >= 100_000:
            break
        calls = min(100_000, max(calls * 2, int(calls * min_round / max(took, 1e-9) * 1.2)))
    per_call = [one_round(calls) / calls for _ in range(rounds)]
    return {"median_s": statistics.median(per_call), "min_s": min(per_call), "calls": calls, "rounds": rounds}


def jit_compiled_models() -> None:
    """Every model the cases compile gets `run_eagerly=False, jit_compile=True`."""
    import keras

    original = keras.Model.compile

    def compile_jit(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.update(run_eagerly=False, jit_compile=True)
        return original(self, *args, **kwargs)

    keras.Model.compile = compile_jit


def case_callable(case: str, mode: str, twin: bool, device: str) -> tuple[Callable[[], Any], float]:
    """(the case as a warm zero-argument callable, seconds to build, compile and warm it)."""
    import cases
    import torch

    started = time.perf_counter()
    if twin:
        run = cases.twin_workload(case, device=device, compile_module=torch.compile if mode == "compiled" else None)
    elif mode == "compiled" and case in COMPILED_CALLS:
        run = torch.compile(cases.workload(case))
        run()
        run()
    else:
        run = cases.workload(case)  # COMPILED_STEPS: compiled by their first calls here
    synchronizer(device)()
    return run, time.perf_counter() - started


def bench(args: argparse.Namespace) -> int:
    import cases

    cases.setup_backend("torch")
    import keras
    import torch

    if args.mode == "compiled":
        jit_compiled_models()
    sync = synchronizer(args.device)
    out = Path(args.out)

    def write(entry: dict[str, Any]) -> None:
        with out.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    write({"environment": {"keras": keras.__version__, "torch": torch.__version__, "python": sys.version.split()[0]}})
    for case in [c for c in args.cases.split(",") if c]:
        entry: dict[str, Any] = {"case": case, "mode": args.mode, "twin": args.twin}
        if args.deadline and time.time() > args.deadline:
            write({**entry, "skipped": "time budget"})
            continue
        write({"started": case})
        print(f"bench: {case} ({args.mode}{', twin' if args.twin else ''})", file=sys.stderr, flush=True)
        try:
            keras.utils.set_random_seed(0)
            run, entry["first_s"] = case_callable(case, args.mode, args.twin, args.device)
            entry.update(timed(run, sync, args.rounds, args.min_round))
        except Exception as error:  # noqa: BLE001 - one case's failure is reported, the rest run
            entry["error"] = first_line(error)
            entry["traceback"] = traceback.format_exc(limit=-6)
        write(entry)
        keras.backend.clear_session()
        torch._dynamo.reset()
    return 0


def smoke(args: argparse.Namespace) -> int:
    """The `kv_decoder` decode step (one token at cache index LM_PROMPT, after the prompt filled the
    cache, as tests/bench/compile.py's "decode step") under `torch.compile(mode="reduce-overhead")`
    (CUDA graphs; mode "default" off CUDA): compiled once, then replayed with each token of
    cases.kv_generate's eager greedy generation as its input, it must predict the next token the
    eager step predicts, every time. (The index stays fixed: Keras's call specialises on the
    Python int, so a loop over the indices recompiles at every token.) Also: the step's time per
    call, eager and compiled."""
    import cases

    cases.setup_backend("torch")
    import numpy as np
    import torch
    from keras import ops

    options: dict[str, Any] = ({"backend": args.backend} if args.backend else
                               {"mode": "reduce-overhead" if args.device == "cuda" else "default"})
    mode = ", ".join(f"{key}={value!r}" for key, value in options.items())  # as torch.compile is called
    model = cases.kv_decoder()
    prompt = ops.convert_to_tensor(cases.data()["prompt"])
    generated = cases.kv_generate(model, prompt)[:, cases.LM_PROMPT:]
    logits, cache = model({"token_ids": prompt, "padding_mask": cases.kv_padding_mask(cases.LM_PROMPT)},
                          cache=cases.kv_cache(), cache_update_index=0)
    mask = cases.kv_padding_mask(cases.LM_PROMPT + 1)

    def step(token: Any) -> Any:
        return model({"token_ids": token, "padding_mask": mask}, cache=cache, cache_update_index=cases.LM_PROMPT)

    def predicted(token: Any, run: Callable[[Any], Any]) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        step_logits, _ = run(token)
        return np.asarray(ops.convert_to_numpy(ops.argmax(step_logits[:, -1, :], axis=-1)))  # a copy: replays overwrite

    inputs = [generated[:, i:i + 1] for i in range(cases.LM_NEW)]
    eager = [predicted(token, step) for token in inputs]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(step, **options)
    started = time.perf_counter()
    predicted(inputs[0], compiled)
    first_s = time.perf_counter() - started
    replayed = [predicted(token, compiled) for token in inputs]
    counters = torch._dynamo.utils.counters
    result: dict[str, Any] = {
        "mode": mode, "device": args.device, "first_call_s": first_s, "steps": len(inputs),
        "tokens_equal": all(np.array_equal(a, b) for a, b in zip(eager, replayed, strict=True)),
        "eager_tokens": [t.tolist() for t in eager], "compiled_tokens": [t.tolist() for t in replayed],
        "cudagraph_skips": int(counters["inductor"].get("cudagraph_skips", 0)), "frames": dict(counters["stats"]),
    }
    sync = synchronizer(args.device)
    token = inputs[-1]

    def compiled_step() -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(token)

    result["eager_step"] = timed(lambda: step(token), sync, args.rounds, args.min_round)
    result["compiled_step"] = timed(compiled_step, sync, args.rounds, args.min_round)
    Path(args.out).write_text(json.dumps(result) + "\n", encoding="utf-8")
    print(f"smoke: {mode}: tokens {'equal' if result['tokens_equal'] else 'DIFFER'}", file=sys.stderr)
    return 0


def parity(args: argparse.Namespace) -> int:
    """tests/parity/models.py --out FILE with torch's deterministic algorithms on."""
    import torch

    torch.use_deterministic_algorithms(True, warn_only=args.warn_only)
    sys.argv = ["models.py", "--out", args.out]
    try:
        runpy.run_path(str(ROOT / "tests" / "parity" / "models.py"), run_name="__main__")
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("parity")
    p.add_argument("--out", required=True)
    p.add_argument("--warn-only", action="store_true", help="deterministic algorithms with warn_only=True")
    for name in ("bench", "smoke"):
        p = commands.add_parser(name)
        p.add_argument("--device", choices=("cuda", "cpu"), required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--rounds", type=int, default=7)
        p.add_argument("--min-round", type=float, default=0.05)
        if name == "bench":
            p.add_argument("--mode", choices=("eager", "compiled"), required=True)
            p.add_argument("--cases", required=True)
            p.add_argument("--twin", action="store_true", help="time the cases' plain-PyTorch twins")
            p.add_argument("--deadline", type=float, default=0.0, help="time.time() after which cases are skipped")
        else:
            p.add_argument("--backend", help="torch.compile's backend instead of inductor's CUDA graphs (a quick check)")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "torch")
    return {"parity": parity, "bench": bench, "smoke": smoke}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
