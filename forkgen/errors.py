"""Typed failures of forkgen, each with its own documented exit code.

The library raises these; only `forkgen.cli.main` prints them (one line
`error: ...`, then a `hint: ...` with the next thing to try) and exits with
`exit_code`. Anything else escaping is an internal error (exit 70).
"""

from __future__ import annotations

from typing import ClassVar

#: Exit codes of the `forkgen` command, as documented in README.md.
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_FETCH = 3
EXIT_INTEGRITY = 4
EXIT_DRIFT = 5
EXIT_BUILD = 6
EXIT_VERIFY = 7
#: `forkgen outdated`: the index serves a release newer than the pin (not a failure).
EXIT_OUTDATED = 10
EXIT_INTERNAL = 70


class ForkgenError(Exception):
    """Base of every expected failure; carries its exit code and a hint."""

    exit_code: ClassVar[int] = EXIT_INTERNAL
    default_hint: ClassVar[str] = ""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint


class UsageError(ForkgenError):
    """Bad arguments, missing configuration, or an output that already exists."""

    exit_code = EXIT_USAGE
    default_hint = "run `forkgen --help`"


class FetchError(ForkgenError):
    """The sdist could not be downloaded (no such version, index unreachable)."""

    exit_code = EXIT_FETCH
    default_hint = (
        "check the version and your pip index configuration "
        "(pip config list; PIP_INDEX_URL)"
    )


class IntegrityError(ForkgenError):
    """The sdist does not match its pinned sha256, or its archive is unsafe or corrupt."""

    exit_code = EXIT_INTEGRITY
    default_hint = "do not use this archive; check the pin in pyproject.toml [tool.forkgen]"


class UpstreamDriftError(ForkgenError):
    """Upstream moved code the patch relies on: an anchor is missing, not unique or reshaped."""

    exit_code = EXIT_DRIFT
    default_hint = (
        "run `forkgen analyze SRC` for the full report; pin a release this "
        "forkgen supports, or teach the codemods the new shape"
    )


class BuildError(ForkgenError):
    """The wheel could not be built from the patched tree."""

    exit_code = EXIT_BUILD
    default_hint = "rerun with the build output above; check that the build backend can be installed"


class VerificationError(ForkgenError):
    """The patched wheel behaves differently from upstream: a test passes upstream and fails patched."""

    exit_code = EXIT_VERIFY
    default_hint = "see the regressions listed above"
