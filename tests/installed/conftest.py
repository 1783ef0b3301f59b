"""Tests run against an installed patched Keras (nox -s smoke); skipped elsewhere."""

from __future__ import annotations

import importlib.util

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if importlib.util.find_spec("keras") is None:
        skip = pytest.mark.skip(reason="needs an installed patched Keras: run `nox -s smoke`")
        for item in items:
            item.add_marker(skip)
