"""pytest plugin standing in for Keras's repository conftest.py, which the wheel does not ship.

Loaded with `-p keras_upstream_plugin` when Keras's own tests run from an installed
wheel (nox -s upstream_tests). It registers the markers Keras's tests use and skips
`requires_trainable_backend` tests on the numpy backend, as Keras's CI does.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

# Keras's CI keeps JAX's default dtype at 32 bits for tests that enable x64.
os.environ.setdefault("JAX_DEFAULT_DTYPE_BITS", "32")


def _gate() -> None:
    """Fail closed: each of the two runs must test the Keras it says it tests.

    The nox session sets FORKGEN_EXPECT_UPSTREAM=<version> for the upstream baseline and
    FORKGEN_WHEEL=<fork wheel> for the patched run; a bare pytest sets neither.
    """
    from forkgen.provenance import installed_problems, installed_provenance, stale_problems

    upstream = os.environ.get("FORKGEN_EXPECT_UPSTREAM")
    wheel = os.environ.get("FORKGEN_WHEEL")
    problems: list[str] = []
    if upstream:
        package, provenance = installed_provenance()
        installed = importlib.metadata.version("keras") if package is not None else None
        if package is None:
            problems.append("no keras is installed")
        elif provenance is not None or installed != upstream:
            problems.append(f"the baseline must be upstream keras {upstream}, found keras {installed}"
                            + (" built by forkgen" if provenance is not None else ""))
    if wheel:
        problems += stale_problems(Path(wheel)) + installed_problems(Path(wheel))
    if problems:
        pytest.exit("upstream_tests: refusing to test: " + "; ".join(problems), returncode=9)


def pytest_configure(config: pytest.Config) -> None:
    _gate()
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
