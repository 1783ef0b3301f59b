"""`forkgen publish`: the static PEP 503/691/658 index, on small synthetic wheels."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import zipfile
from pathlib import Path

import pytest

from forkgen import cli, locking, publish
from forkgen.errors import EXIT_INTEGRITY, EXIT_USAGE, IntegrityError


def make_wheel(directory: Path, version: str = "3.15.1+fastcallspec.1", payload: str = "x = 1\n",
               name: str = "keras", metadata_version: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    dist_info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {metadata_version or version}\nRequires-Python: >=3.11\n\nA fork.\n"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", payload)
        wheel.writestr(f"{dist_info}/METADATA", metadata)
        wheel.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\n")
        wheel.writestr(f"{dist_info}/RECORD", "")
    return path


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pages_link_every_file_with_its_hashes(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in")
    index = tmp_path / "index"
    result = publish.publish([wheel], index)
    assert result.added == (wheel.name,)
    stored = index / "files" / wheel.name
    metadata = index / "files" / (wheel.name + ".metadata")
    assert stored.read_bytes() == wheel.read_bytes()
    assert metadata.read_bytes().startswith(b"Metadata-Version: 2.1\nName: keras\n")
    page = (index / "simple" / "keras" / "index.html").read_text()
    anchors = re.findall(r"<a ([^>]*)>([^<]*)</a>", page)
    assert len(anchors) == 1 and anchors[0][1] == wheel.name
    attributes = dict(re.findall(r'([a-z-]+)="([^"]*)"', anchors[0][0]))
    assert attributes["href"] == f"../../files/keras-3.15.1%2Bfastcallspec.1-py3-none-any.whl#sha256={sha256(wheel)}"
    assert attributes["data-requires-python"] == "&gt;=3.11"
    assert attributes["data-core-metadata"] == attributes["data-dist-info-metadata"] == f"sha256={sha256(metadata)}"
    data = json.loads((index / "simple" / "keras" / "index.json").read_text())
    assert data["meta"] == {"api-version": "1.1"} and data["name"] == "keras"
    assert data["versions"] == ["3.15.1+fastcallspec.1"]
    (entry,) = data["files"]
    assert entry["url"] == "../../files/keras-3.15.1%2Bfastcallspec.1-py3-none-any.whl"
    assert entry["hashes"] == {"sha256": sha256(wheel)} and entry["size"] == wheel.stat().st_size
    assert entry["requires-python"] == ">=3.11" and entry["core-metadata"] == {"sha256": sha256(metadata)}
    assert '<a href="keras/">keras</a>' in (index / "simple" / "index.html").read_text()
    assert json.loads((index / "simple" / "index.json").read_text())["projects"] == [{"name": "keras"}]


def test_a_second_version_keeps_the_first(tmp_path: Path) -> None:
    index = tmp_path / "index"
    first = make_wheel(tmp_path / "a", "3.9.2+fastcallspec.1")
    second = make_wheel(tmp_path / "b", "3.15.1+fastcallspec.1")
    publish.publish([second], index)
    publish.publish([first], index)
    page = (index / "simple" / "keras" / "index.html").read_text()
    assert first.name in page and second.name in page
    data = json.loads((index / "simple" / "keras" / "index.json").read_text())
    assert [f["filename"] for f in data["files"]] == [first.name, second.name]  # by version, not by text
    assert data["versions"] == ["3.9.2+fastcallspec.1", "3.15.1+fastcallspec.1"]


def test_publishing_the_same_wheel_twice_is_a_noop(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in")
    index = tmp_path / "index"
    publish.publish([wheel], index)
    before = snapshot(index)
    copy = make_wheel(tmp_path / "elsewhere")  # same bytes, another path
    result = publish.publish([copy], index)
    assert result.added == () and result.unchanged == (wheel.name,)
    assert snapshot(index) == before  # not even rewritten


def test_a_different_wheel_under_a_published_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = tmp_path / "index"
    publish.publish([make_wheel(tmp_path / "a")], index)
    before = snapshot(index)
    other = make_wheel(tmp_path / "b", payload="x = 2\n")
    with pytest.raises(IntegrityError, match="exists with sha256"):
        publish.publish([other], index)
    assert snapshot(index) == before
    assert cli.main(["publish", str(other), "--index-dir", str(index)]) == EXIT_INTEGRITY
    assert "bump the local label" in capsys.readouterr().err
    assert snapshot(index) == before


def test_a_refused_wheel_stops_the_whole_batch(tmp_path: Path) -> None:
    index = tmp_path / "index"
    publish.publish([make_wheel(tmp_path / "a")], index)
    new = make_wheel(tmp_path / "n", "3.14.1+fastcallspec.1")
    clash = make_wheel(tmp_path / "b", payload="x = 2\n")
    with pytest.raises(IntegrityError):
        publish.publish([new, clash], index)
    assert not (index / "files" / new.name).exists()


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    publish.publish([make_wheel(tmp_path / "a", "3.14.1+fastcallspec.1")], index)
    before = snapshot(index)
    real_replace = os.replace

    def failing_replace(src: str, dst: str) -> None:
        if str(dst).endswith(".whl"):
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        publish.publish([make_wheel(tmp_path / "b", "3.15.1+fastcallspec.1")], index)
    after = snapshot(index)
    assert not [name for name in after if Path(name).name.startswith(".")]  # no temporary file, no lock left
    assert after == before  # the new wheel's metadata file was rolled back too


def test_a_wheel_whose_metadata_disagrees_with_its_name_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in", metadata_version="3.15.1")
    with pytest.raises(IntegrityError, match="METADATA says keras 3.15.1"):
        publish.publish([wheel], tmp_path / "index")


def test_a_running_publish_is_waited_for_and_a_dead_ones_lock_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "index"
    index.mkdir()
    lock = index / ".forkgen-publish.lock"
    lock.write_text('{"pid": 123}')  # the lock file of a publisher that was killed: nobody holds it
    publish.publish([make_wheel(tmp_path / "a", "3.14.1+fastcallspec.1")], index)
    assert "waiting" not in capsys.readouterr().err and not lock.exists()
    held, release = threading.Event(), threading.Event()

    def another_publisher() -> None:
        with locking.hold(lock, "the index"):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=another_publisher)
    thread.start()
    assert held.wait(30)
    threading.Timer(1.0, release.set).start()
    publish.publish([make_wheel(tmp_path / "b", "3.15.1+fastcallspec.1")], index)  # waits, then publishes
    thread.join()
    err = capsys.readouterr().err
    assert f"waiting for the index {index}: pid {os.getpid()}" in err
    assert sorted(p.name for p in (index / "files").glob("*.whl")) == [
        "keras-3.14.1+fastcallspec.1-py3-none-any.whl", "keras-3.15.1+fastcallspec.1-py3-none-any.whl"]
    assert not lock.exists()


def test_cli_prints_the_simple_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = make_wheel(tmp_path / "in")
    assert cli.main(["publish", str(wheel), "--index-dir", str(tmp_path / "index")]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(tmp_path / "index" / "simple")
    assert cli.main(["publish", str(tmp_path / "missing.whl"), "--index-dir", str(tmp_path / "index")]) == EXIT_USAGE
