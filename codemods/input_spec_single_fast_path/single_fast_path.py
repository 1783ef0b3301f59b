"""Codemod: in `assert_input_compatibility`, return early for one `InputSpec` and one input
that is not nested when the checks would pass (keras-team/keras#23184, fast path only).

Upstream (3.4.0-3.15.1) flattens the spec and the inputs (two `tree.flatten`), handles dict
inputs, compares the counts and then runs the per-input checks in a loop. The patch inserts,
after the leading `if not input_spec: return`, an `if` that returns when
`_single_input_spec_passes(input_spec, inputs)` (appended after the function) says the checks
pass; in every other case upstream's body runs untouched, so every error is upstream's own.

Because the helper mirrors upstream's checks, the analysis pins them: the function's body,
normalised (docstring dropped, error messages dropped, the body of a branch that can only
raise collapsed), must be the 3.4.0-3.15.1 shape (`UPSTREAM_SHAPE`). Any other shape is
drift, never a silent mismatch between the helper and the checks it mirrors.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import SkipFile

from codemods.patchlib import (
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    has_marker,
    template_pieces,
)

NAME = "input-spec-single-fast-path"
INPUT_SPEC_PY = "keras/src/layers/input_spec.py"
FUNCTION = "assert_input_compatibility"
HELPER = "_single_input_spec_passes"
#: keras-nightly's shared per-spec checker (its form of #23184): the change is upstream.
NIGHTLY_HELPER = "_check_input_spec"
#: The normalised shape (`normalised_shape`) of `assert_input_compatibility`'s body in Keras
#: 3.4.0-3.15.1 (identical in all of them): the checks `_single_input_spec_passes` mirrors.
UPSTREAM_SHAPE = "5708a30f888e6faf"

#: `if not input_spec: return`: where the fast path goes (3.0.0-3.15.1).
_EMPTY_SPEC_RETURN = m.If(
    test=m.UnaryOperation(operator=m.Not(), expression=m.Name("input_spec")),
    body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(value=None)])]),
    orelse=None,
)
#: The inserted `if`: `type(input_spec) is InputSpec and ... and _single_input_spec_passes(...)`.
_FAST_PATH = m.If(
    test=m.BooleanOperation(
        left=m.BooleanOperation(
            left=m.BooleanOperation(
                left=m.Comparison(
                    left=m.Call(func=m.Name("type"), args=[m.Arg(m.Name("input_spec"))]),
                    comparisons=[m.ComparisonTarget(operator=m.Is(), comparator=m.Name("InputSpec"))],
                )
            )
        ),
        operator=m.And(),
        right=m.Call(func=m.Name(HELPER)),
    )
)


@functools.cache
def pieces() -> dict[str, cst.CSTNode]:
    """The template's pieces: the fast-path `if` and the helper function."""
    found = template_pieces(__package__ or "codemods.input_spec_single_fast_path", "inserted.py")
    return {
        "fast_path": cst.ensure_type(found["fast_path"][0], cst.If),
        "helper": cst.ensure_type(found["helper"][0], cst.FunctionDef),
    }


# -- the normalised shape of upstream's checks --------------------------------------------------


def _only_raises(body: list[ast.stmt]) -> bool:
    """A branch that can only end in a raise: its last statement raises, nothing leaves early."""
    if not body or not isinstance(body[-1], ast.Raise):
        return False
    return not any(isinstance(n, (ast.Return, ast.Continue, ast.Break, ast.Yield)) for s in body for n in ast.walk(s))


def _shape(node: object) -> object:
    """A comparable, Python-version-independent rendering of an `ast` subtree."""
    if isinstance(node, ast.AST):
        fields = tuple(
            (name, _shape(value))
            for name, value in ast.iter_fields(node)
            if name not in ("ctx", "kind", "type_comment") and value is not None and value != []
        )
        return (type(node).__name__, fields)
    if isinstance(node, list):
        return tuple(_shape(v) for v in node)
    return repr(node)


def _normalised(statements: list[ast.stmt]) -> list[object]:
    rendered: list[object] = []
    for statement in statements:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # docstring
        if isinstance(statement, ast.Raise):
            rendered.append("raise")
        elif isinstance(statement, ast.If) and not statement.orelse and _only_raises(statement.body):
            rendered.append(("if-raise", _shape(statement.test)))
        elif isinstance(statement, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            parts: list[object] = [type(statement).__name__]
            for name, value in ast.iter_fields(statement):
                if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                    parts.append((name, tuple(_normalised(value))))
                elif name not in ("type_comment",) and value is not None and value != []:
                    parts.append((name, _shape(value)))
            rendered.append(tuple(parts))
        else:
            rendered.append(_shape(statement))
    return rendered


def normalised_shape(function: ast.FunctionDef) -> str:
    """The fingerprint of `function`'s body without docstrings, error messages, the bodies of
    branches that can only raise, and forkgen's fast path."""
    body = [s for s in function.body if not _is_our_fast_path(s)]
    return hashlib.sha256(repr(_normalised(body)).encode()).hexdigest()[:16]


def _is_our_fast_path(statement: ast.stmt) -> bool:
    """The inserted `if type(input_spec) is InputSpec and ... _single_input_spec_passes(...)`."""
    return (
        isinstance(statement, ast.If)
        and any(isinstance(n, ast.Name) and n.id == HELPER for n in ast.walk(statement.test))
    )


# -- analysis -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Analysis:
    #: "fresh" (to apply), "present" (forkgen's) or "upstream".
    state: str
    detail: str
    anchors: tuple[AnchorReport, ...]
    #: The `if not input_spec: return` statement (fresh only).
    empty_return: cst.If | None = None


def _module_function(module: cst.Module, name: str) -> list[cst.FunctionDef]:
    return [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]


def _binds(tree: ast.Module, name: str) -> bool:
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in statement.names):
                return True
        elif isinstance(statement, ast.ClassDef) and statement.name == name:
            return True
    return False


def analyze(module: cst.Module, tree: ast.Module, path: str = INPUT_SPEC_PY) -> Analysis:
    """Where the fast path goes in input_spec.py, and whether it is there already."""
    functions = _module_function(module, FUNCTION)
    function_asts = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == FUNCTION]
    if len(functions) != 1 or len(function_asts) != 1:
        raise AnchorDrift(path, 1, FUNCTION, f"exactly one def {FUNCTION}", f"{len(functions)}")
    function, function_ast = functions[0], function_asts[0]
    line = function_ast.lineno
    nightly = _module_function(module, NIGHTLY_HELPER)
    if nightly:
        squeeze = any(
            isinstance(n, ast.Assign) and isinstance(n.value, ast.Subscript) and isinstance(n.value.slice, ast.Slice)
            for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == NIGHTLY_HELPER for n in ast.walk(s)
        )
        detail = f"upstream has the fast path ({NIGHTLY_HELPER})" + (
            "" if squeeze else "; with nightly's squeeze semantics (allow_last_axis_squeeze no longer strips 1s)"
        )
        return Analysis("upstream", detail, (AnchorReport(NIGHTLY_HELPER, line, detail),))

    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    ours = [s for s in body if m.matches(s, _FAST_PATH)]
    helpers = _module_function(module, HELPER)
    empties = [i for i, s in enumerate(body) if m.matches(s, _EMPTY_SPEC_RETURN)]
    empty_lines = [
        s.lineno for s in function_ast.body
        if isinstance(s, ast.If) and isinstance(s.test, ast.UnaryOp) and isinstance(s.test.op, ast.Not)
        and isinstance(s.test.operand, ast.Name) and s.test.operand.id == "input_spec"
    ]
    empty_line = empty_lines[0] if empty_lines else line
    if len(empties) != 1:
        raise AnchorDrift(
            path, empty_line, "if not input_spec: return",
            f"exactly one `if not input_spec: return` at the top of {FUNCTION}", f"{len(empties)}",
        )
    fresh = not ours and not helpers
    present = (
        len(ours) == 1 and len(helpers) == 1
        and has_marker(ours[0], module, NAME) and has_marker(helpers[0], module, NAME)
        and empties[0] + 1 < len(body) and body[empties[0] + 1] is ours[0]
    )
    if not (fresh or present):
        raise AnchorDrift(
            path, empty_line, "fast path",
            f"no fast path, or forkgen's right after `if not input_spec: return` and {HELPER}",
            f"{len(ours)} fast path(s) `if type(input_spec) is InputSpec ...`, {len(helpers)} {HELPER}",
        )
    shape = normalised_shape(function_ast)
    if shape != UPSTREAM_SHAPE:
        raise AnchorDrift(
            path, line, f"{FUNCTION} checks",
            f"the checks of Keras 3.4.0-3.15.1, which {HELPER} mirrors (shape {UPSTREAM_SHAPE})",
            f"other checks (shape {shape})",
        )
    for name in ("tree", "backend", "InputSpec"):
        if not _binds(tree, name):
            raise AnchorDrift(path, 1, name, f"`{name}` bound at module level", "none")
    anchors = (
        AnchorReport("if not input_spec: return", empty_line, f"in {FUNCTION}"),
        AnchorReport(f"{FUNCTION} checks", line, "the 3.4.0-3.15.1 checks, mirrored by the fast path"),
    )
    detail = "single InputSpec, unnested input: return early when the checks pass"
    return Analysis("fresh" if fresh else "present", detail if fresh else "present", anchors,
                    cst.ensure_type(body[empties[0]], cst.If) if fresh else None)


class InputSpecSingleFastPathCommand(AnalysedCommand[Analysis]):
    DESCRIPTION: str = (
        "assert_input_compatibility returns early for one InputSpec and one unnested input that pass its checks."
    )
    VERSION = "1"
    PATH = INPUT_SPEC_PY
    _empty: int | None = None

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Analysis:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        analysis = self.site(tree)
        if analysis.state != "fresh":
            raise SkipFile(f"{NAME}: {analysis.detail}")
        self._empty = id(analysis.empty_return)
        return super().transform_module_impl(tree)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == FUNCTION

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if id(original_node) != self._empty:
            return updated_node
        fast = cst.ensure_type(pieces()["fast_path"], cst.If)
        fast = fast.with_changes(leading_lines=[cst.EmptyLine(indent=False), *fast.leading_lines])
        return cst.FlattenSentinel([updated_node, fast])

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if original_node.name.value != FUNCTION:
            return updated_node
        helper = cst.ensure_type(pieces()["helper"], cst.FunctionDef)
        helper = helper.with_changes(
            leading_lines=[cst.EmptyLine(indent=False), cst.EmptyLine(indent=False), *helper.leading_lines]
        )
        return cst.FlattenSentinel([updated_node, helper])
