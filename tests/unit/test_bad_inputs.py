"""Every bad input README's "Bad inputs" table lists: its exit code, its one-line message, and
that nothing was read or written where it should not be (offline, synthetic trees and wheels)."""

from __future__ import annotations

import errno
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from forkgen import cli, index, patch, pipeline, rebase
from forkgen.errors import EXIT_DRIFT, EXIT_INTEGRITY, EXIT_USAGE
from tests.support.fake_index import FakeIndex, File, keras_sdist, serve
from tests.support.synthetic import sdist_bytes, sha256, tree_files, write_tree

PIN = '[tool.forkgen]\ndistribution = "keras"\nversion = "{version}"\nsha256 = "{sha}"\n'


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORKGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FORKGEN_LOCAL_LABEL", raising=False)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def wheel(directory: Path, payload: str) -> Path:
    directory.mkdir(parents=True)
    path = directory / "keras-3.15.1+fastcallspec.2-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("keras/__init__.py", payload)
        archive.writestr("keras-3.15.1+fastcallspec.2.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: keras\nVersion: 3.15.1+fastcallspec.2\n\n")
    return path


def not_keras(root: Path) -> Path:
    (root / "project").mkdir(parents=True)
    (root / "project" / "README.md").write_text("not Keras\n")
    return root / "project"


def a_file(root: Path) -> Path:
    path = root / "a-file"
    path.write_text("not a directory\n")
    return path


PINNED = ["--version", "3.15.1", "--sha256", "0" * 64]


def pyproject(root: Path, version: str) -> Path:
    path = root / "conf" / "pyproject.toml"
    path.parent.mkdir()
    path.write_text(PIN.format(version=version, sha="0" * 64))
    return path


# (id, argv made in tmp_path, exit code, a fragment of the `error:` line)
CASES: list[tuple[str, Callable[[Path], list[str]], int, str]] = [
    ("version with a marker", lambda t: ["fetch", "--version", "3.15.1; x"], EXIT_USAGE, "'3.15.1; x' is not a PEP 440 version"),
    ("version that is a path", lambda t: ["fetch", "--version", "../../evil"], EXIT_USAGE, "'../../evil' is not a PEP 440 version"),
    ("empty version", lambda t: ["fetch", "--version", ""], EXIT_USAGE, "'' is not a PEP 440 version"),
    ("version that is a path, build", lambda t: ["build", "--version", "../../evil"], EXIT_USAGE, "is not a PEP 440 version"),
    ("version that is a path, rebase", lambda t: ["rebase", "../../evil", "--config", str(pyproject(t, "3.15.1"))],
     EXIT_USAGE, "is not a PEP 440 version"),
    ("pinned version that is a path", lambda t: ["fetch", "--config", str(pyproject(t, "../evil"))], EXIT_USAGE,
     "[tool.forkgen] version: '../evil' is not a PEP 440 version"),
    ("sha256 that is not one", lambda t: ["fetch", "--version", "3.15.1", "--sha256", "xyz"], EXIT_USAGE, "is not a sha256"),
    ("config file that does not exist", lambda t: ["fetch", "--config", str(t / "nope.toml")], EXIT_USAGE, "does not exist"),
    ("analyze a directory that is not Keras", lambda t: ["analyze", str(not_keras(t))], EXIT_USAGE,
     "is not a Keras source tree"),
    ("apply a directory that is not Keras", lambda t: ["apply", str(not_keras(t)), "--out", str(t / "out")], EXIT_USAGE,
     "is not a Keras source tree"),
    ("report a directory that is not Keras", lambda t: ["report", str(not_keras(t))], EXIT_USAGE,
     "is not a Keras source tree"),
    ("analyze a Keras tree without layer.py", lambda t: ["analyze", str(write_tree(t / "k", {"keras/src/__init__.py": ""}))],
     EXIT_DRIFT, "no keras/src/layers/layer.py"),
    ("build --source inside the workspace", lambda t: ["build", "--source", str(write_tree(t / "patched_keras/build/keras-3.15.1"))],
     EXIT_USAGE, "overlaps the workspace"),
    ("build --source holding the output directory",
     lambda t: ["build", "--source", str(write_tree(t / "src")), "--out-dir", str(t / "src" / "dist")],
     EXIT_USAGE, "overlaps the output directory"),
    ("publish two different wheels of one name",
     lambda t: ["publish", str(wheel(t / "a", "x = 1\n")), str(wheel(t / "b", "x = 2\n")), "--index-dir", str(t / "index")],
     EXIT_INTEGRITY, "two different wheels named keras-3.15.1+fastcallspec.2-py3-none-any.whl"),
    ("--config given to report", lambda t: ["report", str(write_tree(t / "k")), "--config", "x.toml"], EXIT_USAGE,
     "--config does not apply to `forkgen report`"),
    ("--config given to inspect", lambda t: ["inspect", "w.whl", "--config", "x.toml"], EXIT_USAGE,
     "--config does not apply to `forkgen inspect`"),
    ("--config given to publish", lambda t: ["publish", "w.whl", "--index-dir", "i", "--config", "x.toml"], EXIT_USAGE,
     "--config does not apply to `forkgen publish`"),
    ("--config given to compare-tests", lambda t: ["compare-tests", "a.xml", "b.xml", "--config", "x.toml"], EXIT_USAGE,
     "--config does not apply to `forkgen compare-tests`"),
    # Keras 2: refused before any download, not reported as upstream drift after one.
    ("Keras 2 release", lambda t: ["fetch", "--version", "2.15.0"], EXIT_USAGE,
     "--version: '2.15.0' is a Keras 2 release; the patches are for Keras 3 only"),
    ("Keras 2 release, build", lambda t: ["build", "--version", "2.15.0"], EXIT_USAGE, "'2.15.0' is a Keras 2 release"),
    ("Keras 2 release, rebase", lambda t: ["rebase", "2.15.0", "--config", str(pyproject(t, "3.15.1"))], EXIT_USAGE,
     "'2.15.0' is a Keras 2 release"),
    ("pinned Keras 2 release", lambda t: ["fetch", "--config", str(pyproject(t, "2.15.0"))], EXIT_USAGE,
     "[tool.forkgen] version: '2.15.0' is a Keras 2 release"),
    # Directories forkgen would write into that no one can: refused up front, naming the path.
    ("build --out-dir that is a file", lambda t: ["build", *PINNED, "--out-dir", str(a_file(t))], EXIT_USAGE,
     "a-file is a file, not a directory"),
    ("build --out-dir under a file", lambda t: ["build", *PINNED, "--out-dir", str(a_file(t) / "dist")], EXIT_USAGE,
     "dist: {t}/a-file is a file, not a directory"),
    ("build --out-dir under /proc", lambda t: ["build", *PINNED, "--out-dir", "/proc/forkgen-dist"], EXIT_USAGE,
     "--out-dir /proc/forkgen-dist: cannot write in /proc ("),
    ("build --source, --out-dir under /proc",
     lambda t: ["build", "--source", str(write_tree(t / "src")), "--out-dir", "/proc/forkgen-dist"], EXIT_USAGE,
     "--out-dir /proc/forkgen-dist: cannot write in /proc ("),
    ("fetch --cache-dir /etc/passwd", lambda t: ["fetch", *PINNED, "--cache-dir", "/etc/passwd"], EXIT_USAGE,
     "--cache-dir /etc/passwd is a file, not a directory"),
    ("fetch --cache-dir under /proc", lambda t: ["fetch", *PINNED, "--cache-dir", "/proc/forkgen-cache"], EXIT_USAGE,
     "--cache-dir /proc/forkgen-cache: cannot write in /proc ("),
    ("build --cache-dir that is a file", lambda t: ["build", *PINNED, "--cache-dir", str(a_file(t))], EXIT_USAGE,
     "--cache-dir {t}/a-file is a file, not a directory"),
    ("rebase --cache-dir that is a file",
     lambda t: ["rebase", "3.15.2", "--cache-dir", str(a_file(t)), "--config", str(pyproject(t, "3.15.1"))], EXIT_USAGE,
     "--cache-dir {t}/a-file is a file, not a directory"),
    ("verify --work-dir that is a file",
     lambda t: ["verify", "equivalence", "--wheel", str(wheel(t / "w", "x = 1\n")), "--upstream-src", str(t),
                "--work-dir", str(a_file(t))], EXIT_USAGE, "--work-dir {t}/a-file is a file, not a directory"),
    ("verify --reports under /proc",
     lambda t: ["verify", "equivalence", "--wheel", str(wheel(t / "w", "x = 1\n")), "--upstream-src", str(t),
                "--reports", "/proc/forkgen-reports"], EXIT_USAGE, "--reports /proc/forkgen-reports: cannot write in /proc"),
    ("publish --index-dir that is a file",
     lambda t: ["publish", str(wheel(t / "a", "x = 1\n")), "--index-dir", str(a_file(t))], EXIT_USAGE,
     "--index-dir {t}/a-file is a file, not a directory"),
    ("publish --index-dir under /proc",
     lambda t: ["publish", str(wheel(t / "a", "x = 1\n")), "--index-dir", "/proc/forkgen-index"], EXIT_USAGE,
     "--index-dir /proc/forkgen-index: cannot write in /proc ("),
    ("apply --out under a file", lambda t: ["apply", str(write_tree(t / "src")), "--out", str(a_file(t) / "out")],
     EXIT_USAGE, "out: {t}/a-file is a file, not a directory"),
]


@pytest.mark.parametrize(("argv", "code", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: Callable[[Path], list[str]], code: int,
                   message: str) -> None:
    args = argv(tmp_path)
    before = snapshot(tmp_path.parent)
    assert cli.main(args) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2].startswith("error: ") and message.format(t=tmp_path) in err[-2], err
    assert err[-1].startswith("hint: ")
    # Refused before anything was read or written: no cache, no workspace, no output, nothing outside.
    assert snapshot(tmp_path.parent) == before
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "index").exists() and not (tmp_path / "out").exists()


BAD_PATHS = [c for c in CASES if "/proc" in c[0] or "a file" in c[0] or "/etc/passwd" in c[0]]


@pytest.mark.parametrize("argv", [c[1] for c in BAD_PATHS], ids=[c[0] for c in BAD_PATHS])
def test_a_bad_directory_is_refused_before_any_download_or_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: Callable[[Path], list[str]]
) -> None:
    args = argv(tmp_path)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("ran before the directory was checked")

    for module, name in ((index, "pip_index_config"), (index, "latest_version"), (pipeline, "fetch"), (cli, "fetch"),
                         (patch, "analyze"), (patch, "analyze_series"), (patch, "apply")):
        monkeypatch.setattr(module, name, never)
    assert cli.main(args) == EXIT_USAGE  # what ran first would be an internal error (70)
    assert "ran before" not in capsys.readouterr().err


@pytest.mark.parametrize("command", [["fetch", *PINNED], ["build", *PINNED], ["rebase", "3.15.2"]])
def test_a_home_that_does_not_exist_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    home = tmp_path / "nonexistent"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("FORKGEN_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    extra = ["--config", str(pyproject(tmp_path, "3.15.1"))] if command[0] == "rebase" else []
    before = snapshot(tmp_path)
    assert cli.main([*command, *extra]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"error: the default download cache {home}/.cache/forkgen is under the home directory {home}, " \
           "which does not exist" in err
    assert "hint: pass --cache-dir, or set FORKGEN_CACHE_DIR" in err
    assert not home.exists() and snapshot(tmp_path) == before


def test_a_directory_without_write_permission_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root every directory is writable: a user's missing permission is stood in for where
    forkgen probes it, by creating a file there."""
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    real = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        if Path(kwargs["dir"]) in (index_dir, tmp_path / "out"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    first = wheel(tmp_path / "a", "x = 1\n")
    assert cli.main(["publish", str(first), "--index-dir", str(index_dir)]) == EXIT_USAGE
    assert f"error: --index-dir {index_dir}: cannot write in {index_dir} (Permission denied)" in capsys.readouterr().err
    (tmp_path / "out").mkdir()
    assert cli.main(["build", *PINNED, "--out-dir", str(tmp_path / "out" / "dist")]) == EXIT_USAGE
    assert f"--out-dir {tmp_path}/out/dist: cannot write in {tmp_path}/out (Permission denied)" in capsys.readouterr().err
    assert list(index_dir.iterdir()) == [] and not (tmp_path / "cache").exists()


def test_a_source_inside_the_workspace_is_not_deleted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `forkgen build` clears patched_keras/build/<name> before applying: that was its own input.
    src = write_tree(tmp_path / "patched_keras" / "build" / "keras-3.15.1")
    before = snapshot(src)
    assert cli.main(["build", "--source", str(src)]) == EXIT_USAGE
    assert snapshot(src) == before
    assert sorted(p.name for p in (tmp_path / "patched_keras").iterdir()) == ["build"]


def test_a_keras_tree_one_level_down_is_suggested(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path / "unpacked" / "keras-3.15.1")
    assert cli.main(["analyze", str(tmp_path / "unpacked")]) == EXIT_USAGE
    assert f"hint: did you mean {tmp_path / 'unpacked' / 'keras-3.15.1'}?" in capsys.readouterr().err


def test_the_same_wheel_twice_in_one_publish_is_published_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = wheel(tmp_path / "a", "x = 1\n")
    second = wheel(tmp_path / "b", "x = 1\n")
    assert cli.main(["publish", str(first), str(second), "--index-dir", str(tmp_path / "index")]) == 0
    assert [p.name for p in (tmp_path / "index" / "files").glob("*.whl")] == [first.name]


# --config is honoured by every command that reads the configuration.


def seed(cache: Path, version: str) -> str:
    data = sdist_bytes(tree_files(version=version), top=f"keras-{version}")
    path = cache / "sdists" / "keras" / version / f"keras-{version}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return sha256(data)


def config_elsewhere(tmp_path: Path, version: str, sha: str, extra: str = "") -> Path:
    path = tmp_path / "elsewhere" / "pyproject.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(PIN.format(version=version, sha=sha) + extra)
    return path


def test_fetch_honours_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sha = seed(tmp_path / "cache", "3.14.1")
    assert cli.main(["fetch", "--config", str(config_elsewhere(tmp_path, "3.14.1", sha))]) == 0
    assert capsys.readouterr().out.strip().endswith("keras-3.14.1")
    # The pinned hash of that config is the one checked.
    assert cli.main(["fetch", "--config", str(config_elsewhere(tmp_path, "3.14.1", "1" * 64))]) == EXIT_INTEGRITY


def test_analyze_honours_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src")
    config = config_elsewhere(tmp_path, "3.15.1", "0" * 64, "training-fast-path = false\n")
    assert cli.main(["analyze", str(src)]) == 0
    everything = capsys.readouterr().out
    assert cli.main(["analyze", str(src), "--config", str(config)]) == 0
    configured = capsys.readouterr().out
    assert "callspec-training-fast-path" in everything and "callspec-training-fast-path" not in configured
    assert everything.splitlines()[-1] != configured.splitlines()[-1]  # another wheel label
    assert cli.main(["analyze", str(src), "--config", str(tmp_path / "missing.toml")]) == EXIT_USAGE


def test_build_honours_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sha = seed(tmp_path / "cache", "3.14.1")
    config = config_elsewhere(tmp_path, "3.14.1", sha, 'local-label = "conf.9"\n')
    assert cli.main(["build", "--config", str(config)]) == 0
    built = Path(capsys.readouterr().out.strip().splitlines()[-1])
    # Pin, label and workspace all come from that file.
    assert built == tmp_path / "elsewhere" / "patched_keras" / "dist" / "keras-3.14.1+conf.9-py3-none-any.whl"


def test_rebase_honours_config_and_builds_through_the_build_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = seed(tmp_path / "cache", "3.14.1"), seed(tmp_path / "cache", "3.15.1")
    overlay = tmp_path / "elsewhere" / "overlay"
    overlay.mkdir(parents=True)
    (overlay / "README.md").write_text("The fork's own long description.\n")
    config = config_elsewhere(tmp_path, "3.14.1", old, 'overlay = "overlay"\n')
    calls: list[Path] = []
    real = pipeline.build_fork

    def spy(*args: object, **kwargs: object) -> pipeline.BuildResult:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(result.wheel.path)
        return result

    monkeypatch.setattr(pipeline, "build_fork", spy)
    monkeypatch.setattr(rebase, "verify_release", lambda *args, **kwargs: [])
    assert cli.main(["rebase", "3.15.1", "--sha256", new, "--config", str(config)]) == 0
    assert len(calls) == 1 and calls[0].is_relative_to(tmp_path / "elsewhere" / "patched_keras" / "rebase")
    with zipfile.ZipFile(calls[0]) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "The fork's own long description." in metadata  # the overlay, as `forkgen build` has it
    assert 'version = "3.15.1"' in config.read_text()


# --version latest, and another distribution than the pinned one without --version.


def nightly_sdist(version: str) -> bytes:
    files = tree_files(version=version)
    files["pyproject.toml"] = files["pyproject.toml"].replace('name = "keras"', 'name = "keras-nightly"')
    return sdist_bytes(files, top=f"keras_nightly-{version}")


@pytest.fixture
def nightly_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    nightlies = ["3.16.0.dev2026102504", "3.16.0.dev2026102704", "3.9.0.dev2025042303"]
    fake = FakeIndex({
        "keras-nightly": [File(f"keras_nightly-{v}.tar.gz", nightly_sdist(v)) for v in nightlies],
        "keras": [File(f"keras-{v}.tar.gz", keras_sdist(v)) for v in ("3.14.1", "3.15.1", "3.16.0rc1")],
    })
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    with serve(fake) as url:
        monkeypatch.setenv("PIP_INDEX_URL", url)
        yield url


@pytest.mark.parametrize(
    ("argv", "resolved"),
    [
        (["--distribution", "keras-nightly"], "keras-nightly 3.16.0.dev2026102704"),
        (["--distribution", "keras-nightly", "--version", "latest"], "keras-nightly 3.16.0.dev2026102704"),
        (["--version", "latest"], "keras 3.15.1"),  # the newest final release, not the release candidate
    ],
)
@pytest.mark.parametrize("command", ["fetch", "build"])
def test_latest_is_resolved_on_the_index_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nightly_index: str, command: str, argv: list[str], resolved: str
) -> None:
    config = config_elsewhere(tmp_path, "3.14.1", "0" * 64)
    assert cli.main([command, *argv, "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    dist, version = resolved.split()
    assert f"newest {dist} on the index: {version}" in err
    assert "is not pinned: sha256" in err  # trust on first use, against the index's advertised hash
    assert version in out.strip().splitlines()[-1]


def test_rebase_without_a_version_moves_to_the_newest_nightly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nightly_index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_elsewhere(tmp_path, "3.14.1", "0" * 64)
    monkeypatch.setattr(rebase, "verify_release", lambda *args, **kwargs: [])
    assert cli.main(["rebase", "--distribution", "keras-nightly", "--config", str(config)]) == 0
    text = config.read_text()
    assert 'distribution = "keras-nightly"' in text and 'version = "3.16.0.dev2026102704"' in text
