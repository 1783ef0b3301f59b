"""Tests run against an installed patched Keras (nox -s smoke): fail closed under nox,
skipped in a bare `pytest` without a fork installed."""

from __future__ import annotations

import pytest

from tests.support import gate


def pytest_configure(config: pytest.Config) -> None:
    gate.enforce("smoke")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not gate.fork_installed():
        skip = pytest.mark.skip(reason="needs an installed patched Keras: run `nox -s smoke`")
        for item in items:
            item.add_marker(skip)
