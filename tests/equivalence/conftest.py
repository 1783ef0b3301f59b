"""The equivalence suite runs against an installed patched Keras (nox -s equivalence); under nox
it fails closed (tests/support/gate.py).

Hypothesis profiles: `equivalence` (default, 500 examples per property),
`thorough` (5,000) and `matrix` (100, the short run of `nox -s matrix`), chosen
with `--hypothesis-profile thorough` or FORKGEN_HYPOTHESIS_PROFILE.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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


class NotApplied(pytest.Module):
    """A per-patch module (`test_patch_<name>.py`) whose patch the installed fork does not apply
    (upstream, not applicable, or left out of the build): skipped without being imported, since
    its code may name what only the releases the patch applies to have (3.0.0 has no
    `keras.src.tree`, no `Input(optional=...)`)."""

    reason = ""

    def collect(self) -> list[pytest.Item]:
        pytest.skip(self.reason, allow_module_level=True)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if not module_path.name.startswith("test_patch_") or not gate.fork_installed():
        return None
    from tests.equivalence import upstream

    patch = module_path.stem[len("test_patch_"):].replace("_", "-")
    outcomes = {p["name"]: p["outcome"] for p in upstream.provenance().get("patches", [])}
    if outcomes.get(patch) == "applied":
        return None
    release = upstream.provenance()["upstream"]
    module = NotApplied.from_parent(parent, path=module_path)
    module.reason = (f"this fork does not apply {patch}: {outcomes.get(patch, 'not in the build')} on "
                     f"{release['distribution']} {release['version']}")
    return module


#: Keras's global state no test may leave set: the next test on the same worker would run inside
#: it (a stateless scope, a torch device) and fail there, far from the cause.
_SCOPED_STATE = ("stateless_scope", "torch_device")


@pytest.fixture(autouse=True)
def _no_leftover_scopes() -> Iterator[None]:
    yield
    if not gate.fork_installed():
        return
    from keras.src.backend.common import global_state

    left = {name: global_state.get_global_attribute(name) for name in _SCOPED_STATE}
    left = {name: value for name, value in left.items() if value is not None}
    if left:
        global_state.clear_session()
        pytest.fail(f"the test left Keras's global state set: {left!r} (cleared now)")
