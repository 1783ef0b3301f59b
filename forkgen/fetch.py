"""Fetch stage: download the pinned sdist with pip, verify it, unpack it safely, cache it."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from forkgen.cmd import log, run, tail
from forkgen.errors import FetchError, IntegrityError
from forkgen.model import Pin, Source

_COMPLETE = ".forkgen-complete"


def default_cache_dir() -> Path:
    """`$FORKGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/forkgen`, else `~/.cache/forkgen`."""
    explicit = os.environ.get("FORKGEN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "forkgen"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _archive_dir(pin: Pin, cache_dir: Path) -> Path:
    return cache_dir / "sdists" / pin.distribution / pin.version


def _cached_archive(pin: Pin, cache_dir: Path) -> Path | None:
    directory = _archive_dir(pin, cache_dir)
    archives = sorted(directory.glob("*.tar.gz")) if directory.is_dir() else []
    return archives[0] if archives else None


def _download(pin: Pin, cache_dir: Path) -> Path:
    """Download the sdist with pip (the user's index configuration applies)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as tmp:
        requirement = f"{pin.distribution}=={pin.version}"
        log(f"downloading the sdist of {requirement} with pip")
        result = run(
            [
                sys.executable, "-m", "pip", "download",
                "--no-deps",
                "--no-binary", pin.distribution,
                "--disable-pip-version-check",
                "--dest", tmp,
                requirement,
            ],
            capture=True,
        )
        if result.returncode != 0:
            raise FetchError(
                f"pip could not download {requirement}:\n{tail(result.stdout)}"
            )
        files = [p for p in Path(tmp).iterdir() if p.is_file()]
        archives = [p for p in files if p.name.endswith(".tar.gz")]
        if len(archives) != 1:
            names = ", ".join(sorted(p.name for p in files)) or "nothing"
            raise FetchError(f"pip downloaded {names} for {requirement}, expected one .tar.gz sdist")
        target_dir = _archive_dir(pin, cache_dir)
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / archives[0].name
        os.replace(archives[0], target)
        return target


def _verify(pin: Pin, archive: Path, *, cached: bool) -> str:
    actual = sha256_of(archive)
    if pin.sha256 is None:
        log(
            f"warning: {pin.distribution} {pin.version} is not pinned; "
            f"using the archive as downloaded, sha256 {actual} (pass --sha256 to verify it)"
        )
        return actual
    if actual != pin.sha256:
        if cached:
            raise IntegrityError(
                f"cached archive {archive} has sha256 {actual}, but the pin says {pin.sha256}",
                hint=f"the cache was modified or the pin changed; delete {archive} to download it again",
            )
        archive.unlink()
        raise IntegrityError(
            f"downloaded {archive.name} has sha256 {actual}, but the pin says {pin.sha256}",
            hint="the index served a different file than the pinned one; check your index, or the pin in pyproject.toml",
        )
    return actual


def _check_member(member: tarfile.TarInfo, top: str | None) -> str:
    """Refuse members that could write outside the tree; return the top-level directory."""
    name = member.name
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith(("/", "\\")) or ":" in path.parts[0]:
        raise IntegrityError(f"unsafe archive member {name!r}: absolute path")
    if ".." in path.parts:
        raise IntegrityError(f"unsafe archive member {name!r}: '..' in the path")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise IntegrityError(f"unsafe archive member {name!r}: not a file, directory or link")
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        base = path.parent if member.issym() else PurePosixPath()
        if link.is_absolute():
            raise IntegrityError(f"unsafe archive member {name!r}: link to absolute path {member.linkname!r}")
        depth = 0
        for part in (base / link).parts:
            depth += -1 if part == ".." else (0 if part == "." else 1)
            if depth < 0:
                raise IntegrityError(f"unsafe archive member {name!r}: link {member.linkname!r} escapes the tree")
    first = path.parts[0]
    if top is not None and first != top:
        raise IntegrityError(f"archive has more than one top-level entry ({top!r}, {first!r})")
    return first


def unpack(archive: Path, destination: Path) -> Path:
    """Unpack `archive` into `destination` atomically; return the sdist's root directory."""
    if (destination / _COMPLETE).is_file():
        roots = [p for p in destination.iterdir() if p.is_dir()]
        if len(roots) == 1:
            return roots[0]
        shutil.rmtree(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}-"))
    try:
        try:
            with tarfile.open(archive, "r:*") as tar:
                members = tar.getmembers()
                top: str | None = None
                for member in members:
                    top = _check_member(member, top)
                if top is None:
                    raise IntegrityError(f"archive {archive.name} is empty")
                tar.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
            raise IntegrityError(
                f"archive {archive} is corrupt or unreadable: {error}",
                hint=f"delete {archive} and fetch again",
            ) from None
        (tmp / _COMPLETE).write_text(archive.name + "\n", encoding="utf-8")
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(tmp, destination)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return destination / top


def fetch(pin: Pin, cache_dir: Path) -> Source:
    """Return the verified, unpacked sdist of `pin`, downloading it only if not cached."""
    archive = _cached_archive(pin, cache_dir)
    cached = archive is not None
    if archive is None:
        archive = _download(pin, cache_dir)
    else:
        log(f"using cached {archive}")
    sha256 = _verify(pin, archive, cached=cached)
    log(f"sha256 {sha256} verified" if pin.sha256 else f"sha256 {sha256}")
    root = unpack(archive, cache_dir / "src" / sha256)
    return Source(
        distribution=pin.distribution,
        version=pin.version,
        sha256=sha256,
        archive=archive,
        root=root,
    )
