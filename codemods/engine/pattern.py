"""Patterns: Python source with wildcards, compiled once to libcst matchers (`compile_pattern`)."""

from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

import libcst as cst
import libcst.matchers as m

from codemods.engine.tree import PLACEHOLDER

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
