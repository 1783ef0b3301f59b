"""What an analysis finds: each anchor's occurrence and its state, per file and per patch."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, cast

import libcst as cst
import libcst.matchers as m

from codemods.engine.edits import Edit
from codemods.engine.linemap import lines
from codemods.engine.patch import AnchorDrift, Check
from codemods.engine.pattern import Pattern
from codemods.engine.tree import statements, walk

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
            # Worded as before the engine: "exactly one class Layer", "exactly one def __call__".
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
