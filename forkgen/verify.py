"""Verify stage: compare two runs of the same test suite (upstream wheel vs patched wheel).

Both runs write JUnit XML (pytest --junitxml). A test that passes upstream and does
not pass patched is a regression; tests that fail in both runs are listed with their
reasons, never dropped.

A regression can be confirmed by reruns: the suspects (`suspects`) run again, alone, with
the patched wheel, each rerun writing its own JUnit file. A suspect that passes in every
rerun is reported as flaky (a crashed test worker, a test whose tolerance random numbers
can exceed), with the failure it had; one that fails in any rerun, or that no rerun ran,
stays a regression.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from forkgen.errors import UsageError, VerificationError

OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass(frozen=True)
class Result:
    outcome: str
    message: str = ""


@dataclass
class Comparison:
    label: str
    upstream: dict[str, int]
    patched: dict[str, int]
    regressions: list[dict[str, str]] = field(default_factory=list)
    failing_in_both: list[dict[str, str]] = field(default_factory=list)
    fixed_by_patch: list[str] = field(default_factory=list)
    flaky: list[dict[str, str]] = field(default_factory=list)


def junit_key(classname: str, name: str) -> str:
    """The key of a test case: `classname::name`, the classname cut to its importable part.

    Tests run from an installed wheel are named after their path from the rootdir, through
    the virtual environment; the part after `site-packages.` is the same in every environment.
    """
    _, marker, importable = classname.rpartition("site-packages.")
    return f"{importable if marker else classname}::{name}"


def read_junit(path: Path) -> dict[str, Result]:
    """Outcome of every test case in a JUnit XML file, keyed `classname::name`."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        raise UsageError(f"cannot read test results {path}: {error}") from None
    results: dict[str, Result] = {}
    for case in root.iter("testcase"):
        key = junit_key(case.get("classname", ""), case.get("name", ""))
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = "failed" if tag == "failure" else tag
                text = child.get("message") or (child.text or "")
                message = " ".join(text.split())[:300]
                break
        # A test can be reported twice (e.g. failed, then errored in teardown): keep the worst.
        previous = results.get(key)
        if previous is None or OUTCOMES.index(outcome) in (1, 2):
            results[key] = Result(outcome, message)
    return results


def compare(
    label: str, upstream: dict[str, Result], patched: dict[str, Result], reruns: Sequence[dict[str, Result]] = ()
) -> Comparison:
    """Regressions are tests passing upstream that fail, error or vanish patched.

    With `reruns` (results of rerunning the suspects with the patched wheel), a regression
    that passed in every rerun moves to `flaky`; one that failed in any, or that no rerun
    ran, stays a regression, its rerun outcomes added to the message.
    """
    comparison = Comparison(
        label=label,
        upstream=dict(Counter(r.outcome for r in upstream.values())),
        patched=dict(Counter(r.outcome for r in patched.values())),
    )
    for key, before in sorted(upstream.items()):
        after = patched.get(key, Result("missing", "not run with the patched wheel"))
        if before.outcome == "passed" and after.outcome not in ("passed", "skipped"):
            comparison.regressions.append({"test": key, "outcome": after.outcome, "message": after.message})
        elif before.outcome in ("failed", "error"):
            if after.outcome in ("failed", "error"):
                comparison.failing_in_both.append({"test": key, "upstream": before.message, "patched": after.message})
            elif after.outcome == "passed":
                comparison.fixed_by_patch.append(key)
    for key, after in sorted(patched.items()):
        if key not in upstream and after.outcome in ("failed", "error"):
            comparison.regressions.append({"test": key, "outcome": after.outcome, "message": "only in the patched run: " + after.message})
    if reruns:
        confirmed = []
        for item in comparison.regressions:
            outcomes = [run[item["test"]].outcome for run in reruns if item["test"] in run]
            summary = f"reruns with the patched wheel: {', '.join(outcomes) if outcomes else 'not run'}"
            if len(outcomes) == len(reruns) and all(o == "passed" for o in outcomes):
                comparison.flaky.append({**item, "reruns": summary})
            else:
                confirmed.append({**item, "message": f"{item['message']} ({summary})"})
        comparison.regressions = confirmed
    return comparison


def suspects(comparison: Comparison) -> list[str]:
    """The tests to rerun to confirm the regressions, by key."""
    return [item["test"] for item in comparison.regressions]


def render(comparison: Comparison) -> str:
    lines = [f"upstream suite, {comparison.label}:", f"  {'':10}" + "".join(f"{o:>9}" for o in OUTCOMES)]
    for name, counts in (("upstream", comparison.upstream), ("patched", comparison.patched)):
        lines.append(f"  {name:10}" + "".join(f"{counts.get(o, 0):>9}" for o in OUTCOMES))
    lines.append(f"  failing upstream too ({len(comparison.failing_in_both)}):")
    for item in comparison.failing_in_both:
        lines.append(f"    {item['test']}: {item['upstream'] or '(no message)'}")
    if comparison.fixed_by_patch:
        lines.append(f"  failing upstream, passing patched ({len(comparison.fixed_by_patch)}): " + ", ".join(comparison.fixed_by_patch))
    if comparison.flaky:
        lines.append(f"  flaky, not regressions ({len(comparison.flaky)}): failed in the full patched run, passed in every rerun:")
        for item in comparison.flaky:
            lines.append(f"    {item['test']}: {item['outcome']}: {item['message']} ({item['reruns']})")
    lines.append(f"  regressions: {len(comparison.regressions) or 'none'}")
    for item in comparison.regressions:
        lines.append(f"    {item['test']}: {item['outcome']}: {item['message']}")
    return "\n".join(lines)


def compare_files(
    label: str,
    upstream: Path,
    patched: Path,
    report: Path | None = None,
    reruns: Sequence[Path] = (),
    suspects_file: Path | None = None,
) -> Comparison:
    """Compare two JUnit files; write the JSON report; raise VerificationError on a regression.

    With `suspects_file`, the first pass of a confirmed comparison: write the keys of the
    would-be regressions there (one a line; an empty file when there are none) and judge
    nothing. With `reruns`, the JUnit files of the suspects' reruns confirm or clear them.
    """
    comparison = compare(label, read_junit(upstream), read_junit(patched), [read_junit(path) for path in reruns])
    if suspects_file is not None:  # the table comes with the judgement
        keys = suspects(comparison)
        suspects_file.parent.mkdir(parents=True, exist_ok=True)
        suspects_file.write_text("".join(f"{key}\n" for key in keys), encoding="utf-8")
        print(f"{comparison.label}: {len(keys)} suspect(s) (pass upstream, fail patched) written to {suspects_file}")
        for item in comparison.regressions:
            print(f"  {item['test']}: {item['outcome']}: {item['message']}")
        return comparison
    print(render(comparison))
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(asdict(comparison), indent=2) + "\n", encoding="utf-8")
    if not comparison.upstream:
        raise UsageError(f"{upstream} holds no test results", hint="did pytest collect anything?")
    if comparison.regressions:
        raise VerificationError(
            f"{len(comparison.regressions)} test(s) pass with upstream Keras and fail with the patched wheel ({comparison.label})",
            hint="the patch changes behaviour: see the regressions above",
        )
    return comparison
