"""pytest plugin standing in for Keras's repository conftest.py, which the wheel does not ship.

Loaded with `-p keras_upstream_plugin` when Keras's own tests run from an installed
wheel (nox -s upstream_tests). It registers the markers Keras's tests use and skips
`requires_trainable_backend` tests on the numpy backend, as Keras's CI does.

Two things Keras's conftest does not do, for the comparison of two runs:
- every test starts from a random seed derived from its own id (the same in the upstream and
  the patched run, whichever worker runs it), so that both runs draw the same random numbers;
- FORKGEN_RERUN_TESTS=<file> runs only the tests the file names (JUnit keys, one a line, as
  `forkgen compare-tests --suspects` writes them): the reruns that confirm a regression, and
  upstream's run of the tests the fork did not pass;
- FORKGEN_COLLECTED=<file> writes the JUnit key of every test collected (with `--co`: the
  tests upstream has, against which the fork's run is checked for vanished tests).
"""

from __future__ import annotations

import importlib.metadata
import os
import zlib
from pathlib import Path

import pytest

# Keras's CI keeps JAX's default dtype at 32 bits for tests that enable x64.
os.environ.setdefault("JAX_DEFAULT_DTYPE_BITS", "32")


def _gate() -> None:
    """Fail closed: each of the two runs must test the Keras it says it tests.

    `forkgen verify upstream` sets FORKGEN_EXPECT_UPSTREAM=<version> for the upstream baseline
    and FORKGEN_WHEEL=<fork wheel> for the patched run (a bare pytest sets neither); it has
    checked that the wheel is built by this checkout's codemods. The environment holds Keras
    and its test requirements: forkgen's provenance module comes from the plugin's path.
    """
    from forkgen.provenance import installed_problems, installed_provenance

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
        problems += installed_problems(Path(wheel))
    if problems:
        pytest.exit("upstream_tests: refusing to test: " + "; ".join(problems), returncode=9)


def pytest_configure(config: pytest.Config) -> None:
    _gate()
    config.addinivalue_line("markers", "requires_trainable_backend: needs a backend that implements fit()")
    config.addinivalue_line("markers", "multi_device: needs several devices")


@pytest.fixture(autouse=True)
def _forkgen_seed(request: pytest.FixtureRequest) -> None:
    """Seed Python's, NumPy's, the backend's and Keras's random numbers from the test's id."""
    import keras

    keras.utils.set_random_seed(zlib.crc32(request.node.nodeid.encode()) & 0x7FFFFFFF)


def junit_key(item: pytest.Item) -> str:
    """The key `forkgen compare-tests` gives this test: pytest's JUnit classname and name."""
    from _pytest.junitxml import mangle_test_address

    from forkgen.verify import junit_key as key

    names = mangle_test_address(item.nodeid)
    return key(".".join(names[:-1]), names[-1])


def _only_reruns(config: pytest.Config, items: list[pytest.Item]) -> None:
    listing = os.environ.get("FORKGEN_RERUN_TESTS")
    if not listing:
        return
    wanted = set(Path(listing).read_text(encoding="utf-8").split("\n")) - {""}
    chosen = {id(item) for item in items if junit_key(item) in wanted}
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
    items[:] = [item for item in items if id(item) in chosen]


def _list_collected(items: list[pytest.Item]) -> None:
    listing = os.environ.get("FORKGEN_COLLECTED")
    if listing:
        Path(listing).write_text("".join(f"{junit_key(item)}\n" for item in items), encoding="utf-8")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from keras.src.backend import backend

    _only_reruns(config, items)
    _list_collected(items)
    if backend() not in ("numpy", "openvino"):
        return
    skip = pytest.mark.skip(reason=f"Trainer not implemented for the {backend()} backend")
    for item in items:
        if "requires_trainable_backend" in item.keywords:
            item.add_marker(skip)
