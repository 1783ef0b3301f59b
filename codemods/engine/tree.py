"""Helpers for reading trees: the `# forkgen: <patch>` marker, walks over nodes and statements."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import libcst as cst

# -- helpers for the patches' analyses ----------------------------------------------------------


#: The comment every piece a backport inserts carries, so that its presence is recognised
#: (and told apart from the same change made upstream): `# forkgen: <patch name>`.
MARKER = "# forkgen: {name}"


def marker(name: str) -> str:
    return MARKER.format(name=name)


def walk(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node of `root`'s subtree, parents first (read-only: nothing is rebuilt)."""
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


#: The nodes that hold statements (`statements`, `statement_ancestors`), and their fields
#: that do, in source order.
_STATEMENT_HOLDERS = (
    cst.Module,
    cst.BaseCompoundStatement,
    cst.IndentedBlock,
    cst.Else,
    cst.Finally,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.MatchCase,
)
_STATEMENT_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")
_STATEMENT_NODES = (*_STATEMENT_HOLDERS, cst.SimpleStatementLine)


def _statement_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    children: list[cst.CSTNode] = []
    if isinstance(node, _STATEMENT_HOLDERS):
        for name in _STATEMENT_FIELDS:
            value = getattr(node, name, None)
            if isinstance(value, cst.CSTNode):
                if isinstance(value, _STATEMENT_NODES):
                    children.append(value)
            elif value is not None:
                children.extend(child for child in value if isinstance(child, _STATEMENT_NODES))
    return children


def statements(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The statements of `root`'s subtree and the nodes holding them (blocks, `else`s,
    handlers), parents first, in source order: the nodes of `walk(root)` of those kinds, in
    the same order, without walking (and so rebuilding) any expression."""
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(_statement_children(node)))


def statement_ancestors(root: cst.CSTNode, targets: Iterable[cst.CSTNode]) -> set[int]:
    """The ids of each statement of `targets` and of every node from `root` down to it.

    Only statements and the nodes holding them are walked (no expression), so it is cheap
    even on a whole module; a target not found that way adds nothing. A codemod that rewrites
    only `targets` can visit just these nodes (`on_visit`) and keep every other subtree as it is.
    """
    wanted = {id(t) for t in targets}
    parents: dict[int, int] = {}
    found: set[int] = set()
    stack: list[cst.CSTNode] = [root]
    while stack and wanted:
        node = stack.pop()
        if id(node) in wanted:
            wanted.discard(id(node))
            # Up from the target to the root, through the parents recorded on the way down.
            at: int | None = id(node)
            while at is not None and at not in found:
                found.add(at)
                at = parents.get(at)
        for child in _statement_children(node):
            parents[id(child)] = id(node)
            stack.append(child)
    return found


def ancestors(root: cst.CSTNode, target: cst.CSTNode) -> set[int]:
    """The ids of `target` and of every node from `root` down to it (empty if not under it)."""
    stack: list[tuple[cst.CSTNode, tuple[int, ...]]] = [(root, (id(root),))]
    while stack:
        node, path = stack.pop()
        if node is target:
            return set(path)
        stack.extend((child, (*path, id(child))) for child in node.children)
    return set()


PLACEHOLDER = "UPSTREAM"


def block(statement: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of the indented block of `statement`, an `if`."""
    return list(cst.ensure_type(cst.ensure_type(statement, cst.If).body, cst.IndentedBlock).body)
