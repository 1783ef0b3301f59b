"""Comparing the upstream and patched runs of Keras's own tests (JUnit XML)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkgen import cli
from forkgen.errors import EXIT_VERIFY
from forkgen.verify import compare, read_junit


def junit(path: Path, cases: dict[str, str]) -> Path:
    """A pytest-style JUnit file: name -> passed | failed | error | skipped."""
    body = []
    for name, outcome in cases.items():
        classname, _, test = name.rpartition("::")
        inner = {
            "passed": "",
            "failed": '<failure message="AssertionError: boom">trace</failure>',
            "error": '<error message="collection failed: No module named grain">trace</error>',
            "skipped": '<skipped type="pytest.skip" message="needs a GPU"/>',
        }[outcome]
        body.append(f'<testcase classname="{classname}" name="{test}" time="0.1">{inner}</testcase>')
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{"".join(body)}</testsuite></testsuites>')
    return path


UPSTREAM = {"m.T::a": "passed", "m.T::b": "failed", "m.T::c": "skipped", "m.T::d": "error", "m.T::e": "passed"}


def test_counts_and_failures_in_both(tmp_path: Path) -> None:
    up = read_junit(junit(tmp_path / "up.xml", UPSTREAM))
    patched = read_junit(junit(tmp_path / "p.xml", UPSTREAM))
    comparison = compare("torch", up, patched)
    assert comparison.upstream == comparison.patched == {"passed": 2, "failed": 1, "skipped": 1, "error": 1}
    assert comparison.regressions == []
    assert [(f["test"], f["upstream"]) for f in comparison.failing_in_both] == [
        ("m.T::b", "AssertionError: boom"),
        ("m.T::d", "collection failed: No module named grain"),
    ]


@pytest.mark.parametrize("change", [{"m.T::a": "failed"}, {"m.T::e": "error"}, {"m.T::new": "failed"}])
def test_a_test_passing_upstream_and_failing_patched_is_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str]
) -> None:
    up = junit(tmp_path / "up.xml", UPSTREAM)
    patched = junit(tmp_path / "p.xml", {**UPSTREAM, **change})
    code = cli.main(["compare-tests", str(up), str(patched), "--label", "torch", "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert code == EXIT_VERIFY
    assert "regressions: 1" in out and "error: 1 test(s) pass with upstream Keras" in err
    assert json.loads((tmp_path / "r.json").read_text())["regressions"][0]["test"] == next(iter(change))


def test_a_vanished_test_is_a_regression(tmp_path: Path) -> None:
    up = read_junit(junit(tmp_path / "up.xml", UPSTREAM))
    patched = read_junit(junit(tmp_path / "p.xml", {k: v for k, v in UPSTREAM.items() if k != "m.T::a"}))
    assert [r["outcome"] for r in compare("x", up, patched).regressions] == ["missing"]


def test_no_regression_exits_zero_and_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    up = junit(tmp_path / "up.xml", UPSTREAM)
    code = cli.main(["compare-tests", str(up), str(up), "--label", "numpy"])
    out = capsys.readouterr().out
    assert code == 0
    assert "upstream suite, numpy:" in out and "failing upstream too (2):" in out and "regressions: none" in out
