"""Codemod: in `Layer.__call__`, call `self._maybe_build(call_spec)` without opening the layer's
name scope around it once the layer is built (keras-team/keras#23301, in keras-nightly).

Upstream opens the scope twice per call: around step 4 ("Call build") and around step 7 (the
call). Two siblings, not nested. For a built layer `_maybe_build` returns at once (its first
statement is `if self.built: return`), so the first scope is created, pushed and popped
around nothing: only its cost remains. On TensorFlow, entering a `tf.name_scope` inside a
graph reserves the name (the call's ops are then named `dense_1/...`), so there the scope is
kept and the patch changes nothing.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import SkipFile

from codemods.patchlib import (
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    ast_function,
    ast_lines,
    cst_function,
    fill,
    find_statements,
    has_marker,
    statement_ancestors,
    statements,
    template_pieces,
)

NAME = "layer-call-single-name-scope"
LAYER_PY = "keras/src/layers/layer.py"
ANCHOR = "with self._open_name_scope(): self._maybe_build(call_spec)"


def _self(attr: str) -> m.Attribute:
    return m.Attribute(m.Name("self"), m.Name(attr))


#: `self._maybe_build(call_spec)`, alone on its line.
MAYBE_BUILD = m.SimpleStatementLine(
    body=[m.Expr(m.Call(func=_self("_maybe_build"), args=[m.Arg(m.Name("call_spec"), keyword=None)]))]
)
#: The layer's name scope: `self._open_name_scope()` (3.2+), or
#: `backend.name_scope(self.name, caller=self)` (3.0-3.1, before `_open_name_scope` existed).
SCOPE = m.Call(func=_self("_open_name_scope"), args=[]) | m.Call(
    func=m.Attribute(m.Name("backend"), m.Name("name_scope")),
    args=[m.Arg(_self("name"), keyword=None), m.Arg(m.Name("self"), keyword=m.Name("caller"))],
)
#: Step 4 of `Layer.__call__` in 3.0.0-3.15.1: the scope around `_maybe_build` and nothing else.
BUILD_SCOPE = m.With(items=[m.WithItem(SCOPE, asname=None)], body=m.IndentedBlock(body=[MAYBE_BUILD]))
#: forkgen's guard around it (the template's shape).
GUARD = m.If(body=m.IndentedBlock(body=[MAYBE_BUILD]), orelse=m.Else(body=m.IndentedBlock(body=[BUILD_SCOPE])))
#: The first statement of `_maybe_build` (3.0.0-3.15.1 and nightly): what makes the scope
#: around it empty once the layer is built.
EARLY_RETURN = m.If(
    test=_self("built"),
    body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(value=None)])]),
    orelse=None,
)
#: keras-nightly (#23301): `_maybe_build` opens the scope itself, after its early return.
INNER_SCOPE = m.With(items=[m.WithItem(SCOPE, asname=None)])


@functools.cache
def piece() -> cst.BaseStatement:
    found = template_pieces(__package__ or "codemods.layer_call_single_name_scope", "inserted.py")
    return found["build_step"][0]


@dataclass(frozen=True)
class Site:
    """Step 4 of `Layer.__call__` in one tree."""

    line: int
    #: Upstream's `with <scope>: self._maybe_build(call_spec)`, or None (nightly's shape).
    scope: cst.With | None
    #: forkgen's guard around it, when present.
    guard: cst.If | None
    #: `Layer.__call__`.
    call: cst.FunctionDef


def _lines(tree: ast.Module) -> int:
    """The line of step 4 in `Layer.__call__`: forkgen's guard, else the `with` around
    `_maybe_build`, else the bare call (nightly)."""
    call = ast_function(tree, "Layer.__call__")
    if call is None:
        return 1

    def builds(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "_maybe_build"
        )

    def scoped(node: ast.AST) -> bool:
        return isinstance(node, ast.With) and len(node.body) == 1 and any(builds(n) for n in ast.walk(node.body[0]))

    def guarded(node: ast.AST) -> bool:
        return isinstance(node, ast.If) and len(node.orelse) == 1 and scoped(node.orelse[0])

    lines = ast_lines(call, guarded) or ast_lines(call, scoped) or ast_lines(call, builds)
    return lines[0] if lines else call.lineno


def _first_statement(function: cst.FunctionDef) -> cst.BaseStatement | None:
    """The first statement of `function`'s body after its docstring, if any."""
    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())])):
        body = body[1:]
    return body[0] if body else None


def analyze(module: cst.Module, tree: ast.Module, path: str = LAYER_PY) -> Site:
    """Step 4 of `Layer.__call__`, in upstream's, forkgen's or nightly's shape; else drift."""
    call = cst_function(module, "Layer.__call__", path, tree)
    maybe_build = cst_function(module, "Layer._maybe_build", path, tree)
    line = _lines(tree)
    nodes = list(statements(call))
    scopes = [cst.ensure_type(n, cst.With) for n in nodes if m.matches(n, BUILD_SCOPE)]
    calls = [n for n in nodes if m.matches(n, MAYBE_BUILD)]
    guards = [cst.ensure_type(n, cst.If) for n in nodes if m.matches(n, GUARD)]
    if len(scopes) > 1:
        raise AnchorDrift(path, line, ANCHOR, "exactly one in Layer.__call__", f"{len(scopes)}")
    if not scopes:
        # keras-nightly: `__call__` calls `_maybe_build` bare, which opens the scope itself.
        nested = find_statements(maybe_build, INNER_SCOPE)
        if len(calls) == 1 and len(nested) == 1:
            return Site(line, None, None, call)
        raise AnchorDrift(
            path, line, ANCHOR, f"`{ANCHOR}` in Layer.__call__, or nightly's scope inside _maybe_build",
            f"{len(calls)} `self._maybe_build(call_spec)` and {len(nested)} scope(s) in _maybe_build",
        )
    # Skipping the scope is equivalent only because `_maybe_build` starts by returning when built.
    first = _first_statement(maybe_build)
    if first is None or not m.matches(first, EARLY_RETURN):
        raise AnchorDrift(
            path, line, "if self.built: return", "as the first statement of Layer._maybe_build", "another statement"
        )
    if guards:
        guard = guards[0]
        if not has_marker(guard, module, NAME):
            raise AnchorDrift(path, line, ANCHOR, "unguarded, or guarded by forkgen", "a guard without forkgen's marker")
        return Site(line, scopes[0], guard, call)
    if len(calls) != 1:
        raise AnchorDrift(path, line, "self._maybe_build(call_spec)", "exactly one in Layer.__call__", f"{len(calls)}")
    return Site(line, scopes[0], None, call)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    if site.scope is None:
        return (AnchorReport("self._maybe_build(call_spec)", site.line, "in Layer.__call__, scope inside _maybe_build"),)
    return (AnchorReport(ANCHOR, site.line, "step 4 of Layer.__call__"),)


class SingleNameScopeCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "Skip the name scope around Layer._maybe_build once the layer is built (not on TF)."
    VERSION = "1"
    PATH = LAYER_PY
    _scope: int | None = None
    _path: set[int]

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.scope is None or site.guard is not None:
            raise SkipFile("step 4 opens the scope only when needed already")
        self._scope = id(site.scope)
        # Visit only the nodes leading to the `with`: the rest of the module is kept as it is,
        # without being rebuilt (the transform stays cheap on the 2,000-line layer.py).
        layer = next(s for s in tree.body if m.matches(s, m.ClassDef(name=m.Name("Layer"))))
        self._path = {id(tree), id(layer), id(cst.ensure_type(layer, cst.ClassDef).body)}
        self._path |= statement_ancestors(site.call, [site.scope])
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    def leave_With(self, original_node: cst.With, updated_node: cst.With) -> cst.BaseStatement:
        if id(original_node) != self._scope:
            return updated_node
        return fill(piece(), updated_node)
