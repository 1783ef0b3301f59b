"""Runs that share a machine: locks on what they share, private staging that a killed run leaves.

Several forkgen processes may share one download cache, one checkout's workspace, one output
directory or one index directory (a CI runner with parallel jobs, `nox -s build_fork` beside
`forkgen rebase`). Two mechanisms keep them apart, both on `filelock`'s flock(2) locks, which the
kernel releases when their holder dies, `kill -9` included:

- `hold(path, what)`: an exclusive lock on one shared thing (the download of a release, the
  unpack of an archive, a workspace tree, an index). A run that finds it taken says on stderr
  what it waits for and which process holds it, then waits; Ctrl-C ends the wait
  (KeyboardInterrupt, exit 130 in the CLI) with nothing of the waiter left.
- `staging_dir(parent, stem)` / `staging_file(parent, stem)`: a private `parent/.STEM-XXXXXXXXXXXX`
  while a run writes it, with an owner lock `….lock` held for as long as it exists. Creating one
  first sweeps `parent`: an entry of that stem whose owner lock is free belongs to a run that
  died, and goes (`sweep`).

Lock files are unlinked by their holder before it releases them: filelock (4.x) notices a lock it
won on an unlinked file and takes the new one instead, so no lock file outlives its use.
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import secrets
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from forkgen.cmd import log

LOCK_SUFFIX = ".lock"
#: A lock file without its entry is a stale one's only after this long, in seconds: a live owner
#: makes its entry right after it takes the lock, so a sweeper never unlinks a lock an owner is
#: about to take (which a filelock before 4.x would not notice).
ORPHAN_AFTER = 60.0
#: How often a waiting run says it still waits, in seconds.
REPORT_EVERY = 30.0


def _command() -> str:
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if program in {"__main__.py", "-c", "-m", ""}:
        program = "forkgen"
    text = shlex.join([program, *sys.argv[1:]])
    return text if len(text) <= 200 else text[:197] + "..."


def _write_owner(fd: int) -> None:
    """Record in the lock file who holds it, for the message of a run that has to wait."""
    owner = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": _command(),
        "since": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(owner).encode("utf-8"))


def holder(path: Path) -> str:
    """Who holds the lock at `path`, as its holder recorded it."""
    try:
        owner = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {owner['pid']} on {owner['host']} ({owner['command']}, since {owner['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


@contextmanager
def hold(path: Path, what: str) -> Iterator[None]:
    """Hold the lock at `path` (created if missing) for the body; `what` names what it guards.

    While another process holds it, log what this run waits for and who holds it, every
    REPORT_EVERY seconds, and wait. A KeyboardInterrupt while waiting propagates.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, on_acquired=_write_owner)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        started = time.monotonic()
        log(f"waiting for {what}: {holder(path)} holds it ({path})")
        while True:
            try:
                lock.acquire(timeout=REPORT_EVERY, poll_interval=0.1)
                break
            except Timeout:
                log(f"still waiting for {what} after {time.monotonic() - started:.0f} s: {holder(path)} holds it")
        log(f"{what}: ours after {time.monotonic() - started:.1f} s")
    try:
        yield
    finally:
        _unlink(path)
        lock.release()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        _unlink(path)


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def sweep(parent: Path, stem: str = "*") -> list[Path]:
    """Remove every staging entry `parent/.STEM-*` whose owner is dead; return them.

    An entry's owner lock is free when the run that made it died (or when it has none: one
    made before runs took owner locks); an entry whose lock is held belongs to a live run and
    stays. A lock file left alone for ORPHAN_AFTER seconds (its run died before making its
    entry) goes too.
    """
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for entry in sorted(parent.glob(f".{stem if stem == '*' else glob.escape(stem)}-*")):
        owned = entry.name.endswith(LOCK_SUFFIX)
        target = entry.with_name(entry.name[: -len(LOCK_SUFFIX)]) if owned else entry
        if owned and (target.exists() or target.is_symlink() or _age(entry) < ORPHAN_AFTER):
            continue  # swept with its entry, or its owner is just making it
        owner = target.with_name(target.name + LOCK_SUFFIX)
        lock = FileLock(owner)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            continue  # a live run's
        try:
            if target.exists() or target.is_symlink():
                log(f"removing {target}, left by a run that was killed")
                _remove(target)
                removed.append(target)
        finally:
            _unlink(owner)
            lock.release()
    return removed


@contextmanager
def _staging(parent: Path, stem: str, suffix: str, make: bool) -> Iterator[Path]:
    parent.mkdir(parents=True, exist_ok=True)
    sweep(parent, stem)
    while True:
        path = parent / f".{stem}-{secrets.token_hex(6)}{suffix}"
        lock = FileLock(path.with_name(path.name + LOCK_SUFFIX))
        lock.acquire()  # a new name: at most a sweeper holds it, for an instant
        try:
            if make:
                path.mkdir()
            else:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            break
        except FileExistsError:
            _unlink(path.with_name(path.name + LOCK_SUFFIX))
            lock.release()
    try:
        yield path
    finally:
        _remove(path)
        _unlink(path.with_name(path.name + LOCK_SUFFIX))
        lock.release()


@contextmanager
def staging_dir(parent: Path, stem: str) -> Iterator[Path]:
    """A new private directory `parent/.STEM-XXXXXXXXXXXX`, removed with whatever is left in it."""
    with _staging(parent, stem, "", make=True) as path:
        yield path


@contextmanager
def staging_file(parent: Path, stem: str, suffix: str = "") -> Iterator[Path]:
    """A new empty private file `parent/.STEM-XXXXXXXXXXXX<suffix>`, removed unless renamed away."""
    with _staging(parent, stem, suffix, make=False) as path:
        yield path


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` through a private sibling renamed over it: readers see the old
    file or the new one, never a part."""
    with staging_file(path.parent, path.name) as tmp:
        tmp.write_bytes(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)


def rename_dir(staged: Path, destination: Path) -> bool:
    """Rename the directory `staged` to `destination`; False if `destination` already exists
    (another run got there first), which the caller judges."""
    try:
        os.rename(staged, destination)
    except OSError as error:
        if destination.exists() or destination.is_symlink():
            return False
        raise error
    return True
