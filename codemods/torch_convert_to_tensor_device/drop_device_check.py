"""Codemod: in the torch backend's `convert_to_tensor`, run the body of `if x.device != device:`
unconditionally (keras-team/keras#23189, merged upstream as e2e681519).

`device` there is `get_device()`, a `str` on every public path (`DEFAULT_DEVICE`,
`KERAS_TORCH_DEVICE`, `device_scope` -> `_parse_device_input`), and `x.device` is a
`torch.device`: the two never compare equal, so the test is always True and only costs the
`x.device` property and a comparison on every tensor conversion.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import SkipFile

from codemods.patchlib import (
    NIGHTLY_TORCH_CORE_PY,
    PLACEHOLDER,
    TORCH_CORE_PY,
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    ast_function,
    ast_lines,
    cst_function,
    find_statements,
    has_marker,
    statement_ancestors,
    template_pieces,
    walk,
)

NAME = "torch-convert-to-tensor-device"
CORE_PY = TORCH_CORE_PY
#: keras-nightly moved the torch backend's ops under `ops/` (3.16 dev builds): only read to
#: recognise the upstream shape there.
NIGHTLY_CORE_PY = NIGHTLY_TORCH_CORE_PY
FUNCTION = "convert_to_tensor"
ANCHOR = "if x.device != device:"

#: `device = get_device()`, the statement right above the test in every release 3.0.0-3.15.1:
#: what makes the test always True (a str against a torch.device).
DEVICE_ASSIGN = m.SimpleStatementLine(
    body=[m.Assign(targets=[m.AssignTarget(m.Name("device"))], value=m.Call(func=m.Name("get_device"), args=[]))]
)
#: `if x.device != device:` with no `else` (3.0.0-3.15.1; keras#23189 removed it).
DEVICE_TEST = m.If(
    test=m.Comparison(
        left=m.Attribute(m.Name("x"), m.Name("device")),
        comparisons=[m.ComparisonTarget(m.NotEqual(), m.Name("device"))],
    ),
    orelse=None,
)
#: What follows `device = get_device()` once the test is gone: nightly's `if x.is_meta:` (the
#: 3.10+ meta handling) or the plain move of 3.0-3.9.
MOVE = m.If(test=m.Attribute(m.Name("x"), m.Name("is_meta"))) | m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[m.AssignTarget(m.Name("x"))],
            value=m.Call(func=m.Attribute(m.Name("x"), m.Name("to")), args=[m.Arg(m.Name("device"))]),
        )
    ]
)


def _mentions_is_tensor(node: cst.BaseExpression) -> bool:
    """Whether the test calls `is_tensor(x)` (3.0-3.9: `if is_tensor(x):`; 3.10+:
    `if isinstance(x, Variable) or is_tensor(x):`)."""
    call = m.Call(func=m.Name("is_tensor"), args=[m.Arg(m.Name("x"))])
    return any(m.matches(n, call) for n in walk(node))


PLACEHOLDER_LINE = m.SimpleStatementLine(body=[m.Expr(m.Name(PLACEHOLDER))])


@functools.cache
def pieces() -> tuple[cst.BaseStatement, ...]:
    """The template's statements: the marker comment above the `UPSTREAM` placeholder."""
    found = template_pieces(__package__ or "codemods.torch_convert_to_tensor_device", "inserted.py")
    body = tuple(found["unconditional_move"])
    assert sum(m.matches(n, PLACEHOLDER_LINE) for s in body for n in walk(s)) == 1
    return body


def splice(test: cst.If) -> list[cst.BaseStatement]:
    """The template with `UPSTREAM` replaced by the body of `test`, node for node (one level
    out when the placeholder is at the template's top level).

    Upstream's comment lines above the `if` (and a comment on its header line) stay above.
    """
    block = cst.ensure_type(test.body, cst.IndentedBlock)
    kept = list(block.body)

    class Put(cst.CSTTransformer):
        def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
        ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
            if not m.matches(updated_node, PLACEHOLDER_LINE):
                return updated_node
            first = kept[0]
            assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
            first = first.with_changes(leading_lines=[*updated_node.leading_lines, *first.leading_lines])
            return cst.FlattenSentinel([first, *kept[1:]])

    body = list(cst.ensure_type(cst.IndentedBlock(body=pieces()).visit(Put()), cst.IndentedBlock).body)
    header = [cst.EmptyLine(comment=block.header.comment)] if block.header.comment else []
    first = body[0]
    assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    body[0] = first.with_changes(leading_lines=[*test.leading_lines, *header, *first.leading_lines])
    return body


@dataclass(frozen=True)
class Site:
    """The tensor branch of `convert_to_tensor` in one tree."""

    path: str
    line: int
    #: Upstream's `if x.device != device:`, or None when it is gone (ours or upstream's doing).
    test: cst.If | None
    #: The statement following `device = get_device()` once the test is gone.
    move: cst.BaseStatement | None
    ours: bool
    #: `convert_to_tensor`.
    function: cst.FunctionDef


def _lines(tree: ast.Module) -> tuple[int, int, list[int]]:
    """The line of `convert_to_tensor`, of the statement after its `device = get_device()`
    (else the function's) and of every `x.device != device` in it."""
    function = ast_function(tree, FUNCTION)
    if function is None:
        return 1, 1, []
    line = function.lineno
    for node in ast.walk(function):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for first, second in zip(body[:-1], body[1:], strict=True):
            if (
                isinstance(first, ast.Assign)
                and isinstance(first.value, ast.Call)
                and isinstance(first.value.func, ast.Name)
                and first.value.func.id == "get_device"
            ):
                line = second.lineno

    def is_test(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Attribute)
            and node.test.left.attr == "device"
            and [type(o) for o in node.test.ops] == [ast.NotEq]
        )

    return function.lineno, line, ast_lines(function, is_test)


def analyze(module: cst.Module, tree: ast.Module, path: str = CORE_PY) -> Site:
    """The device test of `convert_to_tensor`'s tensor branch, or its upstream removal; else drift."""
    function = cst_function(module, FUNCTION, path, tree)
    function_line, after_line, test_lines = _lines(tree)
    body = cst.ensure_type(function.body, cst.IndentedBlock).body
    branches = [s for s in body if isinstance(s, cst.If) and _mentions_is_tensor(s.test)]
    if len(branches) != 1:
        raise AnchorDrift(
            path, function_line, "if ... is_tensor(x):", f"exactly one tensor branch in {FUNCTION}", f"{len(branches)}"
        )
    branch = cst.ensure_type(branches[0].body, cst.IndentedBlock).body
    tests = find_statements(branches[0], DEVICE_TEST)
    line = test_lines[0] if test_lines else after_line
    if len(tests) > 1:
        raise AnchorDrift(path, line, ANCHOR, "at most one in the tensor branch", f"{len(tests)}")
    # The statement right after `device = get_device()`: the test (to remove) or, without it,
    # the move itself (removed by us or by upstream).
    after = [branch[i + 1] for i in range(len(branch) - 1) if m.matches(branch[i], DEVICE_ASSIGN)]
    if len(after) != 1:
        raise AnchorDrift(path, line, "device = get_device()", "exactly one in the tensor branch", f"{len(after)}")
    if tests:
        if tests[0] is not after[0]:
            raise AnchorDrift(path, line, ANCHOR, "right after `device = get_device()`", "it elsewhere")
        return Site(path, line, cst.ensure_type(tests[0], cst.If), None, False, function)
    if not m.matches(after[0], MOVE):
        raise AnchorDrift(
            path, line, ANCHOR, f"`{ANCHOR}` or upstream's unconditional move after `device = get_device()`",
            "another statement",
        )
    # The marker comment sits above the moved statement, in its leading lines.
    return Site(path, line, None, after[0], has_marker(after[0], module, NAME), function)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    where = f"in {FUNCTION}'s tensor branch"
    return (AnchorReport(ANCHOR, site.line, where, site.path if site.path != CORE_PY else ""),)


class DropDeviceCheckCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "Run the body of `if x.device != device:` in torch convert_to_tensor unconditionally."
    VERSION = "1"
    PATH = CORE_PY
    _test: int | None = None
    _path: set[int]

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.test is None:
            raise SkipFile("the device test is gone already")
        self._test = id(site.test)
        # Visit only the nodes leading to the test: the rest of the module is kept as it is.
        self._path = {id(tree)} | statement_ancestors(site.function, [site.test])
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if id(original_node) != self._test:
            return updated_node
        return cst.FlattenSentinel(splice(updated_node))
