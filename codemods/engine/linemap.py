"""Line numbers of nodes, from codegen of the module's statements, each rendered once (`lines`)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import libcst as cst
from libcst._nodes.internal import CodegenState

from codemods.engine.patch import TREE_CACHES

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
