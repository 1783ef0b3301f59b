"""The patch series: selection, outcomes, the label, and what forkgen reports and records."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import ClassVar

import libcst as cst
import pytest

from codemods import series
from codemods.engine import AnchorDrift, Check, Headers, Outcome, Patch, Sources
from forkgen import cli
from forkgen.errors import EXIT_DRIFT, EXIT_USAGE
from tests.support.synthetic import tree_files, write_tree

HEADERS = Headers("a test patch", "ours", None, "not-needed", None, "2026-12-01")


class Append(Patch):
    """Appends `# <name>` to `a.py`; upstream when `a.py` already ends with `# upstream <name>`."""

    version = "1"
    headers = HEADERS
    files = ("a.py",)
    codemods: ClassVar[tuple[type, ...]] = ()

    def __init__(self, name: str, *, requires: tuple[str, ...] = (), since: str | None = None) -> None:
        self.name = name  # type: ignore[misc]
        self.requires = requires  # type: ignore[misc]
        self.since = since  # type: ignore[misc]

    def check(self, sources: Sources) -> Check:
        text = sources.require("a.py", self.name)
        if "drift" in text:
            raise AnchorDrift("a.py", 1, self.name, "no drift", "drift")
        if f"# upstream {self.name}\n" in text:
            return Check(Outcome.UPSTREAM, "upstream has it")
        return Check(Outcome.APPLIED, "append", present=f"# {self.name}\n" in text)

    def apply(self, sources: Sources) -> None:
        module = sources.module("a.py")
        sources.replace("a.py", cst.parse_module(module.code + f"# {self.name}\n"))


A, B, C = Append("a"), Append("b", requires=("a",)), Append("c", since="3.12.0")
SERIES = (A, B, C)


def run(text: str, selected: tuple[Patch, ...] = SERIES, release: str | None = "3.15.1") -> series.SeriesResult:
    return series.run(lambda path: text if path == "a.py" else None, selected, release=release, series=SERIES)


def outcomes(result: series.SeriesResult) -> dict[str, str]:
    return {r.patch.name: r.outcome.value for r in result.results}


def test_each_patch_sees_the_tree_the_ones_before_left() -> None:
    result = run("x = 1\n")
    assert outcomes(result) == {"a": "applied", "b": "applied", "c": "applied"}
    assert result.unswitched_files == {"a.py": "x = 1\n# a\n# b\n# c\n"}


def test_applying_again_changes_nothing() -> None:
    result = run("x = 1\n# a\n# b\n# c\n")
    assert all(r.check.present for r in result.results) and result.files == {} and not result.changed


def test_upstream_and_not_applicable() -> None:
    result = run("x = 1\n# upstream a\n", release="3.11.0")
    # `b` builds on `a`, which upstream already has: b's own code still needs a as forkgen wrote it.
    assert outcomes(result) == {"a": "upstream", "b": "not applicable", "c": "not applicable"}
    assert result.files == {}
    assert "targets code Keras has since 3.12.0" in result.results[2].check.detail


def test_drift_is_recorded_for_every_patch_not_raised() -> None:
    result = run("drift = 1\n")
    assert outcomes(result) == {"a": "drift", "b": "not applicable", "c": "drift"}
    assert len(result.drifts) == 2 and result.drifts[0].drift is not None


def test_a_patch_left_out_whose_code_is_present_is_reported() -> None:
    result = run("x = 1\n# a\n# b\n", selected=(A,))
    assert result.present_but_unselected == ["b"]


def test_selection() -> None:
    assert series.select(SERIES) == SERIES
    assert series.select(SERIES, without=["c"]) == (A, B)
    assert series.select(SERIES, configured=["a", "c"]) == (A, C)
    assert series.select(SERIES, configured=["a"], only=["c"]) == (C,)
    with pytest.raises(series.SelectionError, match="no patch named 'z'"):
        series.select(SERIES, only=["z"])
    with pytest.raises(series.SelectionError, match="patch b needs a"):
        series.select(SERIES, without=["a"])


def test_the_label_names_the_applied_patches_and_versions() -> None:
    label = series.series_label([("a", "1"), ("b", "1")])
    assert label.startswith("fast.") and label[5:].isalpha() and len(label) == 13
    assert series.series_label([("b", "1"), ("a", "1")]) == label  # order does not matter
    assert series.series_label([("a", "1"), ("b", "2")]) != label  # a version does
    assert series.series_label([("a", "1")]) != label  # and so does the set


def test_the_label_changes_with_the_form_of_the_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    # The switches change every switched file's bytes: a new form must not keep a served name.
    label = series.series_label([("a", "1"), ("b", "1")])
    monkeypatch.setattr(series.switching, "FORMAT", series.switching.FORMAT + "0")
    assert series.series_label([("a", "1"), ("b", "1")]) != label


def test_the_registered_series_is_well_formed() -> None:
    patches = series.load_series()
    names = [p.name for p in patches]
    assert names[:2] == ["callspec-fast-path", "callspec-training-fast-path"]
    for index, patch in enumerate(patches):
        assert all(r in names[:index] for r in patch.requires), patch.name
        origin = patch.headers.origin
        # "ours", "upstream, <keras PR>", or ours narrowing an upstream change: "<what>, narrowed (ours)".
        assert origin == "ours" or origin.startswith("upstream, https://github.com/keras-team/keras/") or (
            origin.endswith(", narrowed (ours)") and origin != ", narrowed (ours)"
        )
        assert patch.files and patch.codemods and patch.version


def test_cli_series_lists_dep3_headers(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["series"]) == 0
    out = capsys.readouterr().out
    for field in ("Description:", "Origin:", "Forwarded:", "Applied-Upstream:", "Last-Update:"):
        assert field in out
    assert "  callspec-fast-path 2" in out
    assert cli.main(["series", "--without-patch", "callspec-training-fast-path", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["callspec-training-fast-path"]["selected"] is False and listed["callspec-fast-path"]["selected"]
    assert cli.main(["series", "--without-patch", "callspec-fast-path"]) == EXIT_USAGE
    assert "needs callspec-fast-path" in capsys.readouterr().err


def test_build_records_every_patch_and_the_label(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    src = write_tree(tmp_path / "src")
    labels = {}
    for name, extra in (("all", []), ("base", ["--without-patch", "callspec-training-fast-path"])):
        assert cli.main(["build", "--source", str(src), "--out-dir", str(tmp_path / name), *extra]) == 0
        wheel = Path(capsys.readouterr().out.strip().splitlines()[-1])
        assert cli.main(["inspect", str(wheel), "--json"]) == 0
        provenance = json.loads(capsys.readouterr().out)
        labels[name] = provenance["series_label"]
        assert wheel.name == f"keras-3.15.1+{provenance['series_label']}-py3-none-any.whl"
        assert all(p["outcome"] == "applied" for p in provenance["patches"])
        with zipfile.ZipFile(wheel) as archive:
            assert set(provenance["patched_files"]) <= set(archive.namelist())
    assert labels["all"] != labels["base"]


def test_analyze_reports_every_drift_and_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = tree_files()
    files["keras/src/layers/layer.py"] = files["keras/src/layers/layer.py"].replace(
        "        self._called = True\n", "        self._called = True\n        self._called = True\n"
    )
    src = write_tree(tmp_path / "src", files)
    assert cli.main(["analyze", str(src), "--json"]) == EXIT_DRIFT
    report = json.loads(capsys.readouterr().out)
    states = {p["name"]: p["outcome"] for p in report["patches"]}
    assert states["layer-call-state-writes"] == "drift" and states["callspec-fast-path"] == "applied"
    assert report["ok"] is False and "2 unguarded and 0 guarded" in report["error"]
