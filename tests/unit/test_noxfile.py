"""The noxfile's `disposable` sessions: an ended session's environment goes (pass or fail), with
its temporary files, unless nox reuses environments or FORKGEN_KEEP_VENVS=1 keeps them."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("forkgen_noxfile_under_test", ROOT / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Loading the noxfile claims an environment directory of its own unless given one.
    with tempfile.TemporaryDirectory() as envdir, pytest.MonkeyPatch.context() as patch:
        patch.setenv("FORKGEN_NOX_ENVDIR", envdir)
        spec.loader.exec_module(module)
    return module


class FakeSession:
    """What `disposable` uses of nox.Session: the environment's location and reuse flag, the
    environment variables of the commands it runs, and log."""

    def __init__(self, location: Path, reuse_existing: bool) -> None:
        self.virtualenv = SimpleNamespace(location=str(location), reuse_existing=reuse_existing)
        self.env: dict[str, str] = {}
        self.logged: list[str] = []

    def log(self, message: str) -> None:
        self.logged.append(message)


def make_env(tmp_path: Path) -> Path:
    env = tmp_path / ".nox" / "equivalence-backend-torch"
    (env / "lib").mkdir(parents=True)
    (env / "lib" / "big.bin").write_bytes(b"\0" * 1024)
    return env


def test_the_environment_goes_when_the_session_passes(noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORKGEN_KEEP_VENVS", raising=False)
    env = make_env(tmp_path)
    seen: dict[str, Any] = {}

    def session_body(session: FakeSession, backend: str) -> None:
        seen["backend"] = backend
        seen["tmpdir"] = Path(session.env["TMPDIR"])
        (seen["tmpdir"] / "pytest-of-root").mkdir()  # what pytest's tmp_path leaves

    wrapped = noxfile.disposable(session_body)
    session = FakeSession(env, reuse_existing=False)
    wrapped(session, backend="torch")
    assert seen["backend"] == "torch"
    assert seen["tmpdir"].name.startswith("forkgen-nox-equivalence-backend-torch-")
    assert not env.exists()
    assert not seen["tmpdir"].exists()
    assert tmp_path.joinpath(".nox").is_dir()  # only the session's own environment
    assert any("GiB free" in line and "removed when the session ends" in line for line in session.logged)


def test_the_environment_goes_when_the_session_fails(noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORKGEN_KEEP_VENVS", raising=False)
    env = make_env(tmp_path)

    session = FakeSession(env, reuse_existing=False)

    def failing(session: FakeSession) -> None:
        raise RuntimeError("a failed command")

    with pytest.raises(RuntimeError, match="a failed command"):
        noxfile.disposable(failing)(session)
    assert not env.exists()
    assert not Path(session.env["TMPDIR"]).exists()


@pytest.mark.parametrize(("reuse", "keep_variable"), [(True, None), (False, "1")])
def test_the_environment_stays_when_reused_or_kept(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reuse: bool, keep_variable: str | None
) -> None:
    if keep_variable is None:
        monkeypatch.delenv("FORKGEN_KEEP_VENVS", raising=False)
    else:
        monkeypatch.setenv("FORKGEN_KEEP_VENVS", keep_variable)
    env = make_env(tmp_path)
    session = FakeSession(env, reuse_existing=reuse)
    noxfile.disposable(lambda s: None)(session)
    assert (env / "lib" / "big.bin").is_file()
    assert "TMPDIR" not in session.env  # nothing of the session's to remove, nothing redirected
    assert not any("removed when the session ends" in line for line in session.logged)


def test_every_session_is_disposable(noxfile: ModuleType) -> None:
    """Every session of the noxfile removes its environment: one left out brings back the
    15 GB that a CI machine's disk may not have."""
    import nox.registry

    sessions = nox.registry.get()
    assert {"lint", "unit", "build_fork", "equivalence", "nightly", "upstream_tests", "bench"} <= set(sessions)
    undisposed = [name for name, func in sessions.items() if not getattr(func.func, "forkgen_disposable", False)]
    assert undisposed == []


def test_compat_is_a_session_of_its_own_outside_the_default_run(noxfile: ModuleType) -> None:
    """`nox` (CI) stays within its time: the compat cells (torch and Python versions, each a
    multi-GB install) run only when named, one session per (python, torch) cell."""
    import nox
    import nox.registry

    assert "compat" in nox.registry.get()
    assert not any(name.startswith("compat") for name in nox.options.sessions or [])
    cells = noxfile.COMPAT_CELLS
    assert len(set(cells)) == len(cells)
    pythons = {python for python, _ in cells}
    assert {"3.10", "3.11", "3.12", "3.13"} <= pythons
    # Several torches on one Python, and one torch on several Pythons.
    assert len({torch for python, torch in cells if python == "3.11"}) >= 3
    assert all(torch.split()[0].startswith("torch==") for _, torch in cells)


def test_a_torch_requirement_of_several_words_is_several_requirements() -> None:
    from forkgen import requirements

    assert requirements.backend("torch", "torch==2.1.0 numpy<2") == ["torch==2.1.0", "numpy<2"]
    assert requirements.backend("torch", "torch==2.14.1") == ["torch==2.14.1"]
    assert requirements.backend("torch") == requirements.TORCH_SPEC.split()
    assert requirements.backend("jax", "torch==2.1.0 numpy<2") == requirements.BACKENDS["jax"]


def test_the_session_tmpdir_is_outside_the_checkout(noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the checkout, a test's tmp_path would sit inside a forkgen workspace, whose
    pyproject.toml the CLI finds (the CLI tests expect none): TMPDIR is where the system's is."""
    monkeypatch.delenv("FORKGEN_KEEP_VENVS", raising=False)
    env = ROOT / ".nox" / "forkgen-test-noxfile-env"
    seen: list[Path] = []

    def session_body(session: FakeSession) -> None:
        seen.append(Path(session.env["TMPDIR"]))

    try:
        env.mkdir(parents=True)
        noxfile.disposable(session_body)(FakeSession(env, reuse_existing=False))
    finally:
        shutil.rmtree(env, ignore_errors=True)
    assert seen[0].parent == Path(tempfile.gettempdir())
    assert ROOT not in seen[0].parents


CLAIM = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("noxfile_in_child", sys.argv[1])
module = importlib.util.module_from_spec(spec)
os.environ["FORKGEN_NOX_ENVDIR"] = sys.argv[2]  # loading it claims nothing
spec.loader.exec_module(module)
print(module.claim_run_dir(__import__("pathlib").Path(sys.argv[2])), flush=True)
(module.Path(sys.stdin.readline().strip())).mkdir()  # a session's environment
time.sleep(3600) if sys.argv[3] == "stay" else None
"""


def claim_in_child(base: Path, mode: str) -> tuple[subprocess.Popen[str], Path]:
    child = subprocess.Popen(
        [sys.executable, "-c", CLAIM, str(ROOT / "noxfile.py"), str(base), mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    run_dir = Path(child.stdout.readline().strip())
    child.stdin.write(f"{run_dir / 'unit'}\n")
    child.stdin.flush()
    return child, run_dir


def test_each_nox_run_has_its_own_environment_directory_and_a_killed_runs_goes(noxfile: ModuleType, tmp_path: Path) -> None:
    base = tmp_path / ".nox"
    first, first_dir = claim_in_child(base, "stay")
    second, second_dir = claim_in_child(base, "stay")
    try:
        assert first_dir != second_dir and first_dir.parent == second_dir.parent == base
        deadline = time.monotonic() + 30
        while not ((first_dir / "unit").is_dir() and (second_dir / "unit").is_dir()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert noxfile.locking.sweep(base, "run") == []  # both alive: nothing of theirs goes
        assert (first_dir / "unit").is_dir() and (second_dir / "unit").is_dir()
        first.kill()
        first.wait()
        assert noxfile.locking.sweep(base, "run") == [first_dir]  # killed: its environments go
        assert not first_dir.exists() and not first_dir.with_name(first_dir.name + ".lock").exists()
        assert (second_dir / "unit").is_dir()
    finally:
        for child in (first, second):
            child.kill()
            child.wait()
    noxfile.locking.sweep(base, "run")
    assert sorted(p.name for p in base.iterdir()) == []


def test_a_nox_run_that_ends_removes_its_environment_directory(noxfile: ModuleType, tmp_path: Path) -> None:
    base = tmp_path / ".nox"
    child, run_dir = claim_in_child(base, "end")
    assert child.wait(timeout=60) == 0
    assert sorted(p.name for p in base.iterdir()) == []  # atexit removed the directory and its lock


def test_the_fork_on_keras_nightly_is_a_default_session(noxfile: ModuleType, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`nightly` runs with every `nox` (CI's job matrix is the default sessions): the fork built on
    the pinned keras-nightly (its sha256 verified) into the session's own directory, never
    patched_keras/dist/, and the torch equivalence suite against that wheel; FORKGEN_NIGHTLY_VERSION
    names another release (`latest`: the newest, what the nightly-watch workflow runs)."""
    import nox

    assert "nightly" in nox.options.sessions
    monkeypatch.setattr(noxfile, "install_project", lambda session, *args: None)

    class Recording(FakeSession):
        posargs = ["-x"]

        def __init__(self) -> None:
            (tmp_path / "env").mkdir(exist_ok=True)
            super().__init__(tmp_path / "env", reuse_existing=True)
            self.ran: list[tuple[str, ...]] = []

        def run(self, *args: str, **kwargs: Any) -> str:
            self.ran.append(args)
            return "forkgen: built\n" + str(tmp_path / "env" / "dist" / "keras_nightly-x.whl") + "\n"

    def commands(version: str | None) -> list[tuple[str, ...]]:
        if version is None:
            monkeypatch.delenv("FORKGEN_NIGHTLY_VERSION", raising=False)
        else:
            monkeypatch.setenv("FORKGEN_NIGHTLY_VERSION", version)
        session = Recording()
        noxfile.nightly.func(session)
        return session.ran

    build, verify = commands(None)
    assert build[:6] == ("forkgen", "build", "--distribution", "keras-nightly", "--version", noxfile.NIGHTLY_VERSION)
    assert build[6:8] == ("--sha256", noxfile.NIGHTLY_SHA256)
    out = Path(build[build.index("--out-dir") + 1])
    assert out.is_relative_to(tmp_path / "env") and not out.is_relative_to(ROOT)
    assert verify[:7] == ("forkgen", "verify", "equivalence", "--wheel", str(out / "keras_nightly-x.whl"), "--backend", "torch")
    assert verify[-2:] == ("--", "-x")
    latest, _ = commands("latest")
    assert latest[4:6] == ("--version", "latest") and "--sha256" not in latest
