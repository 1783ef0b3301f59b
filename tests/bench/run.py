"""Upstream vs patched Keras, side by side (nox -s bench).

Creates (or reuses) two environments with the same backend requirements, one
with the upstream wheel of the pinned release and one with the fork's wheel,
then:

1. counts the CallSpecs built by the slow constructor and by `CallSpec._fast`
   per call in each (deterministic, machine-independent);
2. times every case of tests/bench/cases.py with pyperf, alternating the two
   environments round by round so that drifts of the machine hit both alike;
3. times forkgen itself: `forkgen build` from a warm cache, and analyze + apply;
4. prints a table, writes patched_keras/bench/results.json and ratios.png.

    python tests/bench/run.py --wheel W --upstream keras==3.15.1 --requirement torch==2.13.0
        [--backend torch] [--rounds 5] [--processes 2] [--values 5] [--cases dense,mlp]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
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
sys.path.insert(0, str(HERE))
from cases import CASES, DESCRIPTIONS  # noqa: E402

#: Which per-call count goes beside each timed case in the table.
COUNT_FOR_CASE = {
    "dense": "dense: layer(x)",
    "mlp": "mlp: model(x)",
    "transformer": "transformer: model(x, training=False)",
    "train_step": "transformer: train_on_batch",
}


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"error: {' '.join(command[:4])} ... failed (exit {result.returncode}):\n{tail}")
    return result


def environment(kind: str, backend: str, requirements: list[str]) -> Path:
    """A virtual environment holding `requirements`, reused while they are unchanged."""
    env = OUT / "envs" / f"{kind}-{backend}"
    marker = env / "forkgen-bench-requirements.json"
    # A local wheel counts by its contents: a rebuilt wheel at the same path is a new environment.
    identity = [hashlib.sha256(Path(r).read_bytes()).hexdigest() if r.endswith(".whl") else r for r in requirements]
    if marker.is_file() and json.loads(marker.read_text()) == identity:
        log(f"reusing {env}")
        return env
    log(f"creating {env}: {' '.join(requirements)}")
    shutil.rmtree(env, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(env)
    run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements])
    marker.write_text(json.dumps(identity))
    return env


def python(env: Path) -> str:
    return str(env / "bin" / "python")


def counts(env: Path, backend: str) -> dict[str, Any]:
    result = run([python(env), str(HERE / "cases.py"), "--backend", backend, "--counts"], cwd=HERE)
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def time_case(envs: dict[str, Path], case: str, backend: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Alternate the environments round by round; one pyperf file per environment."""
    files = {kind: work / f"{kind}-{case}.json" for kind in envs}
    order = list(envs)
    for round_number in range(args.rounds):
        for kind in order if round_number % 2 == 0 else reversed(order):
            command = [python(envs[kind]), str(HERE / "cases.py"), "--backend", backend, "--case", case, "--quiet",
                       "--processes", str(args.processes), "--values", str(args.values), "--warmups", "1",
                       "--append", str(files[kind])]
            run(command, cwd=HERE)
        log(f"  {case}: round {round_number + 1}/{args.rounds} done")
    import pyperf

    stats = {}
    for kind, path in files.items():
        benchmark = pyperf.Benchmark.load(str(path))
        # Values within one worker process are not independent; the worker processes are.
        # The uncertainty of the mean is the standard error over the processes' means.
        process_means = [statistics.fmean(run.values) for run in benchmark.get_runs() if run.values]
        stats[kind] = {"mean": benchmark.mean(), "stdev": benchmark.stdev(), "median": benchmark.median(),
                       "values": benchmark.get_nvalue(), "processes": len(process_means),
                       "standard_error": statistics.stdev(process_means) / math.sqrt(len(process_means))}
    up, fork = stats["upstream"], stats["patched"]
    ratio = fork["mean"] / up["mean"]
    uncertainty = ratio * math.hypot(up["standard_error"] / up["mean"], fork["standard_error"] / fork["mean"])
    return {"case": case, "description": DESCRIPTIONS[case], "upstream": up, "patched": fork,
            "ratio": ratio, "ratio_uncertainty": uncertainty}


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
            probe = ("import sys, time; from pathlib import Path; from forkgen import patch; "
                     "started = time.perf_counter(); patch.analyze(Path(sys.argv[1])); "
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


def human(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def verdict(ratio: float, uncertainty: float) -> str:
    """Faster or slower beyond the noise: the ratio is more than two standard errors from 1."""
    if ratio - 2 * uncertainty > 1:
        return "SLOWER"
    if ratio + 2 * uncertainty < 1:
        return "faster"
    return "within noise"


def table(results: dict[str, Any]) -> str:
    count_sets = {kind: results["counts"][kind]["counts"] for kind in ("upstream", "patched")}
    lines = ["| case | upstream (mean ± std dev) | patched (mean ± std dev) | ratio patched/upstream ± std error "
             "| CallSpecs slow/fast: upstream | patched |",
             "|---|---|---|---|---|---|"]
    for row in results["cases"]:
        shape = COUNT_FOR_CASE.get(row["case"])
        count = ["-", "-"] if shape is None else [
            f"{count_sets[k][shape]['slow']}/{count_sets[k][shape]['fast']}" for k in ("upstream", "patched")]
        up, fork = row["upstream"], row["patched"]
        lines.append(
            f"| {row['case']}: {row['description']} | {human(up['mean'])} ± {human(up['stdev'])} "
            f"| {human(fork['mean'])} ± {human(fork['stdev'])} | {row['ratio']:.3f} ± {row['ratio_uncertainty']:.3f} "
            f"({verdict(row['ratio'], row['ratio_uncertainty'])}) | {count[0]} | {count[1]} |"
        )
    lines += ["", "| CallSpecs per call (slow/fast) | upstream | patched |", "|---|---|---|"]
    for shape in count_sets["patched"]:
        up, fork = count_sets["upstream"][shape], count_sets["patched"][shape]
        lines.append(f"| {shape} | {up['slow']}/{up['fast']} | {fork['slow']}/{fork['fast']} |")
    return "\n".join(lines)


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["cases"]
    figure, axes = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.6))
    names = [row["case"] for row in rows]
    axes.barh(names, [row["ratio"] for row in rows], xerr=[row["ratio_uncertainty"] for row in rows],
              color=["tab:green" if row["ratio"] < 1 else "tab:red" for row in rows], capsize=4)
    axes.axvline(1.0, color="black", linewidth=1)
    axes.invert_yaxis()
    axes.set_xlabel("time ratio patched / upstream (lower is faster)")
    axes.set_title(f"Keras {results['upstream_version']}, {results['backend']} backend, {results['machine']['cpu']}",
                   fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, required=True, help="the fork's wheel")
    parser.add_argument("--upstream", required=True, help="the upstream requirement, e.g. keras==3.15.1")
    parser.add_argument("--requirement", action="append", default=[], help="a backend requirement (repeatable)")
    parser.add_argument("--backend", default="torch", choices=["torch", "jax", "tensorflow", "numpy"])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}")
    parser.add_argument("--rounds", type=int, default=5, help="alternations of the two environments per case (default 5)")
    parser.add_argument("--processes", type=int, default=2, help="pyperf worker processes per round")
    parser.add_argument("--values", type=int, default=5, help="pyperf values per worker process")
    parser.add_argument("--no-tool-cost", action="store_true", help="skip timing forkgen build and analyze + apply")
    args = parser.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    if args.rounds * args.processes < 2:
        parser.error("--rounds × --processes must be at least 2: the uncertainty comes from the spread between processes")
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    distribution = args.upstream.split("==", 1)[0]
    base = [*args.requirement, "pyperf"]
    envs = {"upstream": environment("upstream", args.backend, [args.upstream, "--only-binary", distribution, *base]),
            "patched": environment("patched", args.backend, [str(args.wheel.resolve()), *base])}
    log("counting CallSpecs per call")
    counted = {kind: counts(env, args.backend) for kind, env in envs.items()}
    backend_packages = [{k: v for k, v in counted[kind]["environment"].items() if k != "keras"} for kind in envs]
    if backend_packages[0] != backend_packages[1]:
        raise SystemExit(f"error: the two environments differ beyond Keras: {backend_packages}")
    results: dict[str, Any] = {
        "machine": machine(), "backend": args.backend, "upstream_version": args.upstream.split("==", 1)[1],
        "environments": {kind: counted[kind]["environment"] for kind in envs},
        "settings": {"rounds": args.rounds, "processes_per_round": args.processes, "values": args.values},
        "counts": counted, "cases": [],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    work = OUT / "pyperf" / args.backend  # kept: `python -m pyperf stats|hist|compare_to FILE`
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for case in cases:
        log(f"timing {case}: {DESCRIPTIONS[case]}")
        results["cases"].append(time_case(envs, case, args.backend, args, work))
    if not args.no_tool_cost:
        log("timing forkgen build (warm cache) and analyze + apply")
        results["tool"] = tool_cost(args.upstream, distribution)
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    chart(results, OUT / "ratios.png")
    print(f"Keras {results['upstream_version']} on {args.backend}; {results['machine']['cpu']}, "
          f"{results['machine']['cores']} cores; {results['environments']['patched']}")
    print(table(results))
    if "tool" in results:
        tool = results["tool"]
        print(f"\nforkgen build (warm cache): {tool['build_seconds']:.1f} s; "
              f"analyze + apply: {tool['analyze_apply_seconds']:.2f} s (median of 3)")
    print(f"\nwrote {OUT / 'results.json'} and {OUT / 'ratios.png'}")
    slower = [r["case"] for r in results["cases"] if verdict(r["ratio"], r["ratio_uncertainty"]) == "SLOWER"]
    if slower:
        print(f"patched slower than upstream beyond the noise: {', '.join(slower)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
