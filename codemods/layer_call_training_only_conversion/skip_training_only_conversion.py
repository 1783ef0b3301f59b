"""Codemod: in `Layer.__call__`, let a call whose only kwarg is `training=None|True|False` skip
the two `tree.map_structure(maybe_convert, ...)` of step 1 (keras-nightly's "training-only"
gate), and copy the kwargs of exactly the calls that skip it (not keras-team/keras#23296's copy).

Upstream (3.10-3.15.1) shape, inside `Layer.__call__`::

    original_kwargs = kwargs
    def maybe_convert(x): ... self.dtype_policy.convert_input(x, self.autocast, self.input_dtype) ...
    if (
        kwargs
        or len(args) != 1
        or ...
    ) and self._convert_input_args:
        args = tree.map_structure(maybe_convert, args)
        kwargs = tree.map_structure(maybe_convert, kwargs)

The patch puts `kwargs_may_need_convert = bool(kwargs) and (<helper>(self, kwargs))` before
the gate, uses it as the gate's first operand instead of `kwargs`, attaches `elif kwargs and
self._convert_input_args: kwargs = dict(kwargs)` to the gate, and appends the helper to the
module. With `self._convert_input_args` true and kwargs non-empty, the gate is false only when
the helper let the call skip: 3.15.1 converted that call, and `tree.map_structure` gave it a
fresh dict; the copy gives it one too. Everywhere else `kwargs` stays what 3.15.1 had.

keras-nightly's shape has the flag (inline, no marker) and either an unconditional `else:`
copy or, in #23296's reviewed form, `elif kwargs:`: both are recognised as upstream (they
changed what Nodes record, which is why the patch does not copy like them).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst
import libcst.matchers as m
from libcst.codemod import SkipFile

from codemods.patchlib import (
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    ast_function,
    cst_function,
    find,
    has_marker,
    statement_ancestors,
    template_pieces,
)

NAME = "layer-call-training-only-conversion"
LAYER_PY = "keras/src/layers/layer.py"
#: The local that replaces `kwargs` as the gate's first operand (the name keras-nightly uses).
FLAG = "kwargs_may_need_convert"
#: The module-level predicate the patch appends (named so that it cannot clash with Keras's).
HELPER = "_layer_call_kwargs_may_need_convert"

_SELF_CONVERT_INPUT_ARGS = m.Attribute(m.Name("self"), m.Name("_convert_input_args"))
#: The gate's test: `(<or-chain>) and self._convert_input_args` (3.0.0-3.15.1 and nightly).
_GATE_TEST = m.BooleanOperation(
    left=m.BooleanOperation(operator=m.Or()), operator=m.And(), right=_SELF_CONVERT_INPUT_ARGS
)


def _convert(name: str) -> m.SimpleStatementLine:
    """`<name> = tree.map_structure(maybe_convert, <name>)`: the gate's body, one per line."""
    return m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Name(name))],
                value=m.Call(
                    func=m.Attribute(m.Name("tree"), m.Name("map_structure")),
                    args=[m.Arg(m.Name("maybe_convert")), m.Arg(m.Name(name))],
                ),
            )
        ]
    )


_GATE_BODY = m.IndentedBlock(body=[_convert("args"), _convert("kwargs")])
#: `original_kwargs = kwargs` (3.10+): what step 8 records in the Node, aliasing `kwargs`
#: unless step 1 rebinds it; the reason for the copy.
_ORIGINAL_KWARGS = m.SimpleStatementLine(
    body=[m.Assign(targets=[m.AssignTarget(m.Name("original_kwargs"))], value=m.Name("kwargs"))]
)
#: `self.dtype_policy.convert_input(...)`: what `maybe_convert` runs (3.2+); the helper's
#: "nothing to convert" relies on it being the stock DTypePolicy method.
_CONVERT_INPUT = m.Call(
    func=m.Attribute(m.Attribute(m.Name("self"), m.Name("dtype_policy")), m.Name("convert_input"))
)
_FLAG_ASSIGN = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(FLAG))])])
#: `kwargs = dict(kwargs)`: the body of every copy (ours, nightly's `else:`, #23296's `elif`).
_COPY_BODY = m.IndentedBlock(
    body=[
        m.SimpleStatementLine(
            body=[
                m.Assign(
                    targets=[m.AssignTarget(m.Name("kwargs"))],
                    value=m.Call(func=m.Name("dict"), args=[m.Arg(m.Name("kwargs"))]),
                )
            ]
        )
    ]
)
#: `elif kwargs and self._convert_input_args: kwargs = dict(kwargs)`: ours, the copy only for
#: the calls that took the training-only skip.
_COPY = m.If(
    test=m.BooleanOperation(left=m.Name("kwargs"), operator=m.And(), right=_SELF_CONVERT_INPUT_ARGS),
    body=_COPY_BODY,
    orelse=None,
)
#: `elif kwargs: kwargs = dict(kwargs)`: #23296's reviewed form (upstream's, never ours).
_REVIEWED_COPY = m.If(test=m.Name("kwargs"), body=_COPY_BODY, orelse=None)


@functools.cache
def pieces() -> dict[str, cst.CSTNode]:
    """The template's pieces: the flag statement, the `elif` and the helper function."""
    found = template_pieces(__package__ or "codemods.layer_call_training_only_conversion", "inserted.py")
    flag = cst.ensure_type(found["gate_flag"][0], cst.SimpleStatementLine)
    copy = cst.ensure_type(cst.ensure_type(found["gate_copy"][0], cst.If).orelse, cst.If)
    helper = cst.ensure_type(found["helper"][0], cst.FunctionDef)
    return {"flag": flag, "copy": copy, "helper": helper}


def leftmost(test: cst.BaseExpression) -> cst.BaseExpression:
    """The first operand of the gate's or-chain (`kwargs` upstream, the flag once patched)."""
    node = cst.ensure_type(test, cst.BooleanOperation).left
    while isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or):
        node = node.left
    return node


def _with_leftmost(test: cst.BooleanOperation, name: str) -> cst.BooleanOperation:
    def swap(node: cst.BaseExpression) -> cst.BaseExpression:
        if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or):
            return node.with_changes(left=swap(node.left))
        return cst.ensure_type(node, cst.Name).with_changes(value=name)

    return test.with_changes(left=swap(test.left))


@dataclass(frozen=True)
class Analysis:
    """Where the patch goes in one layer.py, and whether it is there already."""

    #: "fresh" (to apply), "present" (forkgen's) or "upstream".
    state: str
    detail: str
    gate: cst.If
    anchors: tuple[AnchorReport, ...]


def statements(node: cst.CSTNode) -> Iterator[cst.BaseStatement]:
    """Every statement nested in `node`'s blocks, in source order (not expressions: cheaper
    than a full walk, and every anchor of the patch is a statement)."""
    body = getattr(node, "body", None)
    if isinstance(body, cst.IndentedBlock):
        for statement in body.body:
            yield statement
            yield from statements(statement)
    orelse = getattr(node, "orelse", None)
    if isinstance(orelse, cst.If):
        yield orelse
        yield from statements(orelse)
    elif orelse is not None:
        yield from statements(orelse)
    for handler in getattr(node, "handlers", ()):
        yield from statements(handler)
    final = getattr(node, "finalbody", None)
    if final is not None:
        yield from statements(final)


def _lines(function: ast.AST | None, predicate: object) -> list[int]:
    if function is None:
        return []
    assert callable(predicate)
    return sorted(getattr(n, "lineno", 0) for n in ast.walk(function) if predicate(n))


def _is_gate(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.BoolOp)
        and isinstance(node.test.op, ast.And)
        and isinstance(node.test.values[-1], ast.Attribute)
        and node.test.values[-1].attr == "_convert_input_args"
    )


def _binds_dtype_policies(tree: ast.Module) -> int:
    """The line of the module-level statement binding `dtype_policies` (0: none)."""
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == "dtype_policies" for a in stmt.names):
                return stmt.lineno
        elif isinstance(stmt, ast.ClassDef) and stmt.name == "dtype_policies":
            return stmt.lineno
    return 0


def _flat_conversion_body(body: cst.BaseSuite) -> bool:
    """Whether `body` is upstream's two lines as `layer-call-flat-conversion` (later in the
    series) nests them: `flat_converted = ...` then `if flat_converted is None:` around them."""
    return m.matches(
        body,
        m.IndentedBlock(
            body=[
                m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name("flat_converted"))])]),
                m.If(body=_GATE_BODY, orelse=m.Else()),
            ]
        ),
    )


def analyze(module: cst.Module, tree: ast.Module, path: str = LAYER_PY) -> Analysis:
    """The conversion gate of `Layer.__call__` and the patch's state, or AnchorDrift."""
    call = cst_function(module, "Layer.__call__", path, tree)
    call_ast = ast_function(tree, "Layer.__call__")
    call_line = getattr(call_ast, "lineno", 1)
    gate_lines = _lines(call_ast, _is_gate)
    gate_line = gate_lines[0] if gate_lines else call_line
    nested = list(statements(call))
    gates = [
        n
        for n in nested
        if isinstance(n, cst.If)
        and m.matches(n, m.If(test=_GATE_TEST))
        and m.matches(leftmost(n.test), m.Name("kwargs") | m.Name(FLAG))
    ]
    if len(gates) != 1:
        raise AnchorDrift(
            path, gate_line, "conversion gate",
            "exactly one `if (kwargs or ...) and self._convert_input_args:` in Layer.__call__", f"{len(gates)}",
        )
    gate = gates[0]
    first = cst.ensure_type(leftmost(gate.test), cst.Name).value
    lines = [n for n in nested if isinstance(n, cst.SimpleStatementLine)]
    flags = [n for n in lines if m.matches(n, _FLAG_ASSIGN)]
    ours = [f for f in flags if has_marker(f, module, NAME)]
    helpers = [s for s in module.body if m.matches(s, m.FunctionDef(name=m.Name(HELPER)))]

    if first == FLAG and flags and not ours:
        # keras-nightly (#23296 and the training-only gate), without our marker.
        if isinstance(gate.orelse, cst.Else):
            copy = "with nightly's unconditional `else: kwargs = dict(kwargs)` (Node recording already changed)"
        elif gate.orelse is not None and m.matches(gate.orelse, _REVIEWED_COPY):
            copy = "with #23296's `elif kwargs:` copy (Node recording already changed)"
        elif gate.orelse is not None:
            copy = "with an `elif` copy"
        else:
            copy = "without a kwargs copy"
        detail = f"upstream gates conversion on `{FLAG}` {copy}"
        return Analysis("upstream", detail, gate, (AnchorReport("conversion gate", gate_line, detail),))

    fresh = first == "kwargs" and not flags and not helpers and gate.orelse is None
    present = (
        first == FLAG
        and len(flags) == 1
        and len(ours) == 1
        and gate.orelse is not None
        and m.matches(gate.orelse, _COPY)
        and has_marker(gate.orelse, module, NAME)
        and len(helpers) == 1
        and has_marker(helpers[0], module, NAME)
    )
    if not (fresh or present):
        raise AnchorDrift(
            path, gate_line, "conversion gate",
            f"upstream's gate on `kwargs` without an else, or forkgen's `{FLAG}` gate, "
            f"`elif kwargs and self._convert_input_args:` copy and {HELPER}",
            f"a gate on `{first}` ({len(flags)} `{FLAG}` assignments, {len(ours)} forkgen's; "
            f"{'an' if gate.orelse is not None else 'no'} else branch; {len(helpers)} {HELPER})",
        )
    if not (m.matches(gate.body, _GATE_BODY) or _flat_conversion_body(gate.body)):
        raise AnchorDrift(
            path, gate_line, "conversion gate body",
            "`args = tree.map_structure(maybe_convert, args)` then the same for kwargs", "another body",
        )
    originals = [n for n in lines if m.matches(n, _ORIGINAL_KWARGS)]
    original_lines = _lines(call_ast, lambda n: isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "original_kwargs" for t in n.targets))
    if len(originals) != 1:
        raise AnchorDrift(
            path, original_lines[0] if original_lines else call_line, "original_kwargs = kwargs",
            "exactly one `original_kwargs = kwargs` in Layer.__call__", f"{len(originals)}",
        )
    converters = [n for n in nested if isinstance(n, cst.FunctionDef) and n.name.value == "maybe_convert"]
    converter_lines = _lines(call_ast, lambda n: isinstance(n, ast.FunctionDef) and n.name == "maybe_convert")
    converter_line = converter_lines[0] if converter_lines else call_line
    if len(converters) != 1 or len(find(converters[0], _CONVERT_INPUT)) != 1:
        raise AnchorDrift(
            path, converter_line, "maybe_convert",
            "one `def maybe_convert` calling `self.dtype_policy.convert_input` once",
            f"{len(converters)} maybe_convert, "
            f"{len(find(converters[0], _CONVERT_INPUT)) if len(converters) == 1 else 0} convert_input calls",
        )
    import_line = _binds_dtype_policies(tree)
    if not import_line:
        raise AnchorDrift(path, 1, "dtype_policies", "a module-level `from keras.src import dtype_policies`", "none")
    anchors = (
        AnchorReport("original_kwargs = kwargs", original_lines[0], "in Layer.__call__"),
        AnchorReport("maybe_convert", converter_line, "calls self.dtype_policy.convert_input"),
        AnchorReport("conversion gate", gate_line, "`if (kwargs or ...) and self._convert_input_args:`"),
        AnchorReport("dtype_policies", import_line, "module-level import"),
    )
    detail = "training-only calls skip the conversion and get a copy of their kwargs" if fresh else "present"
    return Analysis("fresh" if fresh else "present", detail, gate, anchors)


class ConversionGateCommand(AnalysedCommand[Any]):
    """Base of the codemods that rewrite the input-conversion gate of `Layer.__call__` (this
    patch's and `layer-call-flat-conversion`'s): skip the module unless the patch's analysis
    (with `state`, `detail` and `gate`) finds the gate fresh, and visit only the nodes leading to it."""

    #: The patch's name, for the skip message.
    PATCH_NAME: ClassVar[str]
    PATH = LAYER_PY
    _gate: int | None = None
    _path: set[int]

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        analysis = self.site(tree)
        if analysis.state != "fresh":
            raise SkipFile(f"{self.PATCH_NAME}: {analysis.detail}")
        self._gate = id(analysis.gate)
        # Visit only the nodes leading to the gate: the rest of layer.py is kept as it is,
        # without being rebuilt (`leave_Module` runs all the same).
        self._path = statement_ancestors(tree, [analysis.gate])
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path and super().on_visit(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return node.name.value == "Layer"

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == "__call__"


class SkipTrainingOnlyConversionCommand(ConversionGateCommand):
    DESCRIPTION: str = (
        "Layer.__call__: a call whose only kwarg is training=None|True|False skips the input conversion; "
        "the kwargs of such a call are copied, as 3.15.1's conversion did."
    )
    VERSION = "1"
    PATCH_NAME = NAME

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Analysis:
        return analyze(module, tree, path)

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if id(original_node) != self._gate:
            return updated_node
        flag = cst.ensure_type(pieces()["flag"], cst.SimpleStatementLine)
        flag = flag.with_changes(leading_lines=[cst.EmptyLine(indent=False), *flag.leading_lines])
        test = _with_leftmost(cst.ensure_type(updated_node.test, cst.BooleanOperation), FLAG)
        gate = updated_node.with_changes(test=test, orelse=cst.ensure_type(pieces()["copy"], cst.If))
        return cst.FlattenSentinel([flag, gate])

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        helper = cst.ensure_type(pieces()["helper"], cst.FunctionDef)
        helper = helper.with_changes(leading_lines=[cst.EmptyLine(indent=False), cst.EmptyLine(indent=False), *helper.leading_lines])
        return updated_node.with_changes(body=[*updated_node.body, helper])
