"""Fetch stage: nothing from the sdist runs, hash verification, the re-verified cache, safe unpacking.

Offline: the indexes are local (`tests.support.fake_index`).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forkgen import cli, index
from forkgen.errors import EXIT_INTEGRITY, EXIT_OK, FetchError, IntegrityError, UsageError
from forkgen.fetch import fetch, unpack
from forkgen.index import IndexConfig
from forkgen.model import Pin
from tests.support.fake_index import FakeIndex, File, booby_trapped_sdist, keras_sdist, serve
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


FILE = (member("keras-1/a/b.py"), b"x = 1\n")
UNSAFE = {
    "absolute path": (tar_with((member("/etc/evil"), b"x")), "'/etc/evil': absolute path"),
    "parent directory": (tar_with(FILE, (member("keras-1/../../evil"), b"x")), "'keras-1/../../evil': '..' in the path"),
    "inner symlink": (tar_with(FILE, (member("keras-1/c.py", tarfile.SYMTYPE, "a/b.py"), None)), "'keras-1/c.py': symbolic link"),
    "symlink escaping": (tar_with(FILE, (member("keras-1/link", tarfile.SYMTYPE, "../../etc/passwd"), None)), "symbolic link"),
    "absolute symlink": (tar_with((member("keras-1/link", tarfile.SYMTYPE, "/etc/passwd"), None)), "symbolic link"),
    # Each link stays inside the tree on its own; together c points two levels above it.
    "symlink chain": (
        tar_with(
            (member("keras-1/a", tarfile.SYMTYPE, "."), None),
            (member("keras-1/b", tarfile.SYMTYPE, "a/a/.."), None),
            (member("keras-1/c", tarfile.SYMTYPE, "b/keras-1/b/.."), None),
            (member("keras-1/c/escaped"), b"x"),
        ),
        "'keras-1/a': symbolic link",
    ),
    "inner hard link": (tar_with(FILE, (member("keras-1/c.py", tarfile.LNKTYPE, "keras-1/a/b.py"), None)), "hard link"),
    "hard link escaping": (tar_with((member("keras-1/link", tarfile.LNKTYPE, "../outside"), None)), "hard link"),
    "character device": (tar_with(FILE, (member("keras-1/dev", tarfile.CHRTYPE), None)), "'keras-1/dev': device"),
    "block device": (tar_with(FILE, (member("keras-1/dev", tarfile.BLKTYPE), None)), "'keras-1/dev': device"),
    "FIFO": (tar_with(FILE, (member("keras-1/fifo", tarfile.FIFOTYPE), None)), "'keras-1/fifo': FIFO"),
}


@pytest.mark.parametrize("name", list(UNSAFE))
def test_unsafe_members_are_refused_and_leave_nothing(tmp_path: Path, name: str) -> None:
    data, message = UNSAFE[name]
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(data)
    cache = tmp_path / "cache"
    with pytest.raises(IntegrityError) as caught:
        unpack(archive, cache / "src" / "tree")
    assert caught.value.message.startswith("unsafe archive member ")
    assert message in caught.value.message
    # Nothing outside the cache, nothing half-unpacked inside it (no destination, no temporary).
    assert sorted(tmp_path.rglob("*")) == [archive, cache, cache / "src"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (tar_with((member("keras-1/a"), b"x"), (member("other/b"), b"y")), "more than one top-level entry"),
        (tar_with(), "is empty"),
        (tar_with((member("keras-1"), b"x")), "no top-level directory"),
        (sdist_bytes()[:200], "corrupt"),
    ],
    ids=["two top-level entries", "empty", "top-level file", "corrupt"],
)
def test_malformed_archives_are_refused(tmp_path: Path, data: bytes, message: str) -> None:
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(data)
    with pytest.raises(IntegrityError, match=message):
        unpack(archive, tmp_path / "cache" / "tree")
    assert list((tmp_path / "cache").iterdir()) == []


# -- Pythons without tarfile's extraction filters (before 3.11.4; Debian 12's is 3.11.2) ----


@pytest.fixture
def without_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile as Python 3.11.2 has it: no `data_filter`, and `extractall` takes no `filter`."""
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    original = tarfile.TarFile.extractall

    def extractall(self: tarfile.TarFile, path: str | os.PathLike[str] = ".",
                   members: object = None, *, numeric_owner: bool = False, **unknown: object) -> None:
        if unknown:
            raise TypeError(f"TarFile.extractall() got an unexpected keyword argument {next(iter(unknown))!r}")
        original(self, path, members, numeric_owner=numeric_owner)  # type: ignore[arg-type]

    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall)


def owned(name: str, mode: int, mtime: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = member(name, kind)
    info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = mode, mtime, 4242, 4243, "someone", "others"
    return info


#: name -> (mode in the archive, the mode tarfile's `data` filter gives it)
MODES = {
    "keras-1/setuid.py": (0o4777, 0o755),
    "keras-1/pkg/group_writable.py": (0o664, 0o644),
    "keras-1/pkg/read_only.txt": (0o444, 0o644),
    "keras-1/pkg/group_exec_only.sh": (0o070, 0o640),
    "keras-1/pkg/private.sh": (0o700, 0o700),
}
MODED = tar_with(
    (owned("keras-1", 0o777, 1_600_000_000, tarfile.DIRTYPE), None),
    (owned("keras-1/pkg", 0o2777, 1_600_000_001, tarfile.DIRTYPE), None),
    *((owned(name, mode, 1_600_000_002 + i), name.encode()) for i, (name, (mode, _)) in enumerate(MODES.items())),
)


def unpacked(root: Path) -> dict[str, tuple[bytes | None, int, int, int, int]]:
    """Every path under `root`: its content (None for a directory), mode, owner and mtime."""
    tree = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        content = None if path.is_dir() else path.read_bytes()
        mode = st.st_mode & 0o7777 if path.is_file() else -1  # directories: the default mode
        tree[path.relative_to(root).as_posix()] = (content, mode, st.st_uid, st.st_gid, int(st.st_mtime))
    return tree


def test_an_sdist_unpacks_on_a_python_without_extraction_filters(tmp_path: Path, without_filters: None) -> None:
    archive = tmp_path / "moded.tar.gz"
    archive.write_bytes(MODED)
    root = unpack(archive, tmp_path / "cache" / "tree")
    tree = unpacked(root.parent)
    for name, (_, expected) in MODES.items():
        content, mode, uid, gid, mtime = tree[name]
        assert content == name.encode() and mode == expected, name
        assert (uid, gid) == (os.geteuid(), os.getegid()), "the archive's owner (4242) must not be set"
    assert tree["keras-1"][4] == 1_600_000_000 and tree["keras-1/pkg"][4] == 1_600_000_001
    assert tree["keras-1/setuid.py"][4] == 1_600_000_002


def test_without_extraction_filters_the_tree_is_the_data_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where this Python has the filter: the fallback unpacks exactly what `filter="data"` does."""
    if not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no extraction filters to compare with")
    archive = tmp_path / "moded.tar.gz"
    archive.write_bytes(MODED)
    with_filter = unpack(archive, tmp_path / "filtered" / "tree").parent
    monkeypatch.delattr(tarfile, "data_filter")
    fallback = unpack(archive, tmp_path / "fallback" / "tree").parent
    assert unpacked(fallback) == unpacked(with_filter)


@pytest.mark.parametrize("name", list(UNSAFE))
def test_unsafe_members_are_refused_without_extraction_filters(
    tmp_path: Path, name: str, without_filters: None
) -> None:
    test_unsafe_members_are_refused_and_leave_nothing(tmp_path, name)


def test_a_cached_sdist_is_fetched_on_a_python_without_extraction_filters(
    tmp_path: Path, offline: None, without_filters: None
) -> None:
    seed_cache(tmp_path)
    source = fetch(PIN, tmp_path)
    with tarfile.open(source.archive) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert {p.relative_to(source.root).as_posix(): p.read_bytes() for p in source.root.rglob("*") if p.is_file()} == files


# -- the cache -------------------------------------------------------------------------------

SDIST = sdist_bytes()
PIN = Pin("keras", "3.15.1", sha256(SDIST))


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach an index fails the test."""

    def no_index() -> IndexConfig:
        raise AssertionError("the index must not be asked: the archive is cached")

    monkeypatch.setattr(index, "pip_index_config", no_index)


def seed_cache(cache: Path, data: bytes = SDIST, version: str = "3.15.1") -> Path:
    path = cache / "sdists" / "keras" / version / f"keras-{version}.tar.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path


def test_cached_archive_is_verified_and_reused_offline(tmp_path: Path, offline: None) -> None:
    seed_cache(tmp_path)
    source = fetch(PIN, tmp_path)
    assert source.sha256 == PIN.sha256
    assert source.root == tmp_path / "src" / PIN.sha256 / "keras-3.15.1"
    assert (source.root / "keras/src/layers/layer.py").is_file()
    marker = json.loads((source.root.parent / ".forkgen-complete").read_text())
    assert marker["archive_sha256"] == PIN.sha256
    assert fetch(PIN, tmp_path).root == source.root  # unpacked once, then reused


def test_cached_archive_with_wrong_hash_is_refused(tmp_path: Path, offline: None) -> None:
    archive = seed_cache(tmp_path)
    with pytest.raises(IntegrityError, match="cached archive .* the pin says") as caught:
        fetch(Pin("keras", "3.15.1", "0" * 64), tmp_path)
    assert str(archive) in caught.value.hint
    assert not (tmp_path / "src").exists()


def tamper_modify(root: Path) -> None:
    (root / "keras/src/layers/layer.py").write_text("import os; os.system('evil')\n")


def tamper_add(root: Path) -> None:
    (root / "keras/src/sitecustomize.py").write_text("evil = True\n")


def tamper_delete(root: Path) -> None:
    (root / "keras/src/layers/core/dense.py").unlink()


def tamper_symlink(root: Path) -> None:
    (root / "keras/src/layers/layer.py").unlink()
    (root / "keras/src/layers/layer.py").symlink_to("/etc/hostname")


@pytest.mark.parametrize("tamper", [tamper_modify, tamper_add, tamper_delete, tamper_symlink])
def test_a_changed_unpacked_tree_is_unpacked_again(
    tmp_path: Path, offline: None, capsys: pytest.CaptureFixture[str], tamper: Callable[[Path], None]
) -> None:
    seed_cache(tmp_path)
    root = fetch(PIN, tmp_path).root
    pristine = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    tamper(root)
    assert fetch(PIN, tmp_path).root == root
    assert {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()} == pristine
    assert not any(p.is_symlink() for p in root.rglob("*"))
    assert "its files changed since they were unpacked" in capsys.readouterr().err


def test_a_tree_unpacked_from_another_archive_is_unpacked_again(
    tmp_path: Path, offline: None, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_cache(tmp_path)
    root = fetch(PIN, tmp_path).root
    marker = root.parent / ".forkgen-complete"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "archive_sha256": "1" * 64}))
    assert fetch(PIN, tmp_path).root == root
    assert f"unpacked from an archive with sha256 {'1' * 64}" in capsys.readouterr().err
    assert json.loads(marker.read_text())["archive_sha256"] == PIN.sha256
    marker.write_text("keras-3.15.1.tar.gz\n")  # the marker of forkgen 0.2
    fetch(PIN, tmp_path)
    assert "completion marker is unreadable" in capsys.readouterr().err


def test_an_interrupted_unpack_is_redone(tmp_path: Path, offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    seed_cache(tmp_path)
    root = fetch(PIN, tmp_path).root
    destination = root.parent
    (destination / ".forkgen-complete").unlink()  # killed before the marker was written
    tamper_modify(root)
    assert fetch(PIN, tmp_path).root == root
    assert "no completion marker" in capsys.readouterr().err
    assert b"evil" not in (root / "keras/src/layers/layer.py").read_bytes()
    # Killed mid-extraction: a temporary directory beside the destination, which does not exist yet.
    leftover = destination.parent / f".{destination.name}-k1ll3d"
    shutil.copytree(destination, leftover)
    shutil.rmtree(destination)
    tamper_modify(leftover / "keras-3.15.1")
    assert fetch(PIN, tmp_path).root == root
    assert not leftover.exists()
    assert b"evil" not in (root / "keras/src/layers/layer.py").read_bytes()
    assert sorted(p.name for p in destination.parent.iterdir()) == [destination.name]


# -- downloading -----------------------------------------------------------------------------


@pytest.fixture
def keras_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeIndex]:
    """An index serving SDIST as keras 3.15.1, which fetch uses instead of pip's configuration."""
    fake = FakeIndex({"keras": [File("keras-3.15.1.tar.gz", SDIST)]})
    with serve(fake) as url:
        monkeypatch.setattr(index, "pip_index_config", lambda: IndexConfig(index_url=url))
        yield fake


def cached_files(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "sdists").rglob("*") if p.is_file())


def test_download_is_verified_before_unpacking(tmp_path: Path, keras_index: FakeIndex) -> None:
    source = fetch(PIN, tmp_path)
    assert source.archive == tmp_path / "sdists/keras/3.15.1/keras-3.15.1.tar.gz"
    assert source.archive.read_bytes() == SDIST
    assert cached_files(tmp_path) == ["keras-3.15.1.tar.gz", "keras-3.15.1.tar.gz.sha256"]


def test_download_with_wrong_hash_is_refused_and_not_cached(tmp_path: Path, keras_index: FakeIndex) -> None:
    with pytest.raises(IntegrityError, match=f"has sha256 {PIN.sha256}, but the pin says 1111"):
        fetch(Pin("keras", "3.15.1", "1" * 64), tmp_path)
    assert cached_files(tmp_path) == []  # neither the archive nor its temporary file
    assert not (tmp_path / "src").exists()


def test_unpinned_download_must_match_the_advertised_hash(tmp_path: Path, keras_index: FakeIndex) -> None:
    keras_index.projects["keras"][0].sha256 = "2" * 64
    with pytest.raises(IntegrityError, match=f"has sha256 {PIN.sha256}, but the index advertises 2222"):
        fetch(Pin("keras", "3.15.1", None), tmp_path)
    assert cached_files(tmp_path) == []


def test_unpinned_download_without_advertised_hash_is_used_with_a_warning(
    tmp_path: Path, keras_index: FakeIndex, capsys: pytest.CaptureFixture[str]
) -> None:
    keras_index.projects["keras"][0].sha256 = None
    source = fetch(Pin("keras", "3.15.1", None), tmp_path)
    assert source.sha256 == PIN.sha256
    assert "is NOT verified: the index advertises no sha256" in capsys.readouterr().err
    assert Path(f"{source.archive}.sha256").read_text().strip() == PIN.sha256


def test_unpinned_cached_archive_is_checked_against_its_recorded_hash(
    tmp_path: Path, keras_index: FakeIndex, capsys: pytest.CaptureFixture[str]
) -> None:
    unpinned = Pin("keras", "3.15.1", None)
    source = fetch(unpinned, tmp_path)
    assert "matches the one the index advertises" in capsys.readouterr().err
    keras_index.requests.clear()
    assert fetch(unpinned, tmp_path).root == source.root
    assert keras_index.requests == []
    source.archive.write_bytes(keras_sdist("3.15.1") + b"\0")  # still a valid .tar.gz, but not the one fetched
    with pytest.raises(IntegrityError, match=r"cached archive .* but it had \w{64} when it was downloaded") as caught:
        fetch(unpinned, tmp_path)
    assert f"delete {source.archive}" in caught.value.hint


def test_unpinned_cached_archive_without_a_record_is_downloaded_again(tmp_path: Path, keras_index: FakeIndex) -> None:
    archive = seed_cache(tmp_path, keras_sdist("3.15.1"))
    source = fetch(Pin("keras", "3.15.1", None), tmp_path)
    assert source.archive == archive and archive.read_bytes() == SDIST


def test_missing_release_is_a_fetch_error(tmp_path: Path, keras_index: FakeIndex) -> None:
    with pytest.raises(FetchError, match=r"found no sdist \(\.tar\.gz\) of keras==3\.99\.404"):
        fetch(Pin("keras", "3.99.404", None), tmp_path)


@pytest.mark.parametrize("version", ["../../evil", "3.15.1/../../x", "3.15.1; rm -rf /", ""])
def test_the_version_is_validated_before_any_path(tmp_path: Path, offline: None, version: str) -> None:
    with pytest.raises(UsageError, match="not a PEP 440 version"):
        fetch(Pin("keras", version, None), tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


# -- the issue: `forkgen fetch` never runs code from the archive -----------------------------


@pytest.fixture(params=["http", "file-directory"])
def trapped_index(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """pip configured (through the environment only) with an index serving a booby-trapped
    keras 3.15.1; yields the marker its setup.py and build backend would create."""
    marker = tmp_path / "EXECUTED"
    fake = FakeIndex({"keras": [File("keras-3.15.1.tar.gz", booby_trapped_sdist(marker))]})
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FORKGEN_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    if request.param == "http":
        with serve(fake) as url:
            monkeypatch.setenv("PIP_INDEX_URL", url)
            yield marker
    else:
        monkeypatch.setenv("PIP_INDEX_URL", fake.write(tmp_path / "mirror").as_uri())
        yield marker


def test_fetch_never_runs_code_from_the_sdist(
    trapped_index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["fetch", "--version", "3.15.1", "--sha256", "3" * 64]) == EXIT_INTEGRITY
    assert "but the pin says 3333" in capsys.readouterr().err
    assert not trapped_index.exists()
    assert cached_files(tmp_path / "cache") == []

    assert cli.main(["fetch", "--version", "3.15.1"]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    root = Path(out[-1])
    assert root.parent.parent == tmp_path / "cache" / "src"
    assert (root / "setup.py").is_file() and (root / "_build/trap_backend.py").is_file()
    assert not trapped_index.exists()
