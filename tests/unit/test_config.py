"""The pin in [tool.forkgen] and how the command line overrides it."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        ('version = "3.15.1"', 'version = "2.15.0"', "'2.15.0' is a Keras 2 release; the patches are for Keras 3 only"),
    ],
)
def test_bad_pins_are_usage_errors(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        config.load(write(tmp_path, PYPROJECT.replace(old, new)))


@pytest.mark.parametrize("version", ["2.15.0", "2.16.0rc0", "1.2.2", "v2.15.0", "2.19.0.dev2025010103"])
def test_a_release_before_keras_3_is_refused_up_front(version: str) -> None:
    with pytest.raises(UsageError, match=r"is a Keras [12] release; the patches are for Keras 3 only") as caught:
        config.validate_version(version, "--version")
    assert caught.value.message.startswith("--version: ")
    with pytest.raises(UsageError, match="for Keras 3 only"):
        config.resolve_pin(config.Config(path=None, pin=None, overlay=None), version=version)


@pytest.mark.parametrize("version", ["3.0.0", "3.15.1", "3.16.0.dev2026102704", "4.0.0"])
def test_keras_3_and_later_releases_pass(version: str) -> None:
    assert config.validate_version(version, "--version") == version


def test_validate_dir_accepts_a_writable_directory_or_one_to_create(tmp_path: Path) -> None:
    assert config.validate_dir(tmp_path, "--out-dir") == tmp_path
    missing = tmp_path / "a" / "b"
    assert config.validate_dir(missing, "--out-dir") == missing
    assert list(tmp_path.iterdir()) == []  # checked, not created, and the probe is gone


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: t / "file", "--out-dir {t}/file is a file, not a directory"),
        (lambda t: t / "file" / "below", "--out-dir {t}/file/below: {t}/file is a file, not a directory"),
        (lambda t: Path("/proc/forkgen-out"), "--out-dir /proc/forkgen-out: cannot write in /proc ("),
        (lambda t: Path("/dev/null"), "--out-dir /dev/null is not a directory"),
    ],
    ids=["a file", "under a file", "under /proc", "a device"],
)
def test_validate_dir_refuses_what_no_one_can_write_into(
    tmp_path: Path, make: Callable[[Path], Path], message: str
) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError) as caught:
        config.validate_dir(make(tmp_path), "--out-dir")
    assert caught.value.message.startswith(message.format(t=tmp_path)), caught.value.message
    assert "--out-dir a directory you can write to" in caught.value.hint


@pytest.mark.parametrize("exists", [True, False], ids=["the directory", "its parent"])
def test_validate_dir_refuses_a_directory_without_write_permission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exists: bool
) -> None:
    """root may write anywhere: what a user without permission meets is stood in for at the probe."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        if Path(kwargs["dir"]) == locked:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    target = locked if exists else locked / "index"
    with pytest.raises(UsageError, match=rf"--index-dir {target}: cannot write in {locked} \(Permission denied\)"):
        config.validate_dir(target, "--index-dir")
    assert list(locked.iterdir()) == []
