"""Real clients against the published index (nox -s publish): pip through a real HTTP server
on 127.0.0.1, and twine + pip through a real pypiserver.

Needs the fork's wheel (FORKGEN_WHEEL, set by the nox session), pip and, for the
pypiserver test, `pypi-server` and `twine` on PATH.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkgen.fetch import sha256_of
from forkgen.publish import JSON_CONTENT_TYPE, publish

WHEEL = Path(os.environ.get("FORKGEN_WHEEL", "patched_keras/dist/missing.whl")).resolve()
pytestmark = pytest.mark.skipif(not WHEEL.is_file(), reason="needs the fork's wheel: run `nox -s publish`")
TORCH_SPEC = os.environ.get("FORKGEN_TORCH_SPEC", "torch==2.13.0")


def only_this_index() -> dict[str, str]:
    """The environment for a pip that sees no index but the one on its command line."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL")}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


def upstream_version() -> str:
    return WHEEL.name.split("-")[1].split("+")[0]


class Served:
    """A static index served by http.server, with PEP 691 content negotiation and a request log."""

    def __init__(self, root: Path, negotiate: bool) -> None:
        self.requests: list[tuple[str, str]] = []  # (path, content type served)
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def send_head(self) -> Any:
                path = self.translate_path(self.path)
                accept = self.headers.get("Accept", "")
                if negotiate and os.path.isdir(path) and JSON_CONTENT_TYPE in accept:
                    page = Path(path) / "index.json"
                    if page.is_file():
                        body = page.read_bytes()
                        self.send_response(200)
                        self.send_header("Content-Type", JSON_CONTENT_TYPE)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        served.requests.append((self.path, JSON_CONTENT_TYPE))
                        return _Body(body)
                result = super().send_head()
                if result is not None:
                    served.requests.append((self.path, self.guess_type(path) if not os.path.isdir(path) else "text/html"))
                return result

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, *_: Any) -> bytes:
        data, self.data = self.data, b""
        return data

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("index")
    publish([WHEEL], root)
    return root


@pytest.mark.parametrize("negotiate", [True, False], ids=["pep691-json", "pep503-html"])
def test_pip_download_picks_the_fast_build_from_metadata(index: Path, tmp_path: Path, negotiate: bool) -> None:
    server = Served(index, negotiate)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
             "--index-url", f"{server.url}/simple", "-d", str(tmp_path), f"keras=={upstream_version()}"],
            capture_output=True, text=True, env=only_this_index(),
        )
    finally:
        server.close()
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == [WHEEL.name]
    assert sha256_of(tmp_path / WHEEL.name) == sha256_of(WHEEL)
    paths = [path for path, _ in server.requests]
    page_type = dict(server.requests)["/simple/keras/"]
    assert page_type == (JSON_CONTENT_TYPE if negotiate else "text/html")
    metadata = f"/files/{WHEEL.name.replace('+', '%2B')}.metadata"
    assert metadata in paths, paths  # PEP 658: pip read the metadata file ...
    assert paths.index(metadata) < len(paths) - 1  # ... before it fetched the wheel


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def pypiserver(tmp_path: Path) -> Iterator[str]:
    executable = shutil.which("pypi-server")
    if executable is None:
        if os.environ.get("FORKGEN_WHEEL"):  # under nox: the session installs it, so its absence is a failure
            pytest.fail("pypi-server is not installed in the publish session")
        pytest.skip("pypi-server is not installed")
    packages = tmp_path / "packages"
    packages.mkdir()
    port = free_port()
    process = subprocess.Popen(
        [executable, "run", "--host", "127.0.0.1", "--port", str(port), "--authenticate", ".", "--passwords", ".",
         str(packages)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pypi-server did not start: {process.stdout.read() if process.stdout else ''}") from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_twine_upload_to_pypiserver_then_pip_install(pypiserver: str, tmp_path: Path) -> None:
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(WHEEL)], capture_output=True, text=True)
    print(check.stdout)
    assert check.returncode == 0, check.stdout + check.stderr
    upload = subprocess.run(
        [sys.executable, "-m", "twine", "upload", "--non-interactive", "--repository-url", f"{pypiserver}/",
         "-u", "forkgen", "-p", "unused", str(WHEEL)],
        capture_output=True, text=True,
    )
    print(upload.stdout, upload.stderr)
    assert upload.returncode == 0, upload.stdout + upload.stderr
    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    version = WHEEL.name.split("-")[1]
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir"]
    installed = subprocess.run(
        [*pip, "--no-deps", "--index-url", f"{pypiserver}/simple/", f"keras=={version}"],
        capture_output=True, text=True, env=only_this_index(),
    )
    print(installed.stdout, installed.stderr)
    assert installed.returncode == 0, installed.stderr
    assert f"Successfully installed keras-{version}" in installed.stdout
    # Keras's own dependencies and a backend come from the usual index.
    requires = subprocess.run(
        [python, "-c", "from importlib.metadata import requires; print('\\n'.join(r for r in requires('keras') if 'extra' not in r))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    subprocess.run([*pip, "-q", *requires, TORCH_SPEC], check=True, capture_output=True)
    probe = subprocess.run(
        [python, "-c", "import json, keras; from keras.src import forkgen_provenance as p; "
                       "print(json.dumps([keras.__version__, p.PROVENANCE['upstream']['sdist_sha256']]))"],
        capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": "torch"}, cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    reported_version, sdist_sha256 = json.loads(probe.stdout.strip().splitlines()[-1])
    print(f"keras.__version__ == {reported_version!r}")
    assert reported_version == version and "+" in reported_version
    assert len(sdist_sha256) == 64
