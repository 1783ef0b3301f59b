"""Publish stage: add wheels to a static package index that pip resolves from.

The index directory holds the wheels and three views of them:

    DIR/files/<wheel>                  the wheel
    DIR/files/<wheel>.metadata         its METADATA (PEP 658), so pip resolves without the wheel
    DIR/simple/index.html              PEP 503 root page          (text/html)
    DIR/simple/index.json              PEP 691 root               (application/vnd.pypi.simple.v1+json)
    DIR/simple/<project>/index.html    PEP 503 project page, `#sha256=` fragments,
                                       `data-requires-python`, `data-core-metadata`
    DIR/simple/<project>/index.json    PEP 691 project page (api-version 1.1)

Pages are regenerated from what `files/` holds, so a second version keeps the
first. Every file is written next to its target and renamed over it; a lock
keeps publishers apart (the next one waits, and says for whom). Publishing a wheel that is already there is a
no-op; a different wheel under an existing file name is refused.
"""

from __future__ import annotations

import hashlib
import html
import json
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from urllib.parse import quote

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from forkgen import locking
from forkgen.cmd import log
from forkgen.errors import IntegrityError, UsageError
from forkgen.fetch import sha256_of

JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
API_VERSION = "1.1"


@dataclass(frozen=True)
class Published:
    """One wheel as the index lists it."""

    filename: str
    project: str
    version: str
    sha256: str
    size: int
    requires_python: str | None
    metadata_sha256: str


@dataclass(frozen=True)
class PublishResult:
    added: tuple[str, ...]
    unchanged: tuple[str, ...]
    index_dir: Path


def _wheel_metadata(path: Path) -> bytes:
    """The METADATA of a wheel, checked against its file name."""
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as error:
        raise UsageError(f"{path.name} is not a wheel file name: {error}") from None
    try:
        with zipfile.ZipFile(path) as wheel:
            names = [n for n in wheel.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise IntegrityError(f"{path.name} has {len(names)} .dist-info/METADATA files, expected 1")
            metadata = wheel.read(names[0])
    except (zipfile.BadZipFile, OSError) as error:
        raise IntegrityError(f"{path} is not a readable wheel: {error}") from None
    headers = HeaderParser().parsestr(metadata.decode("utf-8"))
    if canonicalize_name(headers.get("Name", "")) != name or headers.get("Version") != str(version):
        raise IntegrityError(
            f"{path.name}: METADATA says {headers.get('Name')} {headers.get('Version')}, the file name {name} {version}"
        )
    return metadata


def _describe(wheel: Path, metadata: bytes) -> Published:
    name, version, _, _ = parse_wheel_filename(wheel.name)
    requires = HeaderParser().parsestr(metadata.decode("utf-8")).get("Requires-Python")
    return Published(
        filename=wheel.name,
        project=str(name),
        version=str(version),
        sha256=sha256_of(wheel),
        size=wheel.stat().st_size,
        requires_python=requires.strip() if requires else None,
        metadata_sha256=hashlib.sha256(metadata).hexdigest(),
    )


def _write_atomic(path: Path, data: bytes) -> bool:
    """Write `data` to `path` by renaming a private sibling over it; False if already equal."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    locking.write_atomic(path, data)
    return True


@contextmanager
def _locked(index_dir: Path) -> Iterator[None]:
    """One publisher at a time per index; the next one waits. What a killed publisher left
    half-written (its private files beside the pages and wheels) goes first."""
    index_dir.mkdir(parents=True, exist_ok=True)
    with locking.hold(index_dir / ".forkgen-publish.lock", f"the index {index_dir}"):
        simple = index_dir / "simple"
        for directory in (index_dir / "files", simple, *(simple.iterdir() if simple.is_dir() else ())):
            locking.sweep(directory)
        yield


def _listing(index_dir: Path) -> dict[str, list[Published]]:
    """Every published wheel, by project, from `files/` and the `.metadata` beside each."""
    projects: dict[str, list[Published]] = {}
    files = index_dir / "files"
    for wheel in sorted(files.glob("*.whl")) if files.is_dir() else []:
        metadata_file = wheel.with_name(wheel.name + ".metadata")
        metadata = metadata_file.read_bytes() if metadata_file.is_file() else _wheel_metadata(wheel)
        published = _describe(wheel, metadata)
        projects.setdefault(published.project, []).append(published)
    return projects


def _sort_key(published: Published) -> tuple[Version, str]:
    return Version(published.version), published.filename


def project_html(project: str, files: list[Published]) -> str:
    lines = ["<!DOCTYPE html>", "<html>", "  <head>", '    <meta name="pypi:repository-version" content="1.1">',
             f"    <title>Links for {html.escape(project)}</title>", "  </head>", "  <body>",
             f"    <h1>Links for {html.escape(project)}</h1>"]
    for f in sorted(files, key=_sort_key):
        attributes = f'href="../../files/{quote(f.filename)}#sha256={f.sha256}"'
        if f.requires_python:
            attributes += f' data-requires-python="{html.escape(f.requires_python, quote=True)}"'
        attributes += f' data-dist-info-metadata="sha256={f.metadata_sha256}" data-core-metadata="sha256={f.metadata_sha256}"'
        lines.append(f"    <a {attributes}>{html.escape(f.filename)}</a><br>")
    lines += ["  </body>", "</html>", ""]
    return "\n".join(lines)


def project_json(project: str, files: list[Published]) -> str:
    ordered = sorted(files, key=_sort_key)
    page = {
        "meta": {"api-version": API_VERSION},
        "name": project,
        "versions": sorted({f.version for f in ordered}, key=Version),
        "files": [
            {
                "filename": f.filename,
                "url": f"../../files/{quote(f.filename)}",
                "hashes": {"sha256": f.sha256},
                "requires-python": f.requires_python,
                "core-metadata": {"sha256": f.metadata_sha256},
                "dist-info-metadata": {"sha256": f.metadata_sha256},
                "size": f.size,
            }
            for f in ordered
        ],
    }
    return json.dumps(page, indent=2, sort_keys=True) + "\n"


def root_html(projects: list[str]) -> str:
    links = [f'    <a href="{quote(p)}/">{html.escape(p)}</a><br>' for p in sorted(projects)]
    return "\n".join(["<!DOCTYPE html>", "<html>", "  <head>", '    <meta name="pypi:repository-version" content="1.1">',
                      "    <title>Simple index</title>", "  </head>", "  <body>", *links, "  </body>", "</html>", ""])


def root_json(projects: list[str]) -> str:
    page = {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in sorted(projects)]}
    return json.dumps(page, indent=2, sort_keys=True) + "\n"


def _write_pages(index_dir: Path) -> None:
    projects = _listing(index_dir)
    simple = index_dir / "simple"
    for project, published in projects.items():
        _write_atomic(simple / project / "index.html", project_html(project, published).encode())
        _write_atomic(simple / project / "index.json", project_json(project, published).encode())
    _write_atomic(simple / "index.html", root_html(list(projects)).encode())
    _write_atomic(simple / "index.json", root_json(list(projects)).encode())


def publish(wheels: list[Path], index_dir: Path) -> PublishResult:
    """Add `wheels` to the static index in `index_dir` (created if missing)."""
    if not wheels:
        raise UsageError("no wheel given")
    checked: list[tuple[Path, bytes]] = []
    offered: dict[str, tuple[Path, str]] = {}  # file name -> (first wheel of that name, its sha256)
    for wheel in wheels:
        if not wheel.is_file():
            raise UsageError(f"{wheel} does not exist")
        metadata = _wheel_metadata(wheel)
        digest = sha256_of(wheel)
        first = offered.setdefault(wheel.name, (wheel, digest))
        if first[1] != digest:
            raise IntegrityError(
                f"two different wheels named {wheel.name} in one publish: {first[0]} (sha256 {first[1]}) "
                f"and {wheel} (sha256 {digest})",
                hint="an index serves one file per name: publish one of them, under its own local label",
            )
        if first[0] is wheel:
            checked.append((wheel, metadata))
    added: list[str] = []
    unchanged: list[str] = []
    with _locked(index_dir):
        files = index_dir / "files"
        for wheel, _ in checked:  # refuse before writing anything
            existing = files / wheel.name
            if not existing.is_file():
                continue
            published, digest = sha256_of(existing), offered[wheel.name][1]
            if published != digest:
                raise IntegrityError(
                    f"{existing} exists with sha256 {published}; {wheel} has {digest}",
                    hint="a published file never changes: bump the local label (a patch version, or --local-label) and rebuild",
                )
        created: list[Path] = []
        try:
            for wheel, metadata in checked:
                target = files / wheel.name
                if target.is_file():
                    unchanged.append(wheel.name)
                    _write_atomic(target.with_name(target.name + ".metadata"), metadata)  # no-op unless missing
                    continue
                for path, data in ((target.with_name(target.name + ".metadata"), metadata), (target, wheel.read_bytes())):
                    _write_atomic(path, data)
                    created.append(path)
                added.append(wheel.name)
            _write_pages(index_dir)
        except BaseException:
            # Roll back this publish: its files go, the pages describe what is left.
            for path in created:
                path.unlink(missing_ok=True)
            try:
                _write_pages(index_dir)
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
            raise
    for name in added:
        log(f"published {name}")
    for name in unchanged:
        log(f"{name} is already published with the same sha256; nothing changed")
    return PublishResult(added=tuple(added), unchanged=tuple(unchanged), index_dir=index_dir)

