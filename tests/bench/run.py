"""Upstream Keras, keras-nightly and the fork, side by side (nox -s bench).

Creates (or reuses) one environment per build, all with the same backend
requirements: upstream's wheel of the pinned release, keras-nightly (it installs
as the `keras` import package, so it needs its own environment) and the fork's
wheel; with --ablation, also one per patch of the series the fork applies, built
without that patch. On torch, the cases with a plain-PyTorch twin (tests/bench/twins.py:
the same model, weights, loss and optimizer in torch.nn, a hand-written loop) also time
the twin, in the fork's environment, as a fourth build, "torch" (fork / plain torch). Then:

1. counts the CallSpecs built by the slow constructor and by the fast ones
   (`CallSpec._fast`, `CallSpec._fast_bound`) per call in each (deterministic,
   machine-independent);
2. times every case of tests/bench/cases.py with pyperf, alternating the
   environments round by round so that drifts of the machine hit all alike;
3. times forkgen itself: `forkgen build` from a warm cache, and analyze + apply;
4. prints a table and the issue's targets (ratios and counts), writes
   patched_keras/bench/results.json and ratios.png, and refreshes
   docs/benchmark-results.md from that results.json (`--render RESULTS_JSON` does only that).

    python tests/bench/run.py --wheel W --upstream keras==3.15.1 --requirement torch==2.13.0
        [--nightly keras-nightly==3.16.0.dev2026102704] [--backend torch] [--rounds 3]
        [--processes 2] [--values 5] [--cases dense,mlp] [--ablation [--ablation-cases dense]]
        [--switches] [--before WHEEL]
    python tests/bench/run.py --wheel W --upstream keras==3.15.1 --requirement torch==2.13.0 --ceiling

With --switches, every case is also timed in the fork's environment with every patch switched
off at run time (KERAS_FORKGEN_DISABLE=all: the build "fork-off"), which must time like
upstream; with --before WHEEL, in another build of the fork (e.g. one made before a change: the
build "before"), against which the fork must be no slower. Both are timed in the same rounds as
the others; their ratios get a table of their own.

With --ceiling, it times none of the above: tests/bench/ceiling.py runs in the fork's
environment and says how far any change to the steps around a layer call could still take
the targets (its docstring says how).

Every ratio is a ratio of means; its standard error comes from the spread of the
worker processes' means (values within one process are not independent, the
processes are). A ratio more than two standard errors from 1 is "faster" or "SLOWER".
The exit code is 1 when the fork is slower than upstream beyond that in any case.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OUT = ROOT / "patched_keras" / "bench"
#: The page of the documentation that shows the latest results: generated, never typed.
DOCS_RESULTS = ROOT / "docs" / "benchmark-results.md"
sys.path.insert(0, str(HERE))
from cases import (  # noqa: E402
    CASES,
    DESCRIPTIONS,
    KV_GREEDY_LOOP,
    KV_ONE_TOKEN,
    KV_TRAIN_ON_BATCH,
    MICRO_CASES,
    MODEL_CASES,
    TWIN_CASES,
    UNSUPPORTED,
)

#: keras-nightly of the pinned release's time (`--nightly` overrides it).
NIGHTLY = "keras-nightly==3.16.0.dev2026102704"
#: The builds every model-level case is timed in, in the order of a round.
BUILDS = ("upstream", "nightly", "fork")
#: The plain-PyTorch twin of a case (TWIN_CASES, torch backend only), timed as one more build
#: of the round, after the fork, in the fork's environment (`cases.py --twin`).
TWIN = "torch"
#: The ratios reported per case: (numerator, denominator).
RATIOS = (("fork", "upstream"), ("nightly", "upstream"), ("fork", "nightly"), ("fork", TWIN))
#: `--switches`: the fork with every patch switched off at run time, in the fork's environment.
SWITCHED_OFF = "fork-off"
#: `--before WHEEL`: another build of the fork, in an environment of its own.
BEFORE = "before"
#: The environment each build that has none of its own runs in, and the variables it runs with
#: (every other build runs without KERAS_FORKGEN_DISABLE, whatever the caller's environment says).
RUNS_IN = {TWIN: "fork", SWITCHED_OFF: "fork"}
RUN_VARIABLES = {SWITCHED_OFF: {"KERAS_FORKGEN_DISABLE": "all"}}
#: The ratios of --switches and --before: (numerator, denominator, what it should be).
SWITCH_RATIOS = (
    (SWITCHED_OFF, "upstream", "about 1: every patch switched off runs upstream's statements"),
    (SWITCHED_OFF, "fork", "what the patches save, switched off at run time"),
    ("fork", BEFORE, "at most 1: the fork no slower than the build before"),
)
#: The issue's targets per case: fork/upstream at most the first, fork/nightly at most the second
#: (if there is one: nightly has no fast constructor to time in the micro cases).
TARGETS: dict[str, tuple[float, ...]] = {
    "callspec_keywords": (0.20,),
    "dense": (0.60, 0.90),
    "mlp": (0.65, 0.90),
    "mlp_inference": (0.65, 0.90),
    "transformer": (0.75, 0.95),
    "train_step": (0.75, 0.95),
    "generate": (0.75, 0.95),
}
#: The issue's target on the CallSpec counts, met when the fork builds no CallSpec with the slow
#: constructor in these calls of the `kv_decoder` model (tests/bench/cases.py).
COUNT_TARGET = "slow CallSpecs per generated token and per train_on_batch step: 0"
#: The calls it looks at: (count entry, its key, what the summary calls it).
COUNT_TARGET_CALLS = (
    (KV_ONE_TOKEN, "slow", "per generated token (one decode step)"),
    (KV_GREEDY_LOOP, "slow_per_token", f"per generated token (greedy loop of {KV_GREEDY_LOOP.split(', ')[-1]})"),
    (KV_TRAIN_ON_BATCH, "slow", "per train_on_batch step"),
)
#: The issue's timed targets as it words them, beside the ratio targets of TARGETS.
TARGET_TEXT = {
    "callspec_keywords": "CallSpec of block(x, attention_mask=m, cache=c, cache_update_index=8): "
                         "fork/upstream ≤ 0.20 (at least 5x faster)",
    "dense": "Dense(4)(x) no slower than before",
}
#: Issue 26's targets on one case each, as it words them: (text, case, ratio, at most). The
#: loops (fit, evaluate, predict) and the distance to plain PyTorch (the twins' cases).
LOOP_TARGETS = (
    ("fork / plain torch: Dense(4)(x) ≤ 3×", "dense", f"fork/{TWIN}", 3.0),
    ("fork / plain torch: MLP model(x) ≤ 3×", "mlp_call", f"fork/{TWIN}", 3.0),
    ("fork / plain torch: train step (MLP train_on_batch) ≤ 2×", "mlp_train_step", f"fork/{TWIN}", 2.0),
    ("fork / plain torch: fit (MLP, one epoch) ≤ 2.5×", "mlp_fit", f"fork/{TWIN}", 2.5),
    ("fork / plain torch: predict (MLP) ≤ 5×", "mlp_predict", f"fork/{TWIN}", 5.0),
    ("fork / plain torch: Transformer forward ≤ 2.5×", "transformer", f"fork/{TWIN}", 2.5),
    ("fork / upstream: fit (MLP, one epoch) ≤ 0.50", "mlp_fit", "fork/upstream", 0.50),
    ("fork / upstream: evaluate (MLP) ≤ 0.50", "mlp_evaluate", "fork/upstream", 0.50),
    ("fork / upstream: predict (MLP) ≤ 0.30", "mlp_predict", "fork/upstream", 0.30),
)
#: Issue 26's fork/nightly target, on every case timed in keras-nightly.
NIGHTLY_TARGET = 0.60
NIGHTLY_TARGET_TEXT = f"fork / keras-nightly ≤ {NIGHTLY_TARGET:.2f} on every case"
#: Which per-call count goes beside each timed case in the table.
COUNT_FOR_CASE = {
    "dense": "dense: layer(x)",
    "mlp": "mlp: model(x)",
    "mlp_inference": "mlp: model(x, training=False)",
    "transformer": "transformer: model(x, training=False)",
    "train_step": "transformer: train_on_batch",
    "generate": "generate: greedy loop, 16 tokens",
    "conv_predict": "conv_predict: predict_on_batch(x)",
}


def builds_of(case: str, backend: str) -> list[str]:
    """The builds a case is timed in, in the order of a round: the CallSpec micro cases compare
    the two constructors (keras-nightly has only upstream's); on torch, a case with a twin also
    times its plain-PyTorch twin (TWIN, in the fork's environment)."""
    if case in MICRO_CASES:
        return ["upstream", "fork"]
    return [*BUILDS, *([TWIN] if backend == "torch" and case in TWIN_CASES else [])]


def case_targets(case: str) -> dict[str, float]:
    """The case's targets per ratio, the strictest of every issue's: TARGETS (fork/upstream,
    fork/nightly), LOOP_TARGETS and NIGHTLY_TARGET (every case keras-nightly times)."""
    targets: dict[str, float] = dict(zip(("fork/upstream", "fork/nightly"), TARGETS.get(case, ()), strict=False))
    if case not in MICRO_CASES:
        targets["fork/nightly"] = min(targets.get("fork/nightly", NIGHTLY_TARGET), NIGHTLY_TARGET)
    for _, target_case, name, at_most in LOOP_TARGETS:
        if target_case == case:
            targets[name] = min(targets.get(name, at_most), at_most)
    return targets


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"error: {' '.join(command[:4])} ... failed (exit {result.returncode}):\n{tail}")
    return result


def environment(kind: str, backend: str, requirements: list[str], replaces: str | None = None) -> Path:
    """A virtual environment holding `requirements`, reused while they are unchanged.

    `replaces`: a distribution that provides the same import package as one of the
    requirements and must not stay beside it. tensorflow requires `keras`, so pip installs
    the release beside keras-nightly, both writing `keras/`: the release is uninstalled and
    keras-nightly reinstalled over it (the first requirement, without dependencies)."""
    env = OUT / "envs" / f"{kind}-{backend}"
    marker = env / "forkgen-bench-requirements.json"
    # A local wheel counts by its contents: a rebuilt wheel at the same path is a new environment.
    identity = [hashlib.sha256(Path(r).read_bytes()).hexdigest() if r.endswith(".whl") else r for r in requirements]
    # The interpreter too: FORKGEN_PYTHON=3.12 measures every build on 3.12, none on an older env.
    identity.append(f"python {sys.version}")
    if replaces:
        identity.append(f"replaces {replaces}")
    if marker.is_file() and json.loads(marker.read_text()) == identity:
        log(f"reusing {env}")
        return env
    log(f"creating {env}: {' '.join(requirements)}")
    shutil.rmtree(env, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(env)
    pip = [python(env), "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "-q", *requirements])
    if replaces and subprocess.run([*pip, "show", "-q", replaces], capture_output=True).returncode == 0:
        log(f"  {replaces} came in as a dependency: replacing it with {requirements[0]}")
        run([*pip, "uninstall", "-q", "-y", replaces])
        run([*pip, "install", "-q", "--force-reinstall", "--no-deps", requirements[0]])
    marker.write_text(json.dumps(identity))
    return env


def python(env: Path) -> str:
    return str(env / "bin" / "python")


def variables(kind: str) -> dict[str, str]:
    """The environment variables a build's processes run with (RUN_VARIABLES)."""
    return {**{k: v for k, v in os.environ.items() if k != "KERAS_FORKGEN_DISABLE"}, **RUN_VARIABLES.get(kind, {})}


def counts(env: Path, backend: str, kind: str = "") -> dict[str, Any]:
    result = run([python(env), str(HERE / "cases.py"), "--backend", backend, "--counts"], cwd=HERE, env=variables(kind))
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


# -- ablation: the series without one patch ---------------------------------------------------


def forkgen(*arguments: str) -> subprocess.CompletedProcess[str]:
    """`python -m forkgen ...` from the repository root: the checkout's configuration."""
    return subprocess.run([sys.executable, "-m", "forkgen", *arguments], capture_output=True, text=True, cwd=ROOT)


def provenance(wheel: Path) -> dict[str, Any]:
    result = forkgen("inspect", "--json", str(wheel))
    if result.returncode != 0:
        raise SystemExit(f"error: forkgen inspect --json {wheel} failed (exit {result.returncode}): "
                         f"{(result.stdout + result.stderr).strip()[-2000:]}")
    return dict(json.loads(result.stdout))


def applied_patches(record: dict[str, Any]) -> list[str]:
    return [str(p["name"]) for p in record.get("patches", []) if p.get("outcome") == "applied"]


def dependents(applied: list[str]) -> dict[str, list[str]]:
    """For each applied patch, the applied patches that need it (transitively), in series order:
    the series cannot lose a patch without them (`forkgen build` refuses such a selection)."""
    result = forkgen("series", "--json")
    try:
        requires = {str(p["name"]): [str(r) for r in p.get("requires", [])] for p in json.loads(result.stdout)}
    except (ValueError, TypeError, KeyError):
        log("forkgen series --json gave no dependencies: each ablation removes only its own patch")
        requires = {}
    closure: dict[str, list[str]] = {}
    for name in applied:
        removed = {name}
        grew = True
        while grew:
            grew = False
            for other in applied:
                if other not in removed and removed & set(requires.get(other, [])):
                    removed.add(other)
                    grew = True
        closure[name] = [other for other in applied if other in removed and other != name]
    return closure


def ablation_builds(wheel: Path, directory: Path) -> list[dict[str, Any]]:
    """One wheel per applied patch of the fork: the same configuration without that patch
    (and without the patches that need it). A build that fails, or whose provenance does
    not show exactly the fork's patches less the removed ones, is reported, not timed."""
    fork = provenance(wheel)
    applied = applied_patches(fork)
    needed_by = dependents(applied)
    log(f"ablation: the fork applies {', '.join(applied) or 'no patch'}")
    builds = []
    for n, name in enumerate(applied, 1):
        removed = [name, *needed_by[name]]
        label = f"ablation.{n}"
        out = directory / str(n)
        shutil.rmtree(out, ignore_errors=True)
        command = ["build", *[a for r in removed for a in ("--without-patch", r)], "--local-label", label,
                   "--out-dir", str(out)]
        entry: dict[str, Any] = {"kind": label, "patch": name, "also_removed": needed_by[name],
                                 "command": " ".join(["python -m forkgen", *command]), "wheel": None, "error": None}
        builds.append(entry)
        log(f"ablation: building the series without {' + '.join(removed)} ({label})")
        result = forkgen(*command)
        if result.returncode != 0:
            entry["error"] = f"forkgen build failed (exit {result.returncode}): " + \
                " ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
            log(f"ablation: {entry['error']}")
            continue
        built = Path(result.stdout.strip().splitlines()[-1])
        record = provenance(built)
        expected = [p for p in applied if p not in removed]
        if applied_patches(record) != expected or record.get("upstream") != fork.get("upstream"):
            entry["error"] = (f"{built.name} applies {applied_patches(record)} to {record.get('upstream')}, "
                              f"not {expected} to {fork.get('upstream')}: the fork was not built with this "
                              "checkout's configuration")
            log(f"ablation: {entry['error']}")
            continue
        entry["wheel"] = str(built)
        entry["version"] = record.get("fork_version")
    return builds


# -- timing -----------------------------------------------------------------------------------


def summary(path: Path) -> dict[str, Any]:
    import pyperf

    benchmark = pyperf.Benchmark.load(str(path))
    # Values within one worker process are not independent; the worker processes are.
    # The uncertainty of the mean is the standard error over the processes' means.
    process_means = [statistics.fmean(run.values) for run in benchmark.get_runs() if run.values]
    error = statistics.stdev(process_means) / math.sqrt(len(process_means)) if len(process_means) > 1 else None
    return {"mean": benchmark.mean(), "stdev": benchmark.stdev() if benchmark.get_nvalue() > 1 else 0.0,
            "median": benchmark.median(), "values": benchmark.get_nvalue(), "processes": len(process_means),
            "standard_error": error}


def calibrated_loops(path: Path) -> int:
    import pyperf

    loops = {run.get_loops() for run in pyperf.Benchmark.load(str(path)).get_runs() if run.values}
    return max(loops)


def ratio(stats: dict[str, Any], numerator: str, denominator: str) -> dict[str, Any]:
    """numerator/denominator of the means, its standard error, and the verdict at 2 SE."""
    top, bottom = stats[numerator], stats[denominator]
    value = top["mean"] / bottom["mean"]
    error = None
    if top["standard_error"] is not None and bottom["standard_error"] is not None:
        error = value * math.hypot(top["standard_error"] / top["mean"], bottom["standard_error"] / bottom["mean"])
    return {"ratio": value, "standard_error": error, "verdict": verdict(value, error)}


def time_case(kinds: list[str], envs: dict[str, Path], case: str, backend: str, args: argparse.Namespace,
              work: Path) -> dict[str, Any]:
    """Alternate the environments round by round; one pyperf file per environment. The first
    run calibrates pyperf's loops; every later run uses them, so all builds time the same
    number of calls per value and no run spends a worker process on calibration."""
    files = {kind: work / f"{kind}-{case}.json" for kind in kinds}
    loops: int | None = None
    started = time.perf_counter()
    for round_number in range(args.rounds):
        for kind in kinds if round_number % 2 == 0 else list(reversed(kinds)):
            # The plain-PyTorch twin runs in the fork's environment (the same torch), and so does
            # the fork with its patches switched off (RUNS_IN).
            command = [python(envs[RUNS_IN.get(kind, kind)]), str(HERE / "cases.py"), "--backend", backend,
                       "--case", case, *(["--twin"] if kind == TWIN else []), "--quiet",
                       "--processes", str(args.processes), "--values", str(args.values), "--warmups", "1",
                       "--append", str(files[kind])]
            if loops is not None:
                command += ["--loops", str(loops)]
            if kind in RUN_VARIABLES:  # pyperf's worker processes get only the variables named here
                command += ["--inherit-environ", ",".join(RUN_VARIABLES[kind])]
            run(command, cwd=HERE, env=variables(kind))
            if loops is None:
                loops = calibrated_loops(files[kind])
        log(f"  {case}: round {round_number + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)")
    stats = {kind: summary(path) for kind, path in files.items()}
    result: dict[str, Any] = {"case": case, "description": DESCRIPTIONS[case], "loops": loops, "stats": stats,
                              "ratios": {}, "targets": {}, "ablation": {}}
    for numerator, denominator in RATIOS:
        if numerator in stats and denominator in stats:
            result["ratios"][f"{numerator}/{denominator}"] = ratio(stats, numerator, denominator)
    switches = {f"{a}/{b}": ratio(stats, a, b) for a, b, _ in SWITCH_RATIOS if a in stats and b in stats}
    if switches:
        result["switches"] = switches
    for name, target in case_targets(case).items():
        if name in result["ratios"]:
            result["targets"][name] = {"at_most": target, "met": result["ratios"][name]["ratio"] <= target}
    for kind in stats:
        if kind.startswith("ablation."):
            result["ablation"][kind] = ratio(stats, kind, "fork")
    return result


def tool_cost(upstream: str, distribution: str) -> dict[str, float]:
    """`forkgen build` seconds from a warm cache, and analyze + apply seconds (median of 3 fresh interpreters)."""
    version = upstream.split("==", 1)[1]
    with tempfile.TemporaryDirectory() as tmp:
        forkgen = [sys.executable, "-m", "forkgen"]
        source = Path(run([*forkgen, "fetch", "--distribution", distribution, "--version", version], cwd=ROOT)
                      .stdout.strip().splitlines()[-1])
        started = time.perf_counter()
        run([*forkgen, "build", "--distribution", distribution, "--version", version, "--out-dir", f"{tmp}/dist"], cwd=ROOT)
        build_seconds = time.perf_counter() - started
        samples = []
        for i in range(3):  # each in a fresh interpreter, imports done, nothing cached
            # `apply` is what `forkgen apply` / `build` run: the analysis of every patch, then the
            # codemods and the atomic write (a separate `analyze` first would analyse twice).
            probe = ("import sys, time; from pathlib import Path; from forkgen import patch; "
                     "started = time.perf_counter(); "
                     "patch.apply(Path(sys.argv[1]), Path(sys.argv[2])); print(time.perf_counter() - started)")
            result = run([sys.executable, "-c", probe, str(source), f"{tmp}/tree-{i}"], cwd=ROOT)
            samples.append(float(result.stdout.strip().splitlines()[-1]))
    return {"build_seconds": build_seconds, "analyze_apply_seconds": statistics.median(samples),
            "analyze_apply_samples": samples}


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


# -- report -----------------------------------------------------------------------------------


def human(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def verdict(ratio: float, uncertainty: float | None) -> str:
    """Faster or slower beyond the noise: the ratio is more than two standard errors from 1."""
    if uncertainty is None:
        return "no error estimate"
    if ratio - 2 * uncertainty > 1:
        return "SLOWER"
    if ratio + 2 * uncertainty < 1:
        return "faster"
    return "within noise"


def shown(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "n/a"
    error = "?" if entry["standard_error"] is None else f"{entry['standard_error']:.3f}"
    return f"{entry['ratio']:.3f} ± {error} ({entry['verdict']})"


def times(entry: dict[str, Any] | None) -> str:
    """fork / plain torch: how many times the twin's time, without a verdict (it is a distance)."""
    if entry is None:
        return "n/a"
    error = "?" if entry["standard_error"] is None else f"{entry['standard_error']:.2f}"
    return f"{entry['ratio']:.2f}× ± {error}"


def shown_ratio(name: str, entry: dict[str, Any] | None) -> str:
    return times(entry) if name.endswith(f"/{TWIN}") else shown(entry)


def target_cell(name: str, target: dict[str, Any] | None) -> str:
    if target is None:
        return "-"
    bound = f"{target['at_most']:.1f}×" if name.endswith(f"/{TWIN}") else f"{target['at_most']:.2f}"
    return f"≤ {bound}: {'met' if target['met'] else 'missed'}"


def timing(stats: dict[str, Any], kind: str) -> str:
    return "n/a" if kind not in stats else f"{human(stats[kind]['mean'])} ± {human(stats[kind]['stdev'])}"


def count(results: dict[str, Any], kind: str, shape: str | None) -> str:
    measured = results["counts"].get(kind, {}).get("counts")
    if shape is None:
        return "-"
    if measured is None or shape not in measured:
        return "n/a"
    entry = measured[shape]
    text = f"{entry['slow']}/{entry['fast']}"
    if "slow_per_token" in entry:
        text += f" ({entry['slow_per_token']:g}/{entry['fast_per_token']:g} per token)"
    return text


def removed_text(build: dict[str, Any]) -> str:
    also = build["also_removed"]
    return build["patch"] + (f" (and {', '.join(also)}, which need{'s' if len(also) == 1 else ''} it)" if also else "")


def without(build: dict[str, Any]) -> str:
    return " + ".join([build["patch"], *build["also_removed"]])


def count_target(results: dict[str, Any]) -> dict[str, Any]:
    """COUNT_TARGET in every build that was counted; met when every such count of the fork is 0."""
    values: dict[str, dict[str, float] | None] = {}
    for kind, data in results["counts"].items():
        measured = data.get("counts")
        values[kind] = None if measured is None else {
            label: measured[shape][key] for shape, key, label in COUNT_TARGET_CALLS if shape in measured}
    fork = values.get("fork") or {}
    return {"target": COUNT_TARGET, "of": "fork", "values": values,
            "met": bool(fork) and all(value == 0 for value in fork.values())}


def ratio_target(results: dict[str, Any], case: str, before: dict[str, Any] | None = None, *,
                 text: str | None = None, targets: dict[str, float] | None = None) -> dict[str, Any]:
    """`text` (default TARGET_TEXT[case]): the case's ratio `targets` ({ratio: at most}; default
    its TARGETS, the earlier issues'); for `before`, also no slower than the fork/upstream ratio
    of an earlier run (`before`: its ratio and standard error) beyond two standard errors.
    `met` is None when the case was not timed, or none of the target's ratios was measured."""
    entry: dict[str, Any] = {"target": text or TARGET_TEXT[case], "case": case, "ratios": {}, "before": before,
                             "met": None}
    row = next((r for r in results["cases"] if r["case"] == case), None)
    if row is None:
        return entry
    if targets is None:
        targets = dict(zip(("fork/upstream", "fork/nightly"), TARGETS.get(case, ()), strict=False))
    for name, at_most in targets.items():
        if name in row["ratios"]:
            entry["ratios"][name] = {**row["ratios"][name], "at_most": at_most,
                                     "met": row["ratios"][name]["ratio"] <= at_most}
    if targets and not entry["ratios"]:
        return entry
    met = all(ratio["met"] for ratio in entry["ratios"].values())
    now = row["ratios"].get("fork/upstream")
    if before is not None and now is not None:
        errors = [e for e in (now["standard_error"], before.get("standard_error")) if e is not None]
        slack = 2 * math.hypot(*errors) if errors else 0.0
        entry["no_slower_than_before"] = now["ratio"] <= before["ratio"] + slack
        met = met and entry["no_slower_than_before"]
    entry["met"] = met
    return entry


def previous_dense(path: Path, backend: str) -> dict[str, Any] | None:
    """The dense fork/upstream ratio of the results.json an earlier run left, if it ran on this
    backend: the "before" of "Dense(4)(x) no slower than before"."""
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous.get("backend") != backend:
            return None
        row = next(r for r in previous["cases"] if r["case"] == "dense")
        ratio = row["ratios"]["fork/upstream"]
        return {"fork_version": previous.get("fork_version"), "ratio": float(ratio["ratio"]),
                "standard_error": ratio.get("standard_error")}
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None


def nightly_target(results: dict[str, Any]) -> dict[str, Any]:
    """NIGHTLY_TARGET on the fork/nightly ratio of every case timed in keras-nightly."""
    ratios = {row["case"]: {**row["ratios"]["fork/nightly"], "at_most": NIGHTLY_TARGET,
                            "met": row["ratios"]["fork/nightly"]["ratio"] <= NIGHTLY_TARGET}
              for row in results["cases"] if "fork/nightly" in row["ratios"]}
    return {"target": NIGHTLY_TARGET_TEXT, "case": "every case", "ratios": ratios, "before": None,
            "met": all(ratio["met"] for ratio in ratios.values()) if ratios else None}


def issue_targets(results: dict[str, Any], before_dense: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The issues' targets, the earlier ones first, then issue 26's (LOOP_TARGETS, NIGHTLY_TARGET)."""
    return [count_target(results), ratio_target(results, "callspec_keywords"),
            ratio_target(results, "dense", before_dense),
            *[ratio_target(results, case, text=text, targets={name: at_most})
              for text, case, name, at_most in LOOP_TARGETS],
            nightly_target(results)]


def targets_text(targets: list[dict[str, Any]]) -> str:
    lines = ["The issue's targets (informational):"]
    for target in targets:
        verdict_text = {True: "met", False: "missed", None: "not timed"}[target["met"]]
        if "values" in target:
            def counted(values: dict[str, float] | None) -> str:
                if not values:
                    return "n/a"
                return ", ".join(f"{value:g} {label}" for label, value in values.items())

            others = "; ".join(f"{kind} {counted(values)}" for kind, values in target["values"].items()
                               if kind != "fork")
            lines.append(f"- {target['target']}: fork {counted(target['values'].get('fork'))}: {verdict_text}"
                         + (f" (kv_decoder; {others})" if others else " (kv_decoder)"))
            continue
        parts = [f"{name} {shown_ratio(name, ratio)} ({target_cell(name, ratio)})"
                 for name, ratio in target["ratios"].items()]
        before = target.get("before")
        if before is not None and "no_slower_than_before" in target:
            error = "?" if before.get("standard_error") is None else f"{before['standard_error']:.3f}"
            parts.append(f"before (the previous results.json, fork {before['fork_version']}): fork/upstream "
                         f"{before['ratio']:.3f} ± {error}, "
                         f"{'no slower' if target['no_slower_than_before'] else 'SLOWER'} beyond two standard errors")
        lines.append(f"- {target['target']} ({target['case']}): " + ("; ".join(parts) + ": " if parts else "")
                     + verdict_text)
    return "\n".join(lines)


def table(results: dict[str, Any]) -> str:
    lines = ["| case | upstream (mean ± std dev) | nightly (mean ± std dev) | fork (mean ± std dev) "
             "| plain torch (mean ± std dev) "
             "| fork/upstream ± std error | nightly/upstream ± std error | fork/nightly ± std error "
             "| fork / plain torch ± std error "
             "| target fork/upstream | target fork/nightly | target fork / plain torch "
             "| CallSpecs slow/fast: upstream | nightly | fork |",
             "|---" * 15 + "|"]
    target_names = ("fork/upstream", "fork/nightly", f"fork/{TWIN}")
    for row in results["cases"]:
        shape = COUNT_FOR_CASE.get(row["case"])
        lines.append(
            f"| {row['case']}: {row['description']} | "
            + " | ".join(timing(row["stats"], k) for k in (*BUILDS, TWIN))
            + " | " + " | ".join(shown_ratio(f"{a}/{b}", row["ratios"].get(f"{a}/{b}")) for a, b in RATIOS)
            + " | " + " | ".join(target_cell(name, row["targets"].get(name)) for name in target_names)
            + " | " + " | ".join(count(results, k, shape) for k in BUILDS) + " |"
        )
    lines += ["", "A ratio a/b is the mean time of build a over that of build b: \"faster\" (\"SLOWER\") when a "
              "is faster (slower) than b by more than two standard errors. \"plain torch\" is the case's "
              "plain-PyTorch twin (tests/bench/twins.py: the same model, weights, loss and optimizer in torch.nn, "
              "a hand-written loop), timed in the fork's environment; fork / plain torch is how many times its "
              "time the fork takes. A target is met when the ratio is at most the target, the strictest of the "
              "issues' (informational: only \"fork/upstream SLOWER\" fails the run)."]
    kinds = [*BUILDS, *(b["kind"] for b in results.get("ablation", []) if b["wheel"]),
             *(k for k in (SWITCHED_OFF, BEFORE) if k in results["counts"])]
    headers = {"upstream": "upstream", "nightly": "nightly", "fork": "fork", SWITCHED_OFF: "fork, all switched off",
               BEFORE: "before", **{b["kind"]: f"fork without {without(b)}" for b in results.get("ablation", [])}}
    shapes: list[str] = []
    for kind in kinds:
        for shape in results["counts"].get(kind, {}).get("counts") or {}:
            if shape not in shapes:
                shapes.append(shape)
    lines += ["", "| CallSpecs per call (slow/fast) | " + " | ".join(headers[k] for k in kinds) + " |",
              "|---" * (len(kinds) + 1) + "|"]
    for shape in shapes:
        lines.append(f"| {shape} | " + " | ".join(count(results, k, shape) for k in kinds) + " |")
    if results.get("ablation"):
        ablated = [row for row in results["cases"] if row["ablation"]]
        lines += ["", "Ablation: the series without one patch, timed against the full series (the fork) "
                  "in the same rounds; a ratio above 1 is time that patch saves.", "",
                  "| series without | wheel | " + " | ".join(f"{row['case']}: without / full ± std error"
                                                           for row in ablated) + " |",
                  "|---|---|" + "---|" * len(ablated)]
        for build in results["ablation"]:
            if not build["wheel"]:
                lines.append(f"| {removed_text(build)} | not built: {build['error']} |"
                             + " n/a |" * len(ablated))
                continue
            cells = []
            for row in ablated:
                entry = row["ablation"].get(build["kind"])
                cells.append("n/a" if entry is None else shown(entry).replace("(SLOWER)", "(slower without it)")
                             .replace("(faster)", "(faster without it)"))
            lines.append(f"| {removed_text(build)} | {Path(build['wheel']).name} | " + " | ".join(cells) + " |")
        lines += ["", "| case | fork (full series, mean ± std dev) | "
                  + " | ".join(f"without {without(b)}" for b in results["ablation"] if b["wheel"]) + " |",
                  "|---|---|" + "---|" * len([b for b in results["ablation"] if b["wheel"]])]
        for row in ablated:
            lines.append(f"| {row['case']} | {timing(row['stats'], 'fork')} | "
                         + " | ".join(timing(row["stats"], b["kind"]) for b in results["ablation"] if b["wheel"])
                         + " |")
    switched = [row for row in results["cases"] if row.get("switches")]
    if switched:
        shown_ratios = [(f"{a}/{b}", meaning) for a, b, meaning in SWITCH_RATIOS
                        if any(f"{a}/{b}" in row["switches"] for row in switched)]
        lines += ["", f"Run-time switches: {SWITCHED_OFF} is the fork with KERAS_FORKGEN_DISABLE=all (every patch "
                  f"switched off, in the fork's environment), {BEFORE} the build given with --before; "
                  + "; ".join(f"{name}: {meaning}" for name, meaning in shown_ratios) + ".", "",
                  "| case | " + " | ".join(f"{name} ± std error" for name, _ in shown_ratios) + " | "
                  + " | ".join(f"{kind} (mean ± std dev)" for kind in (SWITCHED_OFF, BEFORE)
                               if any(kind in row["stats"] for row in switched)) + " |",
                  "|---|" + "---|" * (len(shown_ratios) + len([k for k in (SWITCHED_OFF, BEFORE)
                                                              if any(k in row["stats"] for row in switched)]))]
        for row in switched:
            lines.append(f"| {row['case']} | " + " | ".join(shown_ratio(name, row["switches"].get(name))
                                                           for name, _ in shown_ratios)
                         + " | " + " | ".join(timing(row["stats"], kind) for kind in (SWITCHED_OFF, BEFORE)
                                              if any(kind in r["stats"] for r in switched)) + " |")
    return "\n".join(lines)


def results_markdown(results: dict[str, Any]) -> str:
    """docs/benchmark-results.md from a results.json: the run's conditions, the table, the
    targets and forkgen's own cost, as `nox -s bench` printed them."""
    environment = results.get("environments", {}).get("fork", {})
    settings = results.get("settings", {})
    machine_ = results.get("machine", {})
    lines = [
        "# Benchmark: latest results",
        "",
        "<!-- Generated by tests/bench/run.py (`nox -s bench`) from patched_keras/bench/results.json. "
        "Do not edit: the next run replaces this file. -->",
        "",
        "Generated by `nox -s bench` from `patched_keras/bench/results.json`; how it is measured and how to "
        "read it: [benchmark.md](benchmark.md).",
        "",
        f"- builds: Keras {results.get('upstream_version')} (upstream), keras-nightly "
        f"{results.get('nightly_version')}, keras {results.get('fork_version')} (the fork)",
        f"- backend: {results.get('backend')}; "
        + ", ".join(f"{k} {v}" for k, v in environment.items() if not k.startswith("keras")),
        f"- machine: {machine_.get('cpu')}, {machine_.get('cores')} cores, {machine_.get('system')}",
        f"- settings: {settings.get('rounds')} rounds × {settings.get('processes_per_round')} processes × "
        f"{settings.get('values')} values; timings took {results.get('timing_seconds', 0) / 60:.1f} min",
        "",
        table(results),
    ]
    if results.get("issue_targets"):
        lines += ["", targets_text(results["issue_targets"])]
    tool = results.get("tool")
    if tool:
        lines += ["", f"forkgen build (warm cache): {tool['build_seconds']:.1f} s; analyze + apply "
                  f"(`forkgen apply`, in a fresh interpreter): {tool['analyze_apply_seconds']:.2f} s (median of 3)."]
    return "\n".join(lines) + "\n"


#: README.md's headline figures: the cases shown and their names there.
HEADLINE_CASES = {
    "dense": "`Dense(4)(x)`",
    "mlp": "4-layer MLP, `model(x)`",
    "transformer": "Transformer block, inference",
    "train_step": "one `train_on_batch` step",
    "generate": "greedy generation, 16 tokens",
    "conv_predict": "ConvNet, `predict_on_batch`",
    "mlp_call": "5-layer MLP, `model(x)`, batch 32",
    "mlp_train_step": "5-layer MLP, `train_on_batch`",
    "mlp_fit": "5-layer MLP, `fit`, one epoch",
    "mlp_evaluate": "5-layer MLP, `evaluate`",
    "mlp_predict": "5-layer MLP, `predict`",
    "transformer_fit": "Transformer block, `fit`, one epoch",
    "transformer_evaluate": "Transformer block, `evaluate`",
    "transformer_predict": "Transformer block, `predict`",
}
HEADLINE_START = "<!-- bench:headline:start (generated by nox -s bench) -->"
HEADLINE_END = "<!-- bench:headline:end -->"


def headline_markdown(results: dict[str, Any]) -> str:
    """The table between README.md's headline markers: fork/upstream, fork/nightly and fork /
    plain torch (n/a where the case has no twin or the run did not time it)."""
    rows = {row["case"]: row for row in results.get("cases", [])}
    lines = ["| case | fork / upstream | fork / keras-nightly | fork / plain torch |", "|---|---|---|---|"]
    for case, name in HEADLINE_CASES.items():
        if case not in rows:
            continue
        ratios = rows[case].get("ratios", {})
        cells = []
        for key in ("fork/upstream", "fork/nightly"):
            entry = ratios.get(key)
            error = "?" if entry is None or entry["standard_error"] is None else f"{entry['standard_error']:.3f}"
            cells.append("n/a" if entry is None else f"{entry['ratio']:.3f} ± {error}")
        cells.append(times(ratios.get(f"fork/{TWIN}")))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_readme_headline(results: dict[str, Any], path: Path = ROOT / "README.md") -> None:
    """Replace the table between README.md's headline markers (if it has them)."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    start, end = text.find(HEADLINE_START), text.find(HEADLINE_END)
    if start < 0 or end < start:
        return
    body = f"{HEADLINE_START}\n{headline_markdown(results)}\n"
    path.write_text(text[:start] + body + text[end:], encoding="utf-8")
    print(f"wrote the headline figures in {path}")


def write_results_markdown(results: dict[str, Any], path: Path = DOCS_RESULTS) -> None:
    """Refresh the generated results page (only where the checkout has a docs/ directory) and
    README.md's headline figures."""
    if path.parent.is_dir():
        path.write_text(results_markdown(results), encoding="utf-8")
        print(f"wrote {path}")
        write_readme_headline(results)


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["cases"]
    ablated = [row for row in rows if row["ablation"]]
    panels = 2 if ablated else 1
    heights = [0.75 * len(rows) + 1.2] + ([0.5 * len(ablated) * len(results["ablation"]) + 1.2] if ablated else [])
    figure, axes_list = plt.subplots(panels, 1, figsize=(10, sum(heights) + 0.6), squeeze=False,
                                     gridspec_kw={"height_ratios": heights})
    axes = axes_list[0][0]
    colors = {"fork/upstream": "tab:blue", "nightly/upstream": "tab:orange", "fork/nightly": "tab:green"}
    bar = 0.26
    for i, (name, color) in enumerate(colors.items()):
        positions, values, errors = [], [], []
        for j, row in enumerate(rows):
            entry = row["ratios"].get(name)
            if entry is not None:
                positions.append(j + (i - 1) * bar)
                values.append(entry["ratio"])
                errors.append(entry["standard_error"] or 0.0)
        axes.barh(positions, values, height=bar, xerr=errors, color=color, capsize=3, label=name)
        for j, row in enumerate(rows):
            target = row["targets"].get(name)
            if target is not None:
                axes.plot([target["at_most"]] * 2, [j + (i - 1.5) * bar, j + (i - 0.5) * bar], color="black",
                          linewidth=2)
    axes.set_yticks(range(len(rows)), [row["case"] for row in rows])
    axes.axvline(1.0, color="black", linewidth=1)
    axes.invert_yaxis()
    axes.set_xlabel("time ratio (lower: the first build is faster); black ticks: the issue's targets")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.set_title(f"Keras {results['upstream_version']}, keras-nightly {results['nightly_version']} and the fork, "
                   f"{results['backend']} backend, {results['machine']['cpu']}", fontsize=9)
    if ablated:
        axes = axes_list[1][0]
        builds = [b for b in results["ablation"] if b["wheel"]]
        labels, values, errors = [], [], []
        for row in ablated:
            for build in builds:
                entry = row["ablation"].get(build["kind"])
                if entry is not None:
                    labels.append(f"{row['case']}: without {without(build)}")
                    values.append(entry["ratio"])
                    errors.append(entry["standard_error"] or 0.0)
        axes.barh(labels, values, xerr=errors, capsize=3,
                  color=["tab:red" if v > 1 else "tab:gray" for v in values])
        axes.axvline(1.0, color="black", linewidth=1)
        axes.invert_yaxis()
        axes.set_xlabel("time ratio series without the patch / full series (above 1: the patch saves time)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# -- main -------------------------------------------------------------------------------------


def check_environments(counted: dict[str, dict[str, Any]], expected: dict[str, tuple[str, str]]) -> None:
    """All environments hold the same backend packages, and each imports the Keras it should."""
    backend_packages = {kind: {k: v for k, v in data["environment"].items() if not k.startswith("keras")}
                        for kind, data in counted.items()}
    if len({json.dumps(p, sort_keys=True) for p in backend_packages.values()}) > 1:
        raise SystemExit(f"error: the environments differ beyond Keras: {backend_packages}")
    for kind, (distribution, version) in expected.items():
        found = counted[kind]["environment"].get("keras_distributions", {})
        if found != {distribution: version}:
            raise SystemExit(f"error: the {kind} environment holds {found or 'no Keras distribution'}, "
                             f"not {distribution} {version}: refusing to time something else")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, help="the fork's wheel (required unless --render)")
    parser.add_argument("--upstream", help="the upstream requirement, e.g. keras==3.15.1 (required unless --render)")
    parser.add_argument("--render", type=Path, metavar="RESULTS_JSON",
                        help=f"time nothing: only write {DOCS_RESULTS.relative_to(ROOT)} from this results.json")
    parser.add_argument("--nightly", default=NIGHTLY, help=f"the keras-nightly requirement (default {NIGHTLY})")
    parser.add_argument("--requirement", action="append", default=[], help="a backend requirement (repeatable)")
    parser.add_argument("--backend", default="torch", choices=["torch", "jax", "tensorflow", "numpy"])
    parser.add_argument("--cases", default=None,
                        help=f"comma-separated subset of {', '.join(CASES)} (default: all the backend runs)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternations of the environments per case (default 3)")
    parser.add_argument("--processes", type=int, default=2, help="pyperf worker processes per round (default 2)")
    parser.add_argument("--values", type=int, default=5, help="pyperf values per worker process (default 5)")
    parser.add_argument("--no-tool-cost", action="store_true", help="skip timing forkgen build and analyze + apply")
    parser.add_argument("--ablation", action="store_true",
                        help="also build the series without each patch the fork applies, and time those wheels "
                             "(one environment and one more timing per patch and case: long)")
    parser.add_argument("--compile", action="store_true",
                        help="instead of the timings: torch.compile on the bench models, upstream and the fork side "
                             "by side (graphs, breaks and their reasons, fullgraph, recompiles, guards, inductor "
                             "timings, each beside the model's plain-PyTorch twin; torch backend; "
                             "tests/bench/compile_run.py)")
    parser.add_argument("--compile-models", default=None,
                        help="with --compile: comma-separated models (default: dense,mlp,transformer,kv_decoder,convnet)")
    parser.add_argument("--no-timing", action="store_true", help="with --compile: skip the inductor timings")
    parser.add_argument("--ceiling", action="store_true",
                        help="instead of the timings: the fork's Layer.__call__ with steps taken out, timed in its "
                             "environment, and the targets projected from the latest results.json (an upper bound "
                             "of what any patch of those steps can give; tests/bench/ceiling.py)")
    parser.add_argument("--switches", action="store_true",
                        help="also time the fork with every patch switched off (KERAS_FORKGEN_DISABLE=all)")
    parser.add_argument("--before", type=Path, metavar="WHEEL",
                        help="also time this other build of the fork (e.g. one made before a change)")
    parser.add_argument("--ablation-cases", default=None,
                        help="comma-separated cases the ablation times (default: the model-level ones among --cases)")
    args = parser.parse_args()
    if args.render is not None:
        write_results_markdown(json.loads(args.render.read_text(encoding="utf-8")))
        return 0
    if args.wheel is None or args.upstream is None:
        parser.error("--wheel and --upstream are required (unless --render)")
    if args.compile and args.backend != "torch":
        parser.error("--compile: torch.compile is the torch backend's")
    if not args.compile and (args.compile_models or args.no_timing):
        parser.error("--compile-models and --no-timing go with --compile")
    if args.ceiling and (args.compile or args.ablation):
        parser.error("--ceiling goes with neither --compile nor --ablation")
    unsupported = UNSUPPORTED.get(args.backend, set())
    if args.cases is None:
        cases = [c for c in CASES if c not in unsupported]
    else:
        cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    if set(cases) & unsupported:
        parser.error(f"the {args.backend} backend cannot run: {', '.join(sorted(set(cases) & unsupported))}")
    if args.ablation_cases is None:
        ablation_cases = [c for c in cases if c in MODEL_CASES] if args.ablation else []
    else:
        if not args.ablation:
            parser.error("--ablation-cases needs --ablation")
        ablation_cases = [c for c in args.ablation_cases.split(",") if c]
        outside = [c for c in ablation_cases if c not in cases]
        if outside:
            parser.error(f"--ablation-cases must be among the timed cases (--cases): {', '.join(outside)}")
    if min(args.rounds, args.processes, args.values) < 1:
        parser.error("--rounds, --processes and --values must be at least 1")
    if args.rounds * args.processes < 2:
        log("warning: one worker process per build: no standard error, so no verdict "
            "(--rounds × --processes of at least 2 gives one)")
    distribution, upstream_version = args.upstream.split("==", 1)
    nightly_distribution = re.split(r"[<>=!~\[ ;@]", args.nightly, maxsplit=1)[0]
    nightly_version = args.nightly.split("==", 1)[1].strip() if "==" in args.nightly else ""
    if not args.wheel.is_file():
        parser.error(f"no wheel at {args.wheel}")
    if args.before is not None and not args.before.is_file():
        parser.error(f"no wheel at {args.before}")
    if (args.switches or args.before) and (args.compile or args.ceiling):
        parser.error("--switches and --before go with neither --compile nor --ceiling")
    fork_version = args.wheel.name.split("-")[1]
    base = [*args.requirement, "pyperf"]
    upstream_requirements = [args.upstream, "--only-binary", distribution, *base]
    fork_requirements = [str(args.wheel.resolve()), *base]
    if args.compile:
        import compile_run

        return compile_run.main({"upstream": environment("upstream", args.backend, upstream_requirements),
                                 "fork": environment("fork", args.backend, fork_requirements)},
                                python, args.compile_models, args.no_timing, OUT / "compile.json")
    if args.ceiling:
        # Streams its progress; the cases default to ceiling.py's (those that call layers).
        return subprocess.run(
            [python(environment("fork", args.backend, fork_requirements)), str(HERE / "ceiling.py"),
             "--backend", args.backend, "--rounds", str(2 * args.rounds + 1),
             "--results", str(OUT / "results.json"), "--out", str(OUT / "ceiling.json"),
             *(["--cases", ",".join(cases)] if args.cases is not None else [])],
            cwd=HERE, check=False,
        ).returncode
    envs = {"upstream": environment("upstream", args.backend, upstream_requirements),
            "nightly": environment("nightly", args.backend,
                                   [args.nightly, "--only-binary", nightly_distribution, *base], replaces=distribution),
            "fork": environment("fork", args.backend, fork_requirements)}
    ablations: list[dict[str, Any]] = []
    if args.ablation:
        ablations = ablation_builds(args.wheel.resolve(), OUT / "ablation" / "wheels")
        for build in ablations:
            if build["wheel"]:
                envs[build["kind"]] = environment(build["kind"], args.backend, [build["wheel"], *base])
    if args.before is not None:
        envs[BEFORE] = environment(BEFORE, args.backend, [str(args.before.resolve()), *base])
    extra = [*([SWITCHED_OFF] if args.switches else []), *([BEFORE] if args.before is not None else [])]
    log("counting CallSpecs per call")
    counted = {kind: counts(env, args.backend, kind) for kind, env in envs.items()}
    if args.switches:
        counted[SWITCHED_OFF] = counts(envs["fork"], args.backend, SWITCHED_OFF)
    expected = {"upstream": (distribution, upstream_version), "fork": (distribution, fork_version),
                **{b["kind"]: (distribution, b["version"]) for b in ablations if b["wheel"]},
                **({BEFORE: (distribution, args.before.name.split("-")[1])} if args.before is not None else {})}
    check_environments(counted, expected)
    nightly_found = counted["nightly"]["environment"].get("keras_distributions", {})
    if list(nightly_found) != [nightly_distribution] or nightly_version not in ("", nightly_found[nightly_distribution]):
        raise SystemExit(f"error: the nightly environment holds {nightly_found or 'no Keras distribution'}, "
                         f"not {args.nightly}: refusing to time something else")
    results: dict[str, Any] = {
        "machine": machine(), "backend": args.backend, "upstream_version": upstream_version,
        "nightly_version": nightly_found[nightly_distribution], "fork_version": fork_version,
        "builds": {"upstream": args.upstream, "nightly": args.nightly, "fork": str(args.wheel.resolve()),
                   TWIN: "the plain-PyTorch twins of tests/bench/twins.py, in the fork's environment",
                   **({SWITCHED_OFF: "the fork with KERAS_FORKGEN_DISABLE=all, in the fork's environment"}
                      if args.switches else {}),
                   **({BEFORE: str(args.before.resolve())} if args.before is not None else {})},
        "environments": {kind: counted[kind]["environment"] for kind in envs},
        "settings": {"rounds": args.rounds, "processes_per_round": args.processes, "values": args.values,
                     "cases": cases, "ablation_cases": ablation_cases, "switches": args.switches},
        "counts": counted, "ablation": ablations, "cases": [],
    }
    before_dense = previous_dense(OUT / "results.json", args.backend)  # before this run overwrites it
    OUT.mkdir(parents=True, exist_ok=True)
    work = OUT / "pyperf" / args.backend  # kept: `python -m pyperf stats|hist|compare_to FILE`
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    for case in cases:
        kinds = builds_of(case, args.backend) + extra
        if case in ablation_cases:
            kinds += [b["kind"] for b in ablations if b["wheel"]]
        log(f"timing {case} in {', '.join(kinds)}: {DESCRIPTIONS[case]}")
        results["cases"].append(time_case(kinds, envs, case, args.backend, args, work))
    results["timing_seconds"] = time.perf_counter() - started
    if not args.no_tool_cost:
        log("timing forkgen build (warm cache) and analyze + apply")
        results["tool"] = tool_cost(args.upstream, distribution)
    results["issue_targets"] = issue_targets(results, before_dense)
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    chart(results, OUT / "ratios.png")
    write_results_markdown(results)
    print(f"Keras {upstream_version} (upstream), keras-nightly {results['nightly_version']} and "
          f"keras {fork_version} (fork) on {args.backend}; {results['machine']['cpu']}, "
          f"{results['machine']['cores']} cores; "
          + ", ".join(f"{k} {v}" for k, v in results["environments"]["fork"].items() if not k.startswith("keras"))
          + "; "
          f"{args.rounds} rounds × {args.processes} processes × {args.values} values, "
          f"timings took {results['timing_seconds'] / 60:.1f} min")
    print(table(results))
    print()
    print(targets_text(results["issue_targets"]))
    if "tool" in results:
        tool = results["tool"]
        print(f"\nforkgen build (warm cache): {tool['build_seconds']:.1f} s; "
              f"analyze + apply (`forkgen apply`: the analysis, the codemods, the write): "
              f"{tool['analyze_apply_seconds']:.2f} s (median of 3)")
    print(f"\nwrote {OUT / 'results.json'} and {OUT / 'ratios.png'}")
    slower = [r["case"] for r in results["cases"] if r["ratios"]["fork/upstream"]["verdict"] == "SLOWER"]
    if slower:
        print(f"fork slower than upstream beyond the noise: {', '.join(slower)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
