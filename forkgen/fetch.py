"""Fetch stage: download the pinned sdist, verify it, unpack it safely, cache it.

Downloading goes through `forkgen.index`, which honours pip's index configuration but never
runs anything from the archive (`pip download` would run its build backend to get metadata).
Whatever is reused from the cache is verified again: the archive against the pin, or against
the sha256 recorded when it was downloaded; the unpacked tree against the digest of its files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from forkgen import index, locking
from forkgen.cmd import log
from forkgen.config import validate_version
from forkgen.errors import IntegrityError, UsageError
from forkgen.model import Pin, Source

_COMPLETE = ".forkgen-complete"


def default_cache_dir() -> Path:
    """`$FORKGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/forkgen`, else `~/.cache/forkgen`.

    The last one only where the home directory exists: forkgen does not create a home directory
    (`HOME=/nonexistent`, a service account's), it asks for a cache directory instead.
    """
    explicit = os.environ.get("FORKGEN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "forkgen"
    hint = "pass --cache-dir, or set FORKGEN_CACHE_DIR (or XDG_CACHE_HOME) to a directory you can write to"
    try:
        home = Path.home()
    except (RuntimeError, KeyError):
        raise UsageError("the default download cache is under the home directory, and there is none "
                         "($HOME is unset and the user has no home in the password database)", hint=hint) from None
    if not home.is_dir():
        what = "does not exist" if not home.exists() else "is not a directory"
        raise UsageError(
            f"the default download cache {home / '.cache' / 'forkgen'} is under the home directory {home}, which {what}",
            hint=hint,
        )
    return home / ".cache" / "forkgen"


def sha256_of(path: Path) -> str:
    """The sha256 of the file at `path`, as hex."""
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


def _record(archive: Path) -> Path:
    """Beside each downloaded archive: its sha256, to re-verify it when it is used again."""
    return archive.with_name(archive.name + ".sha256")


def _not_pinned(pin: Pin, sha256: str, how: str) -> None:
    log(
        f"warning: {pin.distribution} {pin.version} is not pinned: sha256 {sha256} {how} "
        "(pass --sha256 to verify it against a pin)"
    )


def _download(pin: Pin, cache_dir: Path) -> tuple[Path, str]:
    """Download the sdist (nothing in it runs), verify it, then move it into the cache."""
    config = index.pip_index_config()
    candidate = index.find_sdist(pin.distribution, pin.version, pin.sha256, config)
    directory = _archive_dir(pin, cache_dir)
    directory.mkdir(parents=True, exist_ok=True)
    temporary, actual = index.download(candidate, directory, config)
    try:
        if pin.sha256 is not None and actual != pin.sha256:
            raise IntegrityError(
                f"downloaded {candidate.filename} has sha256 {actual}, but the pin says {pin.sha256}",
                hint="the index served a different file than the pinned one; "
                "check your index, or the pin in pyproject.toml",
            )
        if pin.sha256 is None and candidate.sha256 is not None and actual != candidate.sha256:
            raise IntegrityError(
                f"downloaded {candidate.filename} has sha256 {actual}, "
                f"but the index advertises {candidate.sha256}",
                hint="the download was corrupted or tampered with on the way; try again, or check your index",
            )
        if pin.sha256 is not None:
            log(f"sha256 {actual} verified")
        elif candidate.sha256 is not None:
            _not_pinned(pin, actual, "matches the one the index advertises")
        else:
            _not_pinned(pin, actual, "is NOT verified: the index advertises no sha256")
        target = directory / candidate.filename
        locking.write_atomic(_record(target), (actual + "\n").encode("utf-8"))
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return target, actual


def _verify_cached(pin: Pin, archive: Path) -> str | None:
    """The sha256 of a cached archive that still is what was verified; None to download it again."""
    actual = sha256_of(archive)
    if pin.sha256 is not None:
        expected, should = pin.sha256, f"the pin says {pin.sha256}"
    else:
        try:
            expected = _record(archive).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            log(f"{archive} has no recorded sha256 to verify it against; downloading it again")
            archive.unlink()
            return None
        should = f"it had {expected} when it was downloaded"
    if actual != expected:
        raise IntegrityError(
            f"cached archive {archive} has sha256 {actual}, but {should}",
            hint=f"the cache was modified or the pin changed; delete {archive} to download it again",
        )
    if pin.sha256 is not None:
        log(f"sha256 {actual} verified")
    else:
        _not_pinned(pin, actual, "is the one recorded when it was first downloaded")
    return actual


def _check_member(member: tarfile.TarInfo, top: str | None) -> str:
    """Refuse anything but regular files and directories at relative, '..'-free paths.

    Keras sdists hold nothing else; return the member's top-level directory.
    """
    name = member.name
    path = PurePosixPath(name)
    if member.issym():
        what = "symbolic link"
    elif member.islnk():
        what = "hard link"
    elif member.ischr() or member.isblk():
        what = "device"
    elif member.isfifo():
        what = "FIFO"
    elif not (member.isfile() or member.isdir()):
        what = "not a regular file or a directory"
    elif not path.parts:
        what = "empty path"
    elif path.is_absolute() or name.startswith(("/", "\\")) or ":" in path.parts[0]:
        what = "absolute path"
    elif ".." in path.parts:
        what = "'..' in the path"
    else:
        if top is not None and path.parts[0] != top:
            raise IntegrityError(f"archive has more than one top-level entry ({top!r}, {path.parts[0]!r})")
        return path.parts[0]
    raise IntegrityError(f"unsafe archive member {name!r}: {what}")


def tree_digest(root: Path) -> str:
    """sha256 over the sorted relative paths under `root` and the sha256 of each file."""
    entries = []
    for directory, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if Path(directory, d).is_symlink()]:
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            if relative != _COMPLETE:
                regular = path.is_file() and not path.is_symlink()
                entries.append(f"{relative}\0{sha256_of(path) if regular else 'not a regular file'}\n")
    return hashlib.sha256("".join(sorted(entries)).encode()).hexdigest()


def _check_unpacked(destination: Path, sha256: str) -> tuple[Path | None, str]:
    """The root of the unpack in `destination` if it is complete and unchanged, else why not."""
    try:
        marker = json.loads((destination / _COMPLETE).read_text(encoding="utf-8"))
        archive_sha256, tree_sha256 = marker["archive_sha256"], marker["tree_sha256"]
    except FileNotFoundError:
        return None, "it has no completion marker (an interrupted unpack?)"
    except (OSError, ValueError, KeyError, TypeError):
        return None, "its completion marker is unreadable"
    roots = [p for p in destination.iterdir() if p.is_dir() and not p.is_symlink()]
    if archive_sha256 != sha256:
        return None, f"it was unpacked from an archive with sha256 {archive_sha256}, not {sha256}"
    if tree_sha256 != tree_digest(destination):
        return None, "its files changed since they were unpacked"
    if len(roots) != 1:
        return None, f"it holds {len(roots)} directories instead of one"
    return roots[0], ""


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _data_mode(mode: int) -> int:
    """A regular file's mode as tarfile's `data` filter sets it: no setuid, setgid or sticky
    bit, no group or other write; the user may read and write; execute bits only where the
    user's is set."""
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


def _extract_as_data(tar: tarfile.TarFile, members: list[tarfile.TarInfo], directory: Path) -> None:
    """What `extractall(filter="data")` does, for the Pythons that lack the filter.

    The members passed `_check_member`: regular files and directories at relative, '..'-free
    paths, no links, no devices. Files get `_data_mode` and their mtime, directories the
    default mode and their mtime, nothing gets the archive's owner; a path that would resolve
    outside `directory` is refused, as the filter refuses it.
    """
    root = directory.resolve()
    directories: list[tuple[Path, tarfile.TarInfo]] = []
    for member in members:
        target = root.joinpath(*PurePosixPath(member.name).parts)
        if not target.resolve().is_relative_to(root):
            raise IntegrityError(f"unsafe archive member {member.name!r}: outside the destination")
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            directories.append((target, member))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        content = tar.extractfile(member)
        if content is None:  # not reached: _check_member lets regular files through only
            raise IntegrityError(f"unsafe archive member {member.name!r}: not a regular file")
        with content, target.open("wb") as out:
            shutil.copyfileobj(content, out)
        os.chmod(target, _data_mode(member.mode))
        os.utime(target, (member.mtime, member.mtime))
    for target, member in reversed(directories):  # after their files, which change their mtime
        os.utime(target, (member.mtime, member.mtime))


def _extract(archive: Path, directory: Path) -> str:
    """Extract the checked members of `archive` into `directory`; return its top-level directory."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            top: str | None = None
            for member in members:
                top = _check_member(member, top)
            if top is None:
                raise IntegrityError(f"archive {archive.name} is empty")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(directory, members=members, filter="data")
            else:  # Python < 3.11.4 (Debian 12's 3.11.2): no extraction filters
                _extract_as_data(tar, members, directory)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise IntegrityError(
            f"archive {archive} is corrupt or unreadable: {error}",
            hint=f"delete {archive} and fetch again",
        ) from None
    if not (directory / top).is_dir():
        raise IntegrityError(f"archive {archive.name} has no top-level directory")
    return top


def unpack(archive: Path, destination: Path, *, sha256: str | None = None) -> Path:
    """Unpack `archive` into `destination` atomically; return the sdist's root directory.

    `sha256` is the archive's verified digest (computed when not given). An earlier unpack in
    `destination` is reused only if its completion marker records that digest and the digest
    of its files still matches; otherwise, and after an interrupted unpack, it is redone. Runs
    unpacking the same archive take turns (the lock beside `destination`); one that still
    finds `destination` taken when it renames its copy into place (a run that does not lock)
    uses it if it holds the same verified files, and refuses it otherwise.
    """
    sha256 = sha256 or sha256_of(archive)
    lock = destination.with_name(f".{destination.name}{locking.LOCK_SUFFIX}")
    with locking.hold(lock, f"the unpack of {archive.name} into {destination}"):
        if destination.exists() or destination.is_symlink():
            root, reason = _check_unpacked(destination, sha256)
            if root is not None:
                return root
            log(f"discarding {destination}: {reason}; unpacking again")
            _remove(destination)
        with locking.staging_dir(destination.parent, destination.name) as temporary:
            top = _extract(archive, temporary)
            marker = {"archive_sha256": sha256, "tree_sha256": tree_digest(temporary)}
            (temporary / _COMPLETE).write_text(json.dumps(marker) + "\n", encoding="utf-8")
            if locking.rename_dir(temporary, destination):
                return destination / top
            root, reason = _check_unpacked(destination, sha256)
            if root is None:
                raise IntegrityError(
                    f"another run unpacked {archive.name} into {destination} first, and its files are not "
                    f"the verified ones: {reason}",
                    hint=f"delete {destination} and fetch again",
                )
            log(f"another run unpacked {archive.name} into {destination} first, with the same verified files; using them")
            return root


def fetch(pin: Pin, cache_dir: Path) -> Source:
    """Return the verified, unpacked sdist of `pin`, downloading it only if not cached.

    Nothing from the archive is executed; a cached archive or tree is verified again first.
    """
    pin = dataclasses.replace(pin, version=validate_version(pin.version, "version"))
    directory = _archive_dir(pin, cache_dir)
    # One run at a time downloads (or re-verifies) a release; the others wait and then use it.
    with locking.hold(directory.with_name(f".{pin.version}{locking.LOCK_SUFFIX}"),
                      f"the download of {pin.distribution} {pin.version}"):
        locking.sweep(directory, "download")  # the partial download of a run that was killed
        archive = _cached_archive(pin, cache_dir)
        sha256 = None
        if archive is not None:
            log(f"using cached {archive}")
            sha256 = _verify_cached(pin, archive)
        if archive is None or sha256 is None:
            archive, sha256 = _download(pin, cache_dir)
    root = unpack(archive, cache_dir / "src" / sha256, sha256=sha256)
    return Source(
        distribution=pin.distribution,
        version=pin.version,
        sha256=sha256,
        archive=archive,
        root=root,
    )
