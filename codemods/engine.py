"""The patch engine: a patch declares its anchors and edits, the engine finds, edits and decides.

A patch written on the engine is a `DeclaredPatch` subclass (its package's `__init__.py`) plus
the code it inserts (`inserted.py`, one template function per piece, as before). It declares:

- its `Patch` headers (`name`, `version`, `headers`, `files`, `requires`, `since`, `switch`);
- `edits`: what it changes, each an edit of a closed set anchored on a code pattern:

      Wrap(anchor, piece)           the anchor statement goes where the piece says `UPSTREAM`
      InsertBefore(anchor, piece)   the piece's statements right before the anchor statement
      InsertAfter(anchor, piece)    ... right after it
      Prepend(scope, piece)         ... first in the body of function `scope` (after a docstring;
                                    optionally `path=` another file, `reported=False`,
                                    `description` for reports, `blank_lines` below the piece,
                                    `rebinds` for a parameter the piece reassigns)
      Replace(anchor, piece)        the piece instead of the anchor statement (`UPSTREAM` in the
                                    piece, if any, keeps the anchor there)
      ReplaceExpression(anchor, piece)  the piece's expression instead of the anchor expression
                                    (`UPSTREAM` in it keeps the anchor there); for a keyword
                                    argument anchor, the piece is a call with that argument,
                                    whose value replaces the anchor's (`UPSTREAM`: its value);
                                    a piece `if <expression>:  # marker` over an `UPSTREAM`
                                    body puts its marker at the end of the header line of
                                    the statement holding the anchor
      Helper(anchor, piece)         module-level statements right after a module-level anchor
                                    (`before=True`: right before it; `anywhere=True`: applied,
                                    they may be anywhere at module level)
      Append(piece)                 module-level statements at the end of the module (a Helper
                                    without anchor; applied, they may be anywhere at module level;
                                    `path=` another file than the patch's first)
      AddElse(anchor, piece)        an `elif`/`else:` attached to the anchor `if` (which has
                                    none): the piece is `if UPSTREAM: UPSTREAM` with that branch;
                                    a branch ending `else: UPSTREAM` goes before the anchor's
                                    own `else:`
      WrapBody(anchor, piece)       the piece becomes the body of the anchor compound statement,
                                    its old body's statements where the piece says `UPSTREAM`
      Unwrap(anchor, piece)         the anchor compound statement (no `else`) gives way to its
                                    body's statements, one level out; the piece is `UPSTREAM`
                                    with the marker above it (statements after it follow the
                                    body). Applied, the body may be any
                                    code: a statement with the marker above it in the anchor's
                                    scope is forkgen's form, and upstream's change is told only
                                    by `upstream_patterns`

- `details`: the one-line detail of each outcome (`Details`);
- `marked = False` for a patch whose pieces carry no marker (an applied form is forkgen's: a
  change upstream never made in those words), and `pieces()` for code not kept as one
  `inserted.py` (the CallSpec patches cut theirs from per-variant templates);
- optionally `upstream_patterns` (anchors whose presence means the release carries the change;
  count 0 for one that must be absent, `reported=False` for one left out of the outcome's
  anchors) and `upstream_shapes` (other such sets, each with its own detail), `relies_on`
  (anchors the patch needs but does not edit: checked, and reported after the edits'),
  `upstream_forms = False` (an unmarked applied form is drift, not upstream's), `report_paths`
  (the anchors of the patch's first file are reported with their file too: the edits', the
  upstream patterns' and the relied-on ones'),
  `names` (names the inserted code uses that the patch binds itself, with how), `fill` (what
  takes the place of a piece's metavariables, by default the anchor's captures), `moved` (a
  declared file -> where some releases have it instead: a tree with only that one is read,
  edited and reported there), `unshadowed_builtins` (a builtin the inserted code reads, bound
  at module level, is drift), `codemod` (the
  name of its libcst command), `codemod_version` (its version, default the patch's) and the
  escape hatches, for a truly semantic rule: `verify` (a
  check of its own) and `explain` (a more telling word for drift, in the series and in the
  command run alone), with `matches` and `starts_with` to read the tree. A piece is the body of
  its template function, or (`enclosed=True`) the block of the one statement that body holds;
  `blank_lines` puts blank lines above what InsertBefore, InsertAfter and Helper insert;
  `rebinds` names what a piece binds that upstream's code binds there too (no clash).
  `keep_comments=True` keeps upstream's comment lines above the anchor statement (for Prepend,
  the function's first statement) with it, below the inserted code, instead of moving them
  above; `Prepend(..., reported=False)` leaves the function out of the outcome's anchors.
  `UPSTREAM_VALUE` in a piece is a copy of the value of the anchor statement (`return <value>`,
  `x = <value>`), matched as any expression in an applied form; `upstream_rule` is the escape
  hatch for an *upstream* outcome no pattern can tell (a detail, or None).

An `Anchor` is a scope (`""` for the module, `"Class"`, `"Class.method"`, `"function"`) and a
pattern written as Python source, a statement or (`expression=True`) an expression, with an
expected count (exactly one by default), and optionally `alternatives` (the same code in another
release's words, matched in its place; an expression pattern may be a keyword argument,
`name=<expression>`, which matches that argument of a call, its line the keyword's), a `name`
(what reports and drift call it), `file_shown=False` (reports leave its file unnamed, as when it
is the patch's first),
`reported=False` (left out of the outcome's anchors) and, for an expression, `within` (statement
patterns: only the headers of the statements matching one are searched, for the anchor and for
its applied form). A ReplaceExpression with `marked=False` inserts no marker: its expression is
forkgen's when the statement holding it carries the patch's marker (another edit's, such as an
AddElse's branch). A relied-on anchor's `description` may name its pattern's captures,
`{name}`: the code captured (a pattern without captures: the description as written); an edit's
may name `{state}`: its piece's, "absent" (to apply), "ours" or "theirs". In a function the pattern is looked for in every
statement of its body, nested blocks included; in a class or the module, among its direct
statements. The pattern is compiled once to libcst matchers (`compile_pattern`): names, strings,
numbers and operators must be as written; whitespace, comments and parentheses are ignored;
wildcards stand for code that may be anything:

    __        any one expression, argument, element, parameter or statement
    ___       any number of them, where a sequence goes: `f(___)`, `[___]`, a body `___`
    __name    like `__`, and kept under `name` in the match's captures (two underscores and a
              lower-case name that does not end with two underscores: dunders are plain names)

A pattern of several statements is a *run*: that many consecutive statements of one block, each
matching its own (`alternatives` are runs of the same length, matched statement by statement);
the anchor's line is its first statement's, and an unnamed run is called by its statements
joined with "; ". A `Replace` of a run takes the place of them all; `UPSTREAM` in its piece or in
a `Wrap`'s, inside one of the piece's statements, stands for the whole run, node for node (an
edit whose `UPSTREAM` is a line of the template's own, InsertBefore, InsertAfter or Helper, takes
no run). A metavariable `__name` in a piece is filled at each anchor by `DeclaredPatch.fill`
(default: the code the anchor's pattern captured as `__name`, node for node); in the applied
form it matches any code.

A header a pattern leaves out matches anything: `def f(___): ___` matches any decorators and
return annotation, `class C: ___` any bases. An `else:` it leaves out means no `else`. A body on
the header's line (`if a: b()`) also matches the same body as an indented block.

A `Wrap` piece `if ...: ... else: UPSTREAM` stays recognised when a later patch adds `elif`
branches before its `else` (an `AddElse` of its own).

Layout: the inserted code is the piece's, comments included; upstream's statements are kept node
for node; upstream's comment lines above an anchor statement move above the code inserted at it
(as `patchlib.fill` does).

What the engine derives from the declaration, the same way for every patch:

- *Where each edit goes*, and the line of each anchor, from codegen of the module's statements
  (each rendered once, as far as the last node needed, and kept while unchanged: `lines`): no
  second finder, no `ast` predicate.
- *Drift*, worded by the engine: an anchor matching other than its expected count, a scope not
  found exactly once, forkgen's piece present beside a piece missing (a partial presence), a
  name the inserted code uses that nothing binds, a name it binds already in use, a module of
  the tree it imports that the tree does not have (`check_imports`).
- *The outcome* (`DeclaredPatch.check`): each piece is *to apply*, *forkgen's* (its applied form,
  which is the piece with the anchor in place of `UPSTREAM`, is there with its
  `# forkgen: <patch>` marker) or *upstream's* (that same applied form without the marker).
  All upstream's, or every upstream pattern matching, is *upstream*; all present is *applied,
  present*; forkgen's beside to-apply is drift, and so is upstream's beside to-apply unless the
  patch declares `upstream_per_piece` (independent pieces upstream made one at a time).
  *Not applicable* comes from `since` and `requires`, which the series reads
  (`codemods/series.py`).
- *The libcst command* (`command`, named `codemod`): one per patch, a `DeclaredCommand` whose
  single path-limited transformer visits only the statements leading to the edits; the package
  exposes it (`Name = PATCH.command`) so `python -m libcst.tool codemod <package>.<Name> FILE`
  runs it.
"""

from __future__ import annotations

import bisect
import builtins
import dataclasses
import enum
import functools
import importlib
import importlib.resources
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NoReturn, cast

import libcst as cst
import libcst.matchers as m
from libcst._nodes.internal import CodegenState
from libcst.codemod import Codemod, CodemodContext, SkipFile, VisitorBasedCodemodCommand
from libcst.helpers import get_full_name_for_node_or_raise

from codemods.patchlib import (
    PLACEHOLDER,
    TREE_CACHES,
    AnchorDrift,
    AnchorReport,
    Check,
    Outcome,
    Patch,
    Sources,
    ancestors,
    marker,
    statement_ancestors,
    statements,
    walk,
)

# -- patterns -----------------------------------------------------------------------------------

ONE, MANY = "__", "___"
#: In a piece: the value of the anchor statement (`return <value>`, `x = <value>`), copied there.
VALUE = f"{PLACEHOLDER}_VALUE"
_CAPTURE = re.compile(r"__[a-z][a-z0-9_]*")
#: Nodes that are layout, not meaning: a compiled pattern ignores them.
_LAYOUT = (
    cst.BaseParenthesizableWhitespace, cst.EmptyLine, cst.TrailingWhitespace, cst.Newline, cst.Comment,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
    cst.RightCurlyBrace, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual,
)
_LAYOUT_FIELDS = frozenset({"lpar", "rpar", "leading_lines", "lines_after_decorators", "header", "footer", "indent"})


def _is_placeholder_line(node: cst.CSTNode) -> bool:
    """`UPSTREAM` alone on a line: where a template keeps upstream's statement."""
    return (
        isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and isinstance(node.body[0], cst.Expr)
        and isinstance(node.body[0].value, cst.Name) and node.body[0].value.value == PLACEHOLDER
    )


def _metavariable(name: str) -> bool:
    """`__name` (not a dunder): a capture in a pattern, a value filled in a template."""
    return bool(_CAPTURE.fullmatch(name)) and not name.endswith("__")


def _flat(items: Iterable[Any]) -> list[Any]:
    """`items` with a list among them (a run's matchers, where `UPSTREAM` stands) spliced in."""
    return [x for item in items for x in (item if isinstance(item, list) else [item])]


def _wildcard(node: cst.CSTNode) -> str | None:
    """`__` or `___` when `node`, an item of a sequence, is one of them alone."""
    inner: cst.CSTNode = node
    if isinstance(inner, cst.SimpleStatementLine) and len(inner.body) == 1:
        inner = inner.body[0]
    if isinstance(inner, cst.Expr):
        inner = inner.value
    elif isinstance(inner, cst.Arg) and inner.keyword is None and inner.star == "":
        inner = inner.value
    elif isinstance(inner, cst.Element):
        inner = inner.value
    elif isinstance(inner, cst.Param) and inner.default is None and inner.annotation is None:
        inner = inner.name
    elif isinstance(inner, cst.Decorator):
        inner = inner.decorator
    return inner.value if isinstance(inner, cst.Name) and inner.value in (ONE, MANY) else None


@functools.cache
def _fields(node_type: Any) -> tuple[Any, ...]:
    return fields(node_type)


_LAYOUT_TYPES: dict[type, bool] = {}


def _is_layout(value: object) -> bool:
    """Whether a field's value is layout (`_LAYOUT`), asked once per type: the abstract classes
    among them make `isinstance` slow, and patterns ask it for every field."""
    kind = type(value)
    if kind not in _LAYOUT_TYPES:
        _LAYOUT_TYPES[kind] = issubclass(kind, _LAYOUT)
    return _LAYOUT_TYPES[kind]


class _Compiler:
    """Source nodes to libcst matchers: every field but layout, wildcards (in patterns) and the
    `UPSTREAM` placeholder (in templates) replaced by what they stand for."""

    def __init__(self, wildcards: bool, placeholder: Any = None) -> None:
        self.wildcards = wildcards
        #: In a template: the anchor's matcher (a run: the list of its statements' matchers).
        self.placeholder = placeholder
        self.captures: list[str] = []

    def node(self, node: cst.CSTNode) -> Any:
        if not self.wildcards and isinstance(node, cst.Name) and _metavariable(node.value):
            return m.DoNotCare()  # a template's metavariable: filled per anchor (`DeclaredPatch.fill`)
        if self.placeholder is not None and (
            _is_placeholder_line(node) or isinstance(node, cst.Name) and node.value == PLACEHOLDER
        ):
            if isinstance(self.placeholder, list) and not _is_placeholder_line(node):
                raise ValueError(f"a run's `{PLACEHOLDER}` is a line of its own")
            return self.placeholder
        if self.placeholder is not None and isinstance(node, cst.Name) and node.value == VALUE:
            return m.DoNotCare()  # a copy of the anchor statement's value
        if isinstance(node, cst.SimpleStatementSuite) and self.wildcards:
            # `if a: x` in a pattern is also `if a:` and `x` on the next line; `if a: ___`, any body.
            if [_wildcard(s) for s in node.body] == [MANY]:
                return m.DoNotCare()
            small = [self.item(s) for s in node.body]
            return m.SimpleStatementSuite(body=small) | m.IndentedBlock(body=[m.SimpleStatementLine(body=[s]) for s in small])
        if isinstance(node, cst.Name) and self.wildcards:
            if node.value == ONE:
                return m.DoNotCare()
            if node.value == MANY:
                raise ValueError(f"`{MANY}` stands for any number of items: put it where a sequence goes")
            if _metavariable(node.value):
                name = node.value[2:]
                if name in self.captures:
                    raise ValueError(f"metavariable `{node.value}` appears twice")
                self.captures.append(name)
                return m.SaveMatchedNode(m.DoNotCare(), name)
        kwargs: dict[str, Any] = {}
        for f in _fields(type(node)):
            value = getattr(node, f.name)
            if f.name in _LAYOUT_FIELDS or isinstance(value, cst.MaybeSentinel):
                continue
            if _is_layout(value) and f.name != "relative":
                continue
            if self.wildcards and not value and (
                isinstance(node, (cst.FunctionDef, cst.ClassDef)) and f.name in ("decorators", "returns", "bases", "keywords")
            ):
                continue  # a header the pattern leaves out matches anything
            if isinstance(value, (list, tuple)):
                if f.name == "relative":
                    kwargs[f.name] = [m.Dot() for _ in value]
                elif self.wildcards and isinstance(node, cst.Parameters) and f.name == "params" and [
                    _wildcard(v) for v in value
                ] == [MANY]:
                    return m.DoNotCare()  # `(___)`: any parameters
                else:
                    kwargs[f.name] = _flat(self.item(v) for v in value)
            elif isinstance(value, cst.CSTNode):
                kwargs[f.name] = self.node(value)
            else:
                kwargs[f.name] = value
        return getattr(m, type(node).__name__)(**kwargs)

    def item(self, node: cst.CSTNode) -> Any:
        if self.placeholder is not None and _is_placeholder_line(node):
            return self.placeholder
        wildcard = _wildcard(node) if self.wildcards else None
        if wildcard == MANY:
            return m.ZeroOrMore()
        if wildcard == ONE:
            return m.DoNotCare()
        return self.node(node)


@dataclass(frozen=True)
class Pattern:
    """A pattern compiled to a libcst matcher."""

    source: str
    matcher: Any
    #: The libcst node type it matches (a cheap test before the matcher's; "": several).
    kind: str
    captures: tuple[str, ...]
    #: A pattern of several statements (a run): each statement's pattern (the first's is the matcher).
    parts: tuple[Pattern, ...] = ()

    @property
    def following(self) -> tuple[Pattern, ...]:
        """A run: the patterns of the statements after its first."""
        return self.parts[1:]

    def match(self, node: cst.CSTNode) -> Mapping[str, cst.CSTNode] | None:
        """The captures when `node` matches (empty without metavariables), else None (a run: its
        first statement's; `match_run` matches the whole run)."""
        if self.kind and type(node).__name__ != self.kind:
            return None
        if not self.captures:
            return {} if m.matches(node, self.matcher) else None
        found = m.extract(node, self.matcher)
        return None if found is None else {k: cast(cst.CSTNode, v) for k, v in found.items()}

    def match_run(self, block: Sequence[cst.CSTNode], i: int) -> Mapping[str, cst.CSTNode] | None:
        """The captures when the statements of `block` from `i` on match (every statement of a
        pattern of several), else None."""
        run = block[i:i + len(self.parts)]
        if len(run) != len(self.parts):
            return None
        captures: dict[str, cst.CSTNode] = {}
        for node, part in zip(run, self.parts, strict=True):
            found = part.match(node)
            if found is None:
                return None
            captures.update(found)
        return captures


#: An expression pattern that is a keyword argument (`name=...`, not `name==...`).
_KEYWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*=(?!=)")


@functools.cache
def compile_pattern(source: str, expression: bool = False) -> Pattern:
    """`source` (a statement, or with `expression` an expression) compiled to a matcher."""
    text = textwrap.dedent(source).strip()
    node: cst.CSTNode
    if expression and _KEYWORD.match(text):
        # A keyword argument, `name=<expression>`: the argument of a call.
        node = cst.ensure_type(cst.parse_expression(f"f({text})"), cst.Call).args[0]
    elif expression:
        node = cst.parse_expression(text)
    else:
        body = _PARSED.pop(text, None) or cst.parse_module(text + "\n").body
        if len(body) > 1:  # a run: each statement its own pattern
            parts = tuple(compile_pattern(cst.Module(body=[s]).code.strip()) for s in body)
            captures = tuple(c for p in parts for c in p.captures)
            twice = sorted({c for c in captures if captures.count(c) > 1})
            if twice:
                raise ValueError(f"metavariable `__{twice[0]}` appears twice")
            return Pattern(text, parts[0].matcher, parts[0].kind, captures, parts)
        node = body[0]  # parsed once: the module's statement is the one `parse_statement` gives, but for layout
    compiler = _Compiler(wildcards=True)
    matcher = compiler.node(node)
    if not isinstance(matcher, m.BaseMatcherNode) or _wildcard(node):
        raise ValueError(f"pattern {source!r} is a wildcard alone: it would match anything")
    return Pattern(text, matcher, type(node).__name__, tuple(compiler.captures))


#: Statement patterns parsed ahead, in one batch per patch (`_preparse`), by their text.
_PARSED: dict[str, Sequence[cst.SimpleStatementLine | cst.BaseCompoundStatement]] = {}


def _preparse(sources: Iterable[str]) -> None:
    """Parse the statement patterns `sources` in one libcst parse (each the body of an `if`),
    for `compile_pattern` to take: one parse instead of one per pattern is most of a cold run's
    compile time. A batch that does not parse is left to the patterns one by one."""
    texts = sorted({textwrap.dedent(source).strip() for source in sources} - set(_PARSED))
    if not texts:
        return
    batch = "".join("if _:\n" + textwrap.indent(text, "    ") + "\n" for text in texts)
    try:
        blocks = cst.parse_module(batch).body
    except cst.ParserSyntaxError:
        return
    for text, block in zip(texts, blocks, strict=True):
        statements = cst.ensure_type(cst.ensure_type(block, cst.If).body, cst.IndentedBlock).body
        _PARSED[text] = cast(Sequence[cst.SimpleStatementLine | cst.BaseCompoundStatement], statements)


@functools.cache
def compile_either(sources: tuple[str, ...], expression: bool = False) -> Pattern:
    """Patterns that are alternatives, compiled to one (named by the first)."""
    first, *others = (compile_pattern(s, expression) for s in sources)
    if any(o.captures != first.captures for o in others):
        raise ValueError(f"alternatives of {first.source!r} capture other names")
    if others and (first.parts or any(o.parts for o in others)):  # runs: statement by statement
        if any(len(o.parts) != len(first.parts) for o in others):
            raise ValueError(f"alternatives of {first.source!r} are runs of other lengths")
        parts = tuple(compile_either(tuple(x.parts[i].source for x in (first, *others))) for i in range(len(first.parts)))
        return Pattern(first.source, parts[0].matcher, parts[0].kind, first.captures, parts)
    kind = first.kind if all(o.kind == first.kind for o in others) else ""
    return Pattern(first.source, m.OneOf(first.matcher, *(o.matcher for o in others)), kind,
                   first.captures) if others else first


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
    """The body of every function of the template module, by name (as `patchlib.template_pieces`)."""
    module = _parsed_template(package, filename, source)
    return {
        s.name.value: tuple(cst.ensure_type(s.body, cst.IndentedBlock).body)
        for s in module.body if isinstance(s, cst.FunctionDef)
    }


# -- lines --------------------------------------------------------------------------------------


class _NoRecord:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_RECORD = _NoRecord()


class _LineState(CodegenState):
    """Codegen that notes how many tokens precede each node's first syntactic token (where
    libcst's PositionProvider starts a node: after its comment lines and decorators)."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.at: dict[int, int] = {}

    def record_syntactic_position(  # type: ignore[override]
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> _NoRecord:
        self.at.setdefault(id(node), len(self.tokens))
        return _NO_RECORD


class _Part:
    """One statement of a module's body rendered alone: where its nodes start (tokens before
    them) and where its lines end. It renders the same alone as in its module (at the module's
    level nothing is indented), so a module's unchanged statements keep theirs when a patch
    edits it."""

    def __init__(self, statement: cst.CSTNode, module: cst.Module) -> None:
        self.statement = statement
        state = _LineState(module)
        statement._codegen(state)
        self.at = state.at
        #: Token indices where a line ends, and how many lines end up to there (sorted).
        self.breaks: list[int] = []
        self.counts: list[int] = []
        total = 0
        for i, token in enumerate(state.tokens):
            if "\n" in token:
                total += token.count("\n")
                self.breaks.append(i)
                self.counts.append(total)
        self.total = total

    def offset(self, index: int) -> int:
        """The lines that end before token `index`."""
        k = bisect.bisect_left(self.breaks, index)
        return self.counts[k - 1] if k else 0


#: The statements rendered last (by id, with the statement: another node may have the same id
#: once that one is gone).
_PARTS: dict[int, _Part] = {}
_PARTS_KEPT = 2048
TREE_CACHES.append(_PARTS)


class _Lines:
    """Where the nodes of one module start: its statements rendered one by one, as far as the
    last node wanted so far (what a call rendered answers the later ones)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.parts: list[tuple[int, _Part]] = []  # (the line before the statement's, its part)
        state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
        for line in module.header:
            line._codegen(state)
        self.before = "".join(state.tokens).count("\n")

    def _part(self, statement: cst.CSTNode) -> _Part:
        found = _PARTS.get(id(statement))
        if found is None or found.statement is not statement:
            found = _PARTS[id(statement)] = _Part(statement, self.module)
            while len(_PARTS) > _PARTS_KEPT:
                del _PARTS[next(iter(_PARTS))]
        return found

    def get(self, wanted: set[int]) -> dict[int, int]:
        found: dict[int, int] = {}
        left = set(wanted)
        for before, part in self.parts:
            for key in [k for k in left if k in part.at]:
                found[key] = 1 + before + part.offset(part.at[key])
                left.discard(key)
            if not left:
                return found
        body = self.module.body
        while left and len(self.parts) < len(body):
            before = self.parts[-1][0] + self.parts[-1][1].total if self.parts else self.before
            part = self._part(body[len(self.parts)])
            self.parts.append((before, part))
            for key in [k for k in left if k in part.at]:
                found[key] = 1 + before + part.offset(part.at[key])
                left.discard(key)
        return found


#: The line tables of the modules analysed last (by id, with the module).
_LINES: dict[int, _Lines] = {}
_LINES_KEPT = 16
TREE_CACHES.append(_LINES)


def _lines_of(module: cst.Module) -> _Lines:
    found = _LINES.get(id(module))
    if found is None or found.module is not module:
        found = _LINES[id(module)] = _Lines(module)
        while len(_LINES) > _LINES_KEPT:
            del _LINES[next(iter(_LINES))]
    return found


def lines(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[int, int]:
    """The line of each of `nodes` (by id) in `module`, as `ast` numbers it (a def: its `def`).

    Each statement of the module's body rendered at most once, and only as far as the last
    node wanted (a statement unchanged since an earlier version of the module: not again)."""
    nodes = list(nodes)
    wanted = {id(n) for n in nodes if not isinstance(n, cst.Module)}
    found = {id(n): 1 for n in nodes if isinstance(n, cst.Module)}
    if not wanted:
        return found
    found.update(_lines_of(module).get(wanted))
    missing = wanted - found.keys()
    assert not missing, f"{len(missing)} node(s) not in the module"
    return found


# -- finding ------------------------------------------------------------------------------------


class State(enum.Enum):
    TODO = "to apply"
    OURS = "forkgen's"
    THEIRS = "upstream's"


#: A piece's state as an edit anchor's description names it (`{state}`).
_STATE_WORDS = {State.TODO: "absent", State.OURS: "ours", State.THEIRS: "theirs"}


@dataclass(frozen=True)
class Occurrence:
    """One place an edit goes, or went."""

    edit: Edit
    state: State
    #: TODO: the anchor (for Prepend, the function); otherwise the applied form's first statement.
    node: cst.CSTNode
    #: The anchor's line (for Prepend and for an applied form without it, that form's).
    line: int
    #: For a ReplaceExpression: the statement holding the anchor.
    statement: cst.CSTNode | None = None
    #: The anchor's scope (the module, a class or a function).
    scope: cst.CSTNode | None = None
    captures: Mapping[str, cst.CSTNode] = field(default_factory=dict)
    #: TODO, for a pattern of several statements: the statements after the anchor's first.
    following: tuple[cst.CSTNode, ...] = ()


@dataclass(frozen=True)
class FileAnalysis:
    """Where a patch's edits of one file go, or went."""

    path: str
    #: The path drift messages name (the file the codemod was given, when run alone).
    shown: str
    module: cst.Module
    occurrences: tuple[Occurrence, ...]

    @property
    def todo(self) -> tuple[Occurrence, ...]:
        return tuple(o for o in self.occurrences if o.state is State.TODO)


@dataclass(frozen=True)
class Analysis:
    """A patch's analysis of a tree: every file's, and the outcome."""

    files: tuple[FileAnalysis, ...]
    check: Check


def _count(n: int) -> str:
    return {1: "one", 2: "two", 3: "three"}.get(n, str(n))


class _Scopes:
    """The scopes of one module, each resolved once (exactly one, or drift)."""

    def __init__(self, module: cst.Module, shown: str) -> None:
        self.module = module
        self.shown = shown
        self._found: dict[str, cst.CSTNode] = {"": module}

    def get(self, scope: str, anchor: str | None = None) -> cst.CSTNode:
        """The class or def at dotted path `scope`; drift names `anchor` (default: `scope`)."""
        if scope in self._found:
            return self._found[scope]
        *owners, name = scope.split(".")
        owner = self.get(".".join(owners), anchor or scope)
        found = [s for s in _direct(owner) if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s.name.value == name]
        if len(found) != 1:
            classes = [s for s in found if isinstance(s, cst.ClassDef)]
            # Worded as `patchlib.cst_function`: "exactly one class Layer", "exactly one def __call__".
            kind = "class" if (classes if found else name[:1].isupper()) else "def"
            raise AnchorDrift(self.shown, lines(self.module, [owner])[id(owner)], anchor or scope,
                              f"exactly one {kind} {name}", f"{len(found)}")
        self._found[scope] = found[0]
        return found[0]


def _direct(node: cst.CSTNode) -> Sequence[cst.BaseStatement]:
    if isinstance(node, cst.Module):
        return node.body
    body = cast(cst.FunctionDef | cst.ClassDef, node).body
    return body.body if isinstance(body, cst.IndentedBlock) else ()


def _in_scope(scope: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The statements an anchor of `scope` may be (a function: every one, at any depth)."""
    if isinstance(scope, cst.FunctionDef):
        yield from statements(scope.body)
    else:
        yield from _direct(scope)


def _statement_hits(scope: cst.CSTNode, pattern: Pattern) -> Iterator[
        tuple[cst.CSTNode, Mapping[str, cst.CSTNode], tuple[cst.CSTNode, ...]]]:
    """Each statement of `scope` matching `pattern`, its captures and (a pattern of several
    statements: a run of consecutive ones in one block) the statements after it in the run."""
    if not pattern.parts:
        for statement in _in_scope(scope):
            captures = pattern.match(statement)
            if captures is not None:
                yield statement, captures, ()
        return
    n = len(pattern.following)
    for block in _blocks(scope):
        for i in range(len(block) - n):
            captures = pattern.match_run(block, i)
            if captures is not None:
                yield block[i], captures, tuple(block[i + 1:i + 1 + n])


def _blocks(scope: cst.CSTNode) -> Iterator[Sequence[cst.BaseStatement]]:
    """The statement sequences of `scope` an applied form may sit in."""
    if isinstance(scope, cst.FunctionDef):
        for node in statements(scope.body):
            if isinstance(node, cst.IndentedBlock):
                yield node.body
    else:
        yield _direct(scope)


_BLOCK_FIELDS = frozenset({"body", "orelse", "handlers", "finalbody", "cases", "leading_lines"})


def _expressions(statement: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes of `statement` outside its blocks (a compound statement: its header)."""
    if isinstance(statement, cst.SimpleStatementLine):
        yield from walk(statement)
        return
    for f in fields(statement):
        if f.name in _BLOCK_FIELDS:
            continue
        value = getattr(statement, f.name)
        for child in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(child, cst.CSTNode):
                yield from walk(child)


def _seq_kind(matcher: Any) -> str | None:
    return type(matcher).__name__ if isinstance(matcher, m.BaseMatcherNode) else None


# -- names --------------------------------------------------------------------------------------

#: The fields of a node type that bind names ("bind"), bind and read them ("both"), or read
#: them ("use"); a field left out holds no name (`a.b`: only `a` is read). Other types: read.
_ROLES: dict[type[cst.CSTNode], tuple[tuple[str, str], ...]] = {
    cst.Attribute: (("value", "use"),),
    cst.Arg: (("value", "use"),),
    cst.AssignTarget: (("target", "bind"),),
    cst.AnnAssign: (("target", "bind"), ("annotation", "use"), ("value", "use")),
    cst.AugAssign: (("target", "both"), ("value", "use")),
    cst.For: (("target", "bind"), ("iter", "use"), ("body", "use"), ("orelse", "use")),
    cst.CompFor: (("target", "bind"), ("iter", "use"), ("ifs", "use"), ("inner_for_in", "use")),
    cst.NamedExpr: (("target", "bind"), ("value", "use")),
    cst.AsName: (("name", "bind"),),
    cst.FunctionDef: (("decorators", "use"), ("name", "bind"), ("params", "use"), ("returns", "use"), ("body", "use")),
    cst.ClassDef: (("decorators", "use"), ("name", "bind"), ("bases", "use"), ("keywords", "use"), ("body", "use")),
    cst.Param: (("name", "bind"), ("annotation", "use"), ("default", "use")),
    cst.NameItem: (("name", "bind"),),
    cst.ImportFrom: (("names", "use"),),
}


#: `names_of` of the nodes asked about last, by (id, into_defs), with the node (nodes are
#: immutable, and a module's unchanged statements stay the same nodes when a patch edits it).
_NAMES: dict[tuple[int, bool], tuple[cst.CSTNode, frozenset[str], frozenset[str]]] = {}
_NAMES_KEPT = 4096
TREE_CACHES.append(_NAMES)


def names_of(nodes: Iterable[cst.CSTNode], into_defs: bool = True) -> tuple[set[str], set[str]]:
    """(names read, names bound) in `nodes`, by a simple walk: a name bound anywhere in them
    counts as bound everywhere in them. Without `into_defs`, a def or class binds its name only."""
    used: set[str] = set()
    bound: set[str] = set()
    for node in nodes:
        key = (id(node), into_defs)
        known = _NAMES.get(key)
        if known is None or known[0] is not node:
            node_used, node_bound = _names_of(node, into_defs)
            known = (node, frozenset(node_used), frozenset(node_bound))
            _NAMES[key] = known
            while len(_NAMES) > _NAMES_KEPT:
                del _NAMES[next(iter(_NAMES))]
        used |= known[1]
        bound |= known[2]
    return used, bound


def _names_of(node: cst.CSTNode, into_defs: bool) -> tuple[set[str], set[str]]:
    """`names_of` one node."""
    used: set[str] = set()
    bound: set[str] = set()

    def visit(node: cst.CSTNode, role: str) -> None:
        if isinstance(node, cst.Name):
            if role != "use":
                bound.add(node.value)
            if role != "bind":
                used.add(node.value)
            return
        if role != "use":
            if isinstance(node, (cst.Tuple, cst.List, cst.StarredElement, cst.Element)):
                for child in _subnodes(node):
                    visit(child, role)
                return
            role = "use"  # `a.b = ...`, `a[i] = ...` read `a`
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and not into_defs:
            bound.add(node.name.value)
            return
        if isinstance(node, cst.Lambda):
            # Its parameters are its own: what its body reads of the enclosing scope, its defaults.
            params = [q for q in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params,
                                  node.params.star_arg, node.params.star_kwarg) if isinstance(q, cst.Param)]
            used.update(_names_of(node.body, into_defs)[0] - {q.name.value for q in params})
            for q in params:
                if q.default is not None:
                    visit(q.default, "use")
            return
        if isinstance(node, cst.ImportAlias):
            target: cst.BaseExpression = node.asname.name if node.asname else node.name
            while isinstance(target, cst.Attribute):
                target = target.value
            visit(target, "bind")
            return
        roles = _ROLES.get(type(node))
        if roles is None:
            for child in _subnodes(node):
                visit(child, "use")
            return
        for name, child_role in roles:
            value = getattr(node, name)
            for child in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(child, cst.CSTNode):
                    visit(child, child_role)

    visit(node, "use")
    return used, bound


_SUBNODE_TYPES: dict[type, bool] = {}


def imports_of(nodes: Iterable[cst.CSTNode]) -> list[tuple[int, str]]:
    """The modules the import statements in `nodes` name, at any depth, in order: (the dots of a
    relative import, 0 for an absolute one; the dotted name, "" for `from . import x`)."""
    found: list[tuple[int, str]] = []
    for node in (n for root in nodes for n in walk(root)):
        if isinstance(node, cst.Import):
            found += [(0, get_full_name_for_node_or_raise(alias.name)) for alias in node.names]
        elif isinstance(node, cst.ImportFrom):
            module = "" if node.module is None else get_full_name_for_node_or_raise(node.module)
            found.append((len(node.relative), module))
    return found


def _subnodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of `node` but layout (which holds no name), in no particular order: what
    `names_of` needs of `node.children`, without the libcst visitor that builds those."""
    found = []
    for f in _fields(type(node)):
        value = getattr(node, f.name)
        for child in value if isinstance(value, (list, tuple)) else (value,):
            kind = type(child)
            if kind not in _SUBNODE_TYPES:
                _SUBNODE_TYPES[kind] = issubclass(kind, cst.CSTNode) and not issubclass(kind, _LAYOUT)
            if _SUBNODE_TYPES[kind]:
                found.append(child)
    return found


_BUILTINS = frozenset(dir(builtins))


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


class DeclaredPatch(Patch):
    """A patch written as a declaration (see the module's docstring)."""

    edits: ClassVar[tuple[Edit, ...]]
    details: ClassVar[Details]
    #: Anchors that, all found with their counts, show the release carries the change.
    upstream_patterns: ClassVar[tuple[Anchor, ...]] = ()
    #: Other shapes of the change upstream, each (its detail, its patterns), tried in turn.
    upstream_shapes: ClassVar[tuple[tuple[str, tuple[Anchor, ...]], ...]] = ()
    #: Anchors the patch relies on without editing them: each found its expected count (else
    #: drift), and shown after the edits' among the outcome's anchors.
    relies_on: ClassVar[tuple[Anchor, ...]] = ()
    #: A piece upstream made may stand beside pieces still to apply (they are independent).
    upstream_per_piece: ClassVar[bool] = False
    #: An applied form without forkgen's marker is upstream's (False: drift, upstream's change
    #: having another shape, told by `upstream_patterns`).
    upstream_forms: ClassVar[bool] = True
    #: The pieces carry the `# forkgen: <patch>` marker (False: none, and an applied form is
    #: forkgen's, for a patch upstream never made in its words).
    marked: ClassVar[bool] = True
    #: Names the inserted code reads that the patch binds itself: name -> how.
    names: ClassVar[Mapping[str, str]] = {}
    #: A builtin the inserted code reads, bound at module level of its file, is drift.
    unshadowed_builtins: ClassVar[bool] = False
    #: Reports name the file of every anchor, the patch's first file too (default: only the
    #: others); the edits' anchors even with `file_shown=False`.
    report_paths: ClassVar[bool] = False
    #: The template module beside the declaration, or its text (`template_source`).
    template: ClassVar[str] = "inserted.py"
    template_source: ClassVar[str | None] = None
    #: A declared file -> where some releases have it instead (read, edited and reported there
    #: when the tree has only that one).
    moved: ClassVar[Mapping[str, str]] = {}
    #: The name of the patch's libcst command (default: from the patch's name).
    codemod: ClassVar[str]
    #: The version of its libcst command (default: the patch's).
    codemod_version: ClassVar[str | None] = None
    command: ClassVar[type[DeclaredCommand]]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "edits"):
            return  # a base of declarations, not one
        name = cls.__dict__.get("codemod") or "".join(p.title() for p in cls.name.split("-")) + "Command"
        namespace = {"DESCRIPTION": cls.headers.description, "VERSION": cls.codemod_version or cls.version, "PATCH": cls(),
                     "__module__": cls.__module__, "__qualname__": name}
        cls.codemod = name
        cls.command = cast(type[DeclaredCommand], type(name, (DeclaredCommand,), namespace))
        cls.codemods = (cls.command,)

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        """The escape hatch: a rule too semantic for a pattern (raise `AnchorDrift`). Runs on
        every tree the patch applies to (present or not), after the engine's own checks."""

    def upstream_rule(self, sources: Sources) -> str | None:
        """The escape hatch for the *upstream* outcome: a rule too semantic for patterns that the
        release carries the change, and its detail (None: it does not). Tried after
        `upstream_patterns` and `upstream_shapes`; its outcome reports no anchors."""
        return None

    def explain(self, sources: Sources, drift: AnchorDrift) -> None:
        """The escape hatch for drift: an anchor drifted (or a name check failed) and the tree is
        not upstream's either; may raise a more telling `AnchorDrift` (default: `drift` is raised)."""

    def fill(self, edit: Edit, captures: Mapping[str, cst.CSTNode]) -> Mapping[str, cst.CSTNode]:
        """What takes the place of each metavariable `__name` of `edit`'s piece at one anchor, by
        name (default: what the anchor's pattern captured under that name)."""
        return captures

    def starts_with(self, sources: Sources, scope: str, pattern: str, path: str | None = None) -> bool:
        """Whether the first statement of function `scope` (after a docstring) matches `pattern`."""
        path = self.located(sources, path or self.files[0])
        body = _direct(_Scopes(sources.module(path), path).get(scope))
        first = body[_docstring(body):][:1]
        return bool(first) and compile_pattern(pattern).match(first[0]) is not None

    def matches(self, sources: Sources, anchor: Anchor) -> list[tuple[cst.CSTNode, int]]:
        """Each match of `anchor` in the tree with its line (drift when its scope is not found
        exactly once; none when its file is absent)."""
        path = self.located(sources, self.file_of(anchor))
        if not sources.exists(path):
            return []
        module = sources.module(path)
        scope = _Scopes(module, path).get(anchor.scope)
        if anchor.expression:
            hits = [n for s in _in_scope(scope) if anchor.holds(s) for n in _expressions(s)
                    if anchor.compiled.match(n) is not None]
        else:
            hits = [s for s, _, _ in _statement_hits(scope, anchor.compiled)]
        at = lines(module, hits)
        return [(n, at[id(n)]) for n in hits]

    # -- the pieces

    def compiled(self, edit: Edit) -> _Compiled:
        return _compile_edit(type(self), edit)

    @classmethod
    def pieces(cls) -> Mapping[str, tuple[cst.BaseStatement, ...]]:
        """The code the patch inserts, by piece name (default: the template module's functions)."""
        package = importlib.import_module(cls.__module__).__package__ or cls.__module__
        return template_pieces(package, cls.template, cls.template_source)

    def file_of(self, anchor: Anchor) -> str:
        return anchor.path or self.files[0]

    def located(self, sources: Sources, path: str) -> str:
        """Where the tree has the declared file `path`: there, or at its `moved` place when only that exists."""
        other = self.moved.get(path)
        return other if other and not sources.exists(path) and sources.exists(other) else path

    # -- finding

    def analyze_module(self, module: cst.Module, path: str, shown: str | None = None,
                       declared: str | None = None) -> FileAnalysis:
        """Where the edits of file `path` go in `module`, or went; drift when an anchor is not found
        its expected number of times (`shown`: the path drift messages name; `declared`: the
        declared file `path` stands for, `moved`)."""
        shown = shown or path
        scopes = _Scopes(module, shown)
        found: list[tuple[Edit, cst.CSTNode, _Anchors, _Applied]] = []
        wanted: list[cst.CSTNode] = []
        for edit in self.edits:
            if self.file_of(edit.anchor) == (declared or path):
                scope = scopes.get(edit.anchor.scope)
                anchors, applied = self._find(module, edit, scope)
                found.append((edit, scope, anchors, applied))
                wanted += [scope, *(a[0] for a in anchors), *(form[0] for form, _, _ in applied)]
        at = lines(module, wanted)
        occurrences: list[Occurrence] = []
        for edit, scope, anchors, applied in found:
            within = [{id(n) for s in form for n in walk(s)} for form, _, _ in applied]
            bare = [a for a in anchors if not any(id(a[0]) in ids for ids in within)]
            expected = edit.anchor.count
            if len(bare) + len(applied) != expected:
                # The first of them, as upstream's code has them; else the scope's line.
                line = min([at[id(a[0])] for a in anchors] or [at[id(f[0])] for f, _, _ in applied] or [at[id(scope)]])
                words = edit.words or ("to edit", "edited", "")
                got = f"{len(bare)} {words[0]} and {len(applied)} {words[1]}" if edit.words or applied else f"{len(bare)}"
                source = edit.anchor.title
                raise AnchorDrift(shown, line, source, f"exactly {_count(expected)} `{source}` {edit.anchor.where}", got)
            occurrences += [Occurrence(edit, State.TODO, n, at[id(n)], s, scope, c, f) for n, c, s, f in bare]
            for (form, ours, statement), ids in zip(applied, within, strict=True):
                inner = [a for a in anchors if id(a[0]) in ids]
                line = at[id(inner[0][0])] if inner and not edit.form_line else at[id(form[0])]
                if not ours and not self.upstream_forms:
                    words = edit.words or ("to edit", "edited", "an edited form")
                    raise AnchorDrift(shown, at[id(form[0])], edit.name if isinstance(edit, Prepend) else edit.anchor.title,
                                      f"{words[0]}, or {words[1]} by forkgen", f"{words[2]} without forkgen's marker")
                occurrences.append(Occurrence(edit, State.OURS if ours else State.THEIRS, form[0], line, statement,
                                              scope, inner[0][1] if inner else {}))
        self._helper_names_free(module, shown, found)
        return FileAnalysis(path, shown, module, tuple(occurrences))

    def _find(self, module: cst.Module, edit: Edit, scope: cst.CSTNode) -> tuple[_Anchors, _Applied]:
        """`edit`'s anchors in `scope` and its applied forms there."""
        compiled = self.compiled(edit)
        matchers, kinds = compiled.matchers, compiled.kinds
        tag = marker(self.name) if self.marked else ""
        anchors: _Anchors = []
        applied: _Applied = []
        if isinstance(edit, Prepend):
            if not isinstance(scope, cst.FunctionDef):
                raise ValueError(f"{self.name}: Prepend needs a function, not {edit.anchor.scope}")
            body = _direct(scope)
            form = list[cst.CSTNode](body[_docstring(body):][:len(matchers)])
            if len(form) == len(matchers) and all(m.matches(s, x) for s, x in zip(form, matchers, strict=True)):
                applied.append((list[cst.CSTNode](form), tag in module.code_for_node(form[0]), None))
            else:
                anchors.append((scope, {}, None, ()))
            return anchors, applied
        if isinstance(edit, Helper) and edit.anywhere:
            body = module.body
            matchers = tuple(x for x, t in zip(matchers, compiled.template, strict=True) if not _is_placeholder_line(t))
            k = len(matchers)
            for i in range(len(body) - k + 1):
                form = list[cst.CSTNode](body[i:i + k])
                if all(m.matches(s, x) for s, x in zip(form, matchers, strict=True)):
                    applied.append((form, tag in module.code_for_node(form[0]), None))
            if not applied and isinstance(edit, Append):
                anchors.append((module, {}, None, ()))
            elif not applied:
                anchors += [(s, c, None, f) for s, c, f in _statement_hits(scope, edit.anchor.compiled)]
            return anchors, applied
        pattern = edit.anchor.compiled
        if isinstance(edit, ReplaceExpression):
            for statement in _in_scope(scope):
                if not edit.anchor.holds(statement):
                    continue
                for node in _expressions(statement):
                    captures = pattern.match(node)
                    if captures is not None:
                        anchors.append((node, captures, statement, ()))
                    elif type(node).__name__ == kinds[0] and m.matches(node, matchers[0]):
                        applied.append(([node], tag in module.code_for_node(statement), statement))
            return anchors, applied
        anchors += [(statement, captures, None, following) for statement, captures, following in _statement_hits(scope, pattern)]
        if isinstance(edit, Unwrap):
            # The unwrapped body may be any code: the marker above its first statement tells it.
            applied += [([s], True, None) for block in _blocks(scope) for s in block
                        if any(line.comment and tag in line.comment.value for line in _above(s))]
            return anchors, applied
        k = len(matchers)
        for block in _blocks(scope):
            for i in range(len(block) - k + 1):
                if kinds[0] is not None and type(block[i]).__name__ != kinds[0]:
                    continue
                form = list[cst.CSTNode](block[i:i + k])
                if all(m.matches(s, x) for s, x in zip(form, matchers, strict=True)):
                    # forkgen's when the first statement it inserted carries its marker.
                    mine = [s for s, t in zip(form, compiled.template, strict=True) if not _is_placeholder_line(t)]
                    applied.append((form, bool(mine) and tag in module.code_for_node(mine[0]), None))
        return anchors, applied

    def _helper_names_free(self, module: cst.Module, shown: str,
                           found: Sequence[tuple[Edit, cst.CSTNode, _Anchors, _Applied]]) -> None:
        """Drift when a name a Helper binds is bound at module level other than by that helper."""
        for edit, _, _, applied in found:
            if not isinstance(edit, Helper):
                continue
            own = names_of(self.compiled(edit).piece, into_defs=False)[1]
            template = [t for t in self.compiled(edit).template if not (edit.anywhere and _is_placeholder_line(t))]
            helpers = {id(s) for form, _, _ in applied for s, t in zip(form, template, strict=True)
                       if not _is_placeholder_line(t)}
            for statement in module.body:
                clash = sorted(own & names_of([statement], into_defs=False)[1]) if id(statement) not in helpers else []
                if clash:
                    line = lines(module, [statement])[id(statement)]
                    raise AnchorDrift(shown, line, ", ".join(clash), f"names free for {edit.piece} (forkgen's helper)",
                                      "already bound")

    # -- deciding

    def analyze(self, sources: Sources) -> Analysis:
        """The patch's analysis of the tree (memoised until a patch changes a file)."""
        _preparse_patch(type(self))
        return sources.memoised(f"{self.name}:engine", lambda: self._analyze(sources))

    def _analyze(self, sources: Sources) -> Analysis:
        paths = list(dict.fromkeys(self.file_of(e.anchor) for e in self.edits))
        try:
            located = [(self.located(sources, p), p) for p in paths]
            files = tuple(self.analyze_module(sources.module(q), q, declared=p) for q, p in located)
        except AnchorDrift as drift:
            # The anchors may be gone because upstream made the change.
            upstream = self._upstream(sources)
            if upstream is None:
                self.explain(sources, drift)
                raise
            return Analysis((), Check(Outcome.UPSTREAM, *upstream))
        reports = tuple(self.report(f, o) for f in files for o in f.occurrences if o.edit.anchor.reported)
        if not any(o.state is State.OURS for f in files for o in f.occurrences):
            upstream = self._upstream(sources)
            if upstream is not None:
                return Analysis(files, Check(Outcome.UPSTREAM, *upstream))
        try:
            if self.decide(files) is Outcome.UPSTREAM:
                return Analysis(files, Check(Outcome.UPSTREAM, self.details.upstream, reports))
            for f in files:
                self.check_names(f)
                self.check_imports(sources, f)
            relied = (self._relied_on(sources, anchor) for anchor in self.relies_on)
            reports += tuple(r for r in relied if r is not None)
        except AnchorDrift as drift:
            self.explain(sources, drift)
            raise
        todo = list(dict.fromkeys(o.edit.name for f in files for o in f.todo))
        detail = self.details.apply.format(todo=" and ".join(todo)) if todo else self.details.present
        analysis = Analysis(files, Check(Outcome.APPLIED, detail, reports, present=not todo))
        self.verify(sources, analysis)
        return analysis

    def report(self, analysis: FileAnalysis, occurrence: Occurrence) -> AnchorReport:
        """How `forkgen analyze` shows one occurrence's anchor (`{state}` in its description: the
        piece's state, `_STATE_WORDS`)."""
        edit = occurrence.edit
        name = edit.name if isinstance(edit, Prepend) else edit.anchor.title
        description = (edit.anchor.description or edit.anchor.where).replace("{state}", _STATE_WORDS[occurrence.state])
        return AnchorReport(name, occurrence.line, description,
                            self._shown(edit.anchor, analysis.path) or (analysis.path if self.report_paths else ""))

    def _upstream(self, sources: Sources) -> tuple[str, tuple[AnchorReport, ...]] | None:
        """The detail and reports of the first upstream shape whose patterns are each found their
        expected number of times (`upstream_patterns`, then `upstream_shapes`)."""
        shapes = ((self.details.upstream, self.upstream_patterns),) if self.upstream_patterns else ()
        for detail, patterns in (*shapes, *self.upstream_shapes):
            reports = []
            for anchor in patterns:
                path = self.located(sources, self.file_of(anchor))
                try:
                    hits = self.matches(sources, anchor)
                except AnchorDrift:
                    break
                if not sources.exists(path) or len(hits) != anchor.count:
                    break
                if anchor.reported and hits:
                    reports.append(AnchorReport(anchor.title, hits[0][1], anchor.description or anchor.where,
                                                self._shown(anchor, path)))
            else:
                return detail, tuple(reports)
        rule = self.upstream_rule(sources)
        return None if rule is None else (rule, ())

    def _relied_on(self, sources: Sources, anchor: Anchor) -> AnchorReport | None:
        """The report of an anchor the patch relies on (if shown); drift unless found its count."""
        path = self.located(sources, self.file_of(anchor))
        hits = self.matches(sources, anchor)
        if len(hits) != anchor.count:
            scope = _Scopes(sources.module(path), path).get(anchor.scope)
            line = hits[0][1] if hits else lines(sources.module(path), [scope])[id(scope)]
            raise AnchorDrift(path, line, anchor.title, f"exactly {_count(anchor.count)} `{anchor.title}` {anchor.where}",
                              f"{len(hits)}")
        if not (anchor.reported and hits):
            return None
        description = anchor.description or anchor.where
        captures = anchor.compiled.match(hits[0][0]) if anchor.compiled.captures else None
        if captures:
            module = sources.module(path)
            description = description.format_map({k: module.code_for_node(v) for k, v in captures.items()})
        return AnchorReport(anchor.title, hits[0][1], description, self._shown(anchor, path))

    def _shown(self, anchor: Anchor, path: str) -> str:
        """The file a report names: the anchor's, unless the patch's first (without `report_paths`)
        or `file_shown=False`."""
        return path if (path != self.files[0] or self.report_paths) and anchor.file_shown else ""

    def decide(self, files: Sequence[FileAnalysis]) -> Outcome:
        """UPSTREAM when every piece is upstream's, else APPLIED; drift for a partial presence."""
        found = [(f, o) for f in files for o in f.occurrences]
        todo, ours, theirs = ([(f, o) for f, o in found if o.state is s] for s in (State.TODO, State.OURS, State.THEIRS))
        if theirs and not todo and not ours:
            return Outcome.UPSTREAM
        if todo and (ours or theirs and not self.upstream_per_piece):
            done = ours or theirs
            f, o = todo[0]
            raise AnchorDrift(
                f.shown, o.line, self.name, "all pieces present or none" if ours else "all pieces upstream's or none",
                f"{', '.join(dict.fromkeys(x.edit.name for _, x in done))} {done[0][1].state.value}, "
                f"{', '.join(dict.fromkeys(x.edit.name for _, x in todo))} missing",
            )
        return Outcome.APPLIED

    def check_names(self, analysis: FileAnalysis) -> None:
        """Drift when code to insert reads a name nothing binds where it goes (the function it
        goes into, the module, the builtins, the patch's helpers and declared `names`), or binds
        a name that function already uses."""
        declared = set(self.names) | _BUILTINS
        for edit in self.edits:
            if isinstance(edit, Helper):
                declared |= names_of(self.compiled(edit).piece, into_defs=False)[1]
        module_names: set[str] | None = None
        for o in analysis.todo:
            compiled = self.compiled(o.edit)
            used, bound = names_of([compiled.expression] if compiled.expression is not None else compiled.piece)
            if isinstance(o.edit, Replace):
                bound -= names_of([o.node])[1]  # what the replaced statement bound is the piece's to bind
            free = {n for n in used - bound - declared - {PLACEHOLDER, VALUE} if not _metavariable(n)}
            if self.unshadowed_builtins and (used - bound - set(self.names)) & _BUILTINS:
                module_names = module_names or names_of(analysis.module.body, into_defs=False)[1]
                shadowed = sorted((used - bound - set(self.names)) & _BUILTINS & module_names)
                if shadowed:
                    raise AnchorDrift(analysis.shown, o.line, ", ".join(shadowed),
                                      f"the builtins {o.edit.piece} reads", "bound at module level")
            if isinstance(o.edit, (AddElse, WrapBody, Unwrap)):
                bound -= names_of([o.node])[1]  # rebinding what the anchor statement binds
            if isinstance(o.scope, cst.FunctionDef) and not isinstance(o.edit, Helper):
                free -= names_of([o.scope.params])[1]
                if free or bound:
                    scope_used, scope_bound = names_of([o.scope.body], into_defs=False)
                    free -= scope_bound
                    clash = sorted((bound - set(o.edit.rebinds)) & (scope_used | scope_bound))
                    if clash:
                        raise AnchorDrift(analysis.shown, o.line, f"{o.edit.anchor.scope}: {', '.join(clash)}",
                                          f"names free for {o.edit.piece}", "used")
            if free and module_names is None:
                module_names = names_of(analysis.module.body, into_defs=False)[1]
            missing = sorted(free - (module_names or set()))
            if missing:
                raise AnchorDrift(analysis.shown, o.line, ", ".join(missing),
                                  f"bound where {o.edit.piece} goes ({o.edit.anchor.where} or at module level)",
                                  "not bound")

    def check_imports(self, sources: Sources, analysis: FileAnalysis) -> None:
        """Drift when code to insert imports a module of the tree being patched (one of the package
        the file is in, `keras` for `keras/src/losses/loss.py`; relative imports resolved from the
        file's package) that the tree does not have, as `a/b.py` or `a/b/__init__.py`: checked
        here, not found missing when the wheel runs. `import a.b.c` and `from a.b.c import d`
        need `a.b.c` (`d` may be any name). Every import of the piece counts, at any depth (in
        functions too); other packages' modules (torch, numpy) are not looked for. The line is
        where the piece goes (an appended one: below the module's last line). A tree without
        the file's own package (`__init__.py`: the loose modules of a synthetic tree, a file
        alone) has no packages to look in: nothing is checked."""
        package = analysis.path.split("/")[:-1]
        if not package or not analysis.todo or not sources.exists("/".join([*package, "__init__.py"])):
            return
        for o in analysis.todo:
            for level, name in imports_of(self.compiled(o.edit).piece):
                parts = (package[:len(package) + 1 - level] if level else []) + [p for p in name.split(".") if p]
                if len(parts) < 2 or parts[0] != package[0] or level > len(package):
                    continue  # another package's module, or the tree's root package itself
                wanted = ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"]))
                if not any(sources.exists(path) for path in wanted):
                    # An appended piece goes below the module's last line.
                    line = analysis.module.code.count("\n") + 1 if isinstance(o.edit, Append) else o.line
                    raise AnchorDrift(analysis.shown, line, ".".join(parts),
                                      f"the module {o.edit.piece} imports, {wanted[0]} or {wanted[1]}", "neither")

    # -- the Patch interface

    def check(self, sources: Sources) -> Check:
        return self.analyze(sources).check

    def apply(self, sources: Sources) -> None:
        for analysis in self.analyze(sources).files:
            if analysis.todo:
                command = self.command(CodemodContext(filename=analysis.path), analysis)
                sources.replace(analysis.path, command.transform_module(sources.module(analysis.path)))

    # -- editing

    def plan(self, analysis: FileAnalysis) -> tuple[set[int], dict[int, Callable[[Any], Any]]]:
        """(the ids of the nodes to visit, what to do on leaving each node edited)."""
        plan: dict[int, Callable[[Any], Any]] = {}
        targets: list[cst.CSTNode] = []
        extra: set[int] = set()
        for o in analysis.todo:
            compiled = self.compiled(o.edit)
            if isinstance(o.edit, ReplaceExpression):
                assert o.statement is not None and compiled.expression is not None
                fill = _fill_value if isinstance(o.node, cst.Arg) else _fill
                _add(plan, o.node, functools.partial(fill, compiled.expression, values=self.fill(o.edit, o.captures)))
                header = getattr(compiled.piece[0], "body", None)
                if o.edit.marked and isinstance(header, cst.IndentedBlock):
                    _add(plan, o.statement, functools.partial(_header, header.header))
                elif o.edit.marked:
                    _add(plan, o.statement, functools.partial(_comment, _above(compiled.piece[0])))
                targets.append(o.statement)
                extra |= ancestors(o.statement, o.node)
            elif isinstance(o.edit, Append):
                _add(plan, o.node, functools.partial(_append, compiled.template))
            elif isinstance(o.edit, AddElse):
                assert compiled.branch is not None
                _add(plan, o.node, functools.partial(_attach, compiled.branch))
                targets.append(o.node)
            elif isinstance(o.edit, WrapBody):
                _add(plan, o.node, functools.partial(_rebody, compiled.piece))
                targets.append(o.node)
            elif isinstance(o.edit, Unwrap):
                _add(plan, o.node, functools.partial(_unwrap, compiled.piece))
                targets.append(o.node)
            elif isinstance(o.edit, Prepend):
                block = cast(cst.FunctionDef, o.node).body
                _add(plan, block, functools.partial(_prepend, compiled.template, o.edit.blank_lines, o.edit.keep_comments))
                targets.append(o.node)
                extra.add(id(block))
            else:
                _add(plan, o.node, functools.partial(_splice, compiled.template, o.edit.keep_comments,
                                                     self.fill(o.edit, o.captures), o.following))
                targets.append(o.node)
                for statement in o.following:  # a run: its first statement takes the rest along
                    _add(plan, statement, lambda _: cst.RemovalSentinel.REMOVE)
        return statement_ancestors(analysis.module, targets) | extra, plan


@functools.cache
def _preparse_patch(patch: type[DeclaredPatch]) -> None:
    """Every statement pattern of `patch`'s anchors parsed in one batch (`_preparse`)."""
    shapes = tuple(a for _, anchors in patch.upstream_shapes for a in anchors)
    anchors = (*(e.anchor for e in patch.edits if not isinstance(e, (Prepend, Append))), *patch.relies_on,
               *patch.upstream_patterns, *shapes)
    _preparse(source for a in anchors if not a.expression for source in (a.pattern, *a.alternatives))


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
    `patchlib.fill` does), unless `keep_comments`."""
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


def _explained(patch: DeclaredPatch, alone: Sources, drift: AnchorDrift, path: str, filename: str | None) -> NoReturn:
    """Raise `drift` as the patch's `explain` words it, naming the file the command was given."""
    try:
        patch.explain(alone, drift)
    except AnchorDrift as told:
        drift = told
    if drift.path != path or not filename:
        raise drift
    raise AnchorDrift(filename, drift.line, drift.anchor, drift.expected, drift.found) from None


class DeclaredCommand(VisitorBasedCodemodCommand):
    """The libcst command of a `DeclaredPatch`: its edits of one file, by one transformer that
    visits only the statements leading to them (the rest of the module is kept, not rebuilt).

    It uses no libcst metadata and no matcher decorators, so it skips what those cost: the deep
    copy `Codemod.transform_module` makes for a MetadataWrapper (of a 2,000-line layer.py), and
    `MatcherDecoratableTransformer`'s search for decorated methods on every instance and its
    bookkeeping on every node visited."""

    PATCH: ClassVar[DeclaredPatch]

    def __init__(self, context: CodemodContext, analysis: FileAnalysis | None = None) -> None:
        """`analysis`: the patch's analysis of the module to transform, when the caller made it
        (the series hands over its check's: the module is then not analysed again)."""
        Codemod.__init__(self, context)  # without MatcherDecoratableTransformer's initialisation
        self._given = analysis
        self._path: set[int] = set()
        self._plan: dict[int, Callable[[Any], Any]] = {}

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        analysis = self._given
        if analysis is None or analysis.module is not tree:
            patch, filename = self.PATCH, self.context.filename
            path = next((f for f in patch.files if filename and filename.endswith(f)), patch.files[0])
            # Alone, the module is the tree: upstream's shape of it is no drift either; else the
            # drift is worded as in the series (`explain`), naming the file given.
            alone = Sources(lambda p: tree.code if p == path else None)
            try:
                analysis = patch.analyze_module(tree, path, filename or path)
            except AnchorDrift as drift:
                upstream = patch._upstream(alone)
                if upstream is None:
                    _explained(patch, alone, drift, path, filename)
                raise SkipFile(f"{patch.name}: upstream's already ({upstream[0]})") from None
            # As in the series: upstream's shape, partial presence, names, relied-on anchors, verify.
            upstream = None if any(o.state is State.OURS for o in analysis.occurrences) else patch._upstream(alone)
            try:
                theirs = upstream is not None or patch.decide([analysis]) is Outcome.UPSTREAM
                if not theirs:
                    patch.check_names(analysis)
                    for anchor in (a for a in patch.relies_on if patch.file_of(a) == path):
                        patch._relied_on(alone, anchor)
                    patch.verify(alone, Analysis((analysis,), Check(Outcome.APPLIED, "", (), present=not analysis.todo)))
            except AnchorDrift as drift:
                _explained(patch, alone, drift, path, filename)
            if theirs:
                raise SkipFile(f"{patch.name}: upstream's already ({(upstream or (patch.details.upstream,))[0]})")
        if not analysis.todo:
            raise SkipFile(f"{self.PATCH.name}: applied already")
        self._path, self._plan = self.PATCH.plan(analysis)
        return super().transform_module_impl(tree)

    def transform_module(self, tree: cst.Module) -> cst.Module:
        return self.transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    on_visit_attribute = cst.CSTTransformer.on_visit_attribute
    on_leave_attribute = cst.CSTTransformer.on_leave_attribute

    def on_leave(self, original_node: Any, updated_node: Any) -> Any:
        edit = self._plan.get(id(original_node))
        return updated_node if edit is None else edit(updated_node)
