"""The codemods also run through libcst's own runner, as README.md documents."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from codemods.callspec_fast_path.source import patch_source
from codemods.engine import Sources
from codemods.layer_call_state_writes import PATCH as STATE_WRITES
from tests.support.synthetic import LAYER_V4

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = [
    "callspec_fast_path.CallSpecFastPathCommand",
    "callspec_training_fast_path.CallSpecTrainingFastPathCommand",
]


def test_libcst_tool_applies_both_callspec_patches_like_forkgen(tmp_path: Path) -> None:
    target = tmp_path / "layer.py"
    target.write_text(LAYER_V4)
    for command in COMMANDS:
        result = subprocess.run(
            [sys.executable, "-m", "libcst.tool", "codemod", "--no-format", command, str(target)],
            cwd=ROOT, capture_output=True, text=True,
        )
        assert result.returncode == 0, result.stderr
        assert "Transformed 1 files successfully" in result.stderr
    assert target.read_text() == patch_source(LAYER_V4).source


def test_libcst_tool_without_the_extension_is_the_base(tmp_path: Path) -> None:
    target = tmp_path / "layer.py"
    target.write_text(LAYER_V4)
    for command in COMMANDS[:1]:
        subprocess.run(
            [sys.executable, "-m", "libcst.tool", "codemod", "--no-format", command, str(target)],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )
    assert target.read_text() == patch_source(LAYER_V4, extension=False).source


def test_libcst_tool_runs_a_patch_declared_on_the_engine(tmp_path: Path) -> None:
    # A DeclaredPatch's command is found by its package, through `codemods` in .libcst.codemod.yaml.
    target = tmp_path / "layer.py"
    target.write_text(LAYER_V4)
    command = "layer_call_state_writes.GuardStateWritesCommand"
    for expected in ("Transformed 1 files successfully", "Skipped 1 files"):
        result = subprocess.run(
            [sys.executable, "-m", "libcst.tool", "codemod", "--no-format", command, str(target)],
            cwd=ROOT, capture_output=True, text=True,
        )
        assert result.returncode == 0 and expected in result.stderr, result.stderr
    sources = Sources(lambda path: LAYER_V4)
    STATE_WRITES.apply(sources)
    assert target.read_text() == sources.rendered()[STATE_WRITES.files[0]] != LAYER_V4
