"""The `forkgen` command: outputs, atomicity and exit codes, on synthetic Keras-shaped trees."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import forkgen
from codemods import series
from codemods.engine import switching
from forkgen import cli, pipeline
from forkgen.errors import (
    EXIT_BUILD,
    EXIT_DRIFT,
    EXIT_FETCH,
    EXIT_INTEGRITY,
    EXIT_INTERNAL,
    EXIT_USAGE,
)
from tests.support.synthetic import LAYER_V4, LAYERS, sdist_bytes, sha256, tree_files, write_tree

LAYER = "keras/src/layers/layer.py"
DUPLICATED_SIGNATURE = LAYER_V4.replace(
    "        self._call_signature = inspect.signature(self.call)\n",
    "        self._call_signature = inspect.signature(self.call)\n" * 2,
)


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No pyproject.toml with [tool.forkgen] above tmp_path: nothing pinned.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORKGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FORKGEN_LOCAL_LABEL", raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_analyze_reports_every_anchor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src")
    code, out, _ = run(capsys, "analyze", str(src))
    assert code == 0
    assert f"{LAYER}:13: call_signature" in out
    assert f"{LAYER}:36: callspec_construction" in out
    assert "CallSpec variant V4" in out and "the series can be applied: wheel label fast." in out
    assert "  callspec-fast-path 2: applied (can be applied)" in out
    code, out, _ = run(capsys, "analyze", str(src), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["callspec_variant"] == "V4"
    # Every file some patch of the series rewrites, and nothing else.
    assert report["changes"] == sorted({switching.SWITCHES_PY, *(f for p in report["patches"] for f in p["files"])})
    base = report["patches"][0]
    assert base["name"] == "callspec-fast-path" and base["outcome"] == "applied" and not base["present"]
    assert {a["name"]: a["line"] for a in base["anchors"]}["callspec_class"] == 151


@pytest.mark.parametrize("command", ["analyze", "apply"])
def test_drift_exit_code_and_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    src = write_tree(tmp_path / "src", tree_files(DUPLICATED_SIGNATURE))
    extra = ["--out", str(tmp_path / "out")] if command == "apply" else []
    code, out, err = run(capsys, command, str(src), *extra)
    assert code == EXIT_DRIFT
    first, hint = err.strip().splitlines()[-2:]
    assert first.startswith(f"error: upstream drift: {LAYER}:14: anchor 'call_signature': expected exactly one")
    assert hint.startswith("hint: ")
    assert not (tmp_path / "out").exists()
    # No temporary leftovers (the cache, FORKGEN_CACHE_DIR, keeps what the analysis derived, whole).
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["src"]
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.name.endswith(".tmp")]


def test_analyze_json_reports_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src", tree_files(DUPLICATED_SIGNATURE))
    code, out, _ = run(capsys, "analyze", str(src), "--json")
    report = json.loads(out)
    assert code == EXIT_DRIFT and report == {**report, "ok": False, "exit_code": EXIT_DRIFT}
    assert "call_signature" in report["error"]


def test_apply_changes_only_layer_py_and_is_idempotent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src")
    code, out, _ = run(capsys, "apply", str(src), "--out", str(tmp_path / "patched"))
    assert code == 0 and out.strip().splitlines()[-1] == str(tmp_path / "patched")
    before, after = files_of(src), files_of(tmp_path / "patched")
    # The patched files, and the run-time switches the engine adds (codemods/engine/switching.py).
    assert after.keys() - before.keys() == {switching.SWITCHES_PY}
    code, out, _ = run(capsys, "analyze", str(src), "--json")
    touched = {f for p in json.loads(out)["patches"] for f in p["files"]}
    assert LAYER in touched and [name for name in before if before[name] != after[name]] == sorted(touched)
    code, _, err = run(capsys, "apply", str(tmp_path / "patched"), "--out", str(tmp_path / "again"))
    assert code == 0 and "already patched" in err
    assert files_of(tmp_path / "again") == after
    code, out, _ = run(capsys, "analyze", str(tmp_path / "again"))
    assert code == 0 and "the tree already carries every applied patch" in out


def test_apply_refuses_an_existing_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    code, _, err = run(capsys, "apply", str(src), "--out", str(tmp_path / "out"))
    assert code == EXIT_USAGE and "already exists" in err
    assert files_of(tmp_path / "out") == {"keep.txt": b"mine"}


def test_missing_layer_py_is_drift_and_a_tree_that_is_not_keras_is_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert run(capsys, "analyze", str(tmp_path / "empty"))[0] == EXIT_USAGE
    assert run(capsys, "analyze", str(tmp_path / "nowhere"))[0] == EXIT_USAGE
    (tmp_path / "moved" / "keras" / "src").mkdir(parents=True)
    assert run(capsys, "analyze", str(tmp_path / "moved"))[0] == EXIT_DRIFT


def test_fetch_from_cache_prints_the_source_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = sdist_bytes()
    archive = tmp_path / "cache/sdists/keras/3.15.1/keras-3.15.1.tar.gz"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(data)
    code, out, _ = run(capsys, "fetch", "--version", "3.15.1", "--sha256", sha256(data))
    assert code == 0
    assert Path(out.strip().splitlines()[-1], LAYER).is_file()
    code, _, err = run(capsys, "fetch", "--version", "3.15.1", "--sha256", "a" * 64)
    assert code == EXIT_INTEGRITY and "error: cached archive" in err


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "fetch")[0] == EXIT_USAGE  # nothing pinned here
    assert run(capsys, "fetch", "--version", "3.15.1", "--sha256", "xyz")[0] == EXIT_USAGE
    assert run(capsys, "inspect", str(tmp_path / "missing.whl"))[0] == EXIT_USAGE
    (tmp_path / "fake.whl").write_bytes(b"not a zip")
    assert run(capsys, "inspect", str(tmp_path / "fake.whl"))[0] == EXIT_USAGE
    with pytest.raises(SystemExit) as caught:
        cli.main([])
    assert caught.value.code == EXIT_USAGE


@pytest.mark.parametrize("flag", ["--version", "-V", "--forkgen-version"])
def test_forkgen_version_before_any_command_is_forkgens(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main([flag])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"forkgen {forkgen.__version__}\n"


def test_a_commands_version_is_the_keras_release(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.make_parser().parse_args(["build", "--version", "3.14.1"]).release == "3.14.1"
    code, out, err = run(capsys, "fetch", "--version", "2.15.0")  # a release, validated as one
    assert code == EXIT_USAGE and out == "" and "'2.15.0' is a Keras 2 release" in err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "-V, --version, --forkgen-version" in capsys.readouterr().out


def test_internal_errors_are_exit_70_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(pipeline, "fetch", boom)
    code, _, err = run(capsys, "build", "--version", "3.15.1")
    assert code == EXIT_INTERNAL
    assert "error: internal error: RuntimeError: unexpected" in err and "Traceback" not in err


def test_build_from_a_local_tree_and_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src")
    code, out, err = run(capsys, "build", "--source", str(src), "--out-dir", str(tmp_path / "dist"), "--local-label", "test.7")
    assert code == 0, err
    wheel = Path(out.strip().splitlines()[-1])
    assert wheel == tmp_path / "dist/keras-3.15.1+test.7-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        assert b'__version__ = "3.15.1+test.7"' in archive.read("keras/src/version.py")
        assert b"def _fast(cls, plan, first_arg)" in archive.read(LAYER)
    code, out, _ = run(capsys, "inspect", str(wheel), "--json")
    provenance = json.loads(out)
    assert code == 0
    assert provenance["wheel"] == {"name": "keras", "version": "3.15.1+test.7"}
    assert provenance["upstream"]["version"] == "3.15.1"
    assert {
        "CallSpecFastPathCommand", "CallSpecTrainingFastPathCommand", "GuardStateWritesCommand",
    } <= set(provenance["codemods"])
    # Every codemod of every patch of the series, all applied to this 3.15.1-shaped tree.
    assert set(provenance["codemods"]) == {c for p in series.load_series() for c in p.codemod_versions()}
    assert provenance["training_fast_path"] is True
    code, out, _ = run(capsys, "inspect", str(wheel))
    assert code == 0 and "CallSpec variant: V4" in out and "training fast path: yes" in out
    assert "built at" not in out
    assert f"file times:       {provenance['build_timestamp']} (SOURCE_DATE_EPOCH {provenance['source_date_epoch']}, " \
           "fixed for a wheel built from a local tree; when the wheel was built is not recorded" in out
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == [wheel.name]  # no build leftovers


def test_inspect_says_what_the_time_it_prints_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The wheel's time is the sdist's newest file (a reproducible build), not when it was built."""
    data = sdist_bytes()
    archive = tmp_path / "cache/sdists/keras/3.15.1/keras-3.15.1.tar.gz"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(data)
    code, out, err = run(capsys, "build", "--version", "3.15.1", "--sha256", sha256(data), "--out-dir", str(tmp_path / "dist"))
    assert code == 0, err
    wheel = Path(out.strip().splitlines()[-1])
    with tarfile.open(archive) as tar:
        newest = max(int(m.mtime) for m in tar.getmembers())
    code, out, _ = run(capsys, "inspect", str(wheel))
    stamp = dt.datetime.fromtimestamp(newest, dt.UTC).isoformat()
    assert code == 0 and "built at" not in out
    assert f"file times:       {stamp} (SOURCE_DATE_EPOCH {newest}, the newest file of the sdist; " \
           "when the wheel was built is not recorded: the build is reproducible)" in out
    with zipfile.ZipFile(wheel) as built:  # what the line says: every entry of the wheel has that time
        assert {info.date_time for info in built.infolist()} == {dt.datetime.fromtimestamp(newest, dt.UTC).timetuple()[:6]}


def test_inspect_of_a_directory_says_a_wheel_file_is_expected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dist").mkdir()
    code, _, err = run(capsys, "inspect", str(tmp_path / "dist"))
    assert code == EXIT_USAGE
    assert f"error: {tmp_path / 'dist'} is a directory; a wheel file (.whl) is expected" in err
    assert "does not exist" not in err and "hint: give the path of a .whl file" in err
    (tmp_path / "dist" / "keras-3.15.1+x.1-py3-none-any.whl").write_bytes(b"")
    code, _, err = run(capsys, "inspect", str(tmp_path / "dist"))
    assert code == EXIT_USAGE and f"hint: give the wheel's own path, e.g. {tmp_path / 'dist'}/keras-3.15.1+x.1-py3-none-any.whl" in err


def test_build_without_the_extension(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src")
    code, out, err = run(
        capsys, "build", "--source", str(src), "--out-dir", str(tmp_path / "dist"), "--no-training-fast-path"
    )
    assert code == 0, err
    wheel = Path(out.strip().splitlines()[-1])
    with zipfile.ZipFile(wheel) as archive:
        layer = archive.read(LAYER)
    assert b"def _fast(cls, plan, first_arg)" in layer and b"_fast_bound" not in layer
    code, out, _ = run(capsys, "inspect", str(wheel), "--json")
    provenance = json.loads(out)
    assert provenance["training_fast_path"] is False
    assert "CallSpecTrainingFastPathCommand" not in provenance["codemods"]


def test_the_extension_switch_in_the_config_and_its_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src")
    config = tmp_path / "pyproject.toml"
    config.write_text(
        '[tool.forkgen]\ndistribution = "keras"\nversion = "3.15.1"\nsha256 = "' + "0" * 64 + '"\n'
        "training-fast-path = false\n"
    )
    code, _, err = run(capsys, "apply", str(src), "--out", str(tmp_path / "base"), "--config", str(config))
    assert code == 0, err
    assert "_fast_bound" not in (tmp_path / "base" / LAYER).read_text()
    # The command line wins over the config; the base-only tree gets the extension added.
    code, _, err = run(capsys, "apply", str(tmp_path / "base"), "--out", str(tmp_path / "full"), "--config", str(config),
                       "--training-fast-path")
    assert code == 0, err
    assert "def _fast_bound(cls, bindings, layer, args, kwargs)" in (tmp_path / "full" / LAYER).read_text()
    # forkgen never removes code: the extension cannot be left out of a tree that has it.
    code, _, err = run(capsys, "apply", str(tmp_path / "full"), "--out", str(tmp_path / "again"), "--no-training-fast-path")
    assert code == EXIT_USAGE and "already carries callspec-training-fast-path" in err
    assert not (tmp_path / "again").exists()
    config.write_text(config.read_text().replace("false", '"no"'))
    code, _, err = run(capsys, "apply", str(src), "--out", str(tmp_path / "bad"), "--config", str(config))
    assert code == EXIT_USAGE and "training-fast-path must be true or false" in err


def test_build_failure_is_exit_6(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = tree_files()
    files["pyproject.toml"] = files["pyproject.toml"].replace('build-backend = "setuptools.build_meta"', 'build-backend = "no_such_backend"')
    src = write_tree(tmp_path / "src", files)
    code, _, err = run(capsys, "build", "--source", str(src), "--out-dir", str(tmp_path / "dist"))
    assert code == EXIT_BUILD and "error: python -m build failed" in err
    assert list((tmp_path / "dist").iterdir()) == []


def test_python_dash_m_forkgen_is_the_cli(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "forkgen", "fetch", "--version", "3.99.404", "--sha256", "0" * 64,
         "--cache-dir", str(tmp_path / "c")],
        capture_output=True, text=True, env={**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "1"},
    )
    assert result.returncode == EXIT_FETCH, result.stderr
    assert "error: cannot read http://127.0.0.1:9/simple/keras/" in result.stderr


SETUP_PY_3_0 = '''\
from setuptools import find_packages, setup


def get_version(rel_path):
    for line in open(rel_path).read().splitlines():
        if line.startswith("__version__"):
            return line.split('"')[1]
    raise RuntimeError("Unable to find version string.")


setup(name="keras", version=get_version("keras/__init__.py"), packages=find_packages())
'''


def test_build_stamps_the_version_where_3_0_setup_py_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Keras 3.0.x-3.2.x: setup.py takes the version from keras/__init__.py, which repeats the literal.
    files = tree_files(LAYERS["V1"], version="3.0.0")
    del files["pyproject.toml"], files["keras/api/__init__.py"]
    files["setup.py"] = SETUP_PY_3_0
    files["keras/__init__.py"] = 'from keras.src.version import version\n\n__version__ = "3.0.0"\n'
    src = write_tree(tmp_path / "src", files)
    code, out, err = run(capsys, "build", "--source", str(src), "--out-dir", str(tmp_path / "dist"), "--local-label", "test.1")
    assert code == 0, err
    wheel = Path(out.strip().splitlines()[-1])
    assert wheel.name == "keras-3.0.0+test.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("keras/__init__.py").endswith(b'__version__ = "3.0.0+test.1"\n')
        assert b'__version__ = "3.0.0+test.1"' in archive.read("keras/src/version.py")


def test_build_refuses_a_second_version_literal_that_disagrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = tree_files()
    files["keras/__init__.py"] = '__version__ = "3.14.0"\n'
    src = write_tree(tmp_path / "src", files)
    code, _, err = run(capsys, "build", "--source", str(src), "--out-dir", str(tmp_path / "dist"))
    assert code == EXIT_DRIFT
    assert "keras/__init__.py" in err and "'3.14.0'" in err
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []


def test_a_configured_overlay_that_is_missing_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_tree(tmp_path / "src")
    config = tmp_path / "pyproject.toml"
    config.write_text(
        '[tool.forkgen]\ndistribution = "keras"\nversion = "3.15.1"\nsha256 = "' + "0" * 64 + '"\noverlay = "gone"\n'
    )
    code, _, err = run(capsys, "build", "--config", str(config), "--source", str(src), "--out-dir", str(tmp_path / "dist"))
    assert code == EXIT_USAGE and "the overlay directory" in err and "gone" in err
