"""Codemod: in `any_symbolic_tensors` (keras/src/backend/common/keras_tensor.py, 3.15.0+ and
keras-nightly 3.16.0.dev2026102704), skip `tree.is_nested(x)` for values that are leaves of
every tree implementation: `None`, exact `bool`/`int`/`float`/`str`, and instances of a class
an instance of which was a leaf accepted by `keras.ops.is_tensor` (remembered per class).

Two pieces from `inserted.py`: the two tables and the learning helper at module level right
before `def any_symbolic_tensors`, and the guarded loop body, which takes the place of
upstream's `if tree.is_nested(x):` (kept node for node where `UPSTREAM` stands).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import SkipFile

from codemods.patchlib import (
    PLACEHOLDER,
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    ancestors,
    ast_function,
    cst_function,
    has_marker,
    marker,
    template_pieces,
    walk,
)

NAME = "any-symbolic-tensors-leaf-fast-path"
KERAS_TENSOR_PY = "keras/src/backend/common/keras_tensor.py"
FUNCTION = "any_symbolic_tensors"
ANCHOR = "if tree.is_nested(x):"
PLAIN_TYPES = "_forkgen_any_symbolic_plain_types"
LEAF_TYPES = "_forkgen_any_symbolic_leaf_types"
LEARN = "_forkgen_any_symbolic_learn"
HELPERS = (PLAIN_TYPES, LEAF_TYPES, LEARN)

#: `if isinstance(x, KerasTensor): return True`, the first statement of the inner loop.
KERAS_TENSOR_TEST = m.If(
    test=m.Call(func=m.Name("isinstance"), args=[m.Arg(m.Name("x")), m.Arg(m.Name("KerasTensor"))]),
    body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(m.Name("True"))])]),
    orelse=None,
)
#: `if tree.is_nested(x):` with no `else` (3.15.0, 3.15.1, keras-nightly 3.16.0.dev2026102704).
NESTED_TEST = m.If(
    test=m.Call(func=m.Attribute(m.Name("tree"), m.Name("is_nested")), args=[m.Arg(m.Name("x"))]),
    orelse=None,
)
#: `for x in items:` (the inner loop over one of `args` / `kwargs.values()`).
INNER_LOOP = m.For(target=m.Name("x"), iter=m.Name(), orelse=None)
#: An `if ...: continue` before the nested test: a leaf shortcut (ours or, unmarked, upstream's).
SKIP = m.If(body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Continue()])]))
PLACEHOLDER_LINE = m.SimpleStatementLine(body=[m.Expr(m.Name(PLACEHOLDER))])


def _defines(name: str) -> m.BaseMatcherNode:
    return m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])]) | m.FunctionDef(
        name=m.Name(name)
    )


@functools.cache
def pieces() -> tuple[tuple[cst.BaseStatement, ...], tuple[cst.BaseStatement, ...]]:
    """(the module-level statements, the loop body with its `UPSTREAM` placeholder)."""
    found = template_pieces(__package__ or "codemods.any_symbolic_tensors_leaf_fast_path", "inserted.py")
    module_level = tuple(found["module_level"])
    assert [sum(m.matches(s, _defines(n)) for s in module_level) for n in HELPERS] == [1, 1, 1]
    loop = cst.ensure_type(found["loop_body"][0], cst.For)
    body = tuple(cst.ensure_type(loop.body, cst.IndentedBlock).body)
    assert sum(m.matches(s, PLACEHOLDER_LINE) for s in body) == 1, "inserted.py: one UPSTREAM in the loop"
    for first in (module_level[0], body[0]):
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        assert any(line.comment and line.comment.value.startswith(marker(NAME)) for line in first.leading_lines)
    return module_level, body


def replacement(upstream: cst.If) -> list[cst.BaseStatement]:
    """The guarded loop body with upstream's `if` where `UPSTREAM` stands; upstream's comment
    lines above the `if` move above the guard."""
    _, body = pieces()
    out: list[cst.BaseStatement] = []
    for statement in body:
        if m.matches(statement, PLACEHOLDER_LINE):
            out.append(upstream.with_changes(leading_lines=[]))
        else:
            out.append(statement)
    first = cst.ensure_type(out[0], cst.SimpleStatementLine)
    out[0] = first.with_changes(leading_lines=[*upstream.leading_lines, *first.leading_lines])
    return out


@dataclass(frozen=True)
class Site:
    """`any_symbolic_tensors` in one tree."""

    path: str
    line: int
    function: cst.FunctionDef
    #: Upstream's `if tree.is_nested(x):`, when the patch can go in.
    nested: cst.If | None
    #: The index of `def any_symbolic_tensors` in the module's body.
    index: int
    ours: bool = False
    upstream: bool = False


def _lines(tree: ast.Module) -> tuple[int, list[int]]:
    """The line of `any_symbolic_tensors` and of every `tree.is_nested(x)` test in it."""
    function = ast_function(tree, FUNCTION)
    if function is None:
        return 1, []

    def is_nested_test(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Call)
            and isinstance(node.test.func, ast.Attribute)
            and node.test.func.attr == "is_nested"
        )

    return function.lineno, sorted(n.lineno for n in ast.walk(function) if isinstance(n, ast.If) and is_nested_test(n))


def analyze(module: cst.Module, tree: ast.Module, path: str = KERAS_TENSOR_PY) -> Site:
    """Where the shortcut goes and whether it is in (ours or upstream's); else drift."""
    function = cst_function(module, FUNCTION, path, tree)
    function_line, nested_lines = _lines(tree)
    line = nested_lines[0] if nested_lines else function_line
    index = next(i for i, s in enumerate(module.body) if s is function)
    loops = [n for n in walk(function) if m.matches(n, INNER_LOOP)]
    if len(loops) != 1:
        raise AnchorDrift(path, function_line, "for x in items:", f"exactly one `for x in ...` loop in {FUNCTION}",
                          f"{len(loops)}")
    body = list(cst.ensure_type(cst.ensure_type(loops[0], cst.For).body, cst.IndentedBlock).body)
    nested = [s for s in body if m.matches(s, NESTED_TEST)]
    if len(nested) != 1:
        raise AnchorDrift(path, line, ANCHOR, f"exactly one `{ANCHOR}` in the loop of {FUNCTION}", f"{len(nested)}")
    if not body or not m.matches(body[0], KERAS_TENSOR_TEST):
        raise AnchorDrift(path, line, "if isinstance(x, KerasTensor): return True",
                          "the first statement of the loop", "another statement")
    defined = {n: [s for s in module.body if m.matches(s, _defines(n))] for n in HELPERS}
    if has_marker(loops[0], module, NAME):
        if [len(v) for v in defined.values()] != [1, 1, 1]:
            raise AnchorDrift(path, line, " / ".join(HELPERS), "forkgen's 3 module-level names, once each",
                              ", ".join(f"{k}: {len(v)}" for k, v in defined.items()))
        return Site(path, line, function, None, index, ours=True)
    taken = [k for k, v in defined.items() if v]
    if taken:
        raise AnchorDrift(path, line, ", ".join(taken), "no such module-level name before the patch", "defined")
    if any(m.matches(s, SKIP) for s in body[1:body.index(nested[0])]):
        return Site(path, line, function, None, index, upstream=True)
    if body != [body[0], nested[0]]:
        raise AnchorDrift(path, line, ANCHOR, "the loop's second and last statement", f"{len(body)} statements")
    return Site(path, line, function, cst.ensure_type(nested[0], cst.If), index)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    if site.upstream:
        return (AnchorReport(ANCHOR, site.line, f"{FUNCTION} skips leaves before it (upstream)"),)
    return (AnchorReport(ANCHOR, site.line, f"in {FUNCTION}'s loop, after the KerasTensor test"),)


class AnySymbolicTensorsLeafFastPathCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "any_symbolic_tensors skips tree.is_nested for None, plain scalars and backend tensors."
    VERSION = "1"
    PATH = KERAS_TENSOR_PY
    _nested: int | None = None
    _index = 0
    _path: set[int]

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.ours:
            raise SkipFile("the any_symbolic_tensors leaf fast path is in already")
        if site.nested is None:
            raise SkipFile("any_symbolic_tensors skips leaves already (upstream)")
        self._nested = id(site.nested)
        self._index = site.index
        self._path = {id(tree)} | ancestors(site.function, site.nested)
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if id(original_node) != self._nested:
            return updated_node
        return cst.FlattenSentinel(replacement(updated_node))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        module_level, _ = pieces()
        body: list[cst.BaseStatement] = list(updated_node.body)
        function = body[self._index]
        assert isinstance(function, cst.FunctionDef)
        # The pieces take the blank lines above upstream's `def`; the `def` gets two fresh ones.
        first = module_level[0]
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        placed = [first.with_changes(leading_lines=[*function.leading_lines, *first.leading_lines]), *module_level[1:]]
        body[self._index] = function.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        body[self._index:self._index] = placed
        return updated_node.with_changes(body=body)
