"""Stamp the fork's version into `keras/src/version.py` (a build step, not part of the patch)."""

from __future__ import annotations

import ast

import libcst as cst
import libcst.matchers as m

from codemods.engine import AnchorDrift

#: Where every Keras 3 sdist keeps `__version__`.
VERSION_PY = "keras/src/version.py"

#: Other modules some releases take the version from: 3.0.x-3.2.x's setup.py reads
#: `keras/version.py` if present, else `keras/__init__.py`, which there repeats the
#: literal. Each is stamped when it holds a module-level `__version__ = "..."`.
OTHER_VERSION_SOURCES = ("keras/version.py", "keras/__init__.py")

_VERSION_ASSIGN = m.Assign(
    targets=[m.AssignTarget(target=m.Name("__version__"))], value=m.SimpleString()
)


def _version_statements(module: cst.Module) -> list[tuple[int, cst.SimpleStatementLine]]:
    return [
        (i, cst.ensure_type(s, cst.SimpleStatementLine))
        for i, s in enumerate(module.body)
        if m.matches(s, m.SimpleStatementLine(body=[_VERSION_ASSIGN]))
    ]


def _line(source: str) -> int:
    """1-based line of the module-level `__version__ = ...` (1 when there is none)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
            return node.lineno
    return 1


def has_version_literal(source: str) -> bool:
    """Whether a module assigns a string literal to `__version__` at module level."""
    return bool(_version_statements(cst.parse_module(source)))


def read_version(source: str, path: str = VERSION_PY) -> str:
    """The `__version__` string of a `version.py`."""
    module = cst.parse_module(source)
    found = _version_statements(module)
    if len(found) != 1:
        raise AnchorDrift(path, 1, "__version__", 'exactly one module-level `__version__ = "..."`', f"{len(found)}")
    value = cst.ensure_type(cst.ensure_type(found[0][1].body[0], cst.Assign).value, cst.SimpleString).evaluated_value
    return value if isinstance(value, str) else value.decode()


def stamp_version(source: str, expected: str, new: str, path: str = VERSION_PY) -> str:
    """Replace `__version__ = "<expected>"` by `new`, keeping the quote style.

    Raises `AnchorDrift` unless there is exactly one such module-level
    assignment and it holds `expected`.
    """
    module = cst.parse_module(source)
    found = _version_statements(module)
    if len(found) != 1:
        raise AnchorDrift(path, 1, "__version__", 'exactly one module-level `__version__ = "..."`', f"{len(found)}")
    index, statement = found[0]
    line = statement
    assign = cst.ensure_type(line.body[0], cst.Assign)
    string = cst.ensure_type(assign.value, cst.SimpleString)
    if string.evaluated_value != expected:
        raise AnchorDrift(path, _line(source), "__version__", f"the version {expected!r}", repr(string.evaluated_value))
    quote = string.quote
    stamped = line.with_changes(
        body=[assign.with_changes(value=string.with_changes(value=f"{string.prefix}{quote}{new}{quote}"))]
    )
    return module.with_changes(body=[*module.body[:index], stamped, *module.body[index + 1 :]]).code
