"""How a declared edit is compiled and spliced into upstream's statements."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import libcst as cst
import libcst.matchers as m

from codemods.engine.edits import (
    AddElse,
    Append,
    Edit,
    Prepend,
    ReplaceExpression,
    Wrap,
    WrapBody,
    _above,
    _leading,
    _placeholders,
    _Statement,
)
from codemods.engine.finding import _seq_kind
from codemods.engine.pattern import VALUE, _Compiler, _is_placeholder_line, _metavariable
from codemods.engine.tree import PLACEHOLDER, marker, walk

if TYPE_CHECKING:
    from codemods.engine.declared import DeclaredPatch

# -- the declaration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Compiled:
    """An edit's piece, the template taking the anchor's place, and its applied form compiled
    (one matcher per statement of the template; for an expression, one)."""

    piece: tuple[cst.BaseStatement, ...]
    template: tuple[cst.BaseStatement, ...]
    matchers: tuple[Any, ...]
    kinds: tuple[str | None, ...]
    #: For a ReplaceExpression: the expression that takes the anchor's place.
    expression: cst.BaseExpression | None = None
    #: For an AddElse: the branch attached to the anchor.
    branch: cst.CSTNode | None = None


#: What `DeclaredPatch._find` gives: the anchors (node, captures, statement holding an
#: expression) and the applied forms (their statements, forkgen's?, statement holding one).
_Anchors = list[tuple[cst.CSTNode, Mapping[str, cst.CSTNode], cst.CSTNode | None, tuple[cst.CSTNode, ...]]]
_Applied = list[tuple[list[cst.CSTNode], bool, cst.CSTNode | None]]


@functools.cache
def _compile_edit(patch: type[DeclaredPatch], edit: Edit) -> _Compiled:
    """`edit` of `patch` compiled, once per process."""
    piece = patch.pieces().get(edit.piece)
    if not piece:
        raise ValueError(f"{patch.name}: no piece {edit.piece!r} in {patch.template}")
    if edit.enclosed:
        if len(piece) != 1 or not isinstance(getattr(piece[0], "body", None), cst.IndentedBlock):
            raise ValueError(f"{patch.name}: {edit.piece}: an enclosed piece is the block of one compound statement")
        piece = tuple(cast(cst.IndentedBlock, cast(cst.BaseCompoundStatement, piece[0]).body).body)
    if patch.marked and (not isinstance(edit, ReplaceExpression) or edit.marked) and marker(patch.name) not in cst.Module(
        body=[cast(_Statement, piece[0])]
    ).code:
        raise ValueError(f"{patch.name}: piece {edit.piece} carries no `{marker(patch.name)}` on its first statement")
    if isinstance(edit, ReplaceExpression):
        statement = piece[0]
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(piece) == 1 else None
        if isinstance(statement, (cst.If, cst.While)) and len(piece) == 1 and isinstance(statement.body, cst.IndentedBlock) \
                and [_is_placeholder_line(s) for s in statement.body.body] == [True] and not statement.orelse:
            small = cst.Expr(statement.test)  # `if <expression>:  # marker` over `UPSTREAM`: the marker ends the header
        if not isinstance(small, (cst.Expr, cst.Return)) or small.value is None:
            raise ValueError(f"{patch.name}: {edit.piece}: a ReplaceExpression piece is one expression (or return)")
        anchor = edit.anchor.compiled.matcher
        if isinstance(anchor, m.Arg):
            # A keyword argument: the piece is a call with that argument, whose value replaces the
            # anchor's (`UPSTREAM` in it: the anchor's value).
            args = [n for n in walk(small.value) if isinstance(n, cst.Arg) and m.matches(n, m.Arg(keyword=anchor.keyword))]
            if len(args) != 1:
                raise ValueError(f"{patch.name}: {edit.piece}: no one keyword argument to take the anchor's place")
            value = _Compiler(False, anchor.value).node(args[0].value)
            return _Compiled(piece, piece, (m.Arg(keyword=anchor.keyword, value=value),), ("Arg",), args[0].value)
        matcher = _Compiler(False, anchor).node(small.value)
        return _Compiled(piece, piece, (matcher,), (type(small.value).__name__,), small.value)
    if isinstance(edit, AddElse):
        branch = getattr(piece[0], "orelse", None) if len(piece) == 1 and isinstance(piece[0], cst.If) else None
        anchor = edit.anchor.compiled.matcher
        if branch is None or not isinstance(anchor, m.If) or edit.anchor.compiled.parts:
            raise ValueError(f"{patch.name}: {edit.piece}: an AddElse piece is one `if` with a branch, at an `if`")
        # The anchor's own matcher, with the piece's branch where the anchor has none (before its
        # `else:` when the branch ends in `else: UPSTREAM`).
        own = _ending(branch, None)
        matcher = dataclasses.replace(anchor, orelse=_Compiler(False).node(own) if own is not None else None)
        if own is not branch:
            matcher = dataclasses.replace(anchor, orelse=_end_with(cast(m.If, matcher.orelse), anchor.orelse))
        return _Compiled(piece, piece, (matcher,), ("If",), branch=branch)
    if isinstance(edit, WrapBody):
        if _placeholders(piece) != 1:
            raise ValueError(f"{patch.name}: {edit.piece}: a WrapBody piece has one `{PLACEHOLDER}` line")
        anchor = edit.anchor.compiled.matcher
        if edit.anchor.compiled.parts:
            raise ValueError(f"{patch.name}: {edit.piece}: a WrapBody anchor is one compound statement, not a run")
        options = anchor.options if isinstance(anchor, m.OneOf) else (anchor,)
        block = _Compiler(False, _BODY).node(cst.IndentedBlock(body=list(piece)))
        wrapped = []
        for option in options:
            old = getattr(getattr(option, "body", None), "body", None)
            if not isinstance(old, (list, tuple)):
                raise ValueError(f"{patch.name}: {edit.piece}: a WrapBody anchor is a compound statement with a block")
            wrapped.append(dataclasses.replace(option, body=_expand(block, old)))
        matcher = wrapped[0] if len(wrapped) == 1 else m.OneOf(*wrapped)
        return _Compiled(piece, piece[:1], (matcher,), (_seq_kind(wrapped[0]),))
    pattern = None if isinstance(edit, (Prepend, Append)) else edit.anchor.compiled
    template = tuple(edit.template(piece))
    if pattern and pattern.parts and any(_is_placeholder_line(s) for s in template):
        raise ValueError(f"{patch.name}: {edit.piece}: a run's `{PLACEHOLDER}` goes inside a statement of the piece "
                         "(a pattern of several statements is replaced or wrapped)")
    placeholder = pattern and ([p.matcher for p in pattern.parts] or pattern.matcher)
    matchers = tuple(_Compiler(False, placeholder).item(s) for s in template)
    if isinstance(edit, Wrap) and isinstance(template[0], cst.If) and template[0].orelse \
            and _ending(template[0].orelse, None) is None:
        # `if ...: ... else: UPSTREAM`: a later patch's `elif` before that `else` keeps it forkgen's.
        matchers = (dataclasses.replace(matchers[0], orelse=_after_elifs(matchers[0].orelse)),)
    return _Compiled(piece, template, matchers, tuple(_seq_kind(x) for x in matchers))


def _add(plan: dict[int, Callable[[Any], Any]], node: cst.CSTNode, edit: Callable[[Any], Any]) -> None:
    if id(node) in plan:
        raise ValueError("two edits of one node: declare them as one Replace")
    plan[id(node)] = edit


def _docstring(body: Sequence[cst.BaseStatement]) -> int:
    first = body[0] if body else None
    return int(
        isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


class _Fill(cst.CSTTransformer):
    def __init__(self, upstream: cst.CSTNode, keep_comments: bool = False,
                 values: Mapping[str, cst.CSTNode] | None = None, rest: Sequence[cst.CSTNode] = ()) -> None:
        super().__init__()
        self.upstream = upstream
        self.keep_comments = keep_comments
        self.values = values or {}
        self.rest = rest

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if _is_placeholder_line(updated_node) and isinstance(self.upstream, cst.BaseStatement):
            # Upstream's statement (a run: its statements), node for node; the template's comment
            # lines above `UPSTREAM` stay.
            kept = _above(self.upstream) if self.keep_comments else []
            first = self.upstream.with_changes(leading_lines=[*kept, *updated_node.leading_lines])
            return cst.FlattenSentinel([first, *cast(Sequence[cst.BaseStatement], self.rest)]) if self.rest else first
        return updated_node

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if isinstance(self.upstream, cst.BaseExpression) and updated_node.value == PLACEHOLDER:
            return self.upstream
        if isinstance(self.upstream, cst.SimpleStatementLine) and updated_node.value == VALUE:
            value = getattr(self.upstream.body[0], "value", None)
            if not isinstance(value, cst.BaseExpression):
                raise ValueError(f"`{VALUE}`: the anchor statement has no value")
            return value
        if _metavariable(updated_node.value):
            if updated_node.value[2:] not in self.values:
                raise ValueError(f"no value for the piece's `{updated_node.value}` (`DeclaredPatch.fill`)")
            return cast(cst.BaseExpression, self.values[updated_node.value[2:]])
        return updated_node


def _fill(template: cst.CSTNode, upstream: cst.CSTNode, keep_comments: bool = False,
          values: Mapping[str, cst.CSTNode] | None = None, rest: Sequence[cst.CSTNode] = ()) -> Any:
    return template.visit(_Fill(upstream, keep_comments, values, rest))


def _fill_value(template: cst.CSTNode, upstream: cst.Arg, values: Mapping[str, cst.CSTNode] | None = None) -> Any:
    """A keyword argument anchor: its value takes the template's place (`UPSTREAM`: its value)."""
    return upstream.with_changes(value=_fill(template, upstream.value, values=values))


def _splice(template: Sequence[cst.BaseStatement], keep_comments: bool, values: Mapping[str, cst.CSTNode],
            rest: Sequence[cst.CSTNode], upstream: cst.BaseStatement) -> Any:
    """The statements of `template`, `UPSTREAM` replaced by `upstream` (and the `rest` of its
    run), metavariables by `values`; upstream's comment lines above it move above the first (as
    the old `fill` helper did), unless `keep_comments`."""
    out = [cast(cst.BaseStatement, _fill(t, upstream, keep_comments, values, rest)) for t in template]
    if not keep_comments:
        out[0] = _leading(out[0], [*_above(upstream), *_above(out[0])])
    return out[0] if len(out) == 1 else cst.FlattenSentinel(out)


def _prepend(piece: Sequence[cst.BaseStatement], blank_lines: int, keep_comments: bool,
             block: cst.IndentedBlock) -> cst.IndentedBlock:
    """`block` with `piece` first (after a docstring); the comment lines above the statement
    that was first move above the piece (with `keep_comments`, they stay with it), and
    `blank_lines` blank lines go between the piece and that statement."""
    body = block.body
    start = _docstring(body)
    if start == len(body):
        return block.with_changes(body=[*body, *piece])
    first = body[start]
    blank = [cst.EmptyLine(indent=False)] * blank_lines
    if keep_comments:
        return block.with_changes(body=[*body[:start], *piece, _leading(first, [*blank, *_above(first)]), *body[start + 1:]])
    head = _leading(piece[0], [*_above(first), *_above(piece[0])])
    return block.with_changes(body=[*body[:start], head, *piece[1:], _leading(first, blank), *body[start + 1:]])


#: Where a WrapBody piece's matcher takes the anchor's old body (`_expand`).
_BODY = m.SaveMatchedNode(m.DoNotCare(), "__upstream_body__")


def _expand(matcher: Any, items: Sequence[Any]) -> Any:
    """`matcher` with `items` (matchers) spliced where a sequence holds `_BODY`."""
    if isinstance(matcher, (list, tuple)):
        out: list[Any] = []
        for x in matcher:
            out.extend(items) if x is _BODY else out.append(_expand(x, items))
        return type(matcher)(out)
    if isinstance(matcher, m.BaseMatcherNode) and dataclasses.is_dataclass(matcher):
        return dataclasses.replace(matcher, **{f.name: _expand(getattr(matcher, f.name), items)
                                               for f in dataclasses.fields(matcher) if f.init})
    return matcher


class _Rebody(cst.CSTTransformer):
    def __init__(self, old: Sequence[cst.BaseStatement]) -> None:
        super().__init__()
        self.old = old

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body = [s for x in updated_node.body for s in (self.old if _is_placeholder_line(x) else [x])]
        return updated_node.with_changes(body=body)


def _rebody(piece: Sequence[cst.BaseStatement], statement: Any) -> Any:
    """`statement` with the piece as its body, its old body's statements at `UPSTREAM`."""
    block = cast(cst.IndentedBlock, statement.body)
    filled = cast(cst.IndentedBlock, cst.IndentedBlock(body=list(piece)).visit(_Rebody(block.body)))
    return statement.with_changes(body=block.with_changes(body=filled.body))


def _unwrap(piece: Sequence[cst.BaseStatement], statement: Any) -> cst.FlattenSentinel[cst.BaseStatement]:
    """The statements of `statement`'s body, one level out: its comment lines (and a comment on
    its header's line), then the piece's, above the first; the piece's statements after them."""
    block = statement.body
    body = list(block.body) if isinstance(block, cst.IndentedBlock) else [cst.SimpleStatementLine(body=block.body)]
    comment = (block.header if isinstance(block, cst.IndentedBlock) else block.trailing_whitespace).comment
    header = [cst.EmptyLine(comment=comment)] if comment else []
    first = _leading(body[0], [*_above(statement), *header, *_above(piece[0]), *_above(body[0])])
    return cst.FlattenSentinel([first, *body[1:], *piece[1:]])


def _append(piece: Sequence[cst.BaseStatement], module: cst.Module) -> cst.Module:
    return module.with_changes(body=[*module.body, *piece])


def _attach(branch: cst.CSTNode, statement: cst.If) -> cst.If:
    return statement.with_changes(orelse=_ending(branch, statement.orelse))


def _ending(branch: Any, orelse: Any) -> Any:
    """`branch` (an `elif` chain or `else:`), its `else: UPSTREAM` (if any) replaced by `orelse`."""
    if isinstance(branch, cst.If) and branch.orelse is not None:
        return branch.with_changes(orelse=_ending(branch.orelse, orelse))
    body = getattr(getattr(branch, "body", None), "body", None)
    if isinstance(branch, cst.Else) and body and len(body) == 1 and _is_placeholder_line(body[0]):
        return orelse
    return branch


def _end_with(matcher: Any, orelse: Any) -> Any:
    """`matcher` of an `elif` chain, `orelse` matching what follows its last branch."""
    if isinstance(matcher.orelse, m.If):
        return dataclasses.replace(matcher, orelse=_end_with(matcher.orelse, orelse))
    return dataclasses.replace(matcher, orelse=orelse)


def _after_elifs(orelse: Any) -> Any:
    """A matcher of `orelse`, an `else:` branch, also behind any `elif` branches."""
    def ends_with(node: cst.CSTNode | None) -> bool:
        while isinstance(node, cst.If):
            node = node.orelse
        return node is not None and m.matches(node, orelse)
    return m.MatchIfTrue(ends_with)


def _comment(comments: Sequence[cst.EmptyLine], statement: cst.BaseStatement) -> Any:
    """`statement` with `comments` (a piece's marker) right above it, below its own."""
    return _leading(statement, [*_above(statement), *comments])


def _header(header: cst.TrailingWhitespace, statement: cst.BaseCompoundStatement) -> Any:
    """`statement` with `header` (a piece's marker) at the end of its header line."""
    if not isinstance(statement.body, cst.IndentedBlock):
        raise ValueError("a marker at the end of a header line needs a compound statement with an indented body")
    return statement.with_changes(body=statement.body.with_changes(header=header))
