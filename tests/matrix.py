"""Every Keras 3 release through the whole pipeline; writes COMPATIBILITY.md (nox -s matrix).

For each release: fetch -> analyze -> apply -> build with forkgen, then install the
wheel with torch into a fresh environment and run the equivalence field matrix and a
short property-based run. Not part of CI (it downloads and installs ~40 releases).

    python tests/matrix.py [--releases 3.0.0,3.15.1] [--nightly] [--jobs 2] [--output COMPATIBILITY.md]

The pytest output of every release that fails lands in patched_keras/matrix/<release>.log.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "patched_keras" / "matrix"
TORCH_SPEC = os.environ.get("FORKGEN_TORCH_SPEC", "torch==2.13.0")

#: What an old release needs beside today's packages to import and run (found by
#: running this matrix): requirement specs added to its environment.
EXTRA_REQUIREMENTS: dict[str, list[str]] = {}


@dataclass
class Row:
    release: str
    variant: str = "-"
    applied: str = "-"
    equivalence: str = "-"
    seconds: float = 0.0
    #: patch name -> its outcome on this release (applied, upstream, not applicable, drift).
    patches: dict[str, str] = field(default_factory=dict)


def releases(include_nightly: bool) -> list[tuple[str, str]]:
    """(distribution, version) of every Keras 3 release on the index, oldest first."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "keras", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )
    line = next(line for line in result.stdout.splitlines() if line.startswith("Available versions:"))
    versions = [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip().startswith("3.")]
    found = [("keras", v) for v in sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".")))]
    if include_nightly:
        found.append(("keras-nightly", "latest"))
    return found


def forkgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forkgen", *args], capture_output=True, text=True, cwd=ROOT)


def nightly_version() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "keras-nightly", "--pre", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )
    return result.stdout.split("(", 1)[1].split(")", 1)[0]


def check(distribution: str, version: str, work: Path, analyze_only: bool = False) -> Row:
    row = Row(f"{distribution} {version}")
    started = time.monotonic()
    try:
        fetched = forkgen("fetch", "--distribution", distribution, "--version", version)
        if fetched.returncode != 0:
            row.applied = f"fetch failed (exit {fetched.returncode}): {last_error(fetched.stderr)}"
            return row
        source = fetched.stdout.strip().splitlines()[-1]
        analysed = forkgen("analyze", source, "--json")
        report = json.loads(analysed.stdout) if analysed.stdout.strip() else {}
        row.patches = {p["name"]: p["outcome"] for p in report.get("patches", [])}
        row.variant = report.get("callspec_variant") or "-"
        if analysed.returncode != 0:
            row.applied = f"refused (exit {analysed.returncode}): {report.get('error', last_error(analysed.stderr))}"
            return row
        if analyze_only:
            row.applied = ANALYZED
            return row
        out = work / f"{distribution}-{version}"
        built = forkgen("build", "--distribution", distribution, "--version", version, "--out-dir", str(out))
        if built.returncode != 0:
            row.applied = f"build failed (exit {built.returncode}): {last_error(built.stderr)}"
            return row
        row.applied = "yes"
        wheel = built.stdout.strip().splitlines()[-1]
        row.equivalence = equivalence(wheel, version, work / f"venv-{version}", source)
        return row
    finally:
        row.seconds = time.monotonic() - started


def last_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    return (lines[-1][len("error: "):] if lines else stderr.strip().splitlines()[-1] if stderr.strip() else "?")[:200]


def equivalence(wheel: str, version: str, env_dir: Path, source: str) -> str:
    """The field matrix and the properties against `wheel`; `source` is the release's unpacked
    sdist, the suite's oracle (tests/equivalence/upstream.py)."""
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    requirements = [wheel, TORCH_SPEC, "pytest>=9", "hypothesis", *EXTRA_REQUIREMENTS.get(version, [])]
    installed = subprocess.run([python, "-m", "pip", "install", "-q", *requirements], capture_output=True, text=True)
    if installed.returncode != 0:
        return "not installable: " + last_error(installed.stderr)
    tests = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::UserWarning", "-W", "ignore::DeprecationWarning",
         "tests/equivalence/test_field_matrix.py", "tests/equivalence/test_properties.py"],
        capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "KERAS_BACKEND": "torch", "FORKGEN_HYPOTHESIS_PROFILE": "matrix", "FORKGEN_WHEEL": wheel,
             "FORKGEN_UPSTREAM_SRC": source},
    )
    shutil.rmtree(env_dir, ignore_errors=True)
    summary = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else "no output"
    summary = re.sub(r"=+", "", summary).strip()
    if tests.returncode != 0:
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / f"{version}.log").write_text(tests.stdout + tests.stderr, encoding="utf-8")
    return ("pass: " if tests.returncode == 0 else "FAIL: ") + summary


def series_names() -> list[str]:
    listed = forkgen("series", "--json")
    return [p["name"] for p in json.loads(listed.stdout)] if listed.returncode == 0 else []


ANALYZED = "analyzed only"
#: The heading of COMPATIBILITY.md's record of verified rebases, kept by `write`.
REBASES = "## Verified rebases"
SHORT = {"applied": "applied", "upstream": "upstream", "not applicable": "n/a", "drift": "DRIFT"}


def write(rows: list[Row], output: Path) -> None:
    names = series_names()
    names += sorted({n for r in rows for n in r.patches} - set(names))
    lines = [
        "# Compatibility",
        "",
        "Every Keras 3 release through forkgen (`nox -s matrix`): fetch, analyze, apply, build, then",
        f"the equivalence field matrix and a short property-based run on torch ({TORCH_SPEC}).",
        "",
        "Each release is built by this forkgen, installed into a fresh environment beside today's",
        "packages (numpy 2, the torch above; no release needed a pin of its own) and checked with",
        "`tests/equivalence/test_field_matrix.py` and `tests/equivalence/test_properties.py`",
        "(100 examples per property). The field matrix expects each variant's own classification",
        "of defaults ([docs/keras-releases.md](docs/keras-releases.md)) and, for the extension (every call that binds), each variant's",
        "classification of nested values and handling of call-context keywords `call()` does not accept.",
        "Skipped: before 3.10 the tests of registered call-context arguments (a V4 feature); in",
        "3.0.x also those of a registered nested type (3.0's tree is dm-tree, which has no",
        "registry, so there is no such type to test). `seconds` is the wall time of the whole",
        "row, two releases at a time on a 2-core machine.",
        "",
        "Each patch of the series (`forkgen series`) has one outcome per release: *applied*,",
        "*upstream* (the release already contains the change), *n/a* (the release predates the code",
        "the patch targets) or *DRIFT* (its anchors moved: the build is refused). A run with",
        "`--analyze-only --update` refreshes these columns alone: `built`, `equivalence` and `seconds`",
        "then stay those of the row's last full run, which may have built an earlier series. Patches:",
        "",
        *[f"- P{i}: `{name}`" for i, name in enumerate(names, 1)],
        "",
        "| release | CallSpec variant | " + " | ".join(f"P{i}" for i in range(1, len(names) + 1))
        + " | built | equivalence (torch) | seconds |",
        "|---|---|" + "---|" * len(names) + "---|---|---|",
    ]
    for r in rows:
        outcomes = " | ".join(SHORT.get(r.patches.get(n, "-"), r.patches.get(n, "-")) for n in names)
        lines.append(f"| {r.release} | {r.variant} | {outcomes} | {r.applied} | {r.equivalence} | {r.seconds:.0f} |")
    # The hand-kept record below the table (`forkgen rebase` runs, verified) survives a rewrite.
    previous = output.read_text(encoding="utf-8") if output.exists() else ""
    kept = previous[previous.index(REBASES):] if REBASES in previous else ""
    output.write_text("\n".join(lines) + "\n" + ("\n" + kept if kept else ""), encoding="utf-8")


def read(path: Path) -> list[Row]:
    """The rows of an existing COMPATIBILITY.md (with the patch columns its legend names)."""
    rows = []
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        legend = re.match(r"- P\d+: `([^`]+)`", line)
        if legend:
            names.append(legend.group(1))
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 + len(names) and cells[0].startswith(("keras ", "keras-nightly ")):
            back = {v: k for k, v in SHORT.items()}
            patches = {n: back.get(c, c) for n, c in zip(names, cells[2 : 2 + len(names)], strict=True) if c != "-"}
            release, variant, *_ = cells
            built, equivalence, seconds = cells[-3:]
            rows.append(Row(release, variant, built, equivalence, float(seconds), patches))
    return rows


def merge(old: list[Row], new: list[Row]) -> list[Row]:
    """`old` with the rows of the same releases replaced by `new`, oldest release first."""
    before = {r.release: r for r in old}
    for row in new:
        earlier = before.get(row.release)
        if row.applied == ANALYZED and earlier is not None:
            # --analyze-only: the patch columns are new, the build and equivalence results are not.
            row.applied, row.equivalence, row.seconds = earlier.applied, earlier.equivalence, earlier.seconds
    by_release = before | {r.release: r for r in new}

    def key(row: Row) -> tuple[int, tuple[int, ...]]:
        distribution, version = row.release.split(" ", 1)
        numbers = tuple(int(part) for part in re.findall(r"\d+", version))
        return (distribution == "keras-nightly", numbers)

    return sorted(by_release.values(), key=key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", help="comma-separated versions (default: every 3.x release)")
    parser.add_argument("--nightly", action="store_true", help="also the latest keras-nightly")
    parser.add_argument("--output", type=Path, default=ROOT / "COMPATIBILITY.md")
    parser.add_argument("--jobs", type=int, default=2, help="releases checked at once (default 2)")
    parser.add_argument("--update", action="store_true", help="replace only these releases' rows in --output, keep the others")
    parser.add_argument(
        "--analyze-only", action="store_true",
        help="fetch and analyze only (each patch's outcome); with --update, keep the rows' build and equivalence results",
    )
    args = parser.parse_args()
    targets = [("keras", v) for v in args.releases.split(",")] if args.releases else releases(args.nightly)
    if args.releases and args.nightly:
        targets.append(("keras-nightly", "latest"))
    targets = [(d, nightly_version() if v == "latest" else v) for d, v in targets]

    def one(target: tuple[str, str]) -> Row:
        row = check(*target, Path(tmp), args.analyze_only)
        print(f"{row.release}: {row.variant}, applied {row.applied}, equivalence {row.equivalence} ({row.seconds:.0f} s)", flush=True)
        return row

    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(one, targets))
    if args.update and args.output.is_file():
        rows = merge(read(args.output), rows)
    write(rows, args.output)
    failed = [r for r in rows if r.applied != ANALYZED and not r.equivalence.startswith("pass")]
    failed += [r for r in rows if "drift" in r.patches.values()]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
