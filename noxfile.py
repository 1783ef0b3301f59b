"""Sessions that install and call forkgen and pytest; no pipeline logic lives here.

`nox` runs the default sessions in order: lint, unit, integration, build_fork, smoke.
Backend requirements can be overridden, e.g. FORKGEN_TORCH_SPEC="torch==2.14.1".
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = False
nox.options.sessions = ["lint", "unit", "integration", "build_fork", "smoke"]

ROOT = Path(__file__).parent
#: The interpreter running nox, unless FORKGEN_PYTHON names another (e.g. "3.12").
PYTHON = os.environ.get("FORKGEN_PYTHON") or None
#: torch==2.13.0 is the CPU build this project's machines install from disk;
#: any other request may pull a multi-GB CUDA build.
TORCH_SPEC = os.environ.get("FORKGEN_TORCH_SPEC", "torch==2.13.0")


def pinned_wheel() -> Path:
    """Where `nox -s build_fork` leaves the wheel of the pinned release."""
    explicit = os.environ.get("FORKGEN_WHEEL")
    if explicit:
        return Path(explicit).resolve()
    pin = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["forkgen"]
    label = os.environ.get("FORKGEN_LOCAL_LABEL", pin.get("local-label", "fastcallspec.1"))
    name = pin["distribution"].replace("-", "_")
    return ROOT / "patched_keras" / "dist" / f"{name}-{pin['version']}+{label}-py3-none-any.whl"


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """mypy --strict on forkgen/ and codemods/, ruff on everything."""
    session.install("-e", ".[lint]")
    session.run("mypy")
    session.run("ruff", "check", ".")


@nox.session(python=PYTHON)
def unit(session: nox.Session) -> None:
    """Offline tests: codemods on synthetic modules, the stages, the CLI."""
    session.install(".[test]")
    session.run("pytest", "tests/unit", *session.posargs)


@nox.session(python=PYTHON)
def integration(session: nox.Session) -> None:
    """Analyze and apply on the real pinned Keras sdist (downloads it once)."""
    session.install(".[test]")
    session.run("pytest", "tests/integration", *session.posargs)


@nox.session(python=PYTHON)
def build_fork(session: nox.Session) -> None:
    """Build the fork's wheel into patched_keras/dist/ (extra args go to `forkgen build`)."""
    session.install(".")
    session.run("forkgen", "build", *session.posargs)


@nox.session(python=PYTHON)
def smoke(session: nox.Session) -> None:
    """Install the built wheel with torch in a fresh environment and check the fast path."""
    wheel = pinned_wheel()
    if not wheel.is_file():
        session.log(f"{wheel.name} is not built yet: building it")
        session.install(".")
        session.run("forkgen", "build")
    session.install(str(wheel), TORCH_SPEC, "pytest")
    session.run(
        "pytest",
        "tests/installed",
        *session.posargs,
        env={"KERAS_BACKEND": "torch", "FORKGEN_WHEEL": str(wheel)},
    )
