"""Fail-closed gates of the sessions that test an installed fork (smoke, equivalence, publish,
upstream_tests).

Under nox the session names the wheel it installed (FORKGEN_WHEEL): then a missing keras, an
unpatched keras, another wheel than that one, or a wheel built from other codemods than this
checkout's stops the run with a non-zero exit, before collection. Without FORKGEN_WHEEL (a
developer's bare `pytest`, or `nox -s mutants`, which installs deliberately broken forks) the
suites run when a patched keras is installed and are skipped otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forkgen.provenance import installed_problems, installed_provenance, stale_problems

#: The exit code of a run stopped by a gate (pytest's own codes are 0-5).
GATE_EXIT = 9


def enforce(session: str, *, installed: bool = True) -> None:
    """Under nox (FORKGEN_WHEEL set), stop the run unless the fork is there as the session says."""
    value = os.environ.get("FORKGEN_WHEEL")
    if not value:
        return
    wheel = Path(value).resolve()
    if not wheel.is_file():
        problems = [f"FORKGEN_WHEEL={wheel} does not exist"]
    else:
        problems = stale_problems(wheel) + (installed_problems(wheel) if installed else [])
    if problems:
        pytest.exit(
            f"{session}: refusing to test: " + "; ".join(problems) + " (rebuild with `nox -s build_fork`)",
            returncode=GATE_EXIT,
        )


def fork_installed() -> bool:
    """Whether the keras this interpreter imports is a fork wheel."""
    return installed_provenance()[1] is not None
