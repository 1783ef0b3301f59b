"""Synthetic source trees shaped like Keras's, written for these tests, and test utilities.

The synthetic layer.py of each CallSpec variant (`LAYER_V4`, `LAYERS`: the shape of
`keras/src/layers/layer.py` reduced to what the codemods anchor on, importing Keras's backend
and tree as layer.py does) lives with the CallSpec fast path's cases,
codemods/callspec_fast_path/cases.py, and is re-exported here, as is `replace_once` (from
`codemods.engine`); `load_layer` runs one against `tests.support.fake_backend`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import textwrap
import types
from pathlib import Path

from codemods.callspec_fast_path.cases import LAYER_V4, LAYERS, keras_stand_ins  # noqa: F401 - re-exported for the tests
from codemods.engine import Patch, Sources, replace_once, run_module  # noqa: F401 - re-exported for the tests

VERSION_PY = textwrap.dedent(
    '''\
    # Synthetic stand-in for keras/src/version.py.
    __version__ = "3.15.1"


    def version():
        return __version__
    '''
)

PYPROJECT = textwrap.dedent(
    """\
    [build-system]
    requires = ["setuptools >=61.0"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "keras"
    description = "Synthetic Keras-shaped tree for forkgen's tests"
    readme = "README.md"
    requires-python = ">=3.11"
    dynamic = ["version"]

    [tool.setuptools.dynamic]
    version = {attr = "keras.src.version.__version__"}

    [tool.setuptools.package-dir]
    "" = "."
    "keras" = "keras/api"
    "keras.src" = "keras/src"
    """
)


def assert_applies_once(patch: Patch, path: str, before: str, after: str) -> None:
    """`patch` applied to `before` (the only file, at `path`) renders `after`; checked on `after`,
    it finds itself present and rewrites nothing."""
    sources = Sources(lambda p: before if p == path else None)
    patch.apply(sources)
    assert sources.rendered() == {path: after}
    again = Sources(lambda p: after if p == path else None)
    assert patch.check(again).present
    assert again.rendered() == {}


def load_layer(source: str, name: str = "synthetic_layer") -> types.ModuleType:
    """Execute a synthetic layer.py of `LAYERS` (patched or not) as a fresh module, its Keras
    imports (`keras.src`'s backend and tree, `keras.src.backend`'s KerasTensor) handed
    `tests.support.fake_backend` (`run_module`, `keras_stand_ins`)."""
    from tests.support import fake_backend

    return run_module(source, name, keras_stand_ins(fake_backend))


def patch_files() -> dict[str, str]:
    """Every synthetic file the series' patches anchor on outside layer.py, found by each
    package's name (a new patch's come with it, nothing to list): the `FILES` of its `cases`
    module, in the series' order (a later patch's
    file of the same path wins), and each `TREE_APPENDS` of a `cases` module (`{path: text}`:
    module-level statements put at the end of that file, which an earlier patch's `FILES` holds:
    patches on one file with no `requires` between them, each adding the functions it anchors on)."""
    import importlib

    from codemods.series import SERIES_PACKAGES

    files: dict[str, str] = {}
    for package in SERIES_PACKAGES:
        module = importlib.import_module(f"{package}.cases")
        files.update(getattr(module, "FILES", {}))
        for path, text in getattr(module, "TREE_APPENDS", {}).items():
            files[path] += "\n\n" + text
    return files


def tree_files(layer: str = LAYER_V4, version: str = "3.15.1") -> dict[str, str]:
    """The files of a minimal, buildable Keras-shaped sdist tree (every patch of the series
    finds its anchors in it)."""
    return {
        **patch_files(),
        "pyproject.toml": PYPROJECT,
        "README.md": "Synthetic Keras-shaped tree.\n",
        "PKG-INFO": f"Metadata-Version: 2.1\nName: keras\nVersion: {version}\n",
        "keras/api/__init__.py": "from keras.src.version import __version__ as __version__\n",
        "keras/src/__init__.py": "",
        "keras/src/version.py": VERSION_PY.replace("3.15.1", version),
        "keras/src/layers/__init__.py": "",
        "keras/src/layers/layer.py": layer,
        # Modules the series' inserted code imports and no patch anchors in (the engine looks for
        # each module of the tree an inserted import names: `DeclaredPatch.check_imports`).
        "keras/src/backend/common/masking.py": "def get_keras_mask(x):\n    return getattr(x, \"_keras_mask\", None)\n",
        "keras/src/backend/common/stateless_scope.py": "def in_stateless_scope():\n    return False\n",
    }


def write_tree(root: Path, files: dict[str, str] | None = None) -> Path:
    """Write a Keras-shaped source tree at `root`; return `root`."""
    for relative, text in (files or tree_files()).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def sdist_bytes(files: dict[str, str] | None = None, top: str = "keras-3.15.1") -> bytes:
    """A .tar.gz sdist of the tree, the same bytes for the same files (the gzip header's time too)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for relative, text in sorted((files or tree_files()).items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"{top}/{relative}")
            info.size = len(data)
            info.mtime = 1_700_000_000
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
