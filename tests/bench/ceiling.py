"""`nox -s bench -- --ceiling`: how far any change to the steps around a layer call could still
take the bench's figures.

Runs in the fork's environment of tests/bench/run.py. It compiles variants of the installed
fork's own `Layer.__call__` from its source, each with steps taken out (STEPS), and times the
bench's cases with each variant in one process: interleaved rounds, CPU time, the median of
the per-round ratios against the unchanged source compiled the same way ("series").

The variants are measurement only. Taking a step out is not correct Keras for every layer:
the bench's models pass no masks, run no mixed precision and use no distribution, so for them
the variants compute the same outputs, which is checked before timing each case that does
not train (`--no-check` skips it). What a variant saves is an upper bound on what any patch
of those steps can save: a patch keeps a guard at least.

Then, from the bench's latest results.json, each target of the issues is projected by the
variant's factor: a target the "ceiling" variant does not reach is out of reach of any change
to the layer-call path, and the rest of that case's time is elsewhere (the ops, the loops,
torch's kernels). The projection needs a results.json of the same backend; one of another fork
build is used with a warning. Writes patched_keras/bench/ceiling.json.

Exit codes: 0 done; 1 a variant changed a case's outputs (it is no ceiling for that case);
2 bad arguments, or the installed `Layer.__call__` lacks a step's text.

    python ceiling.py --backend torch [--cases mlp_call,mlp_fit] [--rounds 7] [--results RESULTS_JSON]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: The cases that train: each call changes the weights, so their outputs are not compared.
TRAINING_CASES = ("train_step", "mlp_train_step", "mlp_fit", "transformer_fit")
#: The steps a variant can take out: (description, [(text of the fork's `Layer.__call__`, its
#: stand-in)]). Every text must occur in the installed source; each occurrence is replaced.
STEPS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "name scope": ("the `try` block's name scope", [
        ("with self._open_name_scope():\n            current_scope",
         "with _ceiling_no_scope:\n            current_scope"),
    ]),
    "autocast": ("the autocast decision", [
        ("current_scope = backend.get_autocast_scope()", "current_scope = None"),
        ("elif self.compute_dtype != self.variable_dtype:", "elif False:"),
    ]),
    "call context": ("the call context, its arguments and its reset", [
        ("call_context = self._get_call_context()", "call_context = None"),
        ("for context_arg in self._call_context_args:", "for context_arg in ():"),
        ("self._maybe_reset_call_context()", "pass"),
    ]),
    "lane checks": ("patch 28's lane checks (every call takes the lane)", [
        ("fast_lane = _layer_call_fast_lane(self, original_args, call_spec)", "fast_lane = True"),
        ("_layer_call_fast_lane_spec_passes(self, call_spec.first_arg)", "True"),
    ]),
    "mask read": ("the first input's mask read", [
        ("backend.get_keras_mask(call_spec.first_arg) is None", "True"),
    ]),
    "dispatch": ("the dispatch to `call()` (`nn.Module.__call__`, `Operation.__call__`), as `self.call`", [
        ("super(Layer, self).__call__(*args, **kwargs)", "self.call(*args, **kwargs)"),
    ]),
}
#: The variants: name -> the steps it takes out. Each step alone, then "steps" (all of them but
#: the dispatch, which also carries the filtered tracebacks' frames) and "ceiling" (all).
VARIANTS: dict[str, tuple[str, ...]] = {
    **{step: (step,) for step in STEPS},
    "steps": ("name scope", "autocast", "call context", "lane checks", "mask read"),
    "ceiling": tuple(STEPS),
}


class CeilingError(Exception):
    """The installed `Layer.__call__` is not the text the variants are written for."""


def variant_source(source: str, steps: tuple[str, ...]) -> str:
    """`source` with `steps` taken out; CeilingError names every text it lacks."""
    missing = []
    for step in steps:
        for text, stand_in in STEPS[step][1]:
            if text not in source:
                missing.append(f"{step}: {text.splitlines()[0]!r}")
            source = source.replace(text, stand_in)
    if missing:
        raise CeilingError("the installed Layer.__call__ lacks the text of "
                           + "; ".join(missing)
                           + " (the variants are written for the fork of the pinned release)")
    return source


def call_source(function: Callable[..., Any]) -> str:
    """The source of `Layer.__call__` as a module-level function: dedented, without its
    decorator, `super()` spelled out (a function compiled outside its class has no `__class__`)."""
    import inspect

    lines = inspect.getsource(function).splitlines()
    while lines and lines[0].lstrip().startswith("@"):
        del lines[0]
    indent = lines[0][: len(lines[0]) - len(lines[0].lstrip())]
    # A line indented less than the `def` (inside brackets) keeps its text.
    lines = [line[len(indent):] if line.startswith(indent) else line for line in lines]
    return "\n".join(lines).replace("super().__call__", "super(Layer, self).__call__") + "\n"


def projection_refusal(results: dict[str, Any], backend: str) -> str | None:
    """Why `results` (a results.json) cannot be projected by factors measured on `backend`, or None."""
    if results.get("backend") != backend:
        return f"the results.json is of the {results.get('backend')} backend, the factors of {backend}"
    if not isinstance(results.get("cases"), list):
        return "the results.json has no cases"
    return None


def project(rows: list[dict[str, Any]], factors: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Each target of results.json's `rows` for the cases in `factors` (case -> variant ->
    time factor): the ratio now, the ratio times each factor, and whether each reaches the target."""
    projected = []
    for row in rows:
        case_factors = factors.get(row["case"])
        if not case_factors:
            continue
        for name, target in row.get("targets", {}).items():
            ratio = row["ratios"].get(name, {}).get("ratio")
            if ratio is None:
                continue
            at_most = target["at_most"]
            entry: dict[str, Any] = {"case": row["case"], "ratio": name, "at_most": at_most, "now": ratio,
                                     "met_now": ratio <= at_most, "variants": {}}
            for variant, factor in case_factors.items():
                entry["variants"][variant] = {"ratio": ratio * factor, "reached": ratio * factor <= at_most}
            projected.append(entry)
    return projected


def projection_text(projected: list[dict[str, Any]], variants: list[str]) -> str:
    lines = [f"| case | ratio | target | now | {' | '.join(variants)} | verdict |",
             "|---" * (5 + len(variants)) + "|"]
    for entry in projected:
        cells = [f"{entry['variants'][v]['ratio']:.3f}" for v in variants]
        if entry["met_now"]:
            verdict = "met"
        elif entry["variants"][variants[-1]]["reached"]:
            first = next(v for v in variants if entry["variants"][v]["reached"])
            verdict = f"reached only by the variant `{first}`"
        else:
            verdict = "out of reach of the layer-call path"
        lines.append(f"| {entry['case']} | {entry['ratio']} | {entry['at_most']:g} | {entry['now']:.3f} | "
                     + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(lines)


def outputs_agree(first: Any, second: Any) -> bool:
    """Whether two workload results are the same values (tensors, arrays and nests of them)."""
    import numpy as np
    from keras import ops, tree

    try:
        left, right = tree.flatten(first), tree.flatten(second)
    except Exception:  # not a structure keras.tree walks: compare as they are
        left, right = [first], [second]
    if len(left) != len(right):
        return False
    for a, b in zip(left, right, strict=True):
        if a is None or b is None or isinstance(a, (str, bytes, bool, int, float)):
            if a != b:
                return False
            continue
        a_values, b_values = np.asarray(ops.convert_to_numpy(a)), np.asarray(ops.convert_to_numpy(b))
        if a_values.shape != b_values.shape or not np.array_equal(a_values, b_values, equal_nan=True):
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="torch")
    sys.path.insert(0, str(HERE))
    import cases

    parser.add_argument("--cases", default=",".join(cases.MODEL_CASES),
                        help="comma-separated cases (default: every case that calls layers, cases.MODEL_CASES)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--seconds", type=float, default=0.25, help="CPU seconds a measurement lasts at least")
    parser.add_argument("--results", type=Path, help="the bench's results.json to project")
    parser.add_argument("--out", type=Path, help="where to write ceiling.json")
    parser.add_argument("--no-check", action="store_true", help="do not compare each variant's outputs first")
    args = parser.parse_args()
    cases.setup_backend(args.backend)
    names = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(names) - set(cases.CASES))
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    from keras.src.layers import layer as layer_module
    from keras.src.utils import traceback_utils

    stock = layer_module.Layer.__call__
    source = call_source(getattr(stock, "__wrapped__", stock))
    layer_module._ceiling_no_scope = contextlib.nullcontext()

    def compiled(text: str, name: str) -> Callable[..., Any]:
        namespace: dict[str, Any] = {}
        exec(compile(text, f"<ceiling variant {name}>", "exec"), layer_module.__dict__, namespace)
        return traceback_utils.filter_traceback(namespace["__call__"])

    try:
        calls = {"series": compiled(source, "series"),
                 **{name: compiled(variant_source(source, steps), name) for name, steps in VARIANTS.items()}}
    except CeilingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    kinds = list(calls)

    def use(kind: str) -> None:
        layer_module.Layer.__call__ = calls[kind]

    runs: dict[str, tuple[Callable[[], Any], int]] = {}
    for name in names:
        use("series")
        run = cases.workload(name)
        if not args.no_check and name not in TRAINING_CASES:
            reference = run()
            for kind in kinds[1:]:
                use(kind)
                if not outputs_agree(reference, run()):
                    print(f"error: {name}: the variant {kind!r} computes other outputs than the series: "
                          "its steps matter to this case, so it is no ceiling for it", file=sys.stderr)
                    return 1
            use("series")
        started = time.process_time()
        run()
        once = max(time.process_time() - started, 1e-6)
        runs[name] = (run, max(1, math.ceil(args.seconds / once)))
        print(f"{name}: {runs[name][1]} calls a measurement", flush=True)
    times: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in kinds} for name in names}
    for index in range(args.rounds):
        for name, (run, loops) in runs.items():
            for kind in kinds if index % 2 == 0 else kinds[::-1]:
                use(kind)
                run()
                started = time.process_time()
                for _ in range(loops):
                    run()
                times[name][kind].append((time.process_time() - started) / loops)
        print(f"round {index + 1} of {args.rounds}", flush=True)
    use("series")
    layer_module.Layer.__call__ = stock
    factors = {name: {kind: statistics.median(v / s for s, v in zip(times[name]["series"], times[name][kind],
                                                                      strict=True))
                      for kind in kinds[1:]}
               for name in names}
    print("\n| case | series | " + " | ".join(f"{kind} (factor)" for kind in kinds[1:]) + " |")
    print("|---" * (1 + len(kinds)) + "|")
    for name in names:
        series = statistics.median(times[name]["series"]) * 1e6
        print(f"| {name} | {series:.1f} us | "
              + " | ".join(f"{statistics.median(times[name][k]) * 1e6:.1f} us ({factors[name][k]:.3f})"
                           for k in kinds[1:]) + " |")
    print()
    for name, steps in VARIANTS.items():
        print(f"{name}: takes out " + "; ".join(STEPS[s][0] for s in steps))
    report: dict[str, Any] = {"variants": {n: list(s) for n, s in VARIANTS.items()}, "rounds": args.rounds,
                              "factors": factors, "cases": names}
    results = json.loads(args.results.read_text(encoding="utf-8")) if args.results and args.results.is_file() else None
    refusal = None if results is None else projection_refusal(results, args.backend)
    if refusal:
        print(f"\nno projection: {refusal}")
    elif results is not None:
        installed = importlib.metadata.version("keras")
        if results.get("fork_version") != installed:
            print(f"\nwarning: {args.results} timed the fork {results.get('fork_version')}, this is {installed}")
        projected = project(results["cases"], factors)
        report["projected_from"] = {"file": str(args.results), "fork_version": results.get("fork_version")}
        report["projected"] = projected
        print(f"\nThe targets, projected from {args.results} (fork {results.get('fork_version')}) by each "
              "variant's factor:\n")
        print(projection_text(projected, kinds[1:]))
    elif args.results is not None:
        print(f"\nno {args.results}: run `nox -s bench` first for the projected targets")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
