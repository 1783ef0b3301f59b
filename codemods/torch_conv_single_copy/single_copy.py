"""Codemod: the torch backend's `conv` makes its channels_last input in one copy, or none,
instead of two (keras-team/keras#23199, merged upstream, in keras-nightly).

Two pieces in `keras/src/backend/torch/nn.py`: `_forkgen_transpose_conv_inputs` at module level,
right after `def _maybe_convert_to_channels_last`, and in `conv`, a call to it in place of
`inputs = _transpose_spatial_inputs(inputs)`. Upstream's helpers, the conversion that follows
in `conv` (`inputs = _maybe_convert_to_channels_last(inputs)`) and every other caller of
`_transpose_spatial_inputs` (the pooling ops, `conv_transpose`) stay byte for byte.
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
    cst_function,
    find,
    find_statements,
    has_marker,
    marked_helper_defined,
    module_level_names,
    statements,
    template_function,
    template_pieces,
    walk,
)

NAME = "torch-conv-single-copy"
NN_PY = "keras/src/backend/torch/nn.py"
#: keras-nightly moved the torch backend's ops under `ops/` (3.16 dev builds): only read to
#: recognise the upstream shape there.
NIGHTLY_NN_PY = "keras/src/backend/torch/ops/nn.py"
FUNCTION = "conv"
TRANSPOSE = "_transpose_spatial_inputs"
CONVERT = "_maybe_convert_to_channels_last"
MEMORY_FORMAT = "_get_channels_last_memory_format"
#: The function the patch adds (ours; drift if upstream defines one by that name).
HELPER = "_forkgen_transpose_conv_inputs"
ANCHOR = "inputs = _transpose_spatial_inputs(inputs)"
#: The builtins the helper calls: nn.py must not bind these names at module level.
BUILTINS = ("any", "range", "reversed", "zip")
#: The keyword keras#23199 gave `_transpose_spatial_inputs`, which nightly's `conv` passes.
UPSTREAM_KEYWORD = "channels_last_memory_format"


def _assign_inputs(function: str) -> m.SimpleStatementLine:
    """`inputs = <function>(inputs)`."""
    return m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Name("inputs"))],
                value=m.Call(func=m.Name(function), args=[m.Arg(m.Name("inputs"), keyword=None)]),
            )
        ]
    )


#: `inputs = _transpose_spatial_inputs(inputs)` in `conv` (3.15.0-3.15.1): the first copy.
TRANSPOSE_STATEMENT = _assign_inputs(TRANSPOSE)
#: `inputs = _maybe_convert_to_channels_last(inputs)` after it (since keras#22324, 3.14.0): the
#: second copy, which the inserted helper relies on running after it.
CONVERT_STATEMENT = _assign_inputs(CONVERT)
#: Ours: `inputs = _forkgen_transpose_conv_inputs(inputs)`.
HELPER_STATEMENT = _assign_inputs(HELPER)
#: `if data_format == "channels_last":`, the test around both statements in `conv`.
CHANNELS_LAST = m.If(
    test=m.Comparison(
        left=m.Name("data_format"),
        comparisons=[m.ComparisonTarget(m.Equal(), m.SimpleString('"channels_last"') | m.SimpleString("'channels_last'"))],
    )
)
#: nightly's `_transpose_spatial_inputs(inputs, channels_last_memory_format=True)` in `conv`.
UPSTREAM_CALL = m.Call(
    func=m.Name(TRANSPOSE),
    args=[m.ZeroOrMore(), m.Arg(keyword=m.Name(UPSTREAM_KEYWORD), value=m.Name("True")), m.ZeroOrMore()],
)
#: The permutations the helper repeats, by input rank (those of `_transpose_spatial_inputs`).
PERMUTATIONS = {4: (0, 3, 1, 2), 5: (0, 4, 1, 2, 3)}


def _permute(permutation: tuple[int, ...]) -> m.Call:
    """`torch.permute(inputs, (<permutation>))`."""
    return m.Call(
        func=m.Attribute(m.Name("torch"), m.Name("permute")),
        args=[
            m.Arg(m.Name("inputs")),
            m.Arg(m.Tuple(elements=[m.Element(m.Integer(str(i))) for i in permutation])),
        ],
    )


def _copied(permutation: tuple[int, ...]) -> m.Return:
    """`return torch.permute(inputs, (...)).contiguous()`: 3.15's copy to the default layout."""
    return m.Return(m.Call(func=m.Attribute(_permute(permutation), m.Name("contiguous")), args=[]))


PACKAGE = __package__ or "codemods.torch_conv_single_copy"


@functools.cache
def pieces() -> dict[str, list[cst.BaseStatement]]:
    return template_pieces(PACKAGE, "inserted.py")


@functools.cache
def helper() -> cst.FunctionDef:
    """The template's `_forkgen_transpose_conv_inputs`, whole, with the marker comment above it."""
    return template_function(PACKAGE, "inserted.py", HELPER, NAME)


@dataclass(frozen=True)
class Analysis:
    """Where the pieces go in nn.py, and which are there."""

    path: str
    #: Line of the statement in `conv` the call replaces (or of the call, or of upstream's call).
    line: int
    #: Upstream's `inputs = _transpose_spatial_inputs(inputs)` in `conv`, while it is there.
    statement: cst.SimpleStatementLine | None
    #: `def _maybe_convert_to_channels_last` (the helper goes after it) and its line.
    convert: cst.FunctionDef | None
    convert_line: int
    transpose_line: int
    #: Ours: the call in `conv` and the helper, with forkgen's marker.
    call: bool
    helper: bool
    #: keras-nightly's shape: `conv` passes `channels_last_memory_format=True`.
    upstream: bool

    @property
    def present(self) -> bool:
        return self.call and self.helper


def _lines(tree: ast.Module, function: str, callee: str) -> list[int]:
    """The lines, in `function`, of each `inputs = <callee>(...)`."""
    node = ast_function(tree, function)
    if node is None:
        return []
    return sorted(
        n.lineno for n in ast.walk(node)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name) and n.value.func.id == callee
    )


def _def_line(tree: ast.Module, name: str) -> int:
    node = ast_function(tree, name)
    return node.lineno if node is not None else 1


def _rebinds_inputs(node: cst.CSTNode) -> bool:
    """Whether `node` assigns the name `inputs` (any assignment form)."""
    target = m.Name("inputs")
    return any(
        m.matches(n, m.AssignTarget(target) | m.AugAssign(target=target) | m.AnnAssign(target=target)
                  | m.NamedExpr(target=target) | m.For(target=target))
        for n in walk(node)
    )


def _check_conversion(conv: cst.FunctionDef, statement: cst.SimpleStatementLine, path: str, line: int) -> None:
    """`inputs = _maybe_convert_to_channels_last(inputs)` must follow the statement in `conv`,
    with nothing rebinding `inputs` in between: the helper's result is only right with it."""
    converts = find_statements(conv, CONVERT_STATEMENT)
    anchor = f"inputs = {CONVERT}(inputs)"
    if len(converts) != 1:
        raise AnchorDrift(path, line, anchor, f"exactly one in {FUNCTION}", f"{len(converts)}")
    body = list(cst.ensure_type(conv.body, cst.IndentedBlock).body)
    # Each under its own `if data_format == "channels_last":` of conv's body (as in 3.14-3.15.1).
    outer: list[int] = []
    for inner in (statement, converts[0]):
        holders = [i for i, s in enumerate(body) if m.matches(s, CHANNELS_LAST) and any(n is inner for n in statements(s))]
        if len(holders) != 1:
            raise AnchorDrift(path, line, anchor, f'it and `{ANCHOR}` each under an `if data_format == "channels_last":`'
                              f" of {FUNCTION}", "another shape")
        outer.append(holders[0])
    first, second = outer
    if first >= second:
        raise AnchorDrift(path, line, anchor, f"in an `if` after the one of `{ANCHOR}`", "it in the same or an earlier one")
    between: list[cst.CSTNode] = list(body[first + 1 : second])
    first_block = list(cst.ensure_type(cst.ensure_type(body[first], cst.If).body, cst.IndentedBlock).body)
    second_block = list(cst.ensure_type(cst.ensure_type(body[second], cst.If).body, cst.IndentedBlock).body)
    between += first_block[[i for i, s in enumerate(first_block) if s is statement][0] + 1 :]
    between += second_block[: [i for i, s in enumerate(second_block) if s is converts[0]][0]]
    if any(_rebinds_inputs(n) for n in between):
        raise AnchorDrift(path, line, anchor, f"`inputs` unchanged between `{ANCHOR}` and it", "inputs reassigned")


def _check_transpose(module: cst.Module, tree: ast.Module, path: str) -> int:
    """`_transpose_spatial_inputs(inputs)` permutes 4-D and 5-D inputs as the helper does and
    copies the view with `.contiguous()` (3.15.0+; 3.14 returned the view, with no copy to save)."""
    function = cst_function(module, TRANSPOSE, path, tree)
    line = _def_line(tree, TRANSPOSE)
    params = function.params
    extra = params.posonly_params or params.kwonly_params or params.star_kwarg
    if [p.name.value for p in params.params] != ["inputs"] or not isinstance(params.star_arg, cst.MaybeSentinel) or extra:
        raise AnchorDrift(path, line, f"def {TRANSPOSE}(inputs)", "the single parameter `inputs`", "another signature")
    for rank, permutation in PERMUTATIONS.items():
        copied = find(function, _copied(permutation))
        if len(copied) != 1:
            viewed = find(function, m.Return(_permute(permutation)))
            found = f"{len(copied)}" + (", a return of the view without .contiguous()" if viewed else "")
            text = f"return torch.permute(inputs, {permutation}).contiguous()"
            raise AnchorDrift(path, line, text, f"exactly one in {TRANSPOSE} ({rank}-D inputs)", found)
    return line


def _check_memory_format(module: cst.Module, tree: ast.Module, path: str) -> tuple[cst.FunctionDef, int]:
    """`_get_channels_last_memory_format` names torch's two channels_last formats, and
    `_maybe_convert_to_channels_last(tensor)` asks it for `tensor.ndim` and copies with
    `tensor.contiguous(memory_format=...)` (keras#22324's helpers, 3.14.0+)."""
    formats = cst_function(module, MEMORY_FORMAT, path, tree)
    for name in ("channels_last", "channels_last_3d"):
        if not find(formats, m.Attribute(m.Name("torch"), m.Name(name))):
            raise AnchorDrift(path, _def_line(tree, MEMORY_FORMAT), f"torch.{name}", f"in {MEMORY_FORMAT}", "none")
    convert = cst_function(module, CONVERT, path, tree)
    line = _def_line(tree, CONVERT)
    asks = m.Call(func=m.Name(MEMORY_FORMAT), args=[m.Arg(m.Attribute(m.Name("tensor"), m.Name("ndim")))])
    copies = m.Call(
        func=m.Attribute(m.Name("tensor"), m.Name("contiguous")), args=[m.Arg(keyword=m.Name("memory_format"))]
    )
    for matcher, text in ((asks, f"{MEMORY_FORMAT}(tensor.ndim)"), (copies, "tensor.contiguous(memory_format=...)")):
        found = find(convert, matcher)
        if len(found) != 1:
            raise AnchorDrift(path, line, text, f"exactly one in {CONVERT}", f"{len(found)}")
    return convert, line


def analyze(module: cst.Module, tree: ast.Module, path: str = NN_PY) -> Analysis:
    """The anchors of nn.py for the single copy; AnchorDrift when missing, duplicated or reshaped."""
    conv = cst_function(module, FUNCTION, path, tree)
    conv_line = _def_line(tree, FUNCTION)
    upstream = find(conv, UPSTREAM_CALL)
    if upstream:
        lines = _lines(tree, FUNCTION, TRANSPOSE)
        return Analysis(path, lines[0] if lines else conv_line, None, None, 1, 1, False, False, True)
    transposes = find_statements(conv, TRANSPOSE_STATEMENT)
    calls = [s for s in find_statements(conv, HELPER_STATEMENT) if has_marker(s, module, NAME)]
    helper = marked_helper_defined(module, path, HELPER, NAME)
    lines = _lines(tree, FUNCTION, TRANSPOSE) or _lines(tree, FUNCTION, HELPER)
    line = lines[0] if lines else conv_line
    if len(transposes) + len(calls) != 1:
        raise AnchorDrift(path, line, ANCHOR, f"exactly one in {FUNCTION} (or forkgen's call in its place)",
                          f"{len(transposes)}" + (f" and {len(calls)} of forkgen's" if calls else ""))
    statement = cst.ensure_type((transposes or calls)[0], cst.SimpleStatementLine)
    _check_conversion(conv, statement, path, line)
    transpose_line = _check_transpose(module, tree, path)
    convert, convert_line = _check_memory_format(module, tree, path)
    if not any(m.matches(s, m.SimpleStatementLine(body=[m.Import(names=[m.ImportAlias(m.Name("torch"), asname=None)])]))
               for s in module.body):
        raise AnchorDrift(path, 1, "import torch", "at module level (the helper uses `torch`)", "none")
    shadowed = sorted(set(BUILTINS) & module_level_names(module))
    if shadowed:
        raise AnchorDrift(path, 1, shadowed[0], "the builtin (the helper calls it)", "a module-level binding")
    if bool(calls) != helper:
        raise AnchorDrift(path, line, HELPER, "forkgen's call and helper both present or both absent",
                          f"call {'present' if calls else 'absent'}, helper {'present' if helper else 'absent'}")
    return Analysis(path, line, None if calls else statement, convert, convert_line, transpose_line, bool(calls), helper,
                    False)


def anchors(analysis: Analysis) -> tuple[AnchorReport, ...]:
    where = "" if analysis.path == NN_PY else analysis.path
    if analysis.upstream:
        return (AnchorReport(f"{TRANSPOSE}(inputs, {UPSTREAM_KEYWORD}=True)", analysis.line, f"in {FUNCTION}", where),)
    return (
        AnchorReport(ANCHOR, analysis.line, f"in {FUNCTION}: the call to {HELPER} takes its place", where),
        AnchorReport(f"def {CONVERT}", analysis.convert_line, f"{HELPER} goes after it", where),
        AnchorReport(f"def {TRANSPOSE}", analysis.transpose_line, "permutes, then copies with .contiguous()", where),
    )


class SingleCopyCommand(AnalysedCommand[Analysis]):
    DESCRIPTION: str = "torch conv makes its channels_last input with one copy or none instead of two."
    VERSION = "1"
    PATH = NN_PY

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Analysis:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        analysis = self.site(tree)
        if analysis.upstream:
            raise SkipFile(f"conv already passes {UPSTREAM_KEYWORD}=True")
        if analysis.present:
            raise SkipFile("conv calls forkgen's helper already")
        assert analysis.statement is not None and analysis.convert is not None
        body: list[cst.BaseStatement] = []
        for statement in tree.body:
            if statement is analysis.convert:
                body.append(statement)
                inserted = helper()
                # Two blank lines after upstream's function, as between module-level defs.
                body.append(inserted.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(),
                                                                 *inserted.leading_lines]))
            elif m.matches(statement, m.FunctionDef(name=m.Name(FUNCTION))):
                body.append(cst.ensure_type(statement.visit(_Replace(analysis.statement)), cst.FunctionDef))
            else:
                body.append(statement)
        return tree.with_changes(body=body)


class _Replace(cst.CSTTransformer):
    """Puts the template's call in place of upstream's statement (its comment lines stay above)."""

    def __init__(self, target: cst.SimpleStatementLine) -> None:
        super().__init__()
        self._target = target

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        if original_node is not self._target:
            return updated_node
        call = cst.ensure_type(pieces()["conv_inputs"][0], cst.SimpleStatementLine)
        return call.with_changes(leading_lines=original_node.leading_lines)
