"""Analyze and apply on the real pinned Keras sdist, downloaded with pip (needs a package index)."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from codemods.engine import LAYER_PY, switching
from forkgen import config, overlay, patch, provenance
from forkgen.errors import EXIT_FETCH, EXIT_INTEGRITY
from forkgen.fetch import default_cache_dir, fetch
from forkgen.model import Source

pytestmark = pytest.mark.network
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source() -> Source:
    pin = config.load(ROOT / "pyproject.toml").pin
    assert pin is not None
    return fetch(pin, default_cache_dir())


@pytest.fixture(scope="module")
def patched(source: Source, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("apply") / "tree"
    started = time.monotonic()
    patch.analyze(source.root)
    patch.apply(source.root, out)
    print(f"analyze + apply: {time.monotonic() - started:.2f} s")
    return out


def test_analyze_finds_the_anchors_of_3_15_1(source: Source) -> None:
    analysis = patch.analyze(source.root)
    assert analysis.callspec_variant == "V4" and analysis.release == "3.15.1"
    assert all(p.outcome == "applied" and not p.present for p in analysis.patches), analysis.patches
    base = next(p for p in analysis.patches if p.name == "callspec-fast-path")
    lines = {a.name: a.line for a in base.anchors}
    # Line 317 is where docs/keras-releases.md places the _call_signature statement in 3.15.1.
    assert lines["call_signature"] == 317
    assert lines["callspec_construction"] < lines["callspec_class"]


CALLSPEC = ("callspec-fast-path", "callspec-training-fast-path")


def test_only_the_files_the_applied_patches_name_change(source: Source, patched: Path) -> None:
    upstream = {p.relative_to(source.root): p for p in source.root.rglob("*") if p.is_file()}
    ours = {p.relative_to(patched): p for p in patched.rglob("*") if p.is_file()}
    # Upstream's files, and the run-time switches the engine adds (codemods/engine/switching.py).
    assert ours.keys() - upstream.keys() == {Path(switching.SWITCHES_PY)} and upstream.keys() <= ours.keys()
    compile((patched / switching.SWITCHES_PY).read_text(), switching.SWITCHES_PY, "exec")
    changed = sorted(str(name) for name, path in upstream.items() if path.read_bytes() != ours[name].read_bytes())
    named = {f for p in patch.analyze(source.root).applied for f in p.files}
    assert LAYER_PY in changed and set(changed) <= named
    for relative in changed:
        compile((patched / relative).read_text(), relative, "exec")


def test_the_callspec_patches_only_insert(source: Source, tmp_path: Path) -> None:
    # The CallSpec patches insert and wrap; nothing of upstream's layer.py is rewritten.
    only_callspec = patch.apply(source.root, tmp_path / "tree", patch.selection(only=CALLSPEC))
    before = (source.root / LAYER_PY).read_text().splitlines(keepends=True)
    after = (only_callspec.root / LAYER_PY).read_text().splitlines(keepends=True)
    inserted = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag == "insert":
            inserted += j2 - j1
            continue
        # The one upstream statement moved into the guard's `else`: the same
        # lines, four spaces deeper, after the inserted `if` block.
        assert tag == "replace", (tag, before[i1:i2])
        moved = after[j2 - (i2 - i1) : j2]
        assert ["    " + line for line in before[i1:i2]] == moved, (before[i1:i2], after[j1:j2])
        assert "".join(before[i1:i2]).lstrip().startswith("call_spec = CallSpec(")
        inserted += (j2 - j1) - (i2 - i1)
    assert inserted > 100


def test_patched_layer_compiles_and_reapplying_changes_nothing(patched: Path, tmp_path: Path) -> None:
    compile((patched / LAYER_PY).read_text(), LAYER_PY, "exec")
    again = patch.apply(patched, tmp_path / "again")
    assert not again.changed
    assert (tmp_path / "again" / LAYER_PY).read_bytes() == (patched / LAYER_PY).read_bytes()


def forkgen(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forkgen", *args, "--cache-dir", str(cache)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )


def test_wrong_sha256_is_refused(tmp_path: Path) -> None:
    result = forkgen("fetch", "--sha256", "0" * 64, cache=tmp_path)
    assert result.returncode == EXIT_INTEGRITY, result.stderr
    assert "error: downloaded keras-3.15.1.tar.gz has sha256 92ae7c1d" in result.stderr
    assert not list(tmp_path.rglob("*.tar.gz")) and not (tmp_path / "src").exists()


def test_version_that_does_not_exist(tmp_path: Path) -> None:
    result = forkgen("fetch", "--version", "3.99.404", "--sha256", "0" * 64, cache=tmp_path)
    assert result.returncode == EXIT_FETCH, result.stderr
    assert "error: found no sdist (.tar.gz) of keras==3.99.404 on " in result.stderr
    assert "(the newest there: " in result.stderr


def test_two_builds_of_the_pin_are_byte_identical(tmp_path: Path) -> None:
    """Same pin, different directories, different times and umasks: the same bytes."""

    def build(where: Path, umask: int) -> Path:
        # A copy of the pin in `where`: the patched tree and the staging go under where/patched_keras.
        where.mkdir(parents=True)
        (where / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
        shutil.copytree(ROOT / "patched_keras" / "overlay", where / "patched_keras" / "overlay")
        command = [sys.executable, "-m", "forkgen", "build", "--config", str(where / "pyproject.toml")]
        result = subprocess.run(
            ["sh", "-c", f'umask {umask:03o} && exec "$@"', "sh", *command],
            capture_output=True, text=True, cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr
        return Path(result.stdout.strip().splitlines()[-1])

    first = build(tmp_path / "one", 0o022)
    time.sleep(1.1)  # a zip stores times with 2 s resolution; the clock must not matter anyway
    second = build(tmp_path / "elsewhere" / "two", 0o077)
    assert first.name == second.name and first.parent != second.parent
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as wheel:  # the overlay README, filled from the series, is the long description
        metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")))
    readme = (ROOT / "patched_keras" / "overlay" / "README.md").read_text(encoding="utf-8")
    filled = overlay.fill(readme, provenance.read_wheel(first))
    assert filled != readme and filled.strip().encode("utf-8") in metadata
