"""Codemod: a fast path at the top of the torch backend's `Variable.value` property getter
(keras/src/backend/torch/core.py in Keras 3.5.0-3.15.1, keras/src/backend/torch/ops/core.py in
keras-nightly 3.16.0.dev2026102704) that returns `self._value` exactly where upstream's body
returns that same object, and otherwise lets upstream's body run unchanged.

Two pieces from `inserted.py`: the captured originals, at module level right after
`class Variable`, and the guarded fast path, as the getter's first statement.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import SkipFile

from codemods.patchlib import (
    NIGHTLY_TORCH_CORE_PY,
    TORCH_CORE_PY,
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    has_marker,
    marker,
    module_level_names,
    template_pieces,
    walk,
)

NAME = "torch-variable-value-fast-path"
CORE_PY = TORCH_CORE_PY
#: keras-nightly moved the torch backend's ops under `ops/` (3.16 dev builds), same code.
NIGHTLY_CORE_PY = NIGHTLY_TORCH_CORE_PY
CLASS = "Variable"
ANCHOR = "Variable.value: def maybe_use_symbolic_tensor(value): / if in_stateless_scope(): / ..."
GET_DEVICE_ANCHOR = "def get_device(): (global 'torch_device', else DEFAULT_DEVICE)"
#: The locals the fast path binds: the getter must not use them.
LOCALS = ("fast_value", "fast_tracker", "fast_state", "fast_device")
#: The module-level names the first piece binds.
CAPTURED = (
    "_forkgen_local_type",
    "_forkgen_maybe_autocast",
    "_forkgen_autocast_globals",
    "_forkgen_get_autocast_scope",
    "_forkgen_in_stateless_scope",
    "_forkgen_get_device",
    "_forkgen_get_global_attribute",
)
#: What the fast path reads from the module: bound above `class Variable` (imported or defined).
REQUIRED = ("in_stateless_scope", "get_device", "global_state", "KerasVariable")


def _arg(value: m.BaseExpression) -> m.Arg:
    return m.Arg(value, keyword=None, star="")


def _self_attr(name: str) -> m.Attribute:
    return m.Attribute(value=m.Name("self"), attr=m.Name(name))


def _is_none(left: m.BaseExpression) -> m.Comparison:
    return m.Comparison(left=left, comparisons=[m.ComparisonTarget(m.Is(), m.Name("None"))])


def _returns(value: m.BaseExpression) -> m.SimpleStatementLine:
    return m.SimpleStatementLine(body=[m.Return(value=value)])


def _assigns(target: str, value: m.BaseExpression) -> m.SimpleStatementLine:
    return m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(target))], value=value)])


# Upstream's getter, 3.5.0-3.15.1 and keras-nightly 3.16.0.dev2026102704: four statements.
#: `def maybe_use_symbolic_tensor(value):` whose test is `str(get_device()) == "meta" and ...`:
#: the only place the body consults the device.
CLOSURE = m.FunctionDef(
    name=m.Name("maybe_use_symbolic_tensor"),
    body=m.IndentedBlock(
        body=[
            m.If(
                test=m.BooleanOperation(
                    left=m.Comparison(
                        left=m.Call(func=m.Name("str"), args=[_arg(m.Call(func=m.Name("get_device"), args=[]))]),
                        comparisons=[m.ComparisonTarget(m.Equal(), m.SimpleString('"meta"'))],
                    ),
                    operator=m.And(),
                )
            ),
            _returns(m.Name("value")),
        ]
    ),
)
#: `if in_stateless_scope():` (its body returns only when the scope holds a value).
STATELESS = m.If(test=m.Call(func=m.Name("in_stateless_scope"), args=[]), orelse=None)
#: `if self._value is None: <placeholder> else: value = self._maybe_autocast(self._value)`.
AUTOCAST_VALUE = _assigns("value", m.Call(func=m.Attribute(m.Name("self"), m.Name("_maybe_autocast")),
                                          args=[_arg(_self_attr("_value"))]))
INITIALISED = m.If(
    test=_is_none(_self_attr("_value")),
    orelse=m.Else(body=m.IndentedBlock(body=[AUTOCAST_VALUE])),
)
#: `return maybe_use_symbolic_tensor(value)`.
RETURN = _returns(m.Call(func=m.Name("maybe_use_symbolic_tensor"), args=[_arg(m.Name("value"))]))
UPSTREAM_BODY = (CLOSURE, STATELESS, INITIALISED, RETURN)

#: `get_device()` as 3.5.0-3.15.1 write it: the global "torch_device", else DEFAULT_DEVICE.
GET_DEVICE = m.FunctionDef(
    name=m.Name("get_device"),
    params=m.Parameters(params=[], kwonly_params=[], posonly_params=[], star_kwarg=None),
    body=m.IndentedBlock(
        body=[
            _assigns(
                "device",
                m.Call(
                    func=m.Attribute(m.Name("global_state"), m.Name("get_global_attribute")),
                    args=[_arg(m.SimpleString('"torch_device"')), _arg(m.Name("None"))],
                ),
            ),
            m.If(test=_is_none(m.Name("device")), body=m.IndentedBlock(body=[_returns(m.Name("DEFAULT_DEVICE"))]),
                 orelse=None),
            _returns(m.Name("device")),
        ]
    ),
)


@functools.cache
def pieces() -> tuple[tuple[cst.SimpleStatementLine, ...], cst.If]:
    """(the module-level statements, the fast path's `if`)."""
    found = template_pieces(__package__ or "codemods.torch_variable_value_fast_path", "inserted.py")
    module_level = tuple(cst.ensure_type(s, cst.SimpleStatementLine) for s in found["module_level"])
    fast = found["value_fast_path"]
    assert len(fast) == 1, "inserted.py: the fast path is one `if`"
    branch = cst.ensure_type(fast[0], cst.If)
    bound: set[str] = module_level_names(cst.Module(body=module_level))
    assert bound == set(CAPTURED), f"inserted.py: module_level binds {sorted(bound)}"
    for first in (module_level[0], branch):
        assert any(line.comment and line.comment.value.startswith(marker(NAME)) for line in first.leading_lines)
    return module_level, branch


@dataclass(frozen=True)
class Site:
    """The `value` getter of the torch `Variable` in one tree."""

    path: str
    #: The line of the getter's `def`.
    line: int
    cls: cst.ClassDef
    getter: cst.FunctionDef
    #: The index of `class Variable` in the module's body.
    index: int
    ours: bool


def _lines(tree: ast.Module) -> tuple[int, int, int]:
    """The lines of `class Variable`, of its `value` getter and of `def get_device` (1 if absent)."""
    cls = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == CLASS]
    getters = [s for s in cls[0].body if isinstance(s, ast.FunctionDef) and s.name == "value"] if len(cls) == 1 else []
    devices = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "get_device"]
    return (
        cls[0].lineno if cls else 1,
        getters[0].lineno if getters else (cls[0].lineno if len(cls) == 1 else 1),
        devices[0].lineno if devices else 1,
    )


def _is_property(function: cst.FunctionDef) -> bool:
    return len(function.decorators) == 1 and m.matches(function.decorators[0].decorator, m.Name("property"))


def _statements(body: Sequence[cst.BaseStatement], expected: Sequence[m.BaseMatcherNode]) -> bool:
    return len(body) == len(expected) and all(m.matches(s, e) for s, e in zip(body, expected, strict=True))


def analyze(module: cst.Module, tree: ast.Module, path: str = CORE_PY) -> Site:
    """The getter and where the pieces go, or that they are in; else drift."""
    class_line, line, device_line = _lines(tree)
    classes = [i for i, s in enumerate(module.body) if m.matches(s, m.ClassDef(name=m.Name(CLASS)))]
    if len(classes) != 1:
        raise AnchorDrift(path, class_line, f"class {CLASS}", "exactly one at module level", f"{len(classes)}")
    index = classes[0]
    cls = cst.ensure_type(module.body[index], cst.ClassDef)
    members = cst.ensure_type(cls.body, cst.IndentedBlock).body
    getters = [
        cst.ensure_type(s, cst.FunctionDef) for s in members
        if m.matches(s, m.FunctionDef(name=m.Name("value"))) and _is_property(cst.ensure_type(s, cst.FunctionDef))
    ]
    if len(getters) != 1:
        raise AnchorDrift(path, line, f"{CLASS}.value", "exactly one `@property def value(self)`", f"{len(getters)}")
    getter = getters[0]
    if not m.matches(getter.params, m.Parameters(params=[m.Param(m.Name("self"))])):
        raise AnchorDrift(path, line, f"{CLASS}.value", "`def value(self)`", "other parameters")
    body = cst.ensure_type(getter.body, cst.IndentedBlock).body
    ours = bool(body) and isinstance(body[0], cst.If) and has_marker(body[0], module, NAME)
    upstream = body[1:] if ours else body
    if not _statements(upstream, UPSTREAM_BODY):
        raise AnchorDrift(
            path, line, ANCHOR,
            "the closure, `if in_stateless_scope():`, `if self._value is None: ... else: value = "
            "self._maybe_autocast(self._value)`, `return maybe_use_symbolic_tensor(value)`",
            f"{len(upstream)} statements of another shape",
        )

    before = module.body[:index]
    devices = [s for s in before if m.matches(s, m.FunctionDef(name=m.Name("get_device")))]
    if len(devices) != 1 or not m.matches(devices[0], GET_DEVICE):
        raise AnchorDrift(
            path, device_line, GET_DEVICE_ANCHOR, f"exactly one, of that shape, above class {CLASS}",
            f"{len(devices)}" if len(devices) != 1 else "another shape",
        )
    bound = module_level_names(cst.Module(body=before))
    missing = [n for n in REQUIRED if n not in bound]
    if missing:
        raise AnchorDrift(path, class_line, ", ".join(missing), f"bound above class {CLASS}", "not bound")

    captured = [s for s in module.body if module_level_names(cst.Module(body=[s])) & set(CAPTURED)]
    if ours:
        mine = module.body[index + 1:index + 1 + len(CAPTURED)]
        if len(captured) != len(CAPTURED) or list(mine) != captured:
            raise AnchorDrift(
                path, class_line, ", ".join(CAPTURED), f"forkgen's {len(CAPTURED)} statements right after class {CLASS}",
                f"{len(captured)} of them",
            )
        return Site(path, line, cls, getter, index, ours=True)
    if captured:
        raise AnchorDrift(path, class_line, ", ".join(CAPTURED), "no such name before the patch", "already bound")
    used = sorted({n.value for n in walk(getter) if isinstance(n, cst.Name) and n.value in LOCALS})
    if used:
        raise AnchorDrift(path, line, f"{CLASS}.value: {', '.join(used)}", "names free for the fast path", "used")
    return Site(path, line, cls, getter, index, ours=False)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    return (
        AnchorReport(ANCHOR, site.line, "a fast path returns `self._value` above the unchanged body",
                     site.path if site.path != CORE_PY else ""),
    )


class TorchVariableValueFastPathCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "A fast path returning `self._value` at the top of the torch Variable.value getter."
    VERSION = "1"
    PATH = CORE_PY
    _site: Site | None = None

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.ours:
            raise SkipFile("the Variable.value fast path is in already")
        self._site = site
        # Only the module's body list and the getter are rebuilt: no visit of the rest.
        module_level, branch = pieces()
        body = list(cst.ensure_type(site.getter.body, cst.IndentedBlock).body)
        first = body[0]
        assert isinstance(first, cst.FunctionDef)
        # Upstream's comment lines above the closure stay the getter's first lines.
        body[0:1] = [
            branch.with_changes(leading_lines=[*first.leading_lines, *branch.leading_lines]),
            first.with_changes(leading_lines=[cst.EmptyLine(indent=False)]),
        ]
        getter = site.getter.with_changes(body=site.getter.body.with_changes(body=body))
        members = [getter if s is site.getter else s for s in cst.ensure_type(site.cls.body, cst.IndentedBlock).body]
        cls = site.cls.with_changes(body=site.cls.body.with_changes(body=members))
        statements = list(tree.body)
        captured = [module_level[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(),
                                                                *module_level[0].leading_lines]),
                    *module_level[1:]]
        statements[site.index:site.index + 1] = [cls, *captured]
        return tree.with_changes(body=statements)
