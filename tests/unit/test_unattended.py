"""Unattended rebases: `forkgen outdated` and `forkgen rebase --latest` against a local index.

The index is a directory (file://, what pip's `index-url` may name) serving synthetic
Keras-shaped sdists of several releases, written by the tests; the equivalence run is
stubbed as in test_rebase.py (installing torch per test is too slow).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from codemods import series as series_mod
from codemods.engine import LAYER_PY
from forkgen import cli, provenance, verify
from forkgen import rebase as rebase_mod
from forkgen.errors import EXIT_DRIFT, EXIT_FETCH, EXIT_OK, EXIT_OUTDATED
from tests.support.fake_index import FakeIndex, File
from tests.support.synthetic import LAYER_V4, sdist_bytes, sha256, tree_files

PINNED = "3.15.1"
#: The patch that the synthetic "3.16.0" carries upstream (keras-team/keras#23200's shape).
RETIRED = "layer-call-state-writes"
MARK = f"  # forkgen: {RETIRED}"

PYPROJECT = """\
[project]
name = "team-fork"

# The pin. Comments survive a rebase.
[tool.forkgen]
distribution = "keras"
version = "{version}"    # the release we ship
sha256 = "{sha256}"
"""


def release(version: str, layer: str = LAYER_V4) -> bytes:
    return sdist_bytes(tree_files(layer, version), top=f"keras-{version}")


def layer_with_upstream_change() -> str:
    """layer.py as a release that merged RETIRED would ship it: the patch's own rewrite,
    without forkgen's marker (so the patch reports *upstream*, not *applied*)."""
    files = tree_files()
    (patch,) = [p for p in series_mod.load_series() if p.name == RETIRED]
    result = series_mod.run(files.get, [patch], release=PINNED)
    layer = result.files[LAYER_PY]
    assert MARK in layer
    return layer.replace(MARK, "")


def drifted_layer() -> str:
    return LAYER_V4.replace("CallSpec", "CallSignature")


RELEASES: dict[str, Callable[[], bytes]] = {
    "3.15.1": lambda: release("3.15.1"),
    "3.15.2": lambda: release("3.15.2"),
    "3.16.0": lambda: release("3.16.0", layer_with_upstream_change()),
    "3.17.0": lambda: release("3.17.0", drifted_layer()),
    "3.18.0rc1": lambda: release("3.18.0rc1"),
}


class Index:
    """A file:// index at `root`, pip pointed at it, and the project's pyproject.toml."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        self.data: dict[str, bytes] = {}

    def serve(self, *versions: str, nightly: tuple[str, ...] = ()) -> str:
        """Serve these keras releases (and keras-nightly versions); return the index URL."""
        files = []
        for version in versions:
            self.data[version] = self.data.get(version) or RELEASES[version]()
            files.append(File(f"keras-{version}.tar.gz", self.data[version]))
        projects = {"keras": files}
        if nightly:
            projects["keras-nightly"] = [
                File(f"keras_nightly-{v}.tar.gz", sdist_bytes(tree_files(version=v), top=f"keras_nightly-{v}"))
                for v in nightly
            ]
        simple = FakeIndex(projects).write(self.root / "index")
        url = simple.as_uri()
        self.monkeypatch.setenv("PIP_INDEX_URL", url)
        return url


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORKGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "FORKGEN_LOCAL_LABEL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(version=PINNED, sha256=sha256(RELEASES[PINNED]())))
    return tmp_path


@pytest.fixture
def index(project: Path, monkeypatch: pytest.MonkeyPatch) -> Index:
    return Index(project, monkeypatch)


@pytest.fixture
def equivalence(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    ran: list[Path] = []

    def stub(wheel: Path, *args: object, **kwargs: object) -> list[verify.SuiteResult]:
        ran.append(wheel)
        return [verify.SuiteResult("equivalence", "42 passed")]

    monkeypatch.setattr(rebase_mod, "verify_release", stub)
    return ran


def wheel_layer(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(LAYER_PY).decode()


# -- forkgen outdated ------------------------------------------------------------------------


def test_outdated_up_to_date(index: Index, capsys: pytest.CaptureFixture[str]) -> None:
    index.serve("3.15.1", "3.18.0rc1")  # a keras release candidate is not a release to move to
    assert cli.main(["outdated"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "up to date: the pin keras 3.15.1 is the newest keras on the index"
    assert cli.main(["outdated", "--json"]) == EXIT_OK
    document = json.loads(capsys.readouterr().out)
    assert (document["ok"], document["exit_code"], document["outdated"], document["newest"]) == (True, 0, False, "3.15.1")


def test_outdated_names_the_newer_release(index: Index, capsys: pytest.CaptureFixture[str]) -> None:
    index.serve("3.15.1", "3.15.2", "3.16.0")
    assert cli.main(["outdated"]) == EXIT_OUTDATED
    assert capsys.readouterr().out.strip() == "newer release: keras 3.16.0 is newer than the pin keras 3.15.1"
    assert cli.main(["outdated", "--json"]) == EXIT_OUTDATED
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == EXIT_OUTDATED and document["newest"] == "3.16.0" and document["outdated"]
    assert document["pin"] == {"distribution": "keras", "version": "3.15.1"}


def test_outdated_against_keras_nightly_when_the_pin_is_keras(index: Index, capsys: pytest.CaptureFixture[str]) -> None:
    index.serve("3.15.1", nightly=("3.15.0.dev2026010101", "3.16.0.dev2026020203"))
    assert cli.main(["outdated", "--distribution", "keras-nightly", "--json"]) == EXIT_OUTDATED
    document = json.loads(capsys.readouterr().out)
    assert document["newest"] == "3.16.0.dev2026020203" and document["cross_distribution"]
    assert "the pin is keras itself; compared with the newest keras-nightly" in document["message"]
    index.serve("3.15.1", nightly=("3.15.0.dev2026010101",))  # a nightly older than the pinned release
    assert cli.main(["outdated", "--distribution", "keras-nightly"]) == EXIT_OK
    assert "is newer than keras-nightly 3.15.0.dev2026010101" in capsys.readouterr().out


def test_outdated_with_the_index_unreachable(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    assert cli.main(["outdated"]) == EXIT_FETCH
    assert f"error: cannot read http://127.0.0.1:{port}/simple/keras/" in capsys.readouterr().err
    assert cli.main(["outdated", "--json"]) == EXIT_FETCH
    assert json.loads(capsys.readouterr().out) == {
        "ok": False, "exit_code": EXIT_FETCH, "error": f"cannot read http://127.0.0.1:{port}/simple/keras/: [Errno 111] Connection refused",
    }
    # rebase --latest: the same exit code, the pin untouched, and a summary that says why
    before = (project / "pyproject.toml").read_text()
    summary = project / "body.md"
    assert cli.main(["rebase", "--latest", "--summary", str(summary)]) == EXIT_FETCH
    assert (project / "pyproject.toml").read_text() == before
    body = summary.read_text()
    assert "failed at resolve (exit 3)" in body and "Connection refused" in body


# -- forkgen rebase --latest ------------------------------------------------------------------


def test_rebase_latest_clean(index: Index, equivalence: list[Path], project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index.serve("3.15.1", "3.15.2")
    summary = project / "out" / "pr-body.md"
    assert cli.main(["rebase", "--latest", "--summary", str(summary)]) == EXIT_OK
    out = capsys.readouterr().out
    wheel = Path(out.strip().splitlines()[-1])
    assert equivalence == [wheel] and wheel.is_file()
    # the pin moved, its sha256 is the served sdist's
    assert (project / "pyproject.toml").read_text() == PYPROJECT.format(version="3.15.2", sha256=sha256(index.data["3.15.2"]))
    names = [p.name for p in series_mod.load_series()]
    body = summary.read_text()
    assert f"summary: {summary}" in out
    for i, name in enumerate(names, 1):  # every patch of the series, applied before and after
        assert f"| {i} | `{name}` " in body and f"  {name} " in out
    rows = [line for line in body.splitlines() if line.startswith("| ") and "` " in line and "| applied | applied |" in line]
    assert len(rows) == len(names)
    label = wheel.name.split("+")[1].split("-")[0]
    assert f"| `{wheel.name}` | `{hashlib.sha256(wheel.read_bytes()).hexdigest()}` | `{label}` |" in body
    assert "passed: equivalence (42 passed)" in body
    assert "label " + label + " (unchanged: the same patches apply)" in out


def test_rebase_latest_json_retires_an_upstream_patch(index: Index, equivalence: list[Path], project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index.serve("3.15.1", "3.15.2", "3.16.0")
    summary = project / "pr-body.md"
    assert cli.main(["rebase", "--latest", "--json", "--summary", str(summary)]) == EXIT_OK
    document = json.loads(capsys.readouterr().out)  # stdout is the one JSON document
    assert document["ok"] and document["pin_moved"] and document["to"]["version"] == "3.16.0"
    outcomes = {p["name"]: (p["before"], p["outcome"], p["retired"]) for p in document["patches"]}
    assert outcomes.pop(RETIRED) == ("applied", "upstream", True), document["notes"]  # notes: why 3.15.1 was not analysed
    assert set(outcomes.values()) == {("applied", "applied", False)}
    assert document["retired"] == [RETIRED]
    # dropped from the build: the wheel's layer.py carries the release's change, not forkgen's
    wheel = Path(document["wheel"]["path"])
    assert MARK not in wheel_layer(wheel) and "if not self._called:" in wheel_layer(wheel)
    data = provenance.read_wheel(wheel)
    assert {p["name"]: p["outcome"] for p in data["patches"]}[RETIRED] == "upstream"
    retired_codemods = {name for p in series_mod.load_series() if p.name == RETIRED for name in p.codemod_versions()}
    assert retired_codemods and not retired_codemods & set(data["codemods"])
    # ... and from the label: it names exactly the applied patches, not the whole series
    applied = [(p.name, p.version) for p in series_mod.load_series()]
    label = document["wheel"]["version"].split("+")[1]
    assert label == document["label"]["now"] == series_mod.series_label([a for a in applied if a[0] != RETIRED])
    assert label != series_mod.series_label(applied) == document["label"]["before"]
    assert document["label"]["changed"]
    assert document["wheel"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    body = summary.read_text()
    assert "**upstream (retired)**" in body and f"Retired (1): `{RETIRED}`" in body
    assert f"was {series_mod.series_label(applied)} on 3.15.1: the set of applied patches changed" in body


def test_rebase_latest_onto_a_drifted_release(index: Index, equivalence: list[Path], project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index.serve("3.15.1", "3.15.2", "3.17.0")
    before = (project / "pyproject.toml").read_text()
    summary = project / "issue.md"
    assert cli.main(["rebase", "--latest", "--summary", str(summary)]) == EXIT_DRIFT
    captured = capsys.readouterr()
    assert (project / "pyproject.toml").read_text() == before and equivalence == []
    diagnostic = f"{LAYER_PY}:1: anchor 'class CallSpec'"
    assert f"error: rebase onto keras 3.17.0 failed at analyze: upstream drift: {diagnostic}" in captured.err
    assert "FAILED at analyze (exit 5): the pin is unchanged" in captured.out
    body = summary.read_text()
    assert "**Result: failed at analyze (exit 5); the pin is unchanged.**" in body
    assert "### Diagnostic" in body and diagnostic in body and "| **DRIFT** |" in body
    assert cli.main(["rebase", "--latest", "--json", "--summary", str(summary)]) == EXIT_DRIFT
    document = json.loads(capsys.readouterr().out)
    assert (document["ok"], document["exit_code"], document["stage"], document["pin_moved"]) == (False, EXIT_DRIFT, "analyze", False)
    assert "callspec-fast-path" in document["drift"] and diagnostic in document["error"]
    assert document["wheel"] is None and document["equivalence"] == "not run (the rebase stopped at analyze)"


def test_rebase_latest_and_a_version_contradict(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["rebase", "3.15.2", "--latest"]) == 2
    assert "--latest and VERSION 3.15.2 contradict" in capsys.readouterr().err
