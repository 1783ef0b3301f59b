"""Concurrent runs on one machine: several `forkgen` processes sharing a checkout, a cache and an
output directory all succeed, a run that waits says for what and for whom, and a run killed at
any stage leaves nothing that the next run does not sweep.

Every run is a real `python -m forkgen` process on a synthetic Keras-shaped sdist served from a
static index directory (nothing leaves the machine).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from forkgen import fetch
from forkgen.errors import IntegrityError
from tests.support.fake_index import FakeIndex, File, keras_sdist
from tests.support.synthetic import sha256, tree_files, write_tree
from tests.unit.test_publish import make_wheel

ROOT = Path(__file__).resolve().parents[2]
N = 4
STAGES = ["download", "unpack", "apply", "build"]
SDISTS = {version: keras_sdist(version) for version in ("3.14.1", "3.15.1")}


@dataclass
class Project:
    """A checkout pinned to the synthetic 3.15.1, its cache, and how to run forkgen in it."""

    root: Path
    cache: Path
    out: Path
    env: dict[str, str]

    def command(self, *argv: str, killer: tuple[str, str] | None = None) -> list[str]:
        runner = ["-m", "tests.support.killer", *killer] if killer else ["-m", "forkgen"]
        return [sys.executable, *runner, *argv]

    def start(self, *argv: str, killer: tuple[str, str] | None = None) -> subprocess.Popen[str]:
        # Ctrl-C as a terminal delivers it: a shell that starts a job in the background without
        # job control (`cmd &` in a script) sets SIGINT to ignored for everything below it, and
        # Python started with SIGINT ignored installs no KeyboardInterrupt handler; such a run
        # of the suite would otherwise see a waiter that Ctrl-C cannot stop.
        return subprocess.Popen(
            self.command(*argv, killer=killer), cwd=self.root, env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def build(self, killer: tuple[str, str] | None = None) -> subprocess.Popen[str]:
        return self.start("build", "--out-dir", str(self.out), killer=killer)

    def places(self) -> list[Path]:
        """Where a run writes: the cache, the workspace, the output directory."""
        return [self.cache, self.root / "patched_keras", self.out]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def make_project(tmp_path: Path) -> Project:
    """The checkout, its static index of synthetic 3.14.1 and 3.15.1 sdists, its cache, under `tmp_path`."""
    index = FakeIndex({"keras": [File(f"keras-{v}.tar.gz", data) for v, data in SDISTS.items()]})
    simple = index.write(tmp_path / "index")
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [tool.forkgen]
        distribution = "keras"
        version = "3.15.1"
        sha256 = "{sha256(SDISTS['3.15.1'])}"
        """))
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": simple.as_uri(),
        "FORKGEN_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT),
    }
    for name in ("FORKGEN_LOCAL_LABEL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        env.pop(name, None)
    return Project(root=root, cache=tmp_path / "cache", out=tmp_path / "dist", env=env)


def finish(process: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def leftovers(places: Sequence[Path]) -> list[str]:
    """Everything a run leaves that is not a result: staging entries and lock files (every
    name that starts with a dot, but the completion marker of an unpacked tree)."""
    found = []
    for place in places:
        for path in sorted(place.rglob(".*")) if place.exists() else []:
            if path.name != ".forkgen-complete":
                found.append(str(path))
    return found


def built_sha256(err: str) -> str:
    line = next(line for line in err.splitlines() if line.startswith("forkgen: built "))
    return line.split("(sha256 ")[1].split(")")[0]


def run_builds(project: Project, n: int) -> list[tuple[int, str, str]]:
    processes = [project.build() for _ in range(n)]
    return [finish(p) for p in processes]


def assert_all_built(project: Project, results: list[tuple[int, str, str]]) -> None:
    codes = [code for code, _, _ in results]
    assert codes == [0] * len(results), "\n\n".join(err[-3000:] for code, _, err in results if code)
    wheels = {Path(out.strip().splitlines()[-1]) for _, out, _ in results}
    assert len(wheels) == 1
    wheel = wheels.pop()
    digests = {built_sha256(err) for _, _, err in results}
    assert digests == {hashlib.sha256(wheel.read_bytes()).hexdigest()}  # byte-identical wheels
    tree = project.root / "patched_keras" / "build" / "keras-3.15.1"
    assert "def _fast(cls, plan, first_arg)" in (tree / "keras/src/layers/layer.py").read_text()  # complete and patched
    assert sorted(p.name for p in project.out.iterdir()) == [wheel.name]
    assert leftovers(project.places()) == []


def test_concurrent_builds_on_a_cold_then_a_warm_cache_all_succeed(project: Project) -> None:
    assert_all_built(project, run_builds(project, N))  # cold: nothing downloaded or unpacked yet
    assert_all_built(project, run_builds(project, N))  # warm: the same workspace and output directory


def test_a_rebase_beside_a_build_and_two_rebases_at_once_all_succeed(project: Project) -> None:
    build = project.build()
    rebases = [project.start("rebase", "3.14.1", "--no-verify") for _ in range(2)]
    results = [finish(p) for p in (build, *rebases)]
    assert [code for code, _, _ in results] == [0, 0, 0], "\n\n".join(err[-3000:] for _, _, err in results)
    assert 'version = "3.15.1"' in (project.root / "pyproject.toml").read_text()  # --no-verify never moves it
    for _, out, _ in results[1:]:
        assert "keras-3.14.1+" in out.strip().splitlines()[-1]
    assert leftovers(project.places()) == []


@pytest.mark.parametrize("stage", STAGES)
def test_a_run_killed_in_any_stage_leaves_nothing_the_next_run_keeps(project: Project, stage: str) -> None:
    code, _, err = finish(project.build(killer=(stage, "kill")))
    assert code == -signal.SIGKILL, err[-2000:]
    assert leftovers(project.places()), "the kill left nothing: it did not happen inside the stage"
    assert_all_built(project, [finish(project.build())])


def test_a_waiting_run_says_for_what_and_whom_and_ctrl_c_stops_it_cleanly(project: Project) -> None:
    holder = project.build(killer=("download", "stall"))  # holds the download of keras 3.15.1
    deadline = time.monotonic() + 60
    assert holder.stderr is not None
    while "stalled" not in holder.stderr.readline():
        assert holder.poll() is None and time.monotonic() < deadline
    waiter = project.start("fetch")
    assert waiter.stderr is not None
    seen = []
    while not any("waiting for" in line for line in seen):
        line = waiter.stderr.readline()
        assert line, "the waiting run exited or said nothing:\n" + "".join(seen)
        seen.append(line)
    waiting = next(line for line in seen if "waiting for" in line)
    assert "keras 3.15.1" in waiting and f"pid {holder.pid}" in waiting, waiting
    waiter.send_signal(signal.SIGINT)
    # It stops within a second when the machine is idle; 120 s, not 30, for a loaded CI machine
    # (30 s once ran out while another job filled both cores). A waiter that ignores Ctrl-C
    # never exits, so the bound still fails it.
    code, _, err = finish(waiter, timeout=120)
    assert code == 130 and "error: interrupted" in err
    holder.kill()
    holder.communicate()
    code, out, err = finish(project.start("fetch"))  # the next run takes over what the holder left
    assert code == 0, err[-2000:]
    assert Path(out.strip().splitlines()[-1], "keras/src/layers/layer.py").is_file()
    assert leftovers(project.places()) == []


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs)["href"] or "")


def test_concurrent_publishes_into_one_index_keep_every_wheel_and_page(project: Project, tmp_path: Path) -> None:
    index = tmp_path / "served"
    for round_ in range(3):
        wheels = [make_wheel(tmp_path / f"w{round_}{i}", f"3.15.{round_}+fast.w{i}", payload=f"x = {i}\n") for i in range(N)]
        processes = [project.start("publish", str(w), "--index-dir", str(index)) for w in wheels]
        results = [finish(p) for p in processes]
        assert [code for code, _, _ in results] == [0] * N, "\n\n".join(err[-2000:] for _, _, err in results)
    files = sorted(p.name for p in (index / "files").glob("*.whl"))
    assert len(files) == 3 * N
    page = json.loads((index / "simple/keras/index.json").read_text())
    assert sorted(f["filename"] for f in page["files"]) == files
    for f in page["files"]:
        wheel = index / "files" / f["filename"]
        assert f["hashes"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
        metadata = wheel.with_name(wheel.name + ".metadata")
        assert f["core-metadata"]["sha256"] == hashlib.sha256(metadata.read_bytes()).hexdigest()
    parser = _Links()
    parser.feed((index / "simple/keras/index.html").read_text())
    assert sorted(unquote(link.split("/")[-1].split("#")[0]) for link in parser.links) == files
    assert json.loads((index / "simple/index.json").read_text())["projects"] == [{"name": "keras"}]
    assert leftovers([index]) == []


# -- the unpack's rename race, in-process ------------------------------------------------------


def race_unpack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, winner: Callable[[Path, Path], None]) -> Path:
    """Unpack the synthetic 3.15.1 while `winner(destination, staging)` plays another process
    (one that takes no lock: an older forkgen, another machine on a shared cache) that fills
    the destination first, between the extraction and the rename; return the destination."""
    archive = tmp_path / "keras-3.15.1.tar.gz"
    archive.write_bytes(SDISTS["3.15.1"])
    destination = tmp_path / "src" / sha256(SDISTS["3.15.1"])
    extract = fetch._extract

    def extract_and_lose(archive_: Path, directory: Path) -> str:
        top = extract(archive_, directory)
        winner(destination, directory)
        return top

    monkeypatch.setattr(fetch, "_extract", extract_and_lose)
    fetch.unpack(archive, destination)
    return destination


def test_an_unpack_that_loses_the_rename_race_to_the_same_content_uses_the_winners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def same_files(destination: Path, staging: Path) -> None:
        shutil.copytree(staging, destination)
        marker = {"archive_sha256": sha256(SDISTS["3.15.1"]), "tree_sha256": fetch.tree_digest(destination)}
        (destination / ".forkgen-complete").write_text(json.dumps(marker) + "\n")

    destination = race_unpack(tmp_path, monkeypatch, same_files)
    assert (destination / "keras-3.15.1/keras/src/layers/layer.py").is_file()
    assert "another run unpacked" in capsys.readouterr().err
    assert sorted(p.name for p in destination.parent.iterdir()) == [destination.name]


def test_an_unpack_that_loses_the_rename_race_to_other_content_is_an_integrity_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def other_files(destination: Path, staging: Path) -> None:
        write_tree(destination / "keras-3.15.1", {**tree_files(), "keras/src/evil.py": "evil = True\n"})

    with pytest.raises(IntegrityError, match="another run") as caught:
        race_unpack(tmp_path, monkeypatch, other_files)
    assert caught.value.exit_code == 4
    destination = tmp_path / "src" / sha256(SDISTS["3.15.1"])
    assert sorted(p.name for p in destination.parent.iterdir()) == [destination.name]
