"""Codemods: O(1) `ALLOWED_DTYPES` membership and a fast path for canonical dtype strings in
`standardize_dtype` (keras-team/keras#23182, merged in keras-nightly; speed part only).

Three pieces, in two files:
- `dtypes.py`: `ALLOWED_DTYPES_SET = frozenset(ALLOWED_DTYPES)` right after the tuple;
- `variables.py`, `standardize_dtype`: a first statement returning an exact `str` that is in
  the set, and the final `if dtype not in dtypes.ALLOWED_DTYPES:` asking the set first for an
  exact `str` (upstream's tuple test still decides for anything else).

The fast path returns what upstream's body returns only because of that body's shape and of
the two constants; `analyze` checks both on the tree (see `_check_body`), and drifts otherwise.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import (
    AnchorDrift,
    AnchorReport,
    BackportCommand,
    cst_function,
    has_marker,
    template_pieces,
)

NAME = "dtype-fast-paths"
DTYPES_PY = "keras/src/backend/common/dtypes.py"
VARIABLES_PY = "keras/src/backend/common/variables.py"
FUNCTION = "standardize_dtype"
#: The module-level names of dtypes.py the patch reads.
TUPLE, SET, PY_MAP = "ALLOWED_DTYPES", "ALLOWED_DTYPES_SET", "PYTHON_DTYPES_MAP"

#: How each piece was found: absent (3.15.1), ours (forkgen's, marked) or theirs (nightly's).
ABSENT, OURS, THEIRS = "absent", "ours", "theirs"


@functools.cache
def pieces() -> dict[str, cst.BaseStatement]:
    found = template_pieces(__package__ or "codemods.dtype_fast_paths", "inserted.py")
    return {name: body[0] for name, body in found.items()}


def _module_assign(name: str) -> m.SimpleStatementLine:
    """`<name> = ...` alone on a module-level line."""
    return m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])])


def _dtypes_attr(name: str) -> m.Attribute:
    """`dtypes.<name>`: variables.py reads the constants through the module since Keras 3.2.0."""
    return m.Attribute(m.Name("dtypes"), m.Name(name))


def _membership(negated: bool, name: str) -> m.Comparison:
    """`dtype in dtypes.<name>` (or `not in`)."""
    operator = m.NotIn() if negated else m.In()
    return m.Comparison(m.Name("dtype"), [m.ComparisonTarget(operator, _dtypes_attr(name))])


#: The fast path: `if <type/isinstance test> and dtype in dtypes.ALLOWED_DTYPES_SET: return dtype`
#: (ours tests `type(dtype) is str`, nightly's `isinstance(dtype, str)`).
def _fast_path(test_call: m.Call | m.Comparison | m.OneOf[m.Call | m.Comparison]) -> m.If:
    """`if <test_call> and dtype in dtypes.ALLOWED_DTYPES_SET: return dtype`."""
    return m.If(
        test=m.BooleanOperation(left=test_call, operator=m.And(), right=_membership(False, SET)),
        body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(m.Name("dtype"))])]),
        orelse=None,
    )


#: The fast path, in any form (ours tests `type(dtype) is str`, nightly `isinstance(dtype, str)`).
FAST_PATH = _fast_path(m.OneOf(m.Call(), m.Comparison()))
NIGHTLY_FAST_PATH = _fast_path(m.Call(func=m.Name("isinstance")))
#: 3.2.0-3.15.1's final check `if dtype not in dtypes.ALLOWED_DTYPES: raise ...`.
BARE_FINAL = m.If(test=_membership(True, TUPLE), orelse=None)
#: Ours: `if not (type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET) and <upstream test>:`.
OUR_FINAL = m.If(
    test=m.BooleanOperation(left=m.UnaryOperation(m.Not()), operator=m.And(), right=_membership(True, TUPLE)),
    orelse=None,
)
#: keras-nightly: `if dtype not in dtypes.ALLOWED_DTYPES_SET:`.
NIGHTLY_FINAL = m.If(test=_membership(True, SET), orelse=None)


@dataclass(frozen=True)
class DtypesSide:
    """The anchors of dtypes.py: the tuple, and the set if there is one."""

    tuple_line: int
    tuple_node: cst.SimpleStatementLine
    allowed: tuple[str, ...]
    set_state: str
    set_line: int


@dataclass(frozen=True)
class VariablesSide:
    """The anchors of `standardize_dtype` in variables.py."""

    line: int
    fast_state: str
    final_state: str
    final_line: int
    final_node: cst.If


def _literal_strings(node: ast.expr | None) -> tuple[str, ...] | None:
    """The strings of a tuple/list literal of string constants, or None."""
    if not isinstance(node, (ast.Tuple, ast.List)):
        return None
    values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return tuple(values) if len(values) == len(node.elts) else None


def _module_assigns(tree: ast.Module, name: str) -> list[ast.Assign]:
    return [
        s for s in tree.body
        if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in s.targets)
    ]


def analyze_dtypes(module: cst.Module, tree: ast.Module, path: str = DTYPES_PY) -> DtypesSide:
    """The `ALLOWED_DTYPES` tuple (exactly one, a literal of strings) and the set after it."""
    tuples = [s for s in module.body if m.matches(s, _module_assign(TUPLE))]
    tuple_asts = _module_assigns(tree, TUPLE)
    line = tuple_asts[0].lineno if tuple_asts else 1
    if len(tuples) != 1 or len(tuple_asts) != 1:
        raise AnchorDrift(path, line, f"{TUPLE} = (...)", f"exactly one module-level `{TUPLE} = (...)`", f"{len(tuples)}")
    allowed = _literal_strings(tuple_asts[0].value)
    if allowed is None:
        raise AnchorDrift(path, line, f"{TUPLE} = (...)", "a tuple of string literals", type(tuple_asts[0].value).__name__)
    # Every key of PYTHON_DTYPES_MAP is a Python type or a string: an allowed string among
    # them would be translated by upstream before the membership test, not returned as is.
    for assign in _module_assigns(tree, PY_MAP):
        if not isinstance(assign.value, ast.Dict):
            raise AnchorDrift(path, assign.lineno, f"{PY_MAP} = {{...}}", "a dict literal", type(assign.value).__name__)
        for key in assign.value.keys:
            builtin = isinstance(key, ast.Name) and key.id in ("bool", "int", "float", "str", "complex")
            if not (builtin or isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise AnchorDrift(path, assign.lineno, f"{PY_MAP} = {{...}}", "builtin type and string keys",
                                  ast.unparse(key)[:60] if key is not None else "**")
            if isinstance(key, ast.Constant) and key.value in allowed:
                raise AnchorDrift(path, key.lineno, f"{PY_MAP} = {{...}}", "no allowed dtype string as a key", repr(key.value))
    sets = [s for s in module.body if m.matches(s, _module_assign(SET))]
    set_asts = _module_assigns(tree, SET)
    if len(sets) > 1:
        raise AnchorDrift(path, set_asts[-1].lineno, f"{SET} = ...", f"at most one `{SET} = ...`", f"{len(sets)}")
    if not sets:
        return DtypesSide(line, cst.ensure_type(tuples[0], cst.SimpleStatementLine), allowed, ABSENT, line)
    state = OURS if has_marker(sets[0], module, NAME) else THEIRS
    return DtypesSide(line, cst.ensure_type(tuples[0], cst.SimpleStatementLine), allowed, state, set_asts[0].lineno)


class _Unknown(Exception):
    """An expression `_value` does not know how to evaluate."""


def _value(node: ast.expr, dtype: str) -> object:
    """`node` (a test of standardize_dtype's if/elif chain) evaluated for `dtype` = an exact str.

    Only the shapes Keras 3.2-3.15 and nightly use: `hasattr(dtype, "...")`, `str(dtype)`,
    `"..." in <expr>`, `and`/`or`, `not`, string constants and `dtype`.
    """
    if isinstance(node, ast.Name) and node.id == "dtype":
        return dtype
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BoolOp):
        values = [bool(_value(v, dtype)) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _value(node.operand, dtype)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
        left, right = _value(node.left, dtype), _value(node.comparators[0], dtype)
        if not (isinstance(left, str) and isinstance(right, str)):
            raise _Unknown
        return (left in right) is isinstance(node.ops[0], ast.In)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [_value(a, dtype) for a in node.args]
        if node.func.id == "hasattr" and len(args) == 2 and isinstance(args[1], str):
            return hasattr(args[0], args[1])
        if node.func.id == "str" and len(args) == 1:
            return str(args[0])
    raise _Unknown


def _check_body(function: ast.FunctionDef, allowed: Sequence[str], path: str) -> None:
    """Drift unless `standardize_dtype`, from its `if dtype is None` on, returns every exact
    str of `allowed` unchanged: the 3.2.0-3.15.1 shape, `None` check, `PYTHON_DTYPES_MAP.get`,
    an if/elif chain none of whose tests holds for those strings, the final check, `return dtype`."""
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if body and isinstance(body[0], ast.If) and isinstance(body[0].test, ast.BoolOp):
        body = body[1:]  # our fast path
    shape = [type(s).__name__ for s in body]
    line = body[0].lineno if body else function.lineno
    if shape != ["If", "Assign", "If", "If", "Return"]:
        raise AnchorDrift(path, line, f"{FUNCTION} body", "if None / map.get / if-elif chain / final check / return",
                          " / ".join(shape))
    chain: list[ast.expr] = []
    branch: ast.stmt = body[2]
    while isinstance(branch, ast.If):
        chain.append(branch.test)
        if branch.orelse and not (len(branch.orelse) == 1 and isinstance(branch.orelse[0], ast.If)):
            # An `else:` would run for the allowed strings too.
            raise AnchorDrift(path, branch.orelse[0].lineno, f"{FUNCTION} if/elif chain", "no else branch", "an else")
        branch = branch.orelse[0] if branch.orelse else ast.Pass()
    for test in chain:
        try:
            taken = [s for s in allowed if _value(test, s)]
        except _Unknown:
            raise AnchorDrift(path, test.lineno, f"{FUNCTION} if/elif chain", "hasattr/str/in tests",
                              ast.unparse(test)[:60]) from None
        if taken:
            raise AnchorDrift(path, test.lineno, f"{FUNCTION} if/elif chain", "no test true for an allowed dtype string",
                              f"{ast.unparse(test)[:60]} for {taken[0]!r}")


def analyze_variables(
    module: cst.Module, tree: ast.Module, allowed: Sequence[str] | None, path: str = VARIABLES_PY
) -> VariablesSide:
    """The fast path (first statement) and the final check of `standardize_dtype`.

    `allowed` (the strings of dtypes.py's tuple) enables the check of the body's shape; the
    codemod run alone on variables.py (libcst's tool) has no dtypes.py and skips it.
    """
    function = cst_function(module, FUNCTION, path, tree)
    function_ast = next(s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == FUNCTION)
    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    lines = [s.lineno for s in function_ast.body]
    first = 1 if body and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])) else 0
    fast_state = ABSENT
    if len(body) > first and m.matches(body[first], FAST_PATH):
        fast_state = OURS if has_marker(body[first], module, NAME) else THEIRS
        if fast_state == THEIRS and not m.matches(body[first], NIGHTLY_FAST_PATH):
            raise AnchorDrift(path, lines[first], f"{FUNCTION} fast path", "ours (marked) or nightly's isinstance test",
                              "another test")
    finals = [
        (i, s, state)
        for i, s in enumerate(body)
        for state, matcher in ((ABSENT, BARE_FINAL), (OURS, OUR_FINAL), (THEIRS, NIGHTLY_FINAL))
        if m.matches(s, matcher)
    ]
    if len(finals) != 1:
        raise AnchorDrift(path, function_ast.lineno, f"if dtype not in dtypes.{TUPLE}",
                          f"exactly one final membership test in {FUNCTION}", f"{len(finals)}")
    index, node, final_state = finals[0]
    if final_state == OURS and not has_marker(node, module, NAME):
        raise AnchorDrift(path, lines[index], f"if dtype not in dtypes.{TUPLE}", "our test to carry our marker", "no marker")
    if allowed is not None and fast_state != THEIRS:
        _check_body(function_ast, allowed, path)
    return VariablesSide(function_ast.lineno, fast_state, final_state, lines[index], cst.ensure_type(node, cst.If))


@dataclass(frozen=True)
class Analysis:
    dtypes: DtypesSide
    variables: VariablesSide

    @property
    def states(self) -> tuple[str, str, str]:
        return self.dtypes.set_state, self.variables.fast_state, self.variables.final_state


def analyze(dtypes_module: cst.Module, dtypes_tree: ast.Module, variables_module: cst.Module,
            variables_tree: ast.Module) -> Analysis:
    """Both files' anchors; AnchorDrift when they are missing, duplicated or reshaped."""
    side = analyze_dtypes(dtypes_module, dtypes_tree)
    return Analysis(side, analyze_variables(variables_module, variables_tree, side.allowed))


def anchors(analysis: Analysis) -> tuple[AnchorReport, ...]:
    d, v = analysis.dtypes, analysis.variables
    return (
        AnchorReport(f"{TUPLE} = (...)", d.tuple_line, f"module level ({SET}: {d.set_state})", DTYPES_PY),
        AnchorReport(f"def {FUNCTION}", v.line, f"first statement (fast path: {v.fast_state})", VARIABLES_PY),
        AnchorReport(f"if dtype not in dtypes.{TUPLE}", v.final_line, f"in {FUNCTION} ({v.final_state})", VARIABLES_PY),
    )


class _Command(BackportCommand):
    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


class AllowedDtypesSetCommand(_Command):
    DESCRIPTION: str = "dtypes.py: ALLOWED_DTYPES_SET = frozenset(ALLOWED_DTYPES), right after the tuple."
    VERSION = "1"

    def __init__(self, context: CodemodContext, side: DtypesSide | None = None) -> None:
        """`side`: `analyze_dtypes` of the module to transform, when the caller made it (the
        series hands over its check's: the module is neither rendered nor parsed again)."""
        super().__init__(context)
        self._given = side

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        side = self._given or analyze_dtypes(tree, ast.parse(tree.code), self.context.filename or DTYPES_PY)
        if side.set_state != ABSENT:
            raise SkipFile(f"{SET} is there already ({side.set_state})")
        body: list[cst.BaseStatement] = []
        for statement in tree.body:
            body.append(statement)
            if statement is side.tuple_node:
                body.append(pieces()["allowed_dtypes_set"])
        return tree.with_changes(body=body)


class StandardizeDtypeFastPathCommand(_Command):
    DESCRIPTION: str = "standardize_dtype: return a canonical dtype str at once; set membership at the end."
    VERSION = "1"

    def __init__(
        self, context: CodemodContext, allowed: Sequence[str] | None = None, side: VariablesSide | None = None
    ) -> None:
        """`side`: `analyze_variables` of the module to transform with `allowed`, when the caller
        made it (the series hands over its check's: the module is neither rendered nor parsed again)."""
        super().__init__(context)
        self._allowed = allowed
        self._given = side
        self._final: cst.If | None = None

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        side = self._given or analyze_variables(
            tree, ast.parse(tree.code), self._allowed, self.context.filename or VARIABLES_PY
        )
        if (side.fast_state, side.final_state) == (OURS, OURS):
            raise SkipFile("the fast path is there already")
        if side.fast_state == THEIRS:
            raise SkipFile("upstream's fast path is there (keras-nightly)")
        if (side.fast_state, side.final_state) != (ABSENT, ABSENT):
            raise AnchorDrift(self.context.filename or VARIABLES_PY, side.line, FUNCTION,
                              "both pieces absent or both ours", f"fast path {side.fast_state}, final {side.final_state}")
        self._final = side.final_node
        return super().transform_module_impl(tree)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == FUNCTION

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        if original_node is not self._final:
            return updated_node
        template = cst.ensure_type(pieces()["final_check"], cst.If)
        test = cst.ensure_type(template.test, cst.BooleanOperation).with_changes(right=updated_node.test)
        body = cst.ensure_type(updated_node.body, cst.IndentedBlock).with_changes(
            header=cst.ensure_type(template.body, cst.IndentedBlock).header
        )
        return updated_node.with_changes(test=test, body=body)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if original_node.name.value != FUNCTION:
            return updated_node
        block = cst.ensure_type(updated_node.body, cst.IndentedBlock)
        statements = list(block.body)
        first = 1 if statements and m.matches(statements[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])) else 0
        statements.insert(first, pieces()["fast_path"])
        return updated_node.with_changes(body=block.with_changes(body=statements))
