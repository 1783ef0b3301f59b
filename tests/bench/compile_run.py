"""`nox -s bench -- --compile`: torch.compile on the bench models, upstream and the fork side by side.

Runs tests/bench/compile.py in the upstream and fork environments of tests/bench/run.py (the
same ones, reused while their requirements are unchanged), one after the other, and prints for
each model and workload: graphs and graph breaks (`torch._dynamo.explain`), whether
`fullgraph=True` traces, the graphs compiled for a second and a third batch size, dynamo's
guards beside the plain-PyTorch twin's, and (unless `--no-timing`) inductor's compile time
and the compiled against the eager step time, each beside the twin's (measured in the same
process, interleaved), and the compiled Keras call over the compiled twin's. Then where a
compiled call's time goes (torch.profiler: cache lookup, graphs, the compiled frame's rest,
outside), the guards by kind and by source, and the break reasons, each with the Keras frame it
was raised in. Writes
patched_keras/bench/compile.json and docs/compile-results.md (generated: the table and the
reasons of the latest run). A report, not a gate: the exit code is 1 only when a workload
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
#: The page of the documentation that shows the latest report: generated, never typed.
DOCS_RESULTS = HERE.parents[1] / "docs" / "compile-results.md"
BUILDS = ("upstream", "fork")


def workload_key(entry: dict[str, Any]) -> tuple[str, str]:
    return entry["model"], entry["workload"]


HEADER = ["model", "workload", "build", "graphs", "breaks", "fullgraph", "recompiles n+1/n+2", "guards (twin)",
          "compile s (twin)", "eager -> compiled us", "compiled/eager", "twin eager -> compiled us",
          "compiled/twin"]
#: The parts of a compiled call `breakdown` gives (compile.py), in the order the table shows them.
PARTS = ("lookup", "graph", "region", "outside", "total")
BREAKDOWN_HEADER = ["model", "workload", "build", "of", "lookup us", "graph us", "region us", "outside us",
                    "total us", "lookups/graphs per call"]


def _with_twin(value: str, twin: str | None) -> str:
    return value if twin is None else f"{value} ({twin})"


def cell(entry: dict[str, Any] | None) -> list[str]:
    """The table's cells of one build's entry for one workload (HEADER from "graphs" on)."""
    width = len(HEADER) - 3
    if entry is None:
        return ["-"] * width
    if "error" in entry:
        return ["error", *[""] * (width - 2), entry["error"][:60]]
    explained = entry["explain"]
    recompiles = entry["recompiles"]
    timing = entry.get("timing")
    twin_timing = timing.get("twin") if timing else None
    guards = explained.get("guards")
    twin_guards = entry.get("twin_explain", {}).get("guards")
    return [
        str(explained["graphs"]), str(explained["breaks"]),
        "ok" if entry["fullgraph"] == "ok" else "fails",
        "/".join(str(n) for n in recompiles[1:]),
        _with_twin(f"{guards['count']:,}", f"{twin_guards['count']:,}" if twin_guards else None) if guards else "-",
        _with_twin(f"{timing['compile_s']:.1f}", f"{twin_timing['compile_s']:.1f}" if twin_timing else None)
        if timing else "-",
        f"{timing['eager_us']:.0f} -> {timing['compiled_us']:.0f}" if timing else "-",
        f"{timing['compiled_over_eager']:.2f}" if timing else "-",
        f"{twin_timing['eager_us']:.0f} -> {twin_timing['compiled_us']:.0f}" if twin_timing else "-",
        f"{timing['compiled_over_twin']:.2f}" if twin_timing else "-",
    ]


def _keys(reports: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    keys: list[tuple[str, str]] = []
    for build in BUILDS:
        for entry in reports[build]["workloads"]:
            if workload_key(entry) not in keys:
                keys.append(workload_key(entry))
    return keys


def _by_build(reports: dict[str, dict[str, Any]]) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    return {build: {workload_key(e): e for e in reports[build]["workloads"]} for build in BUILDS}


def _markdown_table(rows: list[list[str]]) -> str:
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def table(reports: dict[str, dict[str, Any]]) -> str:
    rows = [HEADER, ["---"] * len(HEADER)]
    by_build = _by_build(reports)
    for model, workload in _keys(reports):
        for build in BUILDS:
            rows.append([model, workload, build, *cell(by_build[build].get((model, workload)))])
    return _markdown_table(rows)


def breakdown_cells(parts: dict[str, float]) -> list[str]:
    """A compiled call's breakdown (compile.py's `breakdown`) as BREAKDOWN_HEADER's cells from "lookup us" on."""
    return [*(f"{parts[part]:.0f}" for part in PARTS), f"{parts['lookups']:g}/{parts['graphs']:g}"]


def breakdown_table(reports: dict[str, dict[str, Any]]) -> str:
    """Where one compiled call's time goes, the Keras model's and its twin's, per build: "none"
    when no entry has a breakdown (`--no-timing`)."""
    rows = [BREAKDOWN_HEADER, ["---"] * len(BREAKDOWN_HEADER)]
    by_build = _by_build(reports)
    for model, workload in _keys(reports):
        for build in BUILDS:
            timing = by_build[build].get((model, workload), {}).get("timing") or {}
            for of, measured in (("keras", timing), ("twin", timing.get("twin") or {})):
                if "breakdown" in measured:
                    rows.append([model, workload, build, of, *breakdown_cells(measured["breakdown"])])
    return _markdown_table(rows) if len(rows) > 2 else "none"


def guard_line(summary: dict[str, Any], kinds: int = 6, sources: int = 10) -> str:
    """A guard summary (compile.py's `guard_summary`) in one line: the count, the first `kinds`
    kinds and the first `sources` sources."""
    kind_text = ", ".join(f"{name} {count:,}" for name, count in summary["kinds"][:kinds])
    source_text = ", ".join(f"`{name}` {count:,}" for name, count in summary["sources"][:sources])
    return f"{summary['count']:,} guards; kinds: {kind_text or 'none'}; sources: {source_text or 'none'}"


def guards(reports: dict[str, dict[str, Any]]) -> str:
    """The guards of every workload by kind and by source, the Keras model's and its twin's, per build."""
    lines = []
    by_build = _by_build(reports)
    for model, workload in _keys(reports):
        for build in BUILDS:
            entry = by_build[build].get((model, workload), {})
            for of, explained in (("keras", entry.get("explain")), ("twin", entry.get("twin_explain"))):
                if explained and "guards" in explained:
                    lines.append(f"- {build}, {model} {workload}, {of}: {guard_line(explained['guards'])}")
    return "\n".join(lines) if lines else "none"


def stale_compiles(reports: dict[str, dict[str, Any]]) -> list[str]:
    """The compiles that hit a cache (compile.py's `caches` counters), whose compile time is not
    a fresh compile's."""
    found = []
    for build in BUILDS:
        for entry in reports[build]["workloads"]:
            timing = entry.get("timing") or {}
            for of, measured in (("keras", timing), ("twin", timing.get("twin") or {})):
                hits = {k: n for k, n in (measured.get("caches") or {}).items() if k.endswith("_hit") and n}
                if hits:
                    found.append(f"{build}, {entry['model']} {entry['workload']}, {of}: "
                                 + ", ".join(f"{k} {n}" for k, n in sorted(hits.items())))
    return found


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
    lines += [f"- {line}: a compile hit a cache (its compile s is not a fresh compile's)"
              for line in stale_compiles(reports)]
    return "\n".join(lines) if lines else "none"


def headline(reports: dict[str, dict[str, Any]]) -> str:
    warm = [f"{build} {reports[build]['warm_up_s']:.1f} s" for build in BUILDS if "warm_up_s" in reports[build]]
    return (f"Keras {reports['upstream']['keras']} (upstream) and {reports['fork']['keras']} (fork), torch "
            f"{reports['fork']['torch']}; explain and fullgraph with backend 'eager', timings with inductor, one thread"
            + (f"; compile times with empty inductor caches, after a warm-up compile that paid what a process's "
               f"first compile pays once ({', '.join(warm)})" if warm else ""))


def markdown(reports: dict[str, dict[str, Any]], when: str) -> str:
    """docs/compile-results.md: the latest report."""
    return (
        "# torch.compile on the bench models: the latest run\n\n"
        "<!-- generated by `nox -s bench -- --compile` (tests/bench/compile_run.py): do not edit -->\n\n"
        f"{when}: {headline(reports)}. What each column means: [benchmark.md](benchmark.md), "
        "\"torch.compile (`--compile`)\". Eager and compiled times are per call, the median of "
        "alternating rounds within one environment: compare the ratio `compiled/eager`, and the two "
        "builds' compiled times only as roughly as two runs minutes apart allow. The twin (the "
        "model in plain torch.nn, tests/bench/twins.py) runs in each build's process, in the same "
        "rounds: `compiled/twin` compares like with like.\n\n"
        f"{table(reports)}\n\n## Where a compiled call's time goes\n\n"
        "torch.profiler (CPU), the median of the profiled calls; the profiler's own cost inflates "
        "every part.\n\n"
        f"{breakdown_table(reports)}\n\n## Guards\n\n{guards(reports)}\n\n"
        f"## Graph breaks and failures\n\n{reasons(reports)}\n"
    )


def main(envs: dict[str, Path], python: Any, models: str | None, no_timing: bool, out: Path,
         docs: Path = DOCS_RESULTS) -> int:
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
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    docs.write_text(markdown(reports, when), encoding="utf-8")
    print(f"torch.compile on the bench models: {headline(reports)}; took {(time.perf_counter() - started) / 60:.1f} min")
    print(table(reports))
    print("\nWhere a compiled call's time goes (torch.profiler, us):")
    print(breakdown_table(reports))
    print("\nGuards:")
    print(guards(reports))
    print("\nGraph breaks and failures:")
    print(reasons(reports))
    print(f"\nwrote {out} and {docs}")
    return 1 if any("error" in entry for entry in reports["fork"]["workloads"]) else 0
