"""The pin: `[tool.forkgen]` in pyproject.toml, overridable from the command line."""

from __future__ import annotations

import os
import re
import stat
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from forkgen.errors import UsageError
from forkgen.model import Pin

_SHA256 = re.compile(r"[0-9a-f]{64}")
_LABEL = re.compile(r"[a-z0-9]+(?:[._][a-z0-9]+)*")
DISTRIBUTIONS = ("keras", "keras-nightly")


@dataclass(frozen=True)
class Config:
    """`[tool.forkgen]` of the project, with the file it came from."""

    path: Path | None
    pin: Pin | None
    #: Directory whose files the fork adds over upstream's (its README).
    overlay: Path | None
    #: Whether builds add the fast-path extension (several positional tensors, `training=<bool>`).
    training_fast_path: bool = True
    #: `patches = [...]`: the patches a build applies (None: the whole series).
    patches: tuple[str, ...] | None = None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.forkgen] table, from `start` upwards."""
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError):
                continue
            if "forkgen" in data.get("tool", {}):
                return candidate
    return None


def validate_sha256(value: str, where: str) -> str:
    value = value.strip().lower()
    if not _SHA256.fullmatch(value):
        raise UsageError(f"{where}: {value!r} is not a sha256 (64 hex digits)")
    return value


#: `--version latest`: the newest release the index serves (for keras-nightly, the default).
LATEST = "latest"
#: The major Keras release the patches are written for; earlier ones are refused up front.
KERAS_MAJOR = 3


def validate_version(value: str, where: str) -> str:
    """`value` as a normalised PEP 440 version, before it reaches a path or a pip argument.

    Normalising means `3.15.1` stays `3.15.1` and `v3.15.1` becomes `3.15.1`; anything that is
    not a version (`3.15.1; x`, `../../evil`, an empty string) is a usage error, and so is a
    release before Keras 3 (`2.15.0`): the patches are written against Keras 3's code, so it is
    refused here rather than reported as upstream drift after a download.
    """
    try:
        version = Version(value)
    except (InvalidVersion, TypeError):
        raise UsageError(
            f"{where}: {value!r} is not a PEP 440 version",
            hint="give a release such as 3.15.1 (or `latest`)",
        ) from None
    if version.major < KERAS_MAJOR:
        raise UsageError(
            f"{where}: {value!r} is a Keras {version.major} release; the patches are for Keras {KERAS_MAJOR} only",
            hint=f"give a Keras {KERAS_MAJOR} release such as 3.15.1 (or `latest`)",
        )
    return str(version)


def _unwritable(directory: Path) -> str | None:
    """Why no file can be created in `directory` (None: one can). Creating one is the only test
    that holds for root, /proc and read-only mounts alike; it is removed at once."""
    try:
        fd, name = tempfile.mkstemp(prefix=".forkgen-probe-", dir=directory)
    except OSError as error:
        return error.strerror or str(error)
    os.close(fd)
    os.unlink(name)
    return None


def validate_dir(path: Path, where: str, hint: str | None = None) -> Path:
    """`path` as a directory forkgen writes into, checked before any work begins: an existing
    directory that a file can be created in, or a missing one whose nearest existing parent is
    such a directory (the run creates it). Anything else (a file, a path under a file, /proc, no
    permission) is a usage error naming `where` (the option, or what the default is) and the path.
    """
    hint = hint or f"give {where} a directory you can write to (it is created if missing)"
    absolute = path.absolute()
    for candidate in (absolute, *absolute.parents):
        try:
            mode = candidate.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            if candidate.is_symlink():
                raise UsageError(f"{where} {path}: {candidate} is a broken symbolic link", hint=hint) from None
            continue
        except OSError as error:
            raise UsageError(f"{where} {path}: cannot reach {candidate} ({error.strerror})", hint=hint) from None
        if not stat.S_ISDIR(mode):
            what = "is a file, not a directory" if stat.S_ISREG(mode) else "is not a directory"
            raise UsageError(
                f"{where} {path} {what}" if candidate == absolute else f"{where} {path}: {candidate} {what}",
                hint=hint,
            )
        problem = _unwritable(candidate)
        if problem is not None:
            raise UsageError(f"{where} {path}: cannot write in {candidate} ({problem})", hint=hint)
        return path
    raise UsageError(f"{where} {path}: no part of it exists", hint=hint)  # not reached: / exists


def validate_label(value: str, where: str) -> str:
    if not _LABEL.fullmatch(value):
        raise UsageError(
            f"{where}: {value!r} is not a PEP 440 local version label",
            hint="use lower-case letters, digits and dots, e.g. fastcallspec.1",
        )
    return value


def load(path: Path | None = None) -> Config:
    """Read `[tool.forkgen]` from `path`, or from the nearest pyproject.toml that has it."""
    if path is None:
        path = find_pyproject(Path.cwd())
        if path is None:
            return Config(path=None, pin=None, overlay=None)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{path}: invalid TOML: {error}") from None
    table = data.get("tool", {}).get("forkgen")
    if not isinstance(table, dict):
        raise UsageError(f"{path} has no [tool.forkgen] table")
    where = f"{path} [tool.forkgen]"
    missing = [k for k in ("distribution", "version", "sha256") if k not in table]
    if missing:
        raise UsageError(f"{where}: missing {', '.join(missing)}")
    distribution = str(table["distribution"])
    if distribution not in DISTRIBUTIONS:
        raise UsageError(f"{where}: distribution must be one of {', '.join(DISTRIBUTIONS)}")
    pin = Pin(
        distribution=distribution,
        version=validate_version(str(table["version"]), f"{where} version"),
        sha256=validate_sha256(str(table["sha256"]), f"{where} sha256"),
        local_label=validate_label(str(table["local-label"]), f"{where} local-label") if "local-label" in table else None,
    )
    overlay = table.get("overlay")
    training = table.get("training-fast-path", True)
    if not isinstance(training, bool):
        raise UsageError(f"{where}: training-fast-path must be true or false")
    patches = table.get("patches")
    if patches is not None and not (isinstance(patches, list) and all(isinstance(p, str) for p in patches)):
        raise UsageError(f"{where}: patches must be a list of patch names", hint="`forkgen series` lists them")
    return Config(
        path=path,
        pin=pin,
        overlay=(path.parent / str(overlay)) if overlay else None,
        training_fast_path=training,
        patches=tuple(patches) if patches is not None else None,
    )


def resolve_pin(
    config: Config,
    *,
    distribution: str | None = None,
    version: str | None = None,
    sha256: str | None = None,
    local_label: str | None = None,
) -> Pin:
    """The pin to use: the config's, with command-line values taking precedence.

    A version other than the pinned one has no known sha256 unless `sha256` is
    given; it is then verified on first use only (see `fetch`).
    """
    base = config.pin
    if base is None and version is None:
        raise UsageError(
            "no pinned Keras release: no pyproject.toml with [tool.forkgen] here or above",
            hint="run from the forkgen checkout, pass --config PATH, or pass --version (and --sha256)",
        )
    dist = distribution or (base.distribution if base else "keras")
    if dist not in DISTRIBUTIONS:
        raise UsageError(f"--distribution must be one of {', '.join(DISTRIBUTIONS)}")
    ver = validate_version(version, "--version") if version is not None else base.version if base else ""
    same_release = base is not None and base.distribution == dist and base.version == ver
    pinned_sha = base.sha256 if same_release and base is not None else None
    if sha256 is not None:
        pinned_sha = validate_sha256(sha256, "--sha256")
    label = local_label or os.environ.get("FORKGEN_LOCAL_LABEL") or (base.local_label if base else None)
    if label is not None:
        label = validate_label(label, "local label")
    return Pin(distribution=dist, version=ver, sha256=pinned_sha, local_label=label)
