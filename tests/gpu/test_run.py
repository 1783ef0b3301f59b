"""tests/gpu/run.py, the GPU machine's one command, run here with `--device cpu --quick` against the
kit `nox -s gpu_kit` made (FORKGEN_GPU_KIT; FORKGEN_GPU_KIT_HOST: this Python's binary wheels where
the kit has none), by an interpreter that imports torch: so that the command is known to work
before a GPU is lent. Skipped without a kit (a bare `pytest`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = os.environ.get("FORKGEN_GPU_KIT")
pytestmark = pytest.mark.skipif(not KIT, reason="needs the kit of `nox -s gpu_kit` (FORKGEN_GPU_KIT)")


def test_the_command_proves_and_times_the_fork_on_cpu_from_the_kit(tmp_path: Path) -> None:
    host = os.environ.get("FORKGEN_GPU_KIT_HOST")
    command = [sys.executable, str(ROOT / "tests" / "gpu" / "run.py"), "--kit", str(KIT), "--device", "cpu", "--quick",
               "--out", str(tmp_path / "out"), *(["--find-links", host] if host and Path(host).is_dir() else [])]
    # No OUT of the caller's, no index: what it installs comes from the kit.
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["equivalence"]["status"] == "passed" and summary["equivalence"]["counts"]["passed"] > 0
    assert summary["parity"]["status"] == "passed" and " 0 differ" in summary["parity"]["summary"]
    assert summary["smoke"]["tokens_equal"] and summary["smoke"]["mode"] == "backend='eager'"
    timed = {(row["case"], row["mode"]): row for row in summary["bench"]}
    assert {("dense", "eager"), ("mlp_call", "eager"), ("mlp_call", "compiled")} <= set(timed)
    for row in timed.values():  # every build and twin timed, none failed
        assert all(row[build]["median_s"] > 0 for build in ("upstream", "nightly", "fork", "torch")), row
    # Each environment imported the build the kit holds for it (the twins run in the fork's).
    kit = json.loads((Path(KIT) / "kit.json").read_text(encoding="utf-8"))
    versions = {build: environment["keras"] for build, environment in summary["environments"].items()}
    assert versions == {"upstream": kit["upstream"].partition("==")[2], "nightly": kit["nightly"].partition("==")[2],
                        "fork": kit["fork"].split("-")[1], "torch": kit["fork"].split("-")[1]}
    assert "| mlp_call | compiled |" in (tmp_path / "out" / "summary.txt").read_text(encoding="utf-8")
