"""The fork's run-time switches (KERAS_FORKGEN_DISABLE, codemods/engine/switching.py): in a process
where some patches are disabled, every function and method of the modules they changed is
upstream's, bytecode for bytecode, where only disabled patches changed it; with nothing
disabled, none of them is the switched-off copy.

Upstream's code is the unpatched release under test (FORKGEN_UPSTREAM_SRC), compiled here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import types
from collections.abc import Iterator
from typing import Any

import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import disabled_patches

try:
    from keras.src import forkgen_switches
except ImportError:  # a fork built before the switches
    forkgen_switches = None

pytestmark = pytest.mark.skipif(forkgen_switches is None, reason="this fork has no run-time switches")


def _codes(code: types.CodeType, prefix: str = "") -> Iterator[tuple[str, types.CodeType]]:
    """(qualified name, code) of every code object nested in `code`, named as Python names them
    (`C.m`, `f.<locals>.g`), without `co_qualname` (Python 3.11+): a class body is the code
    without new locals."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            name = prefix + const.co_name
            yield name, const
            yield from _codes(const, name + (".<locals>." if const.co_flags & inspect.CO_NEWLOCALS else "."))


def _upstream_codes(relative: str) -> dict[str, bytes]:
    """qualified name -> bytecode of every function upstream's module defines (one definition each)."""
    source = (upstream.source_root() / relative).read_text(encoding="utf-8")
    found: dict[str, list[bytes]] = {}
    for name, code in _codes(compile(source, relative, "exec")):
        found.setdefault(name, []).append(code.co_code)
    return {name: codes[0] for name, codes in found.items() if len(codes) == 1}


def _function(owner: Any, name: str) -> types.FunctionType | None:
    value = inspect.getattr_static(owner, name, None)
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    value = inspect.unwrap(value) if callable(value) else value
    return value if isinstance(value, types.FunctionType) else None


def _module(relative: str) -> types.ModuleType | None:
    """The installed module, or None when it needs a framework this environment lacks (torch's
    tree module on jax, say)."""
    try:
        return importlib.import_module(relative.removesuffix(".py").replace("/", "."))
    except ImportError:
        return None


def _defined(relative: str) -> Iterator[tuple[str, types.FunctionType]]:
    """The installed module's top-level functions and its classes' methods, as upstream's tree names them."""
    module = _module(relative)
    if module is None:
        return
    tree = ast.parse((upstream.source_root() / relative).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = _function(module, node.name)
            if found is not None:
                yield node.name, found
        elif isinstance(node, ast.ClassDef) and isinstance(getattr(module, node.name, None), type):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found = _function(getattr(module, node.name), item.name)
                    if found is not None:
                        yield f"{node.name}.{item.name}", found


def _switched_files() -> list[str]:
    """The modules the series switched that this backend imports (another backend's module, such
    as keras/src/backend/torch/core.py on jax, needs a framework the environment may not have)."""
    import keras

    provenance = upstream.provenance()
    others = {f"keras/src/backend/{name}/" for name in ("torch", "jax", "tensorflow", "numpy", "openvino")}
    others.discard(f"keras/src/backend/{keras.backend.backend()}/")
    return sorted(f for f in provenance.get("patched_files", {}) if f.endswith(".py") and f.startswith("keras/src/")
                  and "forkgen_" not in f and (upstream.source_root() / f).is_file()
                  and not any(f.startswith(other) for other in others))


@pytest.mark.skipif(not disabled_patches() or disabled_patches() != frozenset(forkgen_switches.REQUIRES if forkgen_switches else ()),
                    reason="needs KERAS_FORKGEN_DISABLE=all")
@pytest.mark.parametrize("relative", _switched_files() if forkgen_switches else [])
def test_with_every_patch_disabled_every_function_is_upstream_s(relative: str) -> None:
    if _module(relative) is None:
        pytest.skip(f"{relative} needs a framework this environment lacks")
    codes = _upstream_codes(relative)
    compared = 0
    for qualname, function in _defined(relative):
        if qualname in codes and function.__qualname__ == qualname:
            assert function.__code__.co_code == codes[qualname], f"{relative}: {qualname} is not upstream's"
            compared += 1
    assert compared, f"{relative}: no function compared"


@pytest.mark.skipif(bool(disabled_patches()), reason="needs nothing disabled")
def test_with_nothing_disabled_the_patched_functions_run() -> None:
    """Each switched module runs the series' code: a function differs from upstream's, or the
    module holds forkgen's helpers (a patch that only adds them)."""
    for relative in _switched_files():
        codes = _upstream_codes(relative)
        module = _module(relative)
        if module is None:
            continue
        differ = [q for q, f in _defined(relative) if q in codes and f.__code__.co_code != codes[q]]
        assert differ or any(name.lower().startswith("_forkgen") for name in vars(module)), relative
