"""The unpatched release under test, as the oracle of the equivalence tests.

A patch is proven against the code it replaces in *this* release, not against a copy of one
release written into a test: `original(f)` is upstream's own version of the installed (patched)
function or method `f`, read from the unpatched source tree of the very release the fork was
built from, and compiled into the installed module's namespace (so its helpers, constants and
classes are the installed ones, and the only difference between the two is the patch's code).
`upstream(owner, name)` puts it in place of the patched one for a `with` block: the fork with
that patch switched off. `patched_module(patch, file)` finds the module a patch rewrote as the
patch found it (the wheel's provenance records the files of each patch), so a test imports
nothing by a path one release has and another lacks.

The unpatched tree is FORKGEN_UPSTREAM_SRC (`forkgen rebase`, `tests/mutants.py` and the nox
sessions set it to the sdist forkgen fetched and verified); a test that needs it fails without it.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock


class NoUpstreamSource(RuntimeError):
    """The unpatched tree of the installed release cannot be found."""


def provenance() -> dict[str, Any]:
    from keras.src import forkgen_provenance

    data: dict[str, Any] = forkgen_provenance.PROVENANCE
    return data


@functools.cache
def source_root() -> Path:
    """The root of the unpatched source tree of the installed release (it holds `keras/src/`):
    FORKGEN_UPSTREAM_SRC, which the nox sessions and `forkgen rebase` set to the sdist forkgen
    verified and unpacked (what `forkgen fetch` prints for the wheel's release)."""
    upstream = provenance()["upstream"]
    how = (f"`forkgen fetch --distribution {upstream['distribution']} --version {upstream['version']}` prints it"
           if upstream.get("sdist_sha256") else "the fork was built from a local tree: give that tree")
    explicit = os.environ.get("FORKGEN_UPSTREAM_SRC")
    if not explicit:
        raise NoUpstreamSource(f"set FORKGEN_UPSTREAM_SRC to the unpatched source tree of the installed release ({how})")
    root = Path(explicit)
    version = root / "keras" / "src" / "version.py"
    if not version.is_file():
        raise NoUpstreamSource(f"FORKGEN_UPSTREAM_SRC={root} is not a Keras source tree (no keras/src/version.py)")
    if f'"{upstream["version"]}"' not in version.read_text(encoding="utf-8"):
        raise NoUpstreamSource(f"FORKGEN_UPSTREAM_SRC={root} is not {upstream['distribution']} {upstream['version']} ({how})")
    return root


def _relative(module: types.ModuleType) -> str:
    name = module.__name__
    if not name.startswith("keras."):
        raise NoUpstreamSource(f"{name} is not a module of keras")
    return name.replace(".", "/") + ".py"


@functools.cache
def _tree(relative: str) -> ast.Module:
    path = source_root() / relative
    if not path.is_file():
        raise NoUpstreamSource(f"the unpatched release has no {relative}")
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def upstream_source(module: types.ModuleType) -> str:
    """The unpatched text of the installed keras `module`."""
    return (source_root() / _relative(module)).read_text(encoding="utf-8")


def _find(body: list[ast.stmt], qualname: str, relative: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    head, _, rest = qualname.partition(".")
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == head:
            if not rest:
                if isinstance(node, ast.ClassDef):
                    break
                return node
            if isinstance(node, ast.ClassDef):
                return _find(node.body, rest, relative)
    raise NoUpstreamSource(f"the unpatched {relative} defines no {qualname}")


def _is_export(decorator: ast.expr) -> bool:
    # `@keras_export(...)` registers the symbol under its public name: a second registration of
    # the oracle would be pointless (and is refused by some releases).
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name.endswith("_export")


def _unwrap(value: Any) -> Any:
    if isinstance(value, (staticmethod, classmethod)):
        return value.__func__
    if isinstance(value, property):
        return value.fget
    return value


def original(obj: Any, *, owner: Any = None, name: str | None = None) -> Callable[..., Any]:
    """Upstream's version of the installed function or method `obj` (a property: its getter),
    compiled from the unpatched release into the installed module's globals.

    For a method pass the class as `owner` (its module and `__class__`, for a bare `super()`) or
    `obj` as found on the class; `name` is the function's qualified name when it is not `obj`'s.
    """
    if owner is not None and name is not None and obj is None:
        obj = owner.__dict__[name.rpartition(".")[2]]
    function = _unwrap(obj)
    qualname = name or function.__qualname__
    module = sys.modules[function.__module__]
    relative = _relative(module)
    node = _find(_tree(relative).body, qualname, relative)
    node = copy.copy(node)
    node.decorator_list = [d for d in node.decorator_list if not _is_export(d)]
    cls = owner
    if cls is None and "." in qualname:
        cls = module
        for part in qualname.split(".")[:-1]:
            cls = getattr(cls, part)
    # Nested in a factory taking `__class__`, so that a bare `super()` in a method resolves
    # against the installed class, as it does in the class body upstream compiled it in.
    factory = ast.parse("def _forkgen_oracle(__class__):\n    pass\n")
    outer = factory.body[0]
    assert isinstance(outer, ast.FunctionDef)
    outer.body = [node, ast.Return(ast.Name(node.name, ast.Load()))]
    ast.fix_missing_locations(factory)
    code = compile(factory, filename=f"<upstream {relative}>", mode="exec")
    namespace: dict[str, Any] = {}
    exec(code, module.__dict__, namespace)  # noqa: S102 - upstream's own code, from the verified sdist
    made = _unwrap(namespace["_forkgen_oracle"](cls))
    made.__qualname__ = qualname  # as upstream's: messages and reprs that name it read the same
    return made


@contextmanager
def upstream(owner: Any, name: str) -> Iterator[Callable[..., Any]]:
    """For the block, `owner.name` (a module's function, or a class's method, property, static
    or class method) is upstream's unpatched one; yield it."""
    current = inspect.getattr_static(owner, name)
    function = original(current, owner=owner if isinstance(owner, type) else None,
                        name=f"{owner.__qualname__}.{name}" if isinstance(owner, type) else name)
    if isinstance(current, staticmethod):
        replacement: Any = staticmethod(function)
    elif isinstance(current, classmethod):
        replacement = classmethod(function)
    elif isinstance(current, property):
        replacement = property(function, current.fset, current.fdel, current.__doc__)
    else:
        replacement = function
    with mock.patch.object(owner, name, replacement):
        yield function


def patch_files(patch: str) -> list[str]:
    """The files patch `patch` rewrote in this fork, as its provenance records them."""
    for item in provenance().get("patches", []):
        if item["name"] == patch:
            return list(item.get("files", []))
    return []


def patched_module(patch: str, suffix: str) -> types.ModuleType:
    """The module patch `patch` rewrote whose file ends with `suffix` (e.g. "core.py": keras
    3.x's backend/torch/core.py, keras-nightly's backend/torch/ops/core.py)."""
    files = [f for f in patch_files(patch) if f.endswith(suffix)]
    if len(files) != 1:
        raise LookupError(f"{patch} records {len(files)} files ending with {suffix!r}: {patch_files(patch)}")
    return importlib.import_module(files[0][: -len(".py")].replace("/", "."))
