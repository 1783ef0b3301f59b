"""pytest plugin standing in for Keras's repository conftest.py, which the wheel does not ship.

Loaded with `-p keras_upstream_plugin` when Keras's own tests run from an installed
wheel (nox -s upstream_tests). It registers the markers Keras's tests use and skips
`requires_trainable_backend` tests on the numpy backend, as Keras's CI does.
"""

from __future__ import annotations

import os

import pytest

# Keras's CI keeps JAX's default dtype at 32 bits for tests that enable x64.
os.environ.setdefault("JAX_DEFAULT_DTYPE_BITS", "32")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires_trainable_backend: needs a backend that implements fit()")
    config.addinivalue_line("markers", "multi_device: needs several devices")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from keras.src.backend import backend

    if backend() not in ("numpy", "openvino"):
        return
    skip = pytest.mark.skip(reason=f"Trainer not implemented for the {backend()} backend")
    for item in items:
        if "requires_trainable_backend" in item.keywords:
            item.add_marker(skip)
