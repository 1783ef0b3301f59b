"""A package index for the fetch tests: PEP 503 HTML and PEP 691 JSON, over HTTP or as a directory.

`booby_trapped_sdist` builds a Keras-shaped sdist whose `setup.py` and in-tree PEP 517
backend create a marker file when anything executes them, so a test can prove that
fetching never runs code from the archive.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.synthetic import sdist_bytes, tree_files

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def booby_trapped_sdist(marker: Path, version: str = "3.15.1") -> bytes:
    """A Keras-shaped sdist whose `setup.py` and build backend write `marker` when executed."""
    trap = f"open({str(marker)!r}, 'w').write('executed')\n"
    files = tree_files(version=version)
    files["setup.py"] = trap + "from setuptools import setup\nsetup()\n"
    files["pyproject.toml"] = textwrap.dedent(
        """\
        [build-system]
        requires = []
        build-backend = "trap_backend"
        backend-path = ["_build"]

        [project]
        name = "keras"
        dynamic = ["version"]
        """
    )
    files["_build/trap_backend.py"] = trap + textwrap.dedent(
        f"""\
        import os


        def get_requires_for_build_wheel(config_settings=None):
            return []


        def prepare_metadata_for_build_wheel(directory, config_settings=None):
            os.makedirs(os.path.join(directory, "keras-{version}.dist-info"))
            with open(os.path.join(directory, "keras-{version}.dist-info", "METADATA"), "w") as f:
                f.write("Metadata-Version: 2.1\\nName: keras\\nVersion: {version}\\n")
            return "keras-{version}.dist-info"


        def build_wheel(directory, config_settings=None, metadata_directory=None):
            raise RuntimeError("the trap ran")


        def build_sdist(directory, config_settings=None):
            raise RuntimeError("the trap ran")
        """
    )
    return sdist_bytes(files, top=f"keras-{version}")


def keras_sdist(version: str) -> bytes:
    """A harmless Keras-shaped sdist of `version`."""
    return sdist_bytes(tree_files(version=version), top=f"keras-{version}")


@dataclass
class File:
    """One file of a project page."""

    filename: str
    data: bytes
    yanked: bool = False
    #: The sha256 the page advertises: the real one by default, None for none.
    sha256: str | None = "real"

    def advertised(self) -> str | None:
        return hashlib.sha256(self.data).hexdigest() if self.sha256 == "real" else self.sha256


@dataclass
class FakeIndex:
    """Projects and their files, as a simple index serves them under `/simple/` and `/files/`."""

    projects: dict[str, list[File]]
    #: Whether the server answers PEP 691 JSON to clients that ask for it.
    serve_json: bool = True
    #: (user, password) the server requires, as HTTP basic auth.
    auth: tuple[str, str] | None = None
    #: (path, Accept, Authorization) of every request the server answered.
    requests: list[tuple[str, str, str]] = field(default_factory=list)

    def html_page(self, project: str) -> bytes:
        links = []
        for f in self.projects[project]:
            href = f"../../files/{f.filename}" + (f"#sha256={f.advertised()}" if f.advertised() else "")
            yanked = ' data-yanked=""' if f.yanked else ""
            links.append(f'<a href="{html.escape(href)}"{yanked}>{html.escape(f.filename)}</a>')
        return ("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()

    def json_page(self, project: str) -> bytes:
        files = [
            {
                "filename": f.filename,
                "url": f"../../files/{f.filename}",
                "hashes": {"sha256": f.advertised()} if f.advertised() else {},
                "yanked": f.yanked,
            }
            for f in self.projects[project]
        ]
        return json.dumps({"meta": {"api-version": "1.0"}, "name": project, "files": files}).encode()

    def file(self, name: str) -> bytes | None:
        return next((f.data for fs in self.projects.values() for f in fs if f.filename == name), None)

    def write(self, directory: Path) -> Path:
        """Write the index as a static directory (PEP 503 pages only); return its `simple/`."""
        for project, files in self.projects.items():
            page = directory / "simple" / project / "index.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_bytes(self.html_page(project))
            for f in files:
                (directory / "files").mkdir(exist_ok=True)
                (directory / "files" / f.filename).write_bytes(f.data)
        return directory / "simple"


@contextmanager
def serve(index: FakeIndex) -> Iterator[str]:
    """Serve `index` on 127.0.0.1 (any free port) in a thread; yield the URL of its `simple/`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            accept = self.headers.get("Accept", "")
            authorization = self.headers.get("Authorization", "")
            index.requests.append((self.path, accept, authorization))
            if index.auth is not None:
                expected = "Basic " + base64.b64encode(":".join(index.auth).encode()).decode()
                if authorization != expected:
                    return self.answer(401, b"unauthorized", "text/plain")
            parts = self.path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "simple" and parts[1] in index.projects:
                if index.serve_json and JSON_TYPE in accept:
                    return self.answer(200, index.json_page(parts[1]), JSON_TYPE)
                return self.answer(200, index.html_page(parts[1]), "text/html; charset=utf-8")
            data = index.file(parts[1]) if len(parts) == 2 and parts[0] == "files" else None
            if data is not None:
                return self.answer(200, data, "application/gzip")
            self.answer(404, b"not found", "text/plain")

        def answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the http.server API
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
