"""The fail-closed gates of the sessions that test an installed fork: against a fake installed
`keras` (a package directory on PYTHONPATH) and fake wheels, in subprocesses (offline)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from forkgen import cli
from forkgen.errors import EXIT_USAGE, EXIT_VERIFY
from forkgen.provenance import PROVENANCE_PY, codemods_digest, render_module

ROOT = Path(__file__).resolve().parents[2]


def provenance(**changes: object) -> dict[str, object]:
    return {"fork_version": "3.15.1+fastcallspec.2", "codemods_digest": codemods_digest(), **changes}


def fork_wheel(path: Path, data: dict[str, object] | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("keras/__init__.py", "")
        wheel.writestr("keras-3.15.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: keras\nVersion: 3.15.1+fastcallspec.2\n")
        if data is not None:
            wheel.writestr(PROVENANCE_PY, render_module(data))
    return path


def site(root: Path, data: dict[str, object] | None) -> Path:
    """A directory that `import keras` finds: a fork when `data` is given, else upstream."""
    (root / "keras" / "src").mkdir(parents=True)
    (root / "keras" / "__init__.py").write_text("")
    if data is not None:
        (root / PROVENANCE_PY).write_text(render_module(data))
    return root


def run_suite(suite: str, wheel: Path | None, site_dir: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORKGEN_WHEEL", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (site_dir, ROOT) if p is not None)
    if wheel is not None:
        env["FORKGEN_WHEEL"] = str(wheel)
    return subprocess.run(
        [sys.executable, "-m", "pytest", suite, "-q", "-p", "no:cacheprovider", "--co"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )


# case: (what `import keras` finds: nothing, upstream or a fork's provenance; the wheel's provenance; message)
CASES: dict[str, tuple[str | dict[str, object], dict[str, object] | None, str]] = {
    "no keras installed": ("nothing", provenance(), "no keras is installed"),
    "upstream keras installed": ("upstream", provenance(), "is not patched"),
    "another fork installed": (provenance(fork_version="3.15.1+other.1"), provenance(), "but not keras-3.15.1"),
    "a stale wheel": (provenance(codemods_digest="0" * 64), provenance(codemods_digest="0" * 64), "it is stale"),
    "an upstream wheel": ("upstream", None, "carries no forkgen provenance"),
}


@pytest.mark.parametrize("suite", ["tests/equivalence", "tests/installed"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_session_fails_closed(tmp_path: Path, suite: str, case: str) -> None:
    installed, in_wheel, message = CASES[case]
    site_dir = None if installed == "nothing" else site(tmp_path / "site", installed if isinstance(installed, dict) else None)
    wheel = fork_wheel(tmp_path / "keras-3.15.1+fastcallspec.2-py3-none-any.whl", in_wheel)
    result = run_suite(suite, wheel, site_dir)
    assert result.returncode == 9, result.stdout + result.stderr
    assert "refusing to test" in result.stdout + result.stderr and message in result.stdout + result.stderr


def test_the_right_fork_passes_the_gate(tmp_path: Path) -> None:
    data = provenance()
    wheel = fork_wheel(tmp_path / "keras-3.15.1+fastcallspec.2-py3-none-any.whl", data)
    result = run_suite("tests/installed/conftest.py", wheel, site(tmp_path / "site", data))
    assert "refusing" not in result.stdout + result.stderr and result.returncode in (0, 5), result.stdout + result.stderr


def test_a_missing_wheel_fails_the_publish_session(tmp_path: Path) -> None:
    result = run_suite("tests/publish", tmp_path / "missing.whl", None)
    assert result.returncode == 9 and "does not exist" in result.stdout + result.stderr


def test_outside_nox_the_suites_are_skipped_without_a_fork(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("FORKGEN_WHEEL",)}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/publish", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    assert result.returncode == 0 and "skipped" in result.stdout, result.stdout


def test_inspect_check_current(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    current = fork_wheel(tmp_path / "a" / "keras-3.15.1+fastcallspec.2-py3-none-any.whl", provenance())
    stale = fork_wheel(tmp_path / "b" / "keras-3.15.1+fastcallspec.2-py3-none-any.whl", provenance(codemods_digest="f" * 64))
    upstream = fork_wheel(tmp_path / "c" / "keras-3.15.1-py3-none-any.whl", None)
    assert cli.main(["inspect", "--check-current", str(current)]) == 0
    assert cli.main(["inspect", "--check-current", str(stale)]) == EXIT_VERIFY
    assert "it is stale" in capsys.readouterr().err
    assert cli.main(["inspect", "--check-current", str(upstream)]) == EXIT_USAGE


@pytest.mark.parametrize(
    ("installed", "version", "expect", "message"),
    [
        (provenance(), "3.15.1+fastcallspec.2", {"FORKGEN_EXPECT_UPSTREAM": "3.15.1"}, "found keras 3.15.1+fastcallspec.2 built by forkgen"),
        (None, "3.14.0", {"FORKGEN_EXPECT_UPSTREAM": "3.15.1"}, "found keras 3.14.0"),
        (None, "3.15.1", {"FORKGEN_WHEEL": "WHEEL"}, "is not patched"),
    ],
)
def test_the_upstream_suites_check_both_runs(
    tmp_path: Path, installed: dict[str, object] | None, version: str, expect: dict[str, str], message: str
) -> None:
    site_dir = site(tmp_path / "site", installed)
    info = site_dir / f"keras-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: keras\nVersion: {version}\n")
    wheel = fork_wheel(tmp_path / "keras-3.15.1+fastcallspec.2-py3-none-any.whl", provenance())
    env = {k: v for k, v in os.environ.items() if k not in ("FORKGEN_WHEEL", "FORKGEN_EXPECT_UPSTREAM")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT / "tests" / "upstream", site_dir, ROOT))
    env.update({k: str(wheel) if v == "WHEEL" else v for k, v in expect.items()})
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "tests/upstream/pytest.ini"), "--co", "-q", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert result.returncode == 9 and message in result.stdout + result.stderr, result.stdout + result.stderr
