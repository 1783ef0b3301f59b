"""Fetch stage: hash verification, the cache, and safe unpacking (offline; pip is faked)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from forkgen import fetch as fetch_mod
from forkgen.errors import FetchError, IntegrityError
from forkgen.fetch import fetch, unpack
from forkgen.model import Pin
from tests.support.synthetic import sdist_bytes, sha256


def tar_with(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


UNSAFE = {
    "absolute path": tar_with((member("/etc/evil"), b"x")),
    "parent directory": tar_with((member("keras-1/../../evil"), b"x")),
    "symlink escaping": tar_with((member("keras-1/a", b""), b"x"), (member("keras-1/link", tarfile.SYMTYPE, "../../etc/passwd"), None)),
    "absolute symlink": tar_with((member("keras-1/link", tarfile.SYMTYPE, "/etc/passwd"), None)),
    "hard link escaping": tar_with((member("keras-1/link", tarfile.LNKTYPE, "../outside"), None)),
    "device file": tar_with((member("keras-1/dev", tarfile.CHRTYPE), None)),
    "two top-level entries": tar_with((member("keras-1/a"), b"x"), (member("other/b"), b"y")),
}


@pytest.mark.parametrize("name", list(UNSAFE))
def test_unsafe_archives_are_refused_and_leave_nothing(tmp_path: Path, name: str) -> None:
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(UNSAFE[name])
    with pytest.raises(IntegrityError):
        unpack(archive, tmp_path / "out" / "tree")
    assert not (tmp_path / "out" / "tree").exists()
    assert list((tmp_path / "out").iterdir()) == []


def test_safe_archive_with_inner_symlink_unpacks(tmp_path: Path) -> None:
    archive = tmp_path / "ok.tar.gz"
    archive.write_bytes(tar_with((member("keras-1/a/b.py"), b"x = 1\n"), (member("keras-1/c.py", tarfile.SYMTYPE, "a/b.py"), None)))
    root = unpack(archive, tmp_path / "tree")
    assert root == tmp_path / "tree" / "keras-1"
    assert (root / "c.py").read_text() == "x = 1\n"


def test_corrupt_archive(tmp_path: Path) -> None:
    archive = tmp_path / "corrupt.tar.gz"
    archive.write_bytes(sdist_bytes()[:200])
    with pytest.raises(IntegrityError, match="corrupt"):
        unpack(archive, tmp_path / "tree")
    assert not (tmp_path / "tree").exists()


def seed_cache(cache: Path, data: bytes, version: str = "3.15.1") -> Path:
    path = cache / "sdists" / "keras" / version / f"keras-{version}.tar.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path


def no_pip(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    raise AssertionError("pip must not run when the archive is cached")


def test_cached_archive_is_verified_and_reused_without_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = sdist_bytes()
    seed_cache(tmp_path, data)
    monkeypatch.setattr(fetch_mod, "run", no_pip)
    pin = Pin("keras", "3.15.1", sha256(data))
    source = fetch(pin, tmp_path)
    assert source.sha256 == sha256(data)
    assert (source.root / "keras/src/layers/layer.py").is_file()
    assert fetch(pin, tmp_path).root == source.root  # unpacked once, then reused


def test_cached_archive_with_wrong_hash_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = seed_cache(tmp_path, sdist_bytes())
    monkeypatch.setattr(fetch_mod, "run", no_pip)
    with pytest.raises(IntegrityError, match="cached archive") as caught:
        fetch(Pin("keras", "3.15.1", "0" * 64), tmp_path)
    assert str(archive) in caught.value.hint
    assert not (tmp_path / "src").exists()


def fake_pip(data: bytes | None, returncode: int = 0, output: str = "") -> Any:
    def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert args[1:4] == ["-m", "pip", "download"]
        if data is not None:
            dest = Path(args[args.index("--dest") + 1])
            (dest / "keras-3.15.1.tar.gz").write_bytes(data)
        return subprocess.CompletedProcess(args, returncode, output, "")

    return run


def test_download_is_verified_before_unpacking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = sdist_bytes()
    monkeypatch.setattr(fetch_mod, "run", fake_pip(data))
    source = fetch(Pin("keras", "3.15.1", sha256(data)), tmp_path)
    assert source.archive == tmp_path / "sdists/keras/3.15.1/keras-3.15.1.tar.gz"


def test_download_with_wrong_hash_is_refused_and_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch_mod, "run", fake_pip(sdist_bytes()))
    with pytest.raises(IntegrityError, match="pin says"):
        fetch(Pin("keras", "3.15.1", "1" * 64), tmp_path)
    assert not list((tmp_path / "sdists").rglob("*.tar.gz"))
    assert not (tmp_path / "src").exists()


def test_pip_failure_is_a_fetch_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    output = "ERROR: No matching distribution found for keras==0.0.404\n"
    monkeypatch.setattr(fetch_mod, "run", fake_pip(None, 1, output))
    with pytest.raises(FetchError, match="No matching distribution"):
        fetch(Pin("keras", "0.0.404", None), tmp_path)


def test_unpinned_release_uses_the_downloaded_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data = sdist_bytes()
    monkeypatch.setattr(fetch_mod, "run", fake_pip(data))
    source = fetch(Pin("keras", "3.15.1", None), tmp_path)
    assert source.sha256 == sha256(data)
    assert "not pinned" in capsys.readouterr().err
