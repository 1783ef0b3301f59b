"""Codemod: `get_global_attribute` (keras/src/backend/common/global_state.py, every release
3.0.0-3.15.1 and keras-nightly 3.16.0.dev2026102704) reads a plain `str` name of the
`threading.local` tracker from the calling thread's dict of the local, instead of
`getattr(GLOBAL_STATE_TRACKER, name, None)`, which raises and swallows an AttributeError for
every name that is not set (most of them, in eager code).

Two pieces from `inserted.py`: the local type and the frozenset of the names it answers itself,
at module level right after the leading imports (they need `import threading`), and the guarded
look-up that takes the place of upstream's statement, which stays, node for node, in its `else`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import (
    PLACEHOLDER,
    AnchorDrift,
    AnchorReport,
    BackportCommand,
    ancestors,
    ast_function,
    ast_lines,
    cst_function,
    fill,
    find,
    has_marker,
    marker,
    template_pieces,
    walk,
)

NAME = "global-state-lookup-fast-path"
GLOBAL_STATE_PY = "keras/src/backend/common/global_state.py"
FUNCTION = "get_global_attribute"
TRACKER = "GLOBAL_STATE_TRACKER"
LOCAL_TYPE = "_forkgen_local_type"
LOCAL_NAMES = "_forkgen_local_names"
#: The local variable the inserted look-up reads the tracker into (once, as upstream does).
ALIAS = "tracker"
ANCHOR = f"attr = getattr({TRACKER}, name, None)"
IMPORT_ANCHOR = "import threading"
UPSTREAM_ANCHOR = f"{TRACKER}.__dict__.get(name)"


def _arg(value: m.BaseExpression) -> m.Arg:
    return m.Arg(value, keyword=None, star="")


#: `attr = getattr(GLOBAL_STATE_TRACKER, name, None)`: the first statement of
#: `get_global_attribute` in every release 3.0.0-3.15.1 and in keras-nightly 3.16.0.dev2026102704.
LOOKUP = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[m.AssignTarget(m.Name("attr"))],
            value=m.Call(func=m.Name("getattr"), args=[_arg(m.Name(TRACKER)), _arg(m.Name("name")), _arg(m.Name("None"))]),
        )
    ]
)
#: `import threading` at module level (the tracker is `threading.local()`; clear_session makes a new one).
IMPORT_THREADING = m.SimpleStatementLine(body=[m.Import(names=[m.ImportAlias(name=m.Name("threading"), asname=None)])])
PLACEHOLDER_LINE = m.SimpleStatementLine(body=[m.Expr(m.Name(PLACEHOLDER))])


def _dict_get(tracker: m.Name) -> m.Call:
    """`<tracker>.__dict__.get(name, ...)` or `vars(<tracker>).get(name, ...)`: how an upstream
    fix reading the per-thread dict would plausibly look."""
    mapping = m.Attribute(value=tracker, attr=m.Name("__dict__")) | m.Call(func=m.Name("vars"), args=[_arg(tracker)])
    return m.Call(func=m.Attribute(value=mapping, attr=m.Name("get")), args=[_arg(m.Name("name")), m.ZeroOrMore()])


def _assigns(name: str) -> m.SimpleStatementLine:
    return m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])])


@functools.cache
def pieces() -> tuple[tuple[cst.SimpleStatementLine, ...], tuple[cst.SimpleStatementLine, cst.If]]:
    """(the two module-level statements, the look-up: `tracker = ...` and the guarded `if`)."""
    found = template_pieces(__package__ or "codemods.global_state_lookup_fast_path", "inserted.py")
    module_level = tuple(cst.ensure_type(s, cst.SimpleStatementLine) for s in found["module_level"])
    lookup = found["get_global_attribute_lookup"]
    assert [len(module_level), len(lookup)] == [2, 2], "inserted.py: two module-level statements, two for the look-up"
    assert m.matches(module_level[0], _assigns(LOCAL_TYPE)) and m.matches(module_level[1], _assigns(LOCAL_NAMES))
    assign, branch = cst.ensure_type(lookup[0], cst.SimpleStatementLine), cst.ensure_type(lookup[1], cst.If)
    assert m.matches(assign, _assigns(ALIAS)), "inserted.py: the look-up starts with `tracker = GLOBAL_STATE_TRACKER`"
    assert sum(m.matches(n, PLACEHOLDER_LINE) for n in walk(branch)) == 1, "inserted.py: one UPSTREAM in the if"
    for first in (module_level[0], assign):
        assert any(line.comment and line.comment.value.startswith(marker(NAME)) for line in first.leading_lines)
    return module_level, (assign, branch)


def replacement(upstream: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
    """The look-up with upstream's statement in its `else`; upstream's comment lines above
    the statement move above the look-up."""
    _, (assign, branch) = pieces()
    return [
        assign.with_changes(leading_lines=[*upstream.leading_lines, *assign.leading_lines]),
        fill(branch, upstream.with_changes(leading_lines=[])),
    ]


@dataclass(frozen=True)
class Site:
    """`get_global_attribute` and `import threading` in one tree."""

    path: str
    #: The line of upstream's statement (or of the upstream dict look-up, or of the function).
    line: int
    import_line: int
    function: cst.FunctionDef
    #: Upstream's statement, when the patch can go in.
    lookup: cst.SimpleStatementLine | None
    #: The index in the module's body after which the module-level pieces go.
    after_imports: int
    ours: bool = False
    upstream: bool = False


def _leading_imports(body: Sequence[cst.BaseStatement]) -> int:
    """The number of statements, from the top, that are imports (after a docstring)."""
    index = 0
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())])):
        index = 1
    imports = m.SimpleStatementLine(body=[m.OneOf(m.Import(), m.ImportFrom()), m.ZeroOrMore(m.Import() | m.ImportFrom())])
    while index < len(body) and m.matches(body[index], imports):
        index += 1
    return index


def _is_tracker_getattr(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and bool(node.args)
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == TRACKER
    )


def _is_dict_get(node: ast.AST) -> bool:
    """`<x>.__dict__.get(...)` or `vars(<x>).get(...)` (for the line of an upstream look-up)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
        return False
    mapping = node.func.value
    return (isinstance(mapping, ast.Attribute) and mapping.attr == "__dict__") or (
        isinstance(mapping, ast.Call) and isinstance(mapping.func, ast.Name) and mapping.func.id == "vars"
    )


def analyze(module: cst.Module, tree: ast.Module, path: str = GLOBAL_STATE_PY) -> Site:
    """Where the look-up goes and whether it is in, or upstream's; else drift."""
    function = cst_function(module, FUNCTION, path, tree)
    node = ast_function(tree, FUNCTION)
    function_line = node.lineno if node else 1
    getattr_lines = ast_lines(node, _is_tracker_getattr) if node else []
    line = getattr_lines[0] if getattr_lines else function_line

    import_lines = [
        s.lineno for s in tree.body
        if isinstance(s, ast.Import) and [(a.name, a.asname) for a in s.names] == [("threading", None)]
    ]
    imports = [i for i, s in enumerate(module.body) if m.matches(s, IMPORT_THREADING)]
    if len(imports) != 1:
        raise AnchorDrift(
            path, import_lines[1] if len(import_lines) > 1 else 1, IMPORT_ANCHOR,
            "exactly one `import threading` at module level", f"{len(imports)}",
        )
    import_line = import_lines[0] if import_lines else 1
    after_imports = _leading_imports(module.body)
    if imports[0] >= after_imports:
        raise AnchorDrift(path, import_line, IMPORT_ANCHOR, "among the module's leading imports", "it after other code")

    lookups = [cst.ensure_type(n, cst.SimpleStatementLine) for n in find(function, LOOKUP)]
    defined = [s for s in module.body if m.matches(s, _assigns(LOCAL_TYPE) | _assigns(LOCAL_NAMES))]

    if has_marker(function, module, NAME):
        if len(lookups) != 1 or len(defined) != 2:
            raise AnchorDrift(
                path, line, f"{FUNCTION} / {LOCAL_TYPE} / {LOCAL_NAMES}",
                "forkgen's look-up around upstream's statement and its 2 module-level names",
                f"{len(lookups)} upstream statement(s) and {len(defined)} of the 2 names",
            )
        return Site(path, line, import_line, function, None, after_imports, ours=True)
    if defined:
        raise AnchorDrift(path, line, f"{LOCAL_TYPE} / {LOCAL_NAMES}", "no such name before the patch", "already defined")

    # The tracker, or a local name bound to it (`tracker = GLOBAL_STATE_TRACKER`).
    names = {TRACKER} | {
        cst.ensure_type(cst.ensure_type(n, cst.Assign).targets[0].target, cst.Name).value
        for n in find(function, m.Assign(targets=[m.AssignTarget(m.Name())], value=m.Name(TRACKER)))
    }
    if find(function, _dict_get(m.Name(m.MatchIfTrue(lambda value: value in names)))):
        dict_lines = ast_lines(node, _is_dict_get) if node else []
        where = dict_lines[0] if dict_lines else function_line
        return Site(path, where, import_line, function, None, after_imports, upstream=True)

    if len(lookups) != 1:
        raise AnchorDrift(
            path, line, ANCHOR, f"exactly one `{ANCHOR}` statement in {FUNCTION}", f"{len(lookups)}",
        )
    if find(function, m.Name(ALIAS)):
        raise AnchorDrift(path, line, f"{FUNCTION}: {ALIAS}", f"no name `{ALIAS}` in {FUNCTION}", "it used there")
    return Site(path, line, import_line, function, lookups[0], after_imports)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    if site.upstream:
        return (AnchorReport(UPSTREAM_ANCHOR, site.line, f"{FUNCTION} reads the per-thread dict (upstream)"),)
    return (
        AnchorReport(ANCHOR, site.line, "a plain str name is read from the calling thread's dict of the local"),
        AnchorReport(IMPORT_ANCHOR, site.import_line, f"{LOCAL_TYPE} and {LOCAL_NAMES} go after the imports"),
    )


class GlobalStateLookupFastPathCommand(BackportCommand):
    DESCRIPTION: str = "get_global_attribute reads a plain name from the thread-local's per-thread dict."
    VERSION = "1"

    def __init__(self, context: CodemodContext, tree: ast.Module | None = None) -> None:
        """`tree`: the `ast` of the module to transform, when the caller has it already."""
        super().__init__(context)
        self._tree = tree
        self._lookup: int | None = None
        self._after_imports = 0
        self._path: set[int] = set()

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = analyze(tree, self._tree or ast.parse(tree.code), self.context.filename or GLOBAL_STATE_PY)
        if site.ours:
            raise SkipFile("the global-state look-up fast path is in already")
        if site.lookup is None:
            raise SkipFile("get_global_attribute reads the per-thread dict already (upstream)")
        self._lookup = id(site.lookup)
        self._after_imports = site.after_imports
        # Visit only the nodes leading to upstream's statement: the rest is kept as it is.
        self._path = {id(tree)} | ancestors(site.function, site.lookup)
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if id(original_node) != self._lookup:
            return updated_node
        return cst.FlattenSentinel(replacement(updated_node))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        (local_type, local_names), _ = pieces()
        first = local_type.with_changes(leading_lines=[cst.EmptyLine(), *local_type.leading_lines])
        body = list(updated_node.body)
        body[self._after_imports:self._after_imports] = [first, local_names]
        return updated_node.with_changes(body=body)
