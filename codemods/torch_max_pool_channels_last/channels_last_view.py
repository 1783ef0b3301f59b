"""Codemod: the torch backend's `max_pool` pools a dense channels_last 2-D input through its
channels-first view instead of a copy of it (after keras-team/keras#23645, open; in
keras-nightly).

Three pieces in `keras/src/backend/torch/nn.py`: `_forkgen_max_pool_view` at module level, right
before `def max_pool`; in `max_pool`, two statements in place of
`inputs = _transpose_spatial_inputs(inputs)` (ask the helper for the view, else upstream's
copy); and right after `outputs = tnn.max_pool2d(...)`, a copy of the output to the default
layout when the view was pooled. Every other statement, and every other caller of
`_transpose_spatial_inputs`, stays byte for byte.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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

NAME = "torch-max-pool-channels-last"
NN_PY = "keras/src/backend/torch/nn.py"
#: keras-nightly moved the torch backend's ops under `ops/` (3.16 dev builds): only read to
#: recognise the upstream shape there.
NIGHTLY_NN_PY = "keras/src/backend/torch/ops/nn.py"
FUNCTION = "max_pool"
TRANSPOSE = "_transpose_spatial_inputs"
#: The function the patch adds (ours; drift if upstream defines one by that name).
HELPER = "_forkgen_max_pool_view"
#: The local the inserted statements bind in `max_pool` (drift if upstream uses the name).
FLAG = "forkgen_view"
ANCHOR = "inputs = _transpose_spatial_inputs(inputs)"
POOL = "outputs = tnn.max_pool2d(inputs, ...)"
#: The builtins the helper calls: nn.py must not bind these names at module level.
BUILTINS = ("reversed", "type", "zip")
#: Module-level names of nn.py the helper uses besides `torch`.
MODULE_NAMES = ("get_device",)
#: The keyword keras#23645 passes to `_transpose_spatial_inputs` from nightly's `max_pool`.
UPSTREAM_KEYWORD = "channels_last_memory_format"


#: An expression matcher (a node matcher or a OneOf of them: libcst types each field's own union).
Expression = Any


def _assign(target: str, value: Expression) -> m.SimpleStatementLine:
    return m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(target))], value=value)])


def _string(value: str) -> Expression:
    return m.SimpleString(f'"{value}"') | m.SimpleString(f"'{value}'")


def _compare(name: str, value: Expression) -> m.Comparison:
    """`<name> == <value>`."""
    return m.Comparison(left=m.Name(name), comparisons=[m.ComparisonTarget(m.Equal(), value)])


#: `inputs = _transpose_spatial_inputs(inputs)` in `max_pool` (3.15.0-3.15.1): the copy.
TRANSPOSE_STATEMENT = _assign("inputs", m.Call(func=m.Name(TRANSPOSE), args=[m.Arg(m.Name("inputs"), keyword=None)]))
#: Ours: `forkgen_view = _forkgen_max_pool_view(inputs, num_spatial_dims, padding)`.
HELPER_STATEMENT = _assign(
    FLAG,
    m.Call(func=m.Name(HELPER), args=[m.Arg(m.Name("inputs")), m.Arg(m.Name("num_spatial_dims")),
                                      m.Arg(m.Name("padding"))]),
)
#: `if data_format == "channels_last":` (no else), around the anchor in `max_pool`.
CHANNELS_LAST = m.If(test=_compare("data_format", _string("channels_last")), orelse=None)
#: `num_spatial_dims = inputs.ndim - 2`: what the helper is handed as the number of spatial axes.
SPATIAL_DIMS = _assign(
    "num_spatial_dims",
    m.BinaryOperation(left=m.Attribute(m.Name("inputs"), m.Name("ndim")), operator=m.Subtract(), right=m.Integer("2")),
)
#: `if padding == "same": ... else: padding = 0`: a `padding` that is not "same" leaves the
#: input as it is and pools with no padding (the helper's "valid" case).
PADDING = m.If(
    test=_compare("padding", _string("same")),
    orelse=m.Else(body=m.IndentedBlock(body=[_assign("padding", m.Integer("0"))])),
)
#: `device = get_device()` and `if device == "meta":`: 3.15.1 pools a stand-in tensor then,
#: which the helper leaves to upstream's way by asking `get_device()` itself.
DEVICE = _assign("device", m.Call(func=m.Name("get_device"), args=[]))
META = m.If(test=_compare("device", _string("meta")))
#: `outputs = tnn.max_pool2d(inputs, ...)`.
POOL_STATEMENT = _assign(
    "outputs",
    m.Call(func=m.Attribute(m.Name("tnn"), m.Name("max_pool2d")), args=[m.Arg(m.Name("inputs"), keyword=None),
                                                                        m.ZeroOrMore()]),
)
#: `... num_spatial_dims == 2:`, the branch (an `elif` in 3.15.x) that holds it.
TWO_D = m.If(test=_compare("num_spatial_dims", m.Integer("2")))
#: `outputs = outputs.to(device)` then `if data_format == "channels_last":` with
#: `outputs = _transpose_spatial_outputs(outputs)`: 3.15.1's last steps, which stay.
TO_DEVICE = _assign(
    "outputs", m.Call(func=m.Attribute(m.Name("outputs"), m.Name("to")), args=[m.Arg(m.Name("device"))])
)
TRANSPOSE_BACK = _assign(
    "outputs", m.Call(func=m.Name("_transpose_spatial_outputs"), args=[m.Arg(m.Name("outputs"))])
)
#: Ours, after the pooling: `if data_format == "channels_last" and forkgen_view is not None:`.
OUTPUT_STATEMENT = m.If(
    test=m.BooleanOperation(
        left=_compare("data_format", _string("channels_last")),
        operator=m.And(),
        right=m.Comparison(left=m.Name(FLAG), comparisons=[m.ComparisonTarget(m.IsNot(), m.Name("None"))]),
    )
)
#: nightly's `_transpose_spatial_inputs(inputs, channels_last_memory_format=True)` in `max_pool`.
UPSTREAM_CALL = m.Call(
    func=m.Name(TRANSPOSE),
    args=[m.ZeroOrMore(), m.Arg(keyword=m.Name(UPSTREAM_KEYWORD), value=m.Name("True")), m.ZeroOrMore()],
)
#: `return torch.permute(inputs, (0, 3, 1, 2)).contiguous()` in `_transpose_spatial_inputs`:
#: the copy (3.15.0+) the helper saves, of the view it makes itself.
COPIED_4D = m.Return(
    m.Call(
        func=m.Attribute(
            m.Call(func=m.Attribute(m.Name("torch"), m.Name("permute")),
                   args=[m.Arg(m.Name("inputs")),
                         m.Arg(m.Tuple(elements=[m.Element(m.Integer(str(i))) for i in (0, 3, 1, 2)]))]),
            m.Name("contiguous"),
        ),
        args=[],
    )
)

PACKAGE = __package__ or "codemods.torch_max_pool_channels_last"


@functools.cache
def pieces() -> dict[str, list[cst.BaseStatement]]:
    return template_pieces(PACKAGE, "inserted.py")


@functools.cache
def helper() -> cst.FunctionDef:
    """The template's `_forkgen_max_pool_view`, whole, with the marker comment above it."""
    return template_function(PACKAGE, "inserted.py", HELPER, NAME)


@dataclass(frozen=True)
class Analysis:
    """Where the pieces go in nn.py, and which are there."""

    path: str
    #: Line of the statement the inserted ones replace (or of ours, or of upstream's call).
    line: int
    pool_line: int
    transpose_line: int
    #: Upstream's `inputs = _transpose_spatial_inputs(inputs)` and `outputs = tnn.max_pool2d(...)`
    #: in `max_pool`, while the patch is not in.
    statement: cst.SimpleStatementLine | None
    pool: cst.SimpleStatementLine | None
    #: Ours: the statements in `max_pool` and the helper, with forkgen's marker.
    call: bool
    output: bool
    helper: bool
    #: keras-nightly's shape: `max_pool` passes `channels_last_memory_format=True`.
    upstream: bool

    @property
    def present(self) -> bool:
        return self.call and self.output and self.helper


def _line(tree: ast.Module, function: str, predicate: type[ast.stmt], text: str) -> int:
    """The line, in `function`, of the first node of type `predicate` whose source mentions `text`."""
    node = ast_function(tree, function)
    if node is None:
        return 1
    lines = sorted(n.lineno for n in ast.walk(node) if isinstance(n, predicate) and text in ast.unparse(n))
    return lines[0] if lines else node.lineno


def _def_line(tree: ast.Module, name: str) -> int:
    node = ast_function(tree, name)
    return node.lineno if node is not None else 1


def _rebinds(node: cst.CSTNode, name: str) -> bool:
    """Whether `node` assigns `name` (any assignment form, a tuple target included)."""
    target = m.Name(name)
    inner = m.Tuple(elements=[m.ZeroOrMore(), m.Element(target), m.ZeroOrMore()])
    return any(
        m.matches(n, m.AssignTarget(target | inner) | m.AugAssign(target=target) | m.AnnAssign(target=target)
                  | m.NamedExpr(target=target) | m.For(target=target | inner) | m.WithItem(asname=m.AsName(target)))
        for n in walk(node)
    )


def _uses(node: cst.CSTNode, name: str) -> bool:
    return any(m.matches(n, m.Name(name)) for n in walk(node))


def _holder(body: Sequence[cst.BaseStatement], inner: cst.CSTNode, matcher: m.BaseMatcherNode) -> int | None:
    """The index of the statement of `body` matching `matcher` that holds `inner`, if exactly one."""
    holders = [i for i, s in enumerate(body) if m.matches(s, matcher) and any(n is inner for n in statements(s))]
    return holders[0] if len(holders) == 1 else None


def _pool_branch(body: Sequence[cst.BaseStatement], pool: cst.SimpleStatementLine) -> int | None:
    """The index of the statement of `body` (the `if num_spatial_dims == 1:` chain in 3.15.x)
    whose `... num_spatial_dims == 2:` branch holds `pool` directly."""
    for index, statement in enumerate(body):
        for node in statements(statement):
            if m.matches(node, TWO_D) and any(s is pool for s in cst.ensure_type(
                    cst.ensure_type(node, cst.If).body, cst.IndentedBlock).body):
                return index
    return None


def _one(body: Sequence[cst.BaseStatement], matcher: m.BaseMatcherNode, path: str, line: int, text: str,
         after: int) -> int:
    """The index of the only statement of `body` matching `matcher`; it must come after `after`."""
    found = [i for i, s in enumerate(body) if m.matches(s, matcher)]
    if len(found) != 1:
        raise AnchorDrift(path, line, text, f"exactly one in the body of {FUNCTION}", f"{len(found)}")
    if found[0] <= after:
        raise AnchorDrift(path, line, text, f"after `{ANCHOR}` in {FUNCTION}", "it before")
    return found[0]


def _check_flow(function: cst.FunctionDef, statement: cst.SimpleStatementLine, pool: cst.SimpleStatementLine,
                path: str, line: int, pool_line: int) -> None:
    """The steps of 3.15.x's `max_pool` the inserted code relies on, in its body, in order."""
    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    where = _holder(body, statement, CHANNELS_LAST)
    if where is None or len(cst.ensure_type(cst.ensure_type(body[where], cst.If).body, cst.IndentedBlock).body) != (
            2 if m.matches(statement, HELPER_STATEMENT) else 1):
        raise AnchorDrift(path, line, ANCHOR, f'alone under an `if data_format == "channels_last":` of {FUNCTION}',
                          "another shape")
    # The helper is handed the rank and the `padding` argument: both as the function got them.
    spatial = [i for i, s in enumerate(body) if m.matches(s, SPATIAL_DIMS)]
    if len(spatial) != 1 or spatial[0] > where:
        raise AnchorDrift(path, line, "num_spatial_dims = inputs.ndim - 2", f"exactly one before `{ANCHOR}`",
                          f"{len(spatial)}" + (" (after it)" if spatial and spatial[0] > where else ""))
    for node in body[spatial[0] + 1 : where]:
        for name in ("inputs", "num_spatial_dims"):
            if _rebinds(node, name):
                raise AnchorDrift(path, line, ANCHOR, f"`{name}` unchanged since `num_spatial_dims = inputs.ndim - 2`",
                                  f"{name} reassigned")
    if any(_rebinds(node, "padding") for node in body[:where]):
        raise AnchorDrift(path, line, ANCHOR, "the `padding` argument unchanged before it", "padding reassigned")
    padding = _one(body, PADDING, path, line, 'if padding == "same": ... else: padding = 0', where)
    device = _one(body, DEVICE, path, line, "device = get_device()", padding)
    meta = _one(body, META, path, line, 'if device == "meta":', device)
    pooling = _pool_branch(body, pool)
    if pooling is None or pooling <= meta:
        raise AnchorDrift(path, pool_line, POOL, 'under `... num_spatial_dims == 2:` after `if device == "meta":`',
                          "another shape")
    # Between the copy and the pooling, `inputs` changes only where 3.15.1 pads it (never with
    # "valid") or replaces it on the "meta" device (which the helper leaves to upstream).
    for index in range(where + 1, pooling):
        if index not in (padding, meta) and _rebinds(body[index], "inputs"):
            raise AnchorDrift(path, line, ANCHOR, f"`inputs` unchanged between it and `{POOL}`", "inputs reassigned")
    to_device = _one(body, TO_DEVICE, path, pool_line, "outputs = outputs.to(device)", pooling)
    back = [i for i, s in enumerate(body) if m.matches(s, CHANNELS_LAST) and find_statements(s, TRANSPOSE_BACK)]
    if len(back) != 1 or back[0] <= to_device:
        raise AnchorDrift(path, pool_line, "outputs = _transpose_spatial_outputs(outputs)",
                          'exactly one, under `if data_format == "channels_last":` after `outputs = outputs.to(device)`',
                          f"{len(back)}")
    # `data_format` is standardised once, before the copy, and `forkgen_view` is ours alone.
    rebound = [i for i, s in enumerate(body) if _rebinds(s, "data_format")]
    if any(i >= where for i in rebound):
        raise AnchorDrift(path, line, ANCHOR, f"`data_format` unchanged after it in {FUNCTION}",
                          "data_format reassigned")


def _check_transpose(module: cst.Module, tree: ast.Module, path: str) -> int:
    """`_transpose_spatial_inputs(inputs)` permutes a 4-D input as the helper does and copies the
    view with `.contiguous()` (3.15.0+; 3.14 pooled the view itself, with no copy to save)."""
    function = cst_function(module, TRANSPOSE, path, tree)
    line = _def_line(tree, TRANSPOSE)
    params = function.params
    extra = params.posonly_params or params.kwonly_params or params.star_kwarg
    if [p.name.value for p in params.params] != ["inputs"] or not isinstance(params.star_arg, cst.MaybeSentinel) or extra:
        raise AnchorDrift(path, line, f"def {TRANSPOSE}(inputs)", "the single parameter `inputs`", "another signature")
    copied = find(function, COPIED_4D)
    if len(copied) != 1:
        raise AnchorDrift(path, line, "return torch.permute(inputs, (0, 3, 1, 2)).contiguous()",
                          f"exactly one in {TRANSPOSE} (4-D inputs)", f"{len(copied)}")
    return line


def analyze(module: cst.Module, tree: ast.Module, path: str = NN_PY) -> Analysis:
    """The anchors of nn.py for the view; AnchorDrift when missing, duplicated or reshaped."""
    function = cst_function(module, FUNCTION, path, tree)
    def_line = _def_line(tree, FUNCTION)
    if find(function, UPSTREAM_CALL):
        line = _line(tree, FUNCTION, ast.Assign, UPSTREAM_KEYWORD)
        return Analysis(path, line, 1, 1, None, None, False, False, False, True)
    transposes = find_statements(function, TRANSPOSE_STATEMENT)
    calls = [s for s in find_statements(function, HELPER_STATEMENT) if has_marker(s, module, NAME)]
    line = _line(tree, FUNCTION, ast.Assign, TRANSPOSE) if transposes else (
        _line(tree, FUNCTION, ast.Assign, HELPER) if calls else def_line)
    if len(transposes) + len(calls) != 1:
        raise AnchorDrift(path, line, ANCHOR, f"exactly one in {FUNCTION} (or forkgen's statements in its place)",
                          f"{len(transposes)}" + (f" and {len(calls)} of forkgen's" if calls else ""))
    statement = cst.ensure_type((transposes or calls)[0], cst.SimpleStatementLine)
    pools = find_statements(function, POOL_STATEMENT)
    pool_line = _line(tree, FUNCTION, ast.Assign, "tnn.max_pool2d")
    if len(pools) != 1:
        raise AnchorDrift(path, pool_line if pools else def_line, POOL, f"exactly one in {FUNCTION}", f"{len(pools)}")
    pool = cst.ensure_type(pools[0], cst.SimpleStatementLine)
    outputs = [s for s in find_statements(function, OUTPUT_STATEMENT) if has_marker(s, module, NAME)]
    if not calls and _uses(function, FLAG):
        raise AnchorDrift(path, def_line, FLAG, f"a name {FUNCTION} does not use", "it used")
    _check_flow(function, statement, pool, path, line, pool_line)
    transpose_line = _check_transpose(module, tree, path)
    if not any(m.matches(s, m.SimpleStatementLine(body=[m.Import(names=[m.ImportAlias(m.Name("torch"), asname=None)])]))
               for s in module.body):
        raise AnchorDrift(path, 1, "import torch", "at module level (the helper uses `torch`)", "none")
    names = module_level_names(module)
    for name in MODULE_NAMES:
        if name not in names:
            raise AnchorDrift(path, 1, name, "bound at module level (the helper calls it)", "none")
    shadowed = sorted(set(BUILTINS) & names)
    if shadowed:
        raise AnchorDrift(path, 1, shadowed[0], "the builtin (the helper calls it)", "a module-level binding")
    helper_in = marked_helper_defined(module, path, HELPER, NAME)
    if not (bool(calls) == bool(outputs) == helper_in):
        state = ", ".join(f"{what} {'present' if there else 'absent'}" for what, there in
                          (("call", calls), ("output copy", outputs), ("helper", helper_in)))
        raise AnchorDrift(path, line, HELPER, "forkgen's statements and helper all present or all absent", state)
    return Analysis(path, line, pool_line, transpose_line, None if calls else statement, None if calls else pool,
                    bool(calls), bool(outputs), helper_in, False)


def anchors(analysis: Analysis) -> tuple[AnchorReport, ...]:
    where = "" if analysis.path == NN_PY else analysis.path
    if analysis.upstream:
        return (AnchorReport(f"{TRANSPOSE}(inputs, {UPSTREAM_KEYWORD}=True)", analysis.line, f"in {FUNCTION}", where),)
    return (
        AnchorReport(ANCHOR, analysis.line, f"in {FUNCTION}: {HELPER}'s view or this copy takes its place", where),
        AnchorReport(POOL, analysis.pool_line, "its output is copied to the default layout after pooling the view",
                     where),
        AnchorReport(f"def {TRANSPOSE}", analysis.transpose_line, "permutes, then copies with .contiguous()", where),
    )


class ChannelsLastViewCommand(AnalysedCommand[Analysis]):
    DESCRIPTION: str = "torch max_pool pools a dense channels_last 2-D input without copying it."
    VERSION = "1"
    PATH = NN_PY

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Analysis:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        analysis = self.site(tree)
        if analysis.upstream:
            raise SkipFile(f"max_pool already passes {UPSTREAM_KEYWORD}=True")
        if analysis.present:
            raise SkipFile("max_pool pools forkgen's view already")
        assert analysis.statement is not None and analysis.pool is not None
        body: list[cst.BaseStatement] = []
        for statement in tree.body:
            if m.matches(statement, m.FunctionDef(name=m.Name(FUNCTION))):
                function = cst.ensure_type(statement, cst.FunctionDef)
                inserted = helper()
                # Two blank lines above the helper, as between module-level defs; upstream's
                # lines above `def max_pool` stay with it.
                body.append(inserted.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(),
                                                                 *inserted.leading_lines]))
                body.append(cst.ensure_type(function.visit(_Insert(analysis.statement, analysis.pool)),
                                            cst.FunctionDef))
            else:
                body.append(statement)
        return tree.with_changes(body=body)


class _Insert(cst.CSTTransformer):
    """Puts the template's statements in place of upstream's copy and after the pooling (the
    comment lines above upstream's copy stay above the first)."""

    def __init__(self, transpose: cst.SimpleStatementLine, pool: cst.SimpleStatementLine) -> None:
        super().__init__()
        self._transpose = transpose
        self._pool = pool

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.BaseStatement]:
        if original_node is self._transpose:
            first, *rest = pieces()["pool_inputs"]
            first = first.with_changes(leading_lines=original_node.leading_lines)
            return cst.FlattenSentinel([first, *rest])
        if original_node is self._pool:
            return cst.FlattenSentinel([updated_node, *pieces()["pool_outputs"]])
        return updated_node
