"""What the verification environments install: one definition for the noxfile and `forkgen`.

Each backend's requirement can be overridden by an environment variable (torch==2.13.0 is the
CPU build this project's machines install from disk; any other torch request may pull a
multi-GB CUDA build). Nothing here imports more than the standard library, so the noxfile can
read it in nox's own interpreter.
"""

from __future__ import annotations

import os

TORCH_SPEC = os.environ.get("FORKGEN_TORCH_SPEC", "torch==2.13.0")
TENSORFLOW_SPEC = os.environ.get("FORKGEN_TENSORFLOW_SPEC", "tensorflow-cpu==2.21.0")
JAX_SPEC = os.environ.get("FORKGEN_JAX_SPEC", "jax[cpu]==0.10.2")
#: What each Keras backend needs installed.
BACKENDS: dict[str, list[str]] = {
    "torch": [TORCH_SPEC],
    "jax": [JAX_SPEC],
    "tensorflow": [TENSORFLOW_SPEC],
    "numpy": ["scipy", JAX_SPEC],  # the numpy backend imports scipy, and jax for fft
}


def backend(name: str, torch_spec: str | None = None) -> list[str]:
    """What backend `name` needs installed; `torch_spec` replaces the torch requirement.

    A torch requirement (`torch_spec` or FORKGEN_TORCH_SPEC) of several words is several
    requirements: "torch==2.1.0 numpy<2" (torch before 2.3 was built against NumPy 1)."""
    if name == "torch":
        return (torch_spec or TORCH_SPEC).split()
    return list(BACKENDS[name])


#: What Keras imports without declaring it: 3.0-3.3's torch backend imports `packaging`
#: (keras/src/utils/torch_utils.py), which 3.4 added to its requirements.
UNDECLARED = ["packaging"]

#: pytest 9's importorskip skips only a missing module, never an ImportError inside the fork.
PYTEST = "pytest>=9"
#: The equivalence suite's own needs, besides the wheel and the backend.
EQUIVALENCE = [PYTEST, "hypothesis", "pytest-xdist"]
#: Keras's own tests import tf.data whatever the backend, the trainers tests jax, a few grain, scipy, pandas.
UPSTREAM_TESTS = [TENSORFLOW_SPEC, JAX_SPEC, "scipy", "pandas", "grain", PYTEST, "pytest-xdist"]
#: Which of Keras's test packages run against the installed wheel, per backend.
UPSTREAM_TARGETS: dict[str, list[str]] = {
    "torch": ["keras.src.layers", "keras.src.models", "keras.src.trainers"],
    "jax": ["keras.src.layers.layer_test", "keras.src.layers.core", "keras.src.models"],
    "tensorflow": ["keras.src.layers.layer_test", "keras.src.layers.core", "keras.src.models"],
    "numpy": ["keras.src.layers.layer_test", "keras.src.layers.core", "keras.src.models"],
}
#: How many times a test that passed upstream and failed patched is rerun alone with the fork;
#: it is a regression unless it passes every time (then it is reported as flaky).
UPSTREAM_RERUNS = 3


def pytest_workers() -> str:
    """pytest-xdist workers of the long runs (FORKGEN_PYTEST_WORKERS, default 2)."""
    return os.environ.get("FORKGEN_PYTEST_WORKERS", "2")
