"""The fork proven and measured on one machine, from a folder of wheels (issue 41): made for a GPU
machine that has torch and CUDA but no package index, and run the same way here with --device cpu.

    python3 tests/gpu/run.py --kit patched_keras/gpu-kit --device cuda [--quick] [--out DIR]

The kit comes from `nox -s gpu_kit` (kit.json says what it holds). Standard library only; the
interpreter running it must import torch. Steps, each printed as it starts:

1. three environments, upstream Keras, keras-nightly and the fork, each made with
   --system-site-packages and a .pth naming this interpreter's site directories (so they use its
   torch, also when it is itself a virtual environment), each build installed from the kit alone
   (`pip install --no-index --only-binary=:all: --ignore-installed`: Keras's requirements and the
   suite's come from the kit, not the machine);
2. at once: the equivalence suite (tests/equivalence, as `forkgen verify equivalence` runs it,
   its oracle the pinned sdist from the kit; on cuda with hypothesis profile `matrix`, 100 examples
   per property, to fit the budget: `--profile equivalence` for 500) in the fork's environment, and whole-model parity
   (tests/parity/models.py, upstream and fork, bit for bit) with torch's deterministic algorithms
   (CUBLAS_WORKSPACE_CONFIG=:4096:8);
3. the CUDA-graph smoke test: the `kv_decoder` decode step under
   `torch.compile(mode="reduce-overhead")` must give the eager tokens (off CUDA: mode "default");
4. the bench cases, eager then compiled, in upstream, nightly, the fork and the plain-PyTorch
   twins (tests/gpu/worker.py), on the device, one process per build, until the time budget ends.

Keras's torch backend picks "cuda" itself where torch sees a GPU; --device cpu sets
KERAS_TORCH_DEVICE=cpu. Writes summary.json, summary.txt, equivalence.xml and log.txt to --out
(default $OUT when set, else patched_keras/gpu-run/).

Exit codes: 0 equivalence and parity pass; 2 usage, or the kit is missing, incomplete or its fork
wheel is stale for this checkout; 3 torch does not import (or --device cuda and torch sees no
GPU); 4 a build does not install from the kit; 5 the equivalence suite fails; 6 parity fails;
7 both fail; 8 the time budget ended before equivalence or parity did; 9 both pass, but the
CUDA-graph smoke test or a case of the fork or a twin failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import venv
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from forkgen.errors import VerificationError  # noqa: E402 - forkgen's standard-library modules
from forkgen.provenance import stale_problems  # noqa: E402
from forkgen.verify import judge_equivalence, read_junit  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "bench"))
from cases import CASES, MICRO_CASES, TWIN_CASES  # noqa: E402 - imports nothing but the standard library

WORKER = Path(__file__).resolve().parent / "worker.py"
BUILDS = ("upstream", "nightly", "fork")
TWIN = "torch"
#: The compiled cases in the order they are timed while the budget lasts (worker.py says how).
COMPILED = ("mlp_call", "transformer", "mlp_train_step", "train_step", "dense", "mlp_predict", "mlp_fit",
            "mlp_evaluate", "conv_predict", "mlp", "mlp_inference", "transformer_predict", "transformer_evaluate",
            "transformer_fit")
#: --quick: the modules of the three patches that resolve "cuda" (their compile tests left out), two
#: cases, and the smoke test's loop compiled with backend "eager" (the harness, not inductor).
QUICK_EQUIVALENCE = ("test_patch_torch_convert_to_tensor_noop_moves.py", "test_patch_torch_ops_plain_tensor_fast_paths.py",
                     "test_patch_torch_mean_metric_fast_paths.py")
QUICK_CASES, QUICK_COMPILED = ("dense", "mlp_call"), ("mlp_call",)
EXIT = {"usage": 2, "torch": 3, "install": 4, "equivalence": 5, "parity": 6, "both": 7, "time": 8, "report": 9}
#: Seconds kept for the smoke test and the bench when the proofs' time limit is set.
RESERVE = 150


class Stop(Exception):
    """A step that cannot go on: its exit code and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = EXIT[kind], message


class Log:
    """Progress lines on stderr; every line and each command's output in log.txt."""

    def __init__(self, path: Path) -> None:
        self.path, self.lock, self.started = path, threading.Lock(), time.monotonic()
        path.write_text("", encoding="utf-8")

    def say(self, message: str) -> None:
        line = f"[{time.monotonic() - self.started:6.0f}s] {message}"
        with self.lock:
            print(line, file=sys.stderr, flush=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")

    def output(self, title: str, text: str) -> None:
        with self.lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write(f"----- {title}\n{text}\n----- end of {title}\n")


def run(log: Log, title: str, command: list[str], env: dict[str, str], timeout: float | None = None,
        cwd: Path = ROOT) -> tuple[int | None, str]:
    """(exit code, None on timeout; output) of `command`, its output kept in the log. At the
    timeout it gets SIGINT first (pytest then still writes its JUnit file), SIGKILL 20 s later."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as output:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
        code: int | None
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            code = None
        output.seek(0)
        text = output.read()
    log.output(f"{title} (exit {code})", text)
    return code, text


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# -- The kit and the environments -------------------------------------------------------------


def load_kit(kit: Path) -> dict[str, Any]:
    manifest = kit / "kit.json"
    if not manifest.is_file():
        raise Stop("usage", f"{manifest} not found: make the kit with `nox -s gpu_kit` and carry {kit}")
    data: dict[str, Any] = json.loads(manifest.read_text(encoding="utf-8"))
    for name in (data["fork"], data["sdist"]["file"]):
        if not (kit / name).is_file():
            raise Stop("usage", f"the kit lacks {name}: make it again with `nox -s gpu_kit`")
    stale = stale_problems(kit / data["fork"])
    if stale:
        raise Stop("usage", "; ".join(stale) + " (make the kit again: `nox -s gpu_kit`)")
    return data


def unpack_sdist(kit: Path, data: dict[str, Any], work: Path) -> Path:
    """The pinned sdist of the kit, its sha256 checked, unpacked: the equivalence suite's oracle."""
    archive = kit / data["sdist"]["file"]
    if hashlib.sha256(archive.read_bytes()).hexdigest() != data["sdist"]["sha256"]:
        raise Stop("usage", f"{archive} is not the sdist the kit was made with (sha256 differs)")
    target = work / "src"
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
        else:  # Pythons before the extraction filters: the kit's own archive, checked above
            tar.extractall(target)  # noqa: S202
    [root] = [p for p in target.iterdir() if (p / "keras" / "src" / "version.py").is_file()]
    return root


def probe_torch(python: str, device: str) -> dict[str, Any]:
    probe = ("import json, sys, torch; cuda = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
             "'cuda': torch.version.cuda, 'available': cuda, 'gpu': torch.cuda.get_device_name(0) if cuda else None, "
             "'file': torch.__file__}))")
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Stop("torch", f"torch does not import in {python}:\n{tail(done.stderr, 6)}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if device == "cuda" and not found["available"]:
        raise Stop("torch", f"--device cuda, but torch {found['torch']} (CUDA {found['cuda']}) sees no GPU")
    return found


def site_directories() -> list[str]:
    """This interpreter's site directories (its virtual environment's too): the builds' .pth."""
    return [p for p in sys.path if p and Path(p).is_dir() and Path(p).name in ("site-packages", "dist-packages")]


def pip_env() -> dict[str, str]:
    """The environment of the installs: no pip configuration, no index, nothing but the kit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def make_build(log: Log, name: str, requirements: list[str], work: Path, links: list[Path], pythons: list[str]) -> Path:
    """A new environment `name` on this interpreter's torch with `requirements` from the kit; its python."""
    root = work / "envs" / name
    venv.EnvBuilder(system_site_packages=True, clear=True, with_pip=False, symlinks=os.name != "nt").create(root)
    python = root / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "_forkgen_gpu_parent.pth").write_text("\n".join(site_directories()) + "\n", encoding="utf-8")
    pip = [str(python), "-m", "pip"]
    if subprocess.run([*pip, "--version"], capture_output=True, check=False).returncode != 0:
        run(log, f"ensurepip ({name})", [str(python), "-m", "ensurepip", "--default-pip"], env=pip_env())
    command = [*pip, "install", "-q", "--no-index", "--only-binary=:all:", "--ignore-installed", "--no-warn-script-location",
               *[f"--find-links={link}" for link in links], *requirements]
    code, text = run(log, f"install {name}", command, env=pip_env())
    if code != 0:
        raise Stop("install", f"{name} does not install from the kit (pip exit {code}):\n{tail(text, 8)}\n"
                   f"the kit has binary wheels for Python {', '.join(pythons)}; this is {platform.python_version()}")
    log.say(f"{name}: installed {' '.join(Path(r).name for r in requirements)}")
    return python



# -- The proofs --------------------------------------------------------------------------------


def equivalence(log: Log, python: Path, args: argparse.Namespace, env: dict[str, str], out: Path,
                timeout: float | None) -> dict[str, Any]:
    tests = ROOT / "tests" / "equivalence"
    targets = [*[str(tests / name) for name in QUICK_EQUIVALENCE], "-k", "not compile"] if args.quick else [str(tests)]
    junit = out / "equivalence.xml"
    junit.unlink(missing_ok=True)
    # The machine's pytest plugins (pytest-cov, pytest-benchmark ...) are on the path too: only ours load.
    command = [str(python), "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider", "-p", "xdist.plugin", "-p",
               "_hypothesis_pytestplugin", "-n", str(args.workers), "--continue-on-collection-errors", "--durations=10", "-W",
               "ignore::UserWarning", "-W", "ignore::DeprecationWarning", f"--junitxml={junit}"]
    log.say(f"equivalence: {' '.join(Path(t).name for t in targets)}, {args.workers} workers, profile {env['FORKGEN_HYPOTHESIS_PROFILE']}")
    started = time.monotonic()
    code, text = run(log, "equivalence", command, env, timeout)
    result: dict[str, Any] = {"seconds": round(time.monotonic() - started, 1), "tail": tail(text, 3)}
    if junit.is_file():
        result["counts"] = dict(Counter(r.outcome for r in read_junit(junit).values()))
    if code is None:
        return {**result, "status": "time", "summary": f"stopped after {timeout:.0f} s (the time budget; "
                f"{result.get('counts', 'nothing')} by then)"}
    try:
        judged = judge_equivalence(junit, code, "the fork on " + args.device, text)
    except VerificationError as failure:
        return {**result, "status": "failed", "summary": failure.message}
    return {**result, "status": "passed", "summary": judged.summary}


def parity(log: Log, pythons: dict[str, Path], env: dict[str, str], work: Path, timeout: float | None) -> dict[str, Any]:
    """Upstream's and the fork's arrays, bit for bit; with warn_only when an op has no deterministic
    implementation on this device (said in the result)."""
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    result: dict[str, Any] = {"deterministic": "on"}
    for attempt in ("strict", "warn_only"):
        files, failed = {}, ""
        for build in ("upstream", "fork"):
            files[build] = work / f"parity-{build}.npz"
            command = [str(pythons[build]), str(WORKER), "parity", "--out", str(files[build])]
            left = None if deadline is None else max(1.0, deadline - time.monotonic())
            code, text = run(log, f"parity {build} ({attempt})", command + (["--warn-only"] if attempt == "warn_only" else []),
                             env, left)
            if code is None:
                return {**result, "status": "time", "summary": "stopped by the time budget"}
            if code != 0:
                failed = f"the parity models did not run with {build}:\n{tail(text, 6)}"
                break
        if failed and attempt == "strict" and "deterministic" in failed:
            result["deterministic"] = "warn_only: " + failed.splitlines()[-1][:200]
            log.say("parity: an op has no deterministic implementation here; again with warn_only=True")
            continue
        break
    result["seconds"] = round(time.monotonic() - started, 1)
    if failed:
        return {**result, "status": "failed", "summary": failed}
    code, text = run(log, "parity compare", [str(pythons["fork"]), str(ROOT / "tests" / "parity" / "models.py"), "--compare",
                                             str(files["upstream"]), str(files["fork"])], env)
    return {**result, "status": "passed" if code == 0 else "failed", "summary": tail(text, 8 if code else 1)}


# -- The smoke test and the bench ---------------------------------------------------------------


def smoke(log: Log, python: Path, args: argparse.Namespace, env: dict[str, str], work: Path, timeout: float) -> dict[str, Any]:
    out = work / "smoke.json"
    code, text = run(log, "smoke", [str(python), str(WORKER), "smoke", "--device", args.device, "--out", str(out),
                                    "--rounds", str(args.rounds), "--min-round", str(args.min_round),
                                    *(["--backend", "eager"] if args.quick else [])], env, timeout)
    if code is None:
        return {"status": "time", "summary": "stopped by the time budget"}
    if code != 0 or not out.is_file():
        return {"status": "failed", "summary": f"exit {code}:\n{tail(text, 8)}"}
    found: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    found["status"] = "passed" if found["tokens_equal"] else "failed"
    return found


def bench_build(log: Log, python: Path, args: argparse.Namespace, env: dict[str, str], work: Path, build: str,
                mode: str, cases: list[str], deadline: float) -> dict[str, dict[str, Any]]:
    """{case: entry} of one build and mode, and "environment": the worker's Keras, torch and Python;
    a worker that dies is started again after the case it died in."""
    out = work / f"bench-{build}-{mode}.jsonl"
    out.unlink(missing_ok=True)
    results: dict[str, dict[str, Any]] = {}
    remaining = list(cases)
    while remaining and time.time() < deadline:
        command = [str(python), str(WORKER), "bench", "--device", args.device, "--mode", mode, "--cases", ",".join(remaining),
                   "--rounds", str(args.rounds), "--min-round", str(args.min_round), "--deadline", str(deadline),
                   "--out", str(out), *(["--twin"] if build == TWIN else [])]
        code, text = run(log, f"bench {build} {mode}", command, env, max(1.0, deadline - time.time() + 60))
        started = None
        for line in out.read_text(encoding="utf-8").splitlines() if out.is_file() else []:
            entry = json.loads(line)
            if "environment" in entry:
                results["environment"] = entry["environment"]
            elif "started" in entry:
                started = entry["started"]
            elif "case" in entry:
                results[entry["case"]], started = entry, None
        if code == 0:
            break
        if started is not None:  # it died in this case: say so, go on with the others
            results[started] = {"case": started, "mode": mode, "error": f"the worker died (exit {code}): {tail(text, 1)}"}
        remaining = [c for c in cases if c not in results]
    for case in cases:
        results.setdefault(case, {"case": case, "mode": mode, "skipped": "time budget"})
    return results


def bench(log: Log, pythons: dict[str, Path], args: argparse.Namespace, env: dict[str, str], work: Path,
          end: float, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows {case, mode, <build>: entry} for every case timed, eager then compiled; each build's
    versions go to summary["environments"]."""
    rows: list[dict[str, Any]] = []
    plans = [("eager", list(QUICK_CASES if args.quick else CASES)),
             ("compiled", list(QUICK_COMPILED if args.quick else COMPILED))]
    for index, (mode, cases) in enumerate(plans):
        builds = {build: [c for c in cases if build != "nightly" or c not in MICRO_CASES] for build in BUILDS}
        builds[TWIN] = [c for c in cases if c in TWIN_CASES]
        timed: dict[str, dict[str, dict[str, Any]]] = {}
        environments = summary.setdefault("environments", {})
        for number, (build, chosen) in enumerate(builds.items()):
            # An equal share of what is left to each build still to run (the compiled plan's too).
            share = (end - time.time()) / (len(builds) - number + (len(builds) if index == 0 else 0))
            log.say(f"bench {mode}: {build}, {len(chosen)} case(s), at most {share:.0f} s")
            python = pythons["fork" if build == TWIN else build]
            timed[build] = bench_build(log, python, args, env, work, build, mode, chosen, time.time() + share)
            environments.setdefault(build, timed[build].pop("environment", None))
        for case in cases:
            rows.append({"case": case, "mode": mode, **{b: timed[b][case] for b in timed if case in timed[b]}})
    return rows


# -- The report ---------------------------------------------------------------------------------


def milliseconds(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "n/a"
    if "median_s" in entry:
        return f"{entry['median_s'] * 1e3:.3f}"
    return "error" if "error" in entry else "skipped"


def ratio(row: dict[str, Any], a: str, b: str) -> str:
    x, y = row.get(a, {}), row.get(b, {})
    if "median_s" in x and "median_s" in y:
        return f"{x['median_s'] / y['median_s']:.2f}"
    return "-"


def table(rows: list[dict[str, Any]]) -> str:
    header = ["case", "mode", "upstream ms", "nightly ms", "fork ms", "torch ms", "fork/upstream", "fork/nightly",
              "fork/torch"]
    lines = [header, ["---"] * len(header)]
    for row in rows:
        lines.append([row["case"], row["mode"], *[milliseconds(row.get(b)) for b in (*BUILDS, TWIN)],
                      ratio(row, "fork", "upstream"), ratio(row, "fork", "nightly"), ratio(row, "fork", TWIN)])
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def report_problems(rows: list[dict[str, Any]], smoke_result: dict[str, Any]) -> list[str]:
    """What fails in the fork's or a twin's timings, or in the smoke test (exit 9)."""
    problems = [f"{row['case']} ({row['mode']}, {build}): {row[build]['error']}" for row in rows
                for build in ("fork", TWIN) if "error" in row.get(build, {})]
    if smoke_result.get("status") == "failed":
        problems.append("the CUDA-graph smoke test: " + str(smoke_result.get("summary", "the tokens differ from eager")))
    return problems


def render(summary: dict[str, Any]) -> str:
    machine, torch_info = summary["machine"], summary["torch"]
    lines = [f"forkgen on {torch_info.get('gpu') or 'CPU'} (--device {summary['device']}{', quick' if summary['quick'] else ''}): "
             f"torch {torch_info['torch']} (CUDA {torch_info['cuda']}), Python {machine['python']}, {machine['cpus']} CPUs; "
             f"fork {summary['kit']['fork']}, {summary['kit']['upstream']}, {summary['kit']['nightly']}"]
    for name in ("equivalence", "parity"):
        part = summary.get(name, {})
        lines.append(f"{name}: {part.get('status', 'not run')}: {part.get('summary', '')} ({part.get('seconds', '-')} s)")
    if "parity" in summary:
        lines.append(f"  deterministic algorithms: {summary['parity'].get('deterministic')}")
    smoke_result = summary.get("smoke", {})
    if "tokens_equal" in smoke_result:
        step = smoke_result["eager_step"]["median_s"] * 1e6, smoke_result["compiled_step"]["median_s"] * 1e6
        lines.append(f"smoke, kv_decoder decode step under torch.compile({smoke_result['mode']}): tokens "
                     f"{'equal to eager' if smoke_result['tokens_equal'] else 'DIFFER from eager'}; cudagraph skips "
                     f"{smoke_result['cudagraph_skips']}; one step {step[0]:.0f} us eager, {step[1]:.0f} us compiled")
    else:
        lines.append(f"smoke: {smoke_result.get('status', 'not run')}: {smoke_result.get('summary', '')}")
    if summary.get("bench"):
        lines += ["", "bench (fork's environment for the twins, 'torch'): median ms per call", table(summary["bench"])]
    for problem in summary.get("problems", []):
        lines.append(f"PROBLEM: {problem}")
    lines.append(f"exit {summary['exit']} ({summary['verdict']}), {summary['seconds']:.0f} s")
    return "\n".join(lines) + "\n"


def verdict(summary: dict[str, Any]) -> tuple[int, str]:
    statuses = {name: summary.get(name, {}).get("status") for name in ("equivalence", "parity")}
    failed = [name for name, status in statuses.items() if status == "failed"]
    if len(failed) == 2:
        return EXIT["both"], "equivalence and parity fail"
    if failed:
        return EXIT[failed[0]], f"{failed[0]} fails"
    if any(status != "passed" for status in statuses.values()):
        return EXIT["time"], "the time budget ended before the proofs did"
    if summary.get("problems"):
        return EXIT["report"], "proofs pass; a case or the smoke test failed"
    return 0, "equivalence and parity pass"


# -- The command --------------------------------------------------------------------------------


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kit", type=Path, required=True, help="the folder `nox -s gpu_kit` made")
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--quick", action="store_true", help="a few equivalence modules, two cases, few rounds")
    parser.add_argument("--out", type=Path, help="default: $OUT, else patched_keras/gpu-run/")
    parser.add_argument("--find-links", type=Path, action="append", default=[],
                        help="another folder of wheels (this Python's binary wheels where the kit has none)")
    parser.add_argument("--budget", type=float, help="seconds for the whole run (default: 420 on cuda, none on cpu)")
    parser.add_argument("--workers", type=int, default=max(2, min((os.cpu_count() or 2) - 2, 12)),
                        help="pytest-xdist workers of the equivalence suite")
    parser.add_argument("--profile", help="the suite's hypothesis profile (default: matrix, 100 examples per property, "
                        "on cuda and with --quick, to fit the time budget; equivalence, 500, on cpu)")
    parser.add_argument("--rounds", type=int, help="timed rounds per case (default 7; --quick 3)")
    parser.add_argument("--min-round", type=float, help="least seconds of one round (default 0.05; --quick 0.02)")
    parser.add_argument("--work", type=Path, help="where the environments go (default: a temporary folder, removed)")
    args = parser.parse_args()
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.min_round = args.min_round or (0.02 if args.quick else 0.05)
    args.profile = args.profile or ("matrix" if args.quick or args.device == "cuda" else "equivalence")
    if args.budget is None:
        args.budget = 420.0 if args.device == "cuda" else 0.0
    outdir = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "patched_keras" / "gpu-run")
    args.out = outdir.resolve()
    args.kit = args.kit.resolve()
    return args


def main() -> int:
    args = arguments()
    args.out.mkdir(parents=True, exist_ok=True)
    log = Log(args.out / "log.txt")
    began = time.time()
    end = began + args.budget if args.budget else float("inf")
    work = (args.work or Path(tempfile.mkdtemp(prefix="forkgen-gpu-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"device": args.device, "quick": args.quick, "budget_s": args.budget,
                               "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                           "platform": platform.platform()}}
    code = 0
    try:
        kit = load_kit(args.kit)
        summary["kit"] = {k: kit[k] for k in ("fork", "upstream", "nightly")}
        log.say(f"kit {args.kit}: {kit['fork']}, {kit['upstream']}, {kit['nightly']}")
        summary["torch"] = probe_torch(sys.executable, args.device)
        log.say(f"torch {summary['torch']['torch']} from {summary['torch']['file']}; GPU: {summary['torch']['gpu']}")
        source = unpack_sdist(args.kit, kit, work)
        links = [args.kit, *[p.resolve() for p in args.find_links]]
        wanted = {"upstream": [str(args.kit / wheel_of(args.kit, kit["upstream"]))],
                  "nightly": [str(args.kit / wheel_of(args.kit, kit["nightly"]))],
                  "fork": [str(args.kit / kit["fork"]), *kit["test_requirements"]]}
        log.say("environments: upstream, nightly, fork (from the kit)")
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = {b: pool.submit(make_build, log, b, r, work, links, kit["pythons"]) for b, r in wanted.items()}
            pythons = {b: f.result() for b, f in futures.items()}
        for build, python in pythons.items():
            found = probe_torch(str(python), args.device)
            if found["file"] != summary["torch"]["file"]:
                raise Stop("torch", f"the {build} environment imports another torch: {found['file']}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(KERAS_BACKEND="torch", FORKGEN_WHEEL=str(args.kit / kit["fork"]), FORKGEN_UPSTREAM_SRC=str(source),
                   FORKGEN_HYPOTHESIS_PROFILE=args.profile, CUBLAS_WORKSPACE_CONFIG=":4096:8",
                   PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1", TF_CPP_MIN_LOG_LEVEL="3")
        if args.device == "cpu":
            env["KERAS_TORCH_DEVICE"] = "cpu"
        proofs_limit = None if end == float("inf") else max(30.0, end - time.time() - RESERVE)
        log.say(f"equivalence and parity, at once{f' (at most {proofs_limit:.0f} s)' if proofs_limit else ''}")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            eq = pool.submit(equivalence, log, pythons["fork"], args, env, args.out, proofs_limit)
            par = pool.submit(parity, log, pythons, env, work, proofs_limit)
            summary["parity"] = par.result()
            log.say(f"parity: {summary['parity']['status']}: {summary['parity']['summary']}")
            summary["equivalence"] = eq.result()
            log.say(f"equivalence: {summary['equivalence']['status']}: {summary['equivalence']['summary']}")
        smoke_limit = 600.0 if end == float("inf") else max(30.0, min(120.0, (end - time.time()) / 3))
        log.say(f"smoke: the kv_decoder decode step compiled{' with CUDA graphs' if args.device == 'cuda' else ''}")
        summary["smoke"] = smoke(log, pythons["fork"], args, env, work, smoke_limit)
        log.say(f"smoke: {summary['smoke']['status']}")
        summary["bench"] = bench(log, pythons, args, env, work, end if end != float("inf") else time.time() + 86400, summary)
        summary["problems"] = report_problems(summary["bench"], summary["smoke"])
        code, summary["verdict"] = verdict(summary)
    except Stop as stop:
        log.say(f"error: {stop.message}")
        code, summary["verdict"] = stop.code, stop.message
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    summary.update(exit=code, seconds=time.time() - began)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if "torch" in summary and "kit" in summary:
        text = render(summary)
        (args.out / "summary.txt").write_text(text, encoding="utf-8")
        print(text)
    log.say(f"exit {code}: {summary['verdict']}; wrote {args.out}")
    return code


def wheel_of(kit: Path, requirement: str) -> str:
    """The kit's wheel of `name==version` (the fork's own wheel is another file: its version is local)."""
    name, _, version = requirement.partition("==")
    prefix = f"{name.replace('-', '_')}-{version}-"
    found = [p.name for p in kit.glob("*.whl") if p.name.startswith(prefix)]
    if len(found) != 1:
        raise Stop("usage", f"the kit has {len(found)} wheels of {requirement}: make it again with `nox -s gpu_kit`")
    return found[0]


if __name__ == "__main__":
    sys.exit(main())
