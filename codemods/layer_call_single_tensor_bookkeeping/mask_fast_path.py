"""Codemod: in `Layer._set_mask_metadata`, a single (non-nested) output skips the flatten and
the `all(...)` generator upstream runs to learn whether every output has a mask already
(ours, after keras-team/keras#23300).

Upstream 3.0.0-3.15.1 starts the method with

    flat_outputs = tree.flatten(outputs)
    mask_already_computed = all(backend.get_keras_mask(x) is not None for x in flat_outputs)
    if mask_already_computed:
        return

When `tree.is_nested(outputs)` is False, `tree.flatten(outputs)` is `[outputs]` (3.15.1's
`tree.flatten` returns exactly that after the same test; the optree, dm-tree and torch tree
implementations of earlier releases flatten a non-nested value to itself alone), so the three
statements are equivalent to `if <upstream's mask read>(outputs) is not None: return` with
`flat_outputs = [outputs]`. The rest of the method (compute_mask, setting the masks) is kept.
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
    ast_function,
    cst_function,
    has_marker,
    template_pieces,
)

NAME = "layer-call-single-tensor-bookkeeping"
LAYER_PY = "keras/src/layers/layer.py"
FUNCTION = "Layer._set_mask_metadata"
ANCHOR = "flat_outputs = tree.flatten(outputs); mask_already_computed = all(...); if mask_already_computed: return"

#: How upstream reads the mask of `x`: `backend.get_keras_mask(x)` (3.9-3.15.1 at least), a bare
#: `get_keras_mask(x)` (nightly) or `getattr(x, "_keras_mask", None)` (3.0-3.3 at least).
GET_MASK = m.Attribute(m.Name("backend"), m.Name("get_keras_mask")) | m.Name("get_keras_mask")
READ = m.Call(func=GET_MASK, args=[m.Arg(m.Name("x"), keyword=None)]) | m.Call(
    func=m.Name("getattr"),
    args=[
        m.Arg(m.Name("x"), keyword=None),
        m.Arg(m.SimpleString(), keyword=None),
        m.Arg(m.Name("None"), keyword=None),
    ],
)
#: `flat_outputs = tree.flatten(outputs)`
FLATTEN = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[m.AssignTarget(m.Name("flat_outputs"))],
            value=m.Call(
                func=m.Attribute(m.Name("tree"), m.Name("flatten")), args=[m.Arg(m.Name("outputs"), keyword=None)]
            ),
        )
    ]
)
#: `mask_already_computed = all(<get_keras_mask>(x) is not None for x in flat_outputs)`
ALL_COMPUTED = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[m.AssignTarget(m.Name("mask_already_computed"))],
            value=m.Call(
                func=m.Name("all"),
                args=[
                    m.Arg(
                        m.GeneratorExp(
                            elt=m.Comparison(
                                left=READ,
                                comparisons=[m.ComparisonTarget(m.IsNot(), m.Name("None"))],
                            ),
                            for_in=m.CompFor(
                                target=m.Name("x"), iter=m.Name("flat_outputs"), ifs=[], inner_for_in=None, asynchronous=None
                            ),
                        ),
                        keyword=None,
                    )
                ],
            ),
        )
    ]
)
#: `if mask_already_computed: return`
EARLY_RETURN = m.If(
    test=m.Name("mask_already_computed"),
    body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(value=None)])]),
    orelse=None,
)
#: forkgen's piece: `if not tree.is_nested(outputs): ... else: <the three statements>`.
OURS = m.If(
    test=m.UnaryOperation(
        operator=m.Not(),
        expression=m.Call(
            func=m.Attribute(m.Name("tree"), m.Name("is_nested")), args=[m.Arg(m.Name("outputs"), keyword=None)]
        ),
    ),
    orelse=m.Else(body=m.IndentedBlock(body=[FLATTEN, ALL_COMPUTED, EARLY_RETURN])),
)
PARAMS = ("self", "inputs", "outputs", "previous_mask")


@functools.cache
def piece() -> cst.If:
    found = template_pieces(__package__ or "codemods.layer_call_single_tensor_bookkeeping", "inserted.py")
    return cst.ensure_type(found["leaf_outputs"][0], cst.If)


@dataclass(frozen=True)
class Site:
    """The top of `Layer._set_mask_metadata` in one tree."""

    line: int
    function: cst.FunctionDef
    #: Index in the function's body of upstream's first statement (or of forkgen's `if`).
    start: int
    #: Upstream's three statements (inside forkgen's `else` when patched).
    upstream: tuple[cst.BaseStatement, cst.BaseStatement, cst.BaseStatement]
    #: Whether forkgen's piece is there already.
    ours: bool


def _line(tree: ast.Module) -> int:
    function = ast_function(tree, FUNCTION)
    if function is None:
        return 1
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[0].lineno if body else function.lineno


def _body(function: cst.FunctionDef) -> tuple[int, list[cst.BaseStatement]]:
    """The index of the first statement after the docstring, and the body."""
    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    docstring = m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())])
    start = 1 if body and m.matches(body[0], docstring) else 0
    return start, body


def analyze(module: cst.Module, tree: ast.Module, path: str = LAYER_PY) -> Site:
    """The top of `Layer._set_mask_metadata`, in upstream's or forkgen's shape; else drift."""
    function = cst_function(module, FUNCTION, path, tree)
    line = _line(tree)
    params = tuple(p.name.value for p in function.params.params)
    if params != PARAMS or function.params.star_arg is not cst.MaybeSentinel.DEFAULT or function.params.kwonly_params:
        raise AnchorDrift(path, line, FUNCTION, f"parameters {', '.join(PARAMS)}", ", ".join(params) or "other parameters")
    start, body = _body(function)
    if start < len(body) and m.matches(body[start], OURS):
        ours = cst.ensure_type(body[start], cst.If)
        if not has_marker(ours, module, NAME):
            raise AnchorDrift(path, line, ANCHOR, "upstream's statements, or forkgen's leaf test", "a leaf test without forkgen's marker")
        inner = cst.ensure_type(cst.ensure_type(ours.orelse, cst.Else).body, cst.IndentedBlock).body
        return Site(line, function, start, (inner[0], inner[1], inner[2]), True)
    top = body[start : start + 3]
    shapes: tuple[m.BaseMatcherNode, ...] = (FLATTEN, ALL_COMPUTED, EARLY_RETURN)
    names = (
        "flat_outputs = tree.flatten(outputs)",
        "mask_already_computed = all(get_keras_mask(x) is not None for x in flat_outputs)",
        "if mask_already_computed: return",
    )
    for index, (shape, name) in enumerate(zip(shapes, names, strict=True)):
        if index >= len(top) or not m.matches(top[index], shape):
            raise AnchorDrift(path, line + index, ANCHOR, f"statement {index + 1} of {FUNCTION}: `{name}`", "another statement")
    return Site(line, function, start, (top[0], top[1], top[2]), False)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    return (AnchorReport(ANCHOR, site.line, f"top of {FUNCTION}"),)


def _read(all_computed: cst.BaseStatement) -> cst.Call:
    """Upstream's read of a mask in its `all(...)`, made to read `outputs`' instead of `x`'s."""
    call = cst.ensure_type(m.findall(all_computed, READ)[0], cst.Call)
    first = call.args[0].with_changes(value=cst.Name("outputs"))
    return call.with_changes(args=[first, *call.args[1:]])


class _Fill(cst.CSTTransformer):
    def __init__(self, upstream: tuple[cst.BaseStatement, ...], read: cst.Call) -> None:
        super().__init__()
        self.upstream = upstream
        self.read = read

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if m.matches(updated_node, m.SimpleStatementLine(body=[m.Expr(m.Name(PLACEHOLDER))])):
            first, *rest = self.upstream
            return cst.FlattenSentinel([cst.ensure_type(first, cst.SimpleStatementLine).with_changes(leading_lines=[]), *rest])
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if m.matches(updated_node.func, m.Name("get_keras_mask")):
            return self.read
        return updated_node


def filled(site: Site) -> cst.If:
    """forkgen's piece around upstream's three statements (their leading comments move above it)."""
    new = cst.ensure_type(piece().visit(_Fill(site.upstream, _read(site.upstream[1]))), cst.If)
    leading = list(cst.ensure_type(site.upstream[0], cst.SimpleStatementLine).leading_lines)
    return new.with_changes(leading_lines=[*leading, *new.leading_lines])


class MaskFastPathCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "Layer._set_mask_metadata: a non-nested output skips the flatten and all(...) generator."
    VERSION = "1"
    PATH = LAYER_PY
    _site: Site | None = None
    _path: set[int]

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.ours:
            raise SkipFile("the leaf fast path is in already")
        self._site = site
        layer = next(s for s in tree.body if m.matches(s, m.ClassDef(name=m.Name("Layer"))))
        # Visit only the path to the method: the rest of layer.py is kept without being rebuilt.
        self._path = {id(tree), id(layer), id(cst.ensure_type(layer, cst.ClassDef).body), id(site.function)}
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        site = self._site
        if site is None or original_node is not site.function:
            return updated_node
        block = cst.ensure_type(updated_node.body, cst.IndentedBlock)
        body = list(block.body)
        body[site.start : site.start + 3] = [filled(site)]
        return updated_node.with_changes(body=block.with_changes(body=body))
