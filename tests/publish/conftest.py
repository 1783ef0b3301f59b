"""Under nox (FORKGEN_WHEEL set) the publish session fails closed: the wheel must exist and be a
fork wheel built from this checkout's codemods (tests/support/gate.py)."""

from __future__ import annotations

import pytest

from tests.support import gate


def pytest_configure(config: pytest.Config) -> None:
    # The session's own environment has no keras: the wheel goes through the index into fresh ones.
    gate.enforce("publish", installed=False)
