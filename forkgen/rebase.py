"""Rebase: move the pin to another upstream release, only once the fork is proven on it.

fetch -> analyze -> apply -> build (`pipeline.build_fork`, as `forkgen build`) -> equivalence suite on torch -> rewrite the pin.
Any failure leaves pyproject.toml untouched; the exit code says which stage failed.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import venv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from codemods.patchlib import Patch
from forkgen import patch, pipeline
from forkgen.cmd import log, run, tail
from forkgen.errors import ForkgenError, UsageError, VerificationError
from forkgen.fetch import fetch
from forkgen.model import Analysis, Pin, Wheel

#: The torch the equivalence run installs (see README: other requests may pull CUDA builds).
DEFAULT_TORCH_SPEC = "torch==2.13.0"


@dataclass(frozen=True)
class RebaseResult:
    pin: Pin
    wheel: Wheel
    analysis: Analysis
    previous: Analysis | None
    seconds: float


def moved(previous: Analysis | None, current: Analysis) -> list[str]:
    """What moved upstream between the pinned release and the new one: each patch's outcome,
    and every anchor's line."""

    def anchors(analysis: Analysis) -> dict[tuple[str, str], int]:
        return {(p.name, a.name): a.line for p in analysis.patches for a in p.anchors}

    before = anchors(previous) if previous is not None else {}
    outcomes = {p.name: p.outcome for p in previous.patches} if previous is not None else {}
    lines = []
    if previous is not None:
        lines.append(f"  CallSpec variant: {previous.callspec_variant} -> {current.callspec_variant}")
    for outcome in current.patches:
        was = outcomes.get(outcome.name)
        lines.append(f"  patch {outcome.name}: " + (f"{was} -> {outcome.outcome}" if was else outcome.outcome))
    for key, line in anchors(current).items():
        old, anchor = before.get(key), key[1]
        delta = "" if old is None else f" ({line - old:+d})"
        lines.append(f"  {anchor}: line {old} -> {line}{delta}" if previous is not None else f"  {anchor}: line {line}")
    return lines


def run_equivalence(wheel: Path, project: Path, workdir: Path, torch_spec: str) -> None:
    """Install the wheel with torch into a fresh environment and run tests/equivalence there."""
    tests = project / "tests" / "equivalence"
    if not tests.is_dir():
        raise UsageError(f"{tests} not found", hint="run forkgen rebase from the forkgen checkout that holds the pin")
    env_dir = workdir / "venv"
    if env_dir.exists():
        shutil.rmtree(env_dir)
    log(f"creating {env_dir} with {wheel.name} and {torch_spec}")
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    installed = run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel), torch_spec, "pytest>=9", "hypothesis"],
        capture=True,
    )
    if installed.returncode != 0:
        raise VerificationError(
            f"could not install {wheel.name} with {torch_spec}:\n{tail(installed.stdout, 8)}",
            hint="set FORKGEN_TORCH_SPEC or pass --torch-spec with a torch this release supports",
        )
    result = run(
        [python, "-m", "pytest", str(tests), "-q", "-p", "no:cacheprovider",
         "-W", "ignore::UserWarning", "-W", "ignore::DeprecationWarning"],
        cwd=project,
        env={
            "KERAS_BACKEND": "torch",
            "FORKGEN_HYPOTHESIS_PROFILE": os.environ.get("FORKGEN_HYPOTHESIS_PROFILE", "equivalence"),
            "FORKGEN_WHEEL": str(wheel),  # the suite fails closed unless this very wheel is installed
        },
        capture=True,
    )
    print(tail(result.stdout, 3), file=sys.stderr)
    if result.returncode != 0:
        raise VerificationError(
            f"the equivalence suite fails on torch with the rebased fork:\n{tail(result.stdout, 15)}",
            hint="the pin is unchanged; the patch does not reproduce this release's slow path",
        )


def rewrite_pin(pyproject: Path, pin: Pin) -> None:
    """Set version, distribution and sha256 in [tool.forkgen], keeping comments and formatting."""
    document = tomlkit.parse(pyproject.read_text(encoding="utf-8"))
    table = document["tool"]["forkgen"]
    table["distribution"] = pin.distribution
    table["version"] = pin.version
    table["sha256"] = pin.sha256
    text = tomlkit.dumps(document)
    tmp = pyproject.with_name(pyproject.name + ".forkgen-tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, pyproject)


def rebase(
    pin: Pin,
    previous_pin: Pin | None,
    pyproject: Path,
    *,
    cache_dir: Path,
    workspace: Path,
    overlay: Path | None = None,
    torch_spec: str = DEFAULT_TORCH_SPEC,
    verify: bool = True,
    selected: Sequence[Patch] | None = None,
) -> RebaseResult:
    """Prove the fork on `pin`, then move the pin in `pyproject` to it.

    The wheel is built by `pipeline.build_fork`, the very function `forkgen build` runs, into
    `workspace/rebase/<distribution>-<version>/`.
    """
    started = time.monotonic()
    stage = "fetch"

    def enter(name: str) -> None:
        nonlocal stage
        stage = name

    try:
        previous = None
        if previous_pin is not None:
            try:
                previous = patch.analyze_series(fetch(previous_pin, cache_dir).root, selected)
            except ForkgenError as error:
                log(f"(the current pin cannot be analysed for comparison: {error.message})")
        workdir = workspace / "rebase" / f"{pin.distribution}-{pin.version}"
        built = pipeline.build_fork(
            pin,
            cache_dir=cache_dir,
            workspace=workdir,
            out_dir=workdir / "dist",
            overlay=overlay,
            selected=selected,
            on_stage=enter,
        )
        assert built.source is not None  # built from the index, never from a local tree
        pinned = Pin(pin.distribution, pin.version, built.source.sha256, pin.local_label)
        log(f"what moved since {previous_pin.version if previous_pin else 'the pin'}:")
        for line in moved(previous, built.analysis):
            log(line)
        stage = "verify"
        if verify:
            log("[5/5] equivalence suite on torch")
            run_equivalence(built.wheel.path, pyproject.parent, workdir, torch_spec)
        else:
            log("[5/5] equivalence suite skipped (--no-verify): the pin is not rewritten")
            return RebaseResult(pinned, built.wheel, built.analysis, previous, time.monotonic() - started)
    except ForkgenError as error:
        error.message = f"rebase onto {pin.distribution} {pin.version} failed at {stage}: {error.message}"
        error.hint = (error.hint + "; " if error.hint else "") + f"the pin in {pyproject} is unchanged"
        raise
    rewrite_pin(pyproject, pinned)
    log(f"pin moved to {pin.distribution} {pin.version} (sha256 {pinned.sha256}) in {pyproject}")
    return RebaseResult(pinned, built.wheel, built.analysis, previous, time.monotonic() - started)
