"""Codemod: in the torch backend's `convert_to_tensor`, skip the two `.to()` calls of the tensor
branch exactly where torch would return the tensor itself (ours, no upstream counterpart).

Three pieces in `keras/src/backend/torch/core.py` (see `inserted.py`): a device table and its
helper `_forkgen_torch_device` at module level, right before `def convert_to_tensor`; a test
around `x = x.to(device)` (the `else` of `if x.is_meta:`, 3.10+); and, under
`if dtype is not None:` (3.12+), `to_torch_dtype(dtype)` kept in a local and a test around the
`.to()` that uses it. Everything else stays byte for byte.

Both shapes of the device move are anchored: 3.12-3.15.1's, under `if x.device != device:`,
and the one `torch-convert-to-tensor-device` (keras#23189) leaves, which keras-nightly has.
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
    PLACEHOLDER,
    TORCH_CORE_PY,
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    ast_function,
    cst_function,
    find_statements,
    has_marker,
    marked_helper_defined,
    marker,
    module_level_names,
    walk,
)

NAME = "torch-convert-to-tensor-noop-moves"
CORE_PY = TORCH_CORE_PY
#: keras-nightly moved the torch backend's ops under `ops/` (3.16 dev builds), with the same
#: `convert_to_tensor`: the patch goes there.
NIGHTLY_CORE_PY = NIGHTLY_TORCH_CORE_PY
FUNCTION = "convert_to_tensor"
DEVICE_ANCHOR = "x = x.to(device)"
DTYPE_ANCHOR = "x = x.to(to_torch_dtype(dtype))"
#: The names the module-level pieces bind (ours; drift if upstream binds them).
TABLE = "_FORKGEN_TORCH_DEVICES"
HELPER = "_forkgen_torch_device"
#: The local the dtype piece binds in `convert_to_tensor`.
LOCAL = "_forkgen_dtype"
DTYPE_PLACEHOLDER = "UPSTREAM_DTYPE"
#: The builtins the inserted code calls: core.py must not bind these names at module level.
BUILTINS = ("type", "str", "len", "Exception")
PACKAGE = __package__ or "codemods.torch_convert_to_tensor_noop_moves"


def _x_to(arg: m.Name | m.Call) -> m.SimpleStatementLine:
    """`x = x.to(<arg>)`."""
    return m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Name("x"))],
                value=m.Call(func=m.Attribute(m.Name("x"), m.Name("to")), args=[m.Arg(arg, keyword=None)]),
            )
        ]
    )


#: `x = x.to(device)`: the move of a tensor that is not on the meta device (3.10+).
DEVICE_MOVE = _x_to(m.Name("device"))
#: `to_torch_dtype(dtype)`, upstream's argument of the cast.
TO_TORCH_DTYPE = m.Call(func=m.Name("to_torch_dtype"), args=[m.Arg(m.Name("dtype"), keyword=None)])
#: `x = x.to(to_torch_dtype(dtype))` (3.12+: under `if dtype is not None:`, assigned to x).
DTYPE_MOVE = _x_to(TO_TORCH_DTYPE)
#: `if x.is_meta:` (3.10+), whose `else` holds the device move.
IS_META = m.If(test=m.Attribute(m.Name("x"), m.Name("is_meta")))
#: `if dtype is not None:` (3.12+), whose body is the cast.
DTYPE_GIVEN = m.If(
    test=m.Comparison(left=m.Name("dtype"), comparisons=[m.ComparisonTarget(m.IsNot(), m.Name("None"))]),
    orelse=None,
)
#: Ours, under `if dtype is not None:`: `_forkgen_dtype = to_torch_dtype(dtype)`.
DTYPE_LOCAL = m.SimpleStatementLine(
    body=[m.Assign(targets=[m.AssignTarget(m.Name(LOCAL))], value=TO_TORCH_DTYPE)]
)
PLACEHOLDER_LINE = m.SimpleStatementLine(body=[m.Expr(m.Name(PLACEHOLDER))])


@functools.cache
def _template() -> cst.Module:
    from importlib import resources

    return cst.parse_module(resources.files(PACKAGE).joinpath("inserted.py").read_text(encoding="utf-8"))


def _body(name: str) -> list[cst.BaseStatement]:
    """The body of the template's function `name`."""
    found = [s for s in _template().body if m.matches(s, m.FunctionDef(name=m.Name(name)))]
    assert len(found) == 1
    return _block(cst.ensure_type(found[0], cst.FunctionDef).body)


@functools.cache
def module_pieces() -> tuple[cst.SimpleStatementLine, cst.FunctionDef]:
    """The table and the helper, whole, as inserted at module level: each keeps only its marker
    comment above it (the notes above them stay in the template); two blank lines between."""
    table = [s for s in _template().body if m.matches(s, m.SimpleStatementLine(body=[
        m.Assign(targets=[m.AssignTarget(m.Name(TABLE))])]))]
    helper = [s for s in _template().body if m.matches(s, m.FunctionDef(name=m.Name(HELPER)))]
    assert len(table) == 1 and len(helper) == 1
    first = cst.ensure_type(table[0], cst.SimpleStatementLine)
    second = cst.ensure_type(helper[0], cst.FunctionDef)

    def marked(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
        found = [line for line in lines if line.comment and line.comment.value == marker(NAME)]
        assert len(found) == 1
        return found

    return (
        first.with_changes(leading_lines=marked(first.leading_lines)),
        second.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *marked(second.leading_lines)]),
    )


def device_piece(move: cst.SimpleStatementLine) -> cst.If:
    """The test around upstream's `x = x.to(device)` (the statement kept node for node)."""
    (piece,) = _body("device_move")
    piece = cst.ensure_type(piece, cst.If)

    class Put(cst.CSTTransformer):
        def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
        ) -> cst.SimpleStatementLine:
            if m.matches(updated_node, PLACEHOLDER_LINE):
                return move.with_changes(leading_lines=[])
            return updated_node

    filled = cst.ensure_type(piece.visit(Put()), cst.If)
    return filled.with_changes(leading_lines=[*move.leading_lines, *filled.leading_lines])


def dtype_pieces(move: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
    """The local and the test in place of `x = x.to(to_torch_dtype(dtype))`: upstream's
    argument is kept node for node, in the local."""
    assign = cst.ensure_type(move.body[0], cst.Assign)
    argument = cst.ensure_type(assign.value, cst.Call).args[0].value
    local, test = _body("dtype_move")

    class Put(cst.CSTTransformer):
        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
            return argument if updated_node.value == DTYPE_PLACEHOLDER else updated_node

    local = cst.ensure_type(local.visit(Put()), cst.SimpleStatementLine)
    return [local.with_changes(leading_lines=[*move.leading_lines, *local.leading_lines]), test]


@dataclass(frozen=True)
class Site:
    """The two moves of `convert_to_tensor`'s tensor branch in one tree, and the module pieces."""

    path: str
    device_line: int
    dtype_line: int
    #: Upstream's statements, while they are not wrapped (None once ours are there).
    device_move: cst.SimpleStatementLine | None
    dtype_move: cst.SimpleStatementLine | None
    #: `def convert_to_tensor` (the module-level pieces go right before it).
    function: cst.FunctionDef
    present: bool


def _lines(tree: ast.Module) -> tuple[int, int, int]:
    """The lines of `def convert_to_tensor`, of its `x.to(device)` and of its
    `x.to(to_torch_dtype(dtype))` (the function's line when missing)."""
    function = ast_function(tree, FUNCTION)
    if function is None:
        return 1, 1, 1
    device: list[int] = []
    dtype: list[int] = []
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "to"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "x"
            and len(node.args) == 1
        ):
            arg = node.args[0]
            if isinstance(arg, ast.Name) and arg.id in ("device", LOCAL):
                (device if arg.id == "device" else dtype).append(node.lineno)
            elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "to_torch_dtype":
                dtype.append(node.lineno)
    return function.lineno, min(device, default=function.lineno), min(dtype, default=function.lineno)


def _mentions_is_tensor(node: cst.BaseExpression) -> bool:
    """Whether the test calls `is_tensor(x)` (3.12+: `if isinstance(x, Variable) or is_tensor(x):`)."""
    call = m.Call(func=m.Name("is_tensor"), args=[m.Arg(m.Name("x"))])
    return any(m.matches(n, call) for n in walk(node))


def _block(node: cst.CSTNode) -> list[cst.BaseStatement]:
    return list(cst.ensure_type(node, cst.IndentedBlock).body)


def analyze(module: cst.Module, tree: ast.Module, path: str = CORE_PY) -> Site:
    """The two moves (upstream's or ours) and the module-level pieces; else drift."""
    function = cst_function(module, FUNCTION, path, tree)
    function_line, device_line, dtype_line = _lines(tree)
    branches = [
        s for s in _block(function.body) if isinstance(s, cst.If) and _mentions_is_tensor(s.test)
    ]
    if len(branches) != 1:
        raise AnchorDrift(path, function_line, "if ... is_tensor(x):", f"exactly one tensor branch in {FUNCTION}",
                          f"{len(branches)}")
    branch = branches[0]

    # The device move: the only statement of the `else` of `if x.is_meta:` (upstream's), or
    # our test there holding it.
    moves = find_statements(branch, DEVICE_MOVE)
    if len(moves) != 1:
        raise AnchorDrift(path, device_line, DEVICE_ANCHOR, "exactly one in the tensor branch", f"{len(moves)}")
    metas = find_statements(branch, IS_META)
    if len(metas) != 1:
        raise AnchorDrift(path, device_line, "if x.is_meta:", "exactly one in the tensor branch", f"{len(metas)}")
    orelse = cst.ensure_type(metas[0], cst.If).orelse
    held = _block(orelse.body) if isinstance(orelse, cst.Else) else []
    device_ours = (
        len(held) == 1
        and isinstance(held[0], cst.If)
        and _block(held[0].body) == [moves[0]]
        and held[0].orelse is None
        and has_marker(held[0], module, NAME)
    )
    if not device_ours and held != [moves[0]]:
        raise AnchorDrift(path, device_line, DEVICE_ANCHOR, "the only statement of the `else` of `if x.is_meta:`",
                          "another shape")

    # The cast: the only statement of `if dtype is not None:` (upstream's), or our local and test.
    givens = [s for s in _block(branch.body) if m.matches(s, DTYPE_GIVEN)]
    if len(givens) != 1:
        raise AnchorDrift(path, dtype_line, "if dtype is not None:", "exactly one in the tensor branch (3.12+)",
                          f"{len(givens)}")
    cast = _block(cst.ensure_type(givens[0], cst.If).body)
    dtype_ours = (
        len(cast) == 2
        and m.matches(cast[0], DTYPE_LOCAL)
        and has_marker(cast[0], module, NAME)
        and isinstance(cast[1], cst.If)
        and len(_block(cast[1].body)) == 1
        and m.matches(_block(cast[1].body)[0], _x_to(m.Name(LOCAL)))
        and cast[1].orelse is None
    )
    if not dtype_ours and not (len(cast) == 1 and m.matches(cast[0], DTYPE_MOVE)):
        raise AnchorDrift(path, dtype_line, DTYPE_ANCHOR, "the only statement of `if dtype is not None:`",
                          f"{len(cast)} statements" if len(cast) != 1 else "another statement")

    table = [s for s in module.body if m.matches(s, m.SimpleStatementLine(body=[
        m.Assign(targets=[m.AssignTarget(m.Name(TABLE))])]))]
    ours_table = [s for s in table if has_marker(s, module, NAME)]
    if len(table) != len(ours_table) or len(table) > 1:
        raise AnchorDrift(path, 1, TABLE, "forkgen's name free (or one, marked ours)",
                          f"{len(table)} assignments, {len(table) - len(ours_table)} unmarked")
    helper = marked_helper_defined(module, path, HELPER, NAME)
    pieces = {"the device test": device_ours, "the dtype test": dtype_ours, TABLE: bool(table), HELPER: helper}
    if len(set(pieces.values())) != 1:
        found = ", ".join(f"{k} {'present' if v else 'absent'}" for k, v in pieces.items())
        raise AnchorDrift(path, device_line, NAME, "forkgen's pieces all present or all absent", found)
    present = device_ours
    if not present:
        names = module_level_names(module)
        if TABLE in names or HELPER in names:
            raise AnchorDrift(path, 1, TABLE if TABLE in names else HELPER, "forkgen's name free", "a binding")
        locals_ = [n for n in walk(function) if m.matches(n, m.Name(LOCAL))]
        if locals_:
            raise AnchorDrift(path, function_line, LOCAL, f"the name free in {FUNCTION}", f"{len(locals_)} uses")
        shadowed = sorted(set(BUILTINS) & names)
        if shadowed:
            raise AnchorDrift(path, 1, shadowed[0], "the builtin (the inserted code calls it)", "a module-level binding")
        if "torch" not in names:
            raise AnchorDrift(path, 1, "import torch", "at module level (the inserted code uses `torch`)", "none")
    return Site(
        path,
        device_line,
        dtype_line,
        None if present else cst.ensure_type(moves[0], cst.SimpleStatementLine),
        None if present else cst.ensure_type(cast[0], cst.SimpleStatementLine),
        function,
        present,
    )


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    where = "" if site.path == CORE_PY else site.path
    return (
        AnchorReport(DEVICE_ANCHOR, site.device_line, f"in {FUNCTION}: the `else` of `if x.is_meta:`", where),
        AnchorReport(DTYPE_ANCHOR, site.dtype_line, f"in {FUNCTION}: under `if dtype is not None:`", where),
    )


class SkipNoopMovesCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "Skip torch convert_to_tensor's `.to()` calls where torch would return the tensor itself."
    VERSION = "1"
    PATH = CORE_PY

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.present:
            raise SkipFile("convert_to_tensor skips no-op moves already")
        assert site.device_move is not None and site.dtype_move is not None
        body: list[cst.BaseStatement] = []
        for statement in tree.body:
            if statement is site.function:
                table, helper = module_pieces()
                # Upstream's blank lines above `def convert_to_tensor` go above the table; two
                # blank lines between the pieces and the def, as between module-level defs.
                body.append(table.with_changes(leading_lines=[*site.function.leading_lines, *table.leading_lines]))
                body.append(helper)
                replaced = statement.visit(_Replace(site.device_move, site.dtype_move))
                body.append(cst.ensure_type(replaced, cst.FunctionDef).with_changes(
                    leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
            else:
                body.append(statement)
        return tree.with_changes(body=body)


class _Replace(cst.CSTTransformer):
    """Puts the template's pieces in place of upstream's two statements."""

    def __init__(self, device_move: cst.SimpleStatementLine, dtype_move: cst.SimpleStatementLine) -> None:
        super().__init__()
        self._device = device_move
        self._dtype = dtype_move

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if original_node is self._device:
            return device_piece(original_node)
        if original_node is self._dtype:
            return cst.FlattenSentinel(dtype_pieces(original_node))
        return updated_node
