"""Anchors and the closed set of edits a patch declares, and the pieces they insert (`template_pieces`)."""

from __future__ import annotations

import functools
import importlib
import importlib.resources
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import libcst as cst

from codemods.engine.pattern import Pattern, _is_placeholder_line, compile_either
from codemods.engine.tree import PLACEHOLDER, walk

# -- anchors and edits --------------------------------------------------------------------------


@dataclass(frozen=True)
class Anchor:
    """A code pattern in a scope of a file, expected `count` times."""

    #: Dotted path: "" (the module), "Class", "Class.method", "function".
    scope: str
    pattern: str
    count: int = 1
    expression: bool = False
    #: How `forkgen analyze` describes it (default: where it is).
    description: str | None = None
    #: The file (default: the patch's first).
    path: str | None = None
    #: Other patterns that match in its place (the same code in another release's words).
    alternatives: tuple[str, ...] = ()
    #: Shown among the outcome's anchors (an upstream pattern: when found).
    reported: bool = True
    #: What reports and drift call it (default: its pattern).
    name: str | None = None
    #: Reports name its file when it is not the patch's first (False: never).
    file_shown: bool = True
    #: An expression anchor: the statements whose headers are searched (default: every one).
    within: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        if self.name:
            return self.name
        pattern = self.compiled
        return "; ".join(p.source for p in pattern.parts) or pattern.source

    @property
    def compiled(self) -> Pattern:
        return compile_either((self.pattern, *self.alternatives), self.expression)

    @property
    def where(self) -> str:
        return f"in {self.scope}" if self.scope else "at module level"

    def holds(self, statement: cst.CSTNode) -> bool:
        """Whether `statement`'s header may hold this (expression) anchor (`within`)."""
        return not self.within or compile_either(self.within).match(statement) is not None


@dataclass(frozen=True)
class Edit:
    """One change of a patch: `piece` (a function of the template module) at `anchor`."""

    anchor: Anchor
    piece: str
    #: What the outcome's detail calls this edit (`{todo}`); default: the anchor's pattern.
    label: str | None = None
    #: The line of an applied form is its first statement's (default: the anchor's in it).
    form_line: bool = False
    #: The piece is the block of the one compound statement its template function holds (a
    #: template that shows the piece inside the statement enclosing it upstream).
    enclosed: bool = False
    #: Blank lines above the inserted statements (InsertBefore, InsertAfter, Helper).
    blank_lines: int = 0
    #: Names the piece binds that upstream's code binds there too (a Replace of `x = f(x)` by
    #: `x = g(x)`): no clash with the function's own use of them.
    rebinds: tuple[str, ...] = ()
    #: Upstream's comment lines above the anchor statement (Prepend: the first statement) stay
    #: with it, below the inserted code (default: they move above the inserted code).
    keep_comments: bool = False

    #: How drift counts the anchors not yet edited and those already edited, and names one of
    #: the latter.
    words: ClassVar[tuple[str, str, str] | None] = None

    @property
    def name(self) -> str:
        return self.label or self.anchor.title

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """The statements that take the anchor statement's place (`UPSTREAM`: the anchor)."""
        return [*piece, _PLACEHOLDER_LINE]


_PLACEHOLDER_LINE = cst.SimpleStatementLine([cst.Expr(cst.Name(PLACEHOLDER))])
#: A statement of a block (what has `leading_lines`).
_Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


def _leading(statement: cst.CSTNode, lines_: Sequence[cst.EmptyLine]) -> Any:
    """`statement` with `lines_` as its comment and blank lines above."""
    return cast(_Statement, statement).with_changes(leading_lines=list(lines_))


def _above(statement: cst.CSTNode) -> list[cst.EmptyLine]:
    return list(cast(_Statement, statement).leading_lines)


def _spaced(piece: Sequence[cst.BaseStatement], blank_lines: int) -> list[cst.BaseStatement]:
    """`piece` with `blank_lines` blank lines above its first statement."""
    blank = [cst.EmptyLine(indent=False)] * blank_lines
    return [_leading(piece[0], [*blank, *_above(piece[0])]), *piece[1:]] if blank else list(piece)


class Wrap(Edit):
    """The anchor statement goes inside the piece, one statement with `UPSTREAM` in it."""

    words = ("unguarded", "guarded", "a guard")

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        if len(piece) != 1 or _is_placeholder_line(piece[0]) or _placeholders(piece) != 1:
            raise ValueError(f"{self.piece}: a Wrap piece is one statement with one `{PLACEHOLDER}` inside")
        return list(piece)


class InsertBefore(Edit):
    """The piece's statements right before the anchor statement."""

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        return [*_spaced(piece, self.blank_lines), _PLACEHOLDER_LINE]


class InsertAfter(Edit):
    """The piece's statements right after the anchor statement."""

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        return [_PLACEHOLDER_LINE, *_spaced(piece, self.blank_lines)]


class Replace(Edit):
    """The piece's statements instead of the anchor statement (`UPSTREAM` in them keeps it)."""

    words = ("not replaced", "replaced", "a replacement")

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        if _placeholders(piece) > 1:
            raise ValueError(f"{self.piece}: at most one `{PLACEHOLDER}`")
        return list(piece)


@dataclass(frozen=True)
class ReplaceExpression(Edit):
    """The piece's expression instead of the anchor expression (`UPSTREAM` in it keeps it).

    The piece is one statement, `return <expression>` or the expression alone; its marker is a
    comment line above it, which goes above the statement holding the anchor. Or the piece is
    `if <expression>:` (`while`, `elif`) whose body is `UPSTREAM` alone: its marker, at the end
    of that header line, goes at the end of the header line of the statement holding the anchor
    (a compound statement). `marked=False`: no marker (the statement holding the anchor carries
    another edit's)."""

    marked: bool = True

    words = ("not replaced", "replaced", "a replacement")


@dataclass(frozen=True)
class Helper(Edit):
    """The piece's statements at module level right after the anchor (a module-level statement),
    `blank_lines` blank lines above them; with `before`, right before it, the anchor's comment and
    blank lines above them and `blank_lines` between them and the anchor. The names they bind
    count as bound for the patch; bound elsewhere in the module, they are drift."""

    blank_lines: int = 2
    before: bool = False
    #: Applied, the piece may be anywhere at module level (a later patch's helpers may come
    #: between it and the anchor).
    anywhere: bool = False

    def __post_init__(self) -> None:
        if self.anchor.scope:
            raise ValueError(f"{self.piece}: a Helper goes after a module-level anchor, not in {self.anchor.scope}")

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        if self.before:
            return [*piece, _PLACEHOLDER_LINE.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * self.blank_lines)]
        return [_PLACEHOLDER_LINE, *_spaced(piece, self.blank_lines)]


class Prepend(Edit):
    """The piece's statements first in the body of the function `scope` (after its docstring);
    `description`: how reports describe it; `blank_lines`: blank lines between the piece and the
    statement that was first."""

    def __init__(self, scope: str, piece: str, label: str | None = None, description: str | None = None,
                 blank_lines: int = 0, *, path: str | None = None, reported: bool = True,
                 keep_comments: bool = False, rebinds: tuple[str, ...] = ()) -> None:
        super().__init__(Anchor(scope, "", description=description or f"first statement of {scope}", path=path,
                                reported=reported, name=f"{scope}: first statement"), piece, label,
                         blank_lines=blank_lines, keep_comments=keep_comments, rebinds=rebinds)

    @property
    def name(self) -> str:
        return self.label or f"{self.anchor.scope}: first statement"

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        return list(piece)


class Append(Helper):
    """The piece's statements at the end of the module (of `path`, default the patch's first file),
    `blank_lines` blank lines above them. Applied, they may be anywhere at module level (later
    patches append after them)."""

    def __init__(self, piece: str, blank_lines: int = 2, label: str | None = None, *, path: str | None = None) -> None:
        super().__init__(Anchor("", "", description="end of the module", reported=False, name=f"{piece} (appended)",
                                path=path), piece, label, blank_lines=blank_lines, anywhere=True)

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        return _spaced(piece, self.blank_lines)


class AddElse(Edit):
    """An `elif` or `else:` attached to the anchor, an `if` without one. The piece is one
    `if UPSTREAM: UPSTREAM` with that branch: the anchor's test and body stay as they are. Names
    the branch binds that the anchor binds too are no clash."""

    words = ("without the branch", "with it", "a branch")


class WrapBody(Edit):
    """The piece becomes the body of the anchor, a compound statement whose header stays; the
    statements of its old body go, node for node, where the piece says `UPSTREAM` (a line alone).
    Names the piece binds that the old body binds too are no clash."""

    words = ("unwrapped", "wrapped", "a wrapped body")


class Unwrap(Edit):
    """The anchor, a compound statement without `else`, gives way to the statements of its body,
    node for node, one level out. The piece is `UPSTREAM`, the marker comment above it (it goes
    above the first of them, below the anchor's own comment lines), then any statements to run
    after them (none in a backport: a mutant adds some; names they bind that the body binds too
    are no clash). Applied, the body may be
    any code: forkgen's form is a statement with the marker above it; an unmarked one cannot be
    told from other code (declare `upstream_patterns` for upstream's)."""

    words = ("to unwrap", "unwrapped", "")

    def template(self, piece: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        if not _is_placeholder_line(piece[0]) or _placeholders(piece) != 1:
            raise ValueError(f"{self.piece}: an Unwrap piece is `{PLACEHOLDER}`, the marker above it, then statements")
        return list(piece)


def _placeholders(piece: Iterable[cst.CSTNode]) -> int:
    return sum(1 for s in piece for n in walk(s) if isinstance(n, cst.Name) and n.value == PLACEHOLDER)


@dataclass(frozen=True)
class Details:
    """The one-line detail of each outcome; `{todo}` in `apply` is the labels of the edits to
    apply, joined with "and"."""

    apply: str
    present: str
    upstream: str


# -- templates ----------------------------------------------------------------------------------


@functools.cache
def _parsed_template(package: str, filename: str, source: str | None) -> cst.Module:
    if source is None:
        source = importlib.resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return cst.parse_module(source)


def template_pieces(package: str, filename: str, source: str | None = None) -> dict[str, tuple[cst.BaseStatement, ...]]:
    """The body of every function of the template module, by name."""
    module = _parsed_template(package, filename, source)
    return {
        s.name.value: tuple(cst.ensure_type(s.body, cst.IndentedBlock).body)
        for s in module.body if isinstance(s, cst.FunctionDef)
    }
