"""`nox -s bench -- --compile`: torch.compile on the bench models, upstream and the fork side by side.

Runs tests/bench/compile.py in the upstream and fork environments of tests/bench/run.py (the
same ones, reused while their requirements are unchanged), one after the other, and prints for
each model and workload: graphs and graph breaks (`torch._dynamo.explain`), whether
`fullgraph=True` traces, the graphs compiled for a second and a third batch size, and (unless
`--no-timing`) inductor's compile time and the compiled against the eager step time. The break
reasons follow the table, each with the Keras frame it was raised in. Writes
patched_keras/bench/compile.json. A report, not a gate: the exit code is 1 only when a workload
could not run at all in the fork.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILDS = ("upstream", "fork")


def workload_key(entry: dict[str, Any]) -> tuple[str, str]:
    return entry["model"], entry["workload"]


def cell(entry: dict[str, Any] | None) -> list[str]:
    """The table's cells of one build's entry for one workload."""
    if entry is None:
        return ["-"] * 7
    if "error" in entry:
        return ["error", "", "", "", "", "", entry["error"][:60]]
    explained = entry["explain"]
    recompiles = entry["recompiles"]
    timing = entry.get("timing")
    return [
        str(explained["graphs"]), str(explained["breaks"]),
        "ok" if entry["fullgraph"] == "ok" else "fails",
        "/".join(str(n) for n in recompiles[1:]),
        f"{timing['compile_s']:.1f}" if timing else "-",
        f"{timing['eager_us']:.0f} -> {timing['compiled_us']:.0f}" if timing else "-",
        f"{timing['compiled_over_eager']:.2f}" if timing else "-",
    ]


def table(reports: dict[str, dict[str, Any]]) -> str:
    header = ["model", "workload", "build", "graphs", "breaks", "fullgraph", "recompiles n+1/n+2",
              "compile s", "eager -> compiled us", "compiled/eager"]
    rows = [header, ["---"] * len(header)]
    keys: list[tuple[str, str]] = []
    for build in BUILDS:
        for entry in reports[build]["workloads"]:
            if workload_key(entry) not in keys:
                keys.append(workload_key(entry))
    by_build = {build: {workload_key(e): e for e in reports[build]["workloads"]} for build in BUILDS}
    for model, workload in keys:
        for build in BUILDS:
            rows.append([model, workload, build, *cell(by_build[build].get((model, workload)))])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def reasons(reports: dict[str, dict[str, Any]]) -> str:
    lines = []
    for build in BUILDS:
        for entry in reports[build]["workloads"]:
            for reason in entry.get("explain", {}).get("reasons", []):
                lines.append(f"- {build}, {entry['model']} {entry['workload']}: {reason['count']}x "
                             f"{reason['reason']} (at {reason['where'] or 'no frame'})")
            if entry.get("fullgraph", "ok") != "ok":
                lines.append(f"- {build}, {entry['model']} {entry['workload']}: fullgraph=True: {entry['fullgraph']}")
            if "error" in entry:
                lines.append(f"- {build}, {entry['model']} {entry['workload']}: could not run: {entry['error']}")
    return "\n".join(lines) if lines else "none"


def main(envs: dict[str, Path], python: Any, models: str | None, no_timing: bool, out: Path) -> int:
    """`envs`: the upstream and fork environments; `python(env)` their interpreter."""
    command = [str(HERE / "compile.py")]
    if models:
        command += ["--models", models]
    if no_timing:
        command.append("--no-timing")
    reports: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for build in BUILDS:
        print(f"bench: torch.compile report in the {build} environment (several minutes)", file=sys.stderr, flush=True)
        with tempfile.TemporaryFile("w+") as stdout:
            process = subprocess.Popen([python(envs[build]), *command], stdout=stdout, stderr=subprocess.PIPE,
                                       text=True, cwd=HERE)
            assert process.stderr is not None
            said: list[str] = []
            for line in process.stderr:  # progress as it comes: one line per workload
                said.append(line)
                if line.startswith("compile: "):
                    print(f"bench: {build}: {line[len('compile: '):].rstrip()}", file=sys.stderr, flush=True)
            code = process.wait()
            stdout.seek(0)
            text = stdout.read()
        if code != 0:
            tail = "".join(said[-15:])
            raise SystemExit(f"error: tests/bench/compile.py failed in the {build} environment (exit {code}):\n{tail}")
        reports[build] = json.loads(text.strip().splitlines()[-1])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    print(f"torch.compile on the bench models: Keras {reports['upstream']['keras']} (upstream) and "
          f"{reports['fork']['keras']} (fork), torch {reports['fork']['torch']}; explain and fullgraph with "
          f"backend 'eager', timings with inductor, one thread; took {(time.perf_counter() - started) / 60:.1f} min")
    print(table(reports))
    print("\nGraph breaks and failures:")
    print(reasons(reports))
    print(f"\nwrote {out}")
    return 1 if any("error" in entry for entry in reports["fork"]["workloads"]) else 0
