"""The pin in [tool.forkgen] and how the command line overrides it."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkgen import config
from forkgen.errors import UsageError

PYPROJECT = """\
[project]
name = "somebody"

[tool.forkgen]
distribution = "keras"
version = "3.15.1"
# a comment that must not matter
sha256 = "92AE7C1DD7F61041953DC2D42253181EE099086F0B58AE36FCF98147A6F08A29"
local-label = "fastcallspec.3"
overlay = "patched_keras/overlay"
"""


def write(tmp_path: Path, text: str = PYPROJECT) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    return path


def test_pin_is_read_and_normalised(tmp_path: Path) -> None:
    cfg = config.load(write(tmp_path))
    assert cfg.pin is not None
    assert cfg.pin.sha256 == "92ae7c1dd7f61041953dc2d42253181ee099086f0b58ae36fcf98147a6f08a29"
    assert cfg.pin.local_label == "fastcallspec.3"
    assert cfg.overlay == tmp_path / "patched_keras/overlay"


def test_nearest_pyproject_with_the_table_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path)
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "sub" / "pyproject.toml").write_text("[project]\nname = 'other'\n")
    monkeypatch.chdir(tmp_path / "sub" / "deeper")
    assert config.load().path == tmp_path / "pyproject.toml"


def test_other_release_is_unpinned_unless_a_hash_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORKGEN_LOCAL_LABEL", raising=False)
    cfg = config.load(write(tmp_path))
    assert config.resolve_pin(cfg).sha256 is not None
    assert config.resolve_pin(cfg, version="3.14.1").sha256 is None
    assert config.resolve_pin(cfg, version="3.14.1", sha256="b" * 64).sha256 == "b" * 64
    assert config.resolve_pin(cfg, distribution="keras-nightly").sha256 is None


def test_label_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config.load(write(tmp_path))
    monkeypatch.setenv("FORKGEN_LOCAL_LABEL", "fromenv.1")
    assert config.resolve_pin(cfg).local_label == "fromenv.1"
    assert config.resolve_pin(cfg, local_label="flag.2").local_label == "flag.2"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('sha256 = "92AE', 'sha256 = "ZZ', "is not a sha256"),
        ('local-label = "fastcallspec.3"', 'local-label = "Fast Path"', "local version label"),
        ('distribution = "keras"', 'distribution = "tensorflow"', "distribution must be"),
        ('version = "3.15.1"\n', "", "missing version"),
        ("[tool.forkgen]", "[tool.forkgen", "invalid TOML"),
    ],
)
def test_bad_pins_are_usage_errors(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        config.load(write(tmp_path, PYPROJECT.replace(old, new)))
