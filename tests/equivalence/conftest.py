"""The equivalence suite runs against an installed patched Keras (nox -s equivalence); under nox
it fails closed (tests/support/gate.py).

Hypothesis profiles: `equivalence` (default, 500 examples per property),
`thorough` (5,000) and `matrix` (100, the short run of `nox -s matrix`), chosen
with `--hypothesis-profile thorough` or FORKGEN_HYPOTHESIS_PROFILE.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.support import gate

settings.register_profile(
    "equivalence",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("thorough", parent=settings.get_profile("equivalence"), max_examples=5000)
settings.register_profile("matrix", parent=settings.get_profile("equivalence"), max_examples=100)
settings.load_profile(os.environ.get("FORKGEN_HYPOTHESIS_PROFILE", "equivalence"))


def pytest_configure(config: pytest.Config) -> None:
    gate.enforce("equivalence")
    if gate.fork_installed():
        # The oracle of every patch is the unpatched release under test (tests/equivalence/upstream.py).
        from tests.equivalence import upstream

        try:
            upstream.source_root()
        except upstream.NoUpstreamSource as error:
            pytest.exit(f"equivalence: refusing to test: {error}", returncode=gate.GATE_EXIT)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not gate.fork_installed():
        skip = pytest.mark.skip(reason="needs an installed patched Keras: run `nox -s equivalence`")
        for item in items:
            if "tests/equivalence" in str(item.fspath).replace(os.sep, "/"):
                item.add_marker(skip)
