"""Every install command README.md and docs/serving.md give, run as written with the real client
(pip, or uv from PyPI) against the fork's published index on 127.0.0.1 (nox -s publish).

PyPI is replaced by a second local index that serves upstream's keras of the same version
(downloaded at test time, never committed) and Keras's dependencies, so a command that would
install upstream's keras from PyPI installs it here and fails. The installed keras must be the
fork: its distribution version and `keras.__version__` (read from keras/src/version.py, as
importing keras needs a backend) carry the wheel's label. The commands are the ones the pages
mark (tests/support/documented_installs.py); tests/unit/test_docs.py checks that none is
unmarked.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from email.parser import HeaderParser
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from forkgen.provenance import PROVENANCE_PY, parse_module
from forkgen.publish import publish
from tests.publish.test_index_clients import WHEEL, Served, upstream_version
from tests.support.documented_installs import (
    FORK_INDEX,
    LABEL,
    PYPI_INDEX,
    Documented,
    documented_installs,
)

pytestmark = pytest.mark.skipif(not WHEEL.is_file(), reason="needs the fork's wheel: run `nox -s publish`")

#: What the installed keras says: its distribution's version and keras/src/version.py's `__version__`.
PROBE = """
import ast, importlib.metadata, importlib.util, json, pathlib
origin = pathlib.Path(importlib.util.find_spec("keras").origin)
tree = ast.parse((origin.parent / "src" / "version.py").read_text(encoding="utf-8"))
module_version = next(
    node.value.value for node in tree.body
    if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets)
)
print(json.dumps([importlib.metadata.version("keras"), module_version]))
"""


def fork_version() -> str:
    return str(parse_wheel_filename(WHEEL.name)[1])


def unique_installs() -> list[Documented]:
    """Each documented command once (README.md and docs/serving.md share some), first place first."""
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], Documented] = {}
    for documented in documented_installs():
        seen.setdefault((documented.command, documented.files), documented)
    return list(seen.values())


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(the fork's index, the stand-in for PyPI), each served on 127.0.0.1."""
    fork_root = tmp_path_factory.mktemp("fork-index")
    publish([WHEEL], fork_root)
    wheels = tmp_path_factory.mktemp("upstream-wheels")
    # Upstream's keras of the same version and its dependencies, from the index pip is configured with.
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "-d", str(wheels),
         "--only-binary", ":all:", f"keras=={upstream_version()}"],
        capture_output=True, text=True,
    )
    assert download.returncode == 0, download.stdout + download.stderr
    upstream = [w for w in wheels.glob("*.whl") if parse_wheel_filename(w.name)[0] == "keras"]
    assert [str(parse_wheel_filename(w.name)[1]) for w in upstream] == [upstream_version()]
    pypi_root = tmp_path_factory.mktemp("pypi-stand-in")
    publish(sorted(wheels.glob("*.whl")), pypi_root)
    fork, pypi = Served(fork_root, negotiate=True), Served(pypi_root, negotiate=True)
    try:
        yield f"{fork.url}/simple", f"{pypi.url}/simple"
    finally:
        fork.close()
        pypi.close()


@pytest.fixture(scope="module")
def uv() -> str:
    executable = shutil.which("uv")
    if executable is None:
        if os.environ.get("FORKGEN_WHEEL"):  # under nox the session installs uv: its absence is a failure
            pytest.fail("uv is not installed in the publish session")
        pytest.skip("uv is not installed")
    return executable


def client_env(tmp_path: Path, pypi: str, uv_dir: str, venv_dir: Path | None) -> dict[str, str]:
    """A user's environment whose PyPI is the stand-in: pip's and uv's own settings, nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV"))}
    config_home = tmp_path / "config"
    config_home.mkdir(exist_ok=True)
    env.update({
        "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": pypi, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1", "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
        "UV_DEFAULT_INDEX": pypi, "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "XDG_CONFIG_HOME": str(config_home),
    })
    path = [uv_dir, env.get("PATH", "")]
    if venv_dir is None:  # a uv project makes its own environment, with this Python
        env["UV_PYTHON"] = sys.executable
    else:  # (UV_PYTHON would make `uv pip` install into that interpreter's environment instead)
        env["VIRTUAL_ENV"] = str(venv_dir)
        path.insert(0, str(venv_dir / "bin"))
    env["PATH"] = os.pathsep.join(path)
    return env


def run_install(documented: Documented, indexes: tuple[str, str], uv: str, tmp_path: Path) -> str:
    """Run one documented command as written (indexes and label substituted); return the installed
    distribution version, after checking that keras/src/version.py says the same."""
    fork, pypi = indexes

    def substitute(text: str) -> str:
        return text.replace(FORK_INDEX, fork).replace(PYPI_INDEX, pypi).replace(LABEL, fork_version().partition("+")[2])

    work = tmp_path / "work"
    work.mkdir()
    for name, content in documented.files:
        (work / name).write_text(substitute(content), encoding="utf-8")
    words = documented.command.split()
    if words[:2] == ["uv", "sync"]:
        venv_dir, target = None, work / ".venv"  # the project's own environment
    elif words[:3] == ["uv", "pip", "install"]:
        venv_dir = target = tmp_path / "env"
        venv.EnvBuilder(with_pip=False).create(venv_dir)
    elif words[:2] == ["pip", "install"]:
        venv_dir = target = tmp_path / "env"
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    else:
        pytest.fail(f"{documented}: no client runs this documented install command; teach this test it")
    command = substitute(documented.command)
    result = subprocess.run(["bash", "-c", command], cwd=work, capture_output=True, text=True,
                            env=client_env(tmp_path, pypi, str(Path(uv).parent), venv_dir))
    print(f"$ {command}\n{result.stdout}{result.stderr}")
    assert result.returncode == 0, f"{documented}: exit {result.returncode}\n{result.stderr}"
    probe = subprocess.run([str(target / "bin" / "python"), "-c", PROBE], capture_output=True, text=True, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    distribution_version, module_version = ast.literal_eval(probe.stdout.strip().splitlines()[-1])
    assert module_version == distribution_version, (documented, module_version, distribution_version)
    return str(distribution_version)


@pytest.mark.parametrize("documented", unique_installs(), ids=str)
def test_documented_command_installs_the_fork(documented: Documented, indexes: tuple[str, str], uv: str,
                                              tmp_path: Path) -> None:
    installed = run_install(documented, indexes, uv, tmp_path)
    print(f"{documented}: keras.__version__ == {installed!r}")
    assert installed == fork_version(), f"{documented} installed keras {installed}, not the fork's {fork_version()}"


def test_the_pages_give_commands_for_pip_and_uv() -> None:
    documented = documented_installs()
    for page in ("README.md", "docs/serving.md"):
        installers = {d.installer for d in documented if d.page == page}
        assert installers == {"pip", "uv"}, f"{page} gives install commands for {installers or 'no client'}"
    assert {name for d in documented for name, _ in d.files} >= {"requirements.txt", "pyproject.toml"}


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_the_old_command_shows_the_stand_in_catches_upstream(installer: str, indexes: tuple[str, str], uv: str,
                                                             tmp_path: Path) -> None:
    """The control: README's earlier command (the fork's index as --index-url, PyPI as extra)
    installs the fork with pip and upstream's keras with uv, so a documented command that would
    install upstream from PyPI fails the test above."""
    old = Documented("README.md (before)", 0, f"{'uv ' if installer == 'uv' else ''}pip install --index-url "
                     f"{FORK_INDEX} --extra-index-url {PYPI_INDEX} keras=={upstream_version()}")
    installed = run_install(old, indexes, uv, tmp_path)
    assert installed == (fork_version() if installer == "pip" else upstream_version())


def test_the_wheels_description_is_its_series() -> None:
    """`pip show` and the index pages show the overlay README, filled in from the series built."""
    with zipfile.ZipFile(WHEEL) as wheel:
        metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        provenance = parse_module(wheel.read(PROVENANCE_PY).decode("utf-8"))
    description = HeaderParser().parsestr(metadata).get_payload()
    applied = [p["name"] for p in provenance["patches"] if p["outcome"] == "applied"]
    assert "{{" not in description
    assert fork_version() in description
    assert f"{len(applied)} performance patch" in description
    assert all(f"`{name}`" in description for name in applied)
