"""Every subprocess and every progress line goes through here."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def log(message: str) -> None:
    """A progress line on stderr (stdout carries only results)."""
    print(f"forkgen: {message}", file=sys.stderr, flush=True)


def run(
    args: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    capture: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `args`, echoing the command first; never raises on a non-zero exit.

    With `capture`, stdout and stderr are returned (merged into stdout);
    otherwise the command's output goes to our stderr as it runs.
    """
    argv = [str(a) for a in args]
    print(f"+ {shlex.join(argv)}", file=sys.stderr, flush=True)
    full_env = {**os.environ, **env} if env is not None else None
    return subprocess.run(
        argv,
        cwd=cwd,
        env=full_env,
        text=True,
        stdout=subprocess.PIPE if capture else sys.stderr,
        stderr=subprocess.STDOUT,
        check=False,
    )


def tail(text: str, lines: int = 5) -> str:
    """The last non-empty lines of a command's output, for an error message."""
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])
