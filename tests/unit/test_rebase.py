"""forkgen rebase: the pin moves only when every stage passed (offline, synthetic sdists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkgen import cli
from forkgen import rebase as rebase_mod
from forkgen.errors import EXIT_DRIFT, EXIT_VERIFY, VerificationError
from tests.support.synthetic import LAYER_V4, sdist_bytes, sha256, tree_files

PYPROJECT = """\
[project]
name = "team-fork"

# The pin. Comments survive a rebase.
[tool.forkgen]
distribution = "keras"
version = "3.14.1"    # the release we ship
sha256 = "{old}"
local-label = "fastcallspec.1"
"""


def seed(cache: Path, version: str, layer: str = LAYER_V4) -> str:
    data = sdist_bytes(tree_files(layer, version), top=f"keras-{version}")
    path = cache / "sdists" / "keras" / version / f"keras-{version}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return sha256(data)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORKGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FORKGEN_LOCAL_LABEL", raising=False)
    old = seed(tmp_path / "cache", "3.14.1")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(old=old))
    return tmp_path


def test_rewrite_pin_keeps_comments_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT.format(old="a" * 64))
    rebase_mod.rewrite_pin(path, rebase_mod.Pin("keras", "3.15.1", "b" * 64))
    assert path.read_text() == PYPROJECT.format(old="b" * 64).replace('"3.14.1"', '"3.15.1"')


def test_rebase_moves_the_pin_after_the_equivalence_suite(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    new = seed(project / "cache", "3.15.1")
    ran: list[Path] = []
    monkeypatch.setattr(rebase_mod, "verify_release", lambda wheel, **kwargs: ran.append(wheel) or [])
    assert cli.main(["rebase", "3.15.1", "--sha256", new]) == 0
    out, err = capsys.readouterr()
    assert ran and ran[0].name == "keras-3.15.1+fastcallspec.1-py3-none-any.whl"
    assert out.strip().splitlines()[-1] == str(ran[0])
    assert "callspec_construction: line 36 -> 36 (+0)" in err
    assert PYPROJECT.format(old=new).replace('"3.14.1"', '"3.15.1"') == (project / "pyproject.toml").read_text()


def test_failed_equivalence_leaves_the_pin(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    new = seed(project / "cache", "3.15.1")
    before = (project / "pyproject.toml").read_text()

    def fail(*args: object, **kwargs: object) -> None:
        raise VerificationError("the equivalence suite fails on torch")

    monkeypatch.setattr(rebase_mod, "verify_release", fail)
    assert cli.main(["rebase", "3.15.1", "--sha256", new]) == EXIT_VERIFY
    err = capsys.readouterr().err
    assert "error: rebase onto keras 3.15.1 failed at verify" in err and "the pin in" in err
    assert (project / "pyproject.toml").read_text() == before


def test_drifted_release_is_refused_with_what_moved(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drifted = LAYER_V4.replace("CallSpec", "CallSignature")
    new = seed(project / "cache", "3.16.0", drifted)
    before = (project / "pyproject.toml").read_text()
    assert cli.main(["rebase", "3.16.0", "--sha256", new]) == EXIT_DRIFT
    err = capsys.readouterr().err
    assert "error: rebase onto keras 3.16.0 failed at analyze: upstream drift: keras/src/layers/layer.py:1: anchor 'class CallSpec'" in err
    assert (project / "pyproject.toml").read_text() == before


def test_no_verify_builds_but_keeps_the_pin(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = seed(project / "cache", "3.15.1")
    before = (project / "pyproject.toml").read_text()
    assert cli.main(["rebase", "3.15.1", "--sha256", new, "--no-verify"]) == 0
    assert (project / "pyproject.toml").read_text() == before
