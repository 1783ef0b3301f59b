"""Verify stage: compare two runs of the same test suite (upstream wheel vs patched wheel).

Both runs write JUnit XML (pytest --junitxml). A test that passes upstream and does
not pass patched is a regression; tests that fail in both runs are listed with their
reasons, never dropped.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
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


def read_junit(path: Path) -> dict[str, Result]:
    """Outcome of every test case in a JUnit XML file, keyed `classname::name`."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        raise UsageError(f"cannot read test results {path}: {error}") from None
    results: dict[str, Result] = {}
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        # Tests run from an installed wheel are named after their path from the
        # rootdir, through the virtual environment: keep the importable part.
        _, marker, importable = classname.rpartition("site-packages.")
        key = f"{importable if marker else classname}::{case.get('name', '')}"
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


def compare(label: str, upstream: dict[str, Result], patched: dict[str, Result]) -> Comparison:
    """Regressions are tests passing upstream that fail, error or vanish patched."""
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
    return comparison


def render(comparison: Comparison) -> str:
    lines = [f"upstream suite, {comparison.label}:", f"  {'':10}" + "".join(f"{o:>9}" for o in OUTCOMES)]
    for name, counts in (("upstream", comparison.upstream), ("patched", comparison.patched)):
        lines.append(f"  {name:10}" + "".join(f"{counts.get(o, 0):>9}" for o in OUTCOMES))
    lines.append(f"  failing upstream too ({len(comparison.failing_in_both)}):")
    for item in comparison.failing_in_both:
        lines.append(f"    {item['test']}: {item['upstream'] or '(no message)'}")
    if comparison.fixed_by_patch:
        lines.append(f"  failing upstream, passing patched ({len(comparison.fixed_by_patch)}): " + ", ".join(comparison.fixed_by_patch))
    lines.append(f"  regressions: {len(comparison.regressions) or 'none'}")
    for item in comparison.regressions:
        lines.append(f"    {item['test']}: {item['outcome']}: {item['message']}")
    return "\n".join(lines)


def compare_files(label: str, upstream: Path, patched: Path, report: Path | None = None) -> Comparison:
    """Compare two JUnit files; write the JSON report; raise VerificationError on a regression."""
    comparison = compare(label, read_junit(upstream), read_junit(patched))
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
