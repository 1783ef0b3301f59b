"""Codemods: `Operation.__call__` and `Cond.__call__` describe their arguments in an error only
when the call raised (keras-team/keras#23183, merged as 75cd954658, in keras-nightly).

Keras 3.0.0-3.15.1, with traceback filtering on (the default), wrap the function they are about
to call on every call: `traceback_utils.inject_argument_info_in_traceback` imports
`tensorflow.errors` (on TF), builds a closure, copies `fn`'s metadata onto it with
`functools.wraps` and re-checks the filtering flag, ~3 us per op call. The patch calls the
function directly inside `try:` and, only in `except`, calls a new helper of
`traceback_utils`, `raise_with_argument_info`: the wrapper's error path moved into a function,
so that what is raised is what the wrapper raises (exact mirror; nightly's helper differs, see
the package docstring). `inject_argument_info_in_traceback` itself stays, unchanged.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import (
    AnchorDrift,
    AnchorReport,
    BackportCommand,
    ast_function,
    cst_function,
    fill,
    has_marker,
    template_pieces,
)

NAME = "operation-call-error-info"
TRACEBACK_UTILS_PY = "keras/src/utils/traceback_utils.py"
OPERATION_PY = "keras/src/ops/operation.py"
CORE_PY = "keras/src/ops/core.py"
#: The two methods that wrap their call_fn, by file (same in Keras 3.0.0-3.15.1).
SITES = {OPERATION_PY: "Operation.__call__", CORE_PY: "Cond.__call__"}
#: Upstream's wrapper, which stays; the helper goes right after it.
WRAPPER = "inject_argument_info_in_traceback"
#: The module-level function the helper formats each argument with (3.0.0-3.15.1).
FORMATTER = "format_argument_value"
HELPER = "raise_with_argument_info"
#: keras-nightly's error-path helper (#23183 as merged): its presence is the change upstream.
NIGHTLY_HELPER = "inject_argument_info_in_error"
OBJECT_NAME = "OBJECT_NAME"
TEMPLATE = "inserted.py"


def _traceback_utils_call(attr: str) -> m.Call:
    """`traceback_utils.<attr>(...)`: the modules call it through that module name (all 3.x)."""
    return m.Call(func=m.Attribute(value=m.Name("traceback_utils"), attr=m.Name(attr)))


#: `call_fn = traceback_utils.inject_argument_info_in_traceback(call_fn, object_name=...)`.
#: Exactly these two arguments: the helper gets the same `fn` and `object_name`.
WRAP = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[m.AssignTarget(m.Name("call_fn"))],
            value=m.Call(
                func=m.Attribute(value=m.Name("traceback_utils"), attr=m.Name(WRAPPER)),
                args=[
                    m.Arg(value=m.Name("call_fn"), keyword=None, star=""),
                    m.Arg(keyword=m.Name("object_name"), star=""),
                ],
            ),
        )
    ]
)
#: `return call_fn(*args, **kwargs)`: the call the wrapper guarded, kept as the `try` body.
CALL = m.SimpleStatementLine(
    body=[
        m.Return(
            value=m.Call(
                func=m.Name("call_fn"),
                args=[m.Arg(value=m.Name("args"), star="*"), m.Arg(value=m.Name("kwargs"), star="**")],
            )
        )
    ]
)
#: `if traceback_utils.is_traceback_filtering_enabled():`. The wrapper re-checks the flag before
#: calling and goes plain when it is off; the `try` has no such check, so it must sit in the
#: branch where the flag is known to be on (as in every 3.x release).
FILTERING = m.If(test=_traceback_utils_call("is_traceback_filtering_enabled"))
#: Ours: `try: return call_fn(*args, **kwargs)` / `except Exception as e:` calling the helper.
OURS = m.Try(
    body=m.IndentedBlock(body=[CALL]),
    handlers=[
        m.ExceptHandler(
            type=m.Name("Exception"),
            name=m.AsName(name=m.Name("e")),
            body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Expr(_traceback_utils_call(HELPER))])]),
        )
    ],
    orelse=None,
    finalbody=None,
)


@functools.cache
def pieces() -> dict[str, cst.BaseStatement]:
    """The template's pieces: the helper is its module-level `def` itself (so that its
    docstring is indented for module level), the call site the body of `call_site`."""
    from importlib import resources

    package = __package__ or "codemods.operation_call_error_info"
    text = resources.files(package).joinpath(TEMPLATE).read_text(encoding="utf-8")
    helper = [s for s in cst.parse_module(text).body if m.matches(s, m.FunctionDef(name=m.Name(HELPER)))]
    # Its leading lines are the template's (the ruff directive above it): not inserted.
    return {"helper": helper[0].with_changes(leading_lines=[]), "call_site": template_pieces(package, TEMPLATE)["call_site"][0]}


@dataclass(frozen=True)
class Site:
    """One of the two `__call__` methods, and the shape its call takes."""

    path: str
    qualname: str
    #: "fresh" (3.x: wraps every call), "ours" (forkgen's try) or "upstream" (nightly's try).
    shape: str
    line: int
    #: With "fresh": the `if` whose body holds the pair, and the pair.
    branch: cst.If | None = None
    #: The nodes from the method down to the `if`, both included.
    chain: tuple[cst.CSTNode, ...] = ()
    wrap: cst.SimpleStatementLine | None = None
    call: cst.SimpleStatementLine | None = None


@dataclass(frozen=True)
class Helper:
    """Where the helper goes in traceback_utils.py, or where it is."""

    line: int
    #: The module-level `def inject_argument_info_in_traceback` (None in nightly: deleted).
    wrapper: cst.FunctionDef | None
    #: Forkgen's helper, when present.
    present: bool


def _line(tree: ast.Module, qualname: str, attr: str) -> int:
    """The line of the first `traceback_utils.<attr>` in `qualname`, else of its `def`."""
    function = ast_function(tree, qualname)
    if function is None:
        return 1
    lines = sorted(n.lineno for n in _uses(function, attr))
    return lines[0] if lines else function.lineno


def _uses(node: ast.AST, attr: str) -> list[ast.Attribute]:
    """Every `traceback_utils.<attr>` under `node` (the `ast` walk is cheap; libcst's is not)."""
    return [
        n for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and n.attr == attr
        and isinstance(n.value, ast.Name) and n.value.id == "traceback_utils"
    ]


Chain = tuple[cst.CSTNode, ...]


def _statements(block: cst.BaseSuite, chain: Chain) -> Iterator[tuple[cst.BaseStatement, Chain]]:
    """Every statement of `block` and of the compound statements in it, with the nodes from
    the method down to it (what a visit passes through); nested `def`/`class` not entered."""
    if not isinstance(block, cst.IndentedBlock):
        return
    for statement in block.body:
        here = (*chain, block, statement)
        yield statement, here
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        for part in ("body", "orelse", "handlers", "finalbody"):
            value = getattr(statement, part, None)
            for sub in value if isinstance(value, tuple | list) else [value]:
                if isinstance(sub, cst.IndentedBlock):
                    yield from _statements(sub, here)
                elif isinstance(sub, cst.If):  # `elif`
                    yield sub, (*here, sub)
                    yield from _statements(sub.body, (*here, sub))
                elif isinstance(sub, (cst.Else, cst.Finally, cst.ExceptHandler)):
                    yield from _statements(sub.body, (*here, sub))


def analyze_site(module: cst.Module, tree: ast.Module, path: str) -> Site:
    """The shape of the call in `SITES[path]`, or AnchorDrift."""
    qualname = SITES[path]
    method = cst_function(module, qualname, path, tree)
    method_ast = ast_function(tree, qualname) or ast.Module([], [])
    statements = list(_statements(method.body, (method,)))
    wraps = _uses(method_ast, WRAPPER)
    if not wraps:
        ours = [n for n, _ in statements if m.matches(n, OURS) and has_marker(n, module, NAME)]
        if len(ours) == 1:
            return Site(path, qualname, "ours", _line(tree, qualname, HELPER))
        # keras-nightly (#23183 as merged): the call in `try:`, and `except Exception as e:`
        # hands `e` to `traceback_utils.inject_argument_info_in_error`.
        nightly = [
            n for n in ast.walk(method_ast)
            if isinstance(n, ast.Try) and any(_uses(h, NIGHTLY_HELPER) for h in n.handlers)
        ]
        if len(nightly) == 1 and not ours:
            return Site(path, qualname, "upstream", _line(tree, qualname, NIGHTLY_HELPER))
        raise AnchorDrift(
            path, _line(tree, qualname, HELPER), f"{qualname}: traceback_utils.{WRAPPER}",
            f"one `call_fn = traceback_utils.{WRAPPER}(call_fn, object_name=...)` in {qualname}",
            f"none, and {len(ours)} forkgen try and {len(nightly)} try calling {NIGHTLY_HELPER}",
        )
    pairs = []
    for branch, chain in statements:
        if not m.matches(branch, FILTERING):
            continue
        body = cst.ensure_type(cst.ensure_type(branch, cst.If).body, cst.IndentedBlock).body
        for first, second in zip(body, body[1:], strict=False):
            if m.matches(first, WRAP) and m.matches(second, CALL):
                pairs.append((cst.ensure_type(branch, cst.If), chain, first, second))
    line = _line(tree, qualname, WRAPPER)
    if len(wraps) != 1 or len(pairs) != 1:
        raise AnchorDrift(
            path, line, f"{qualname}: traceback_utils.{WRAPPER}",
            f"exactly one `call_fn = traceback_utils.{WRAPPER}(call_fn, object_name=...)` followed by "
            "`return call_fn(*args, **kwargs)` in `if traceback_utils.is_traceback_filtering_enabled():`",
            f"{len(wraps)} call(s) to {WRAPPER}, {len(pairs)} in that shape",
        )
    branch, chain, wrap, call = pairs[0]
    return Site(
        path, qualname, "fresh", line, branch, chain,
        cst.ensure_type(wrap, cst.SimpleStatementLine), cst.ensure_type(call, cst.SimpleStatementLine),
    )


def _module_functions(module: cst.Module, name: str) -> list[cst.FunctionDef]:
    return [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]


def analyze_helper(module: cst.Module, tree: ast.Module, path: str = TRACEBACK_UTILS_PY) -> Helper:
    """Where the helper goes (after the wrapper), or that forkgen's helper is there."""
    helpers = _module_functions(module, HELPER)
    wrappers = _module_functions(module, WRAPPER)
    formatters = _module_functions(module, FORMATTER)
    line = getattr(ast_function(tree, HELPER) or ast_function(tree, WRAPPER), "lineno", 1)
    if len(helpers) > 1 or (helpers and not has_marker(helpers[0], module, NAME)):
        raise AnchorDrift(path, line, f"def {HELPER}", f"no {HELPER}, or forkgen's", f"{len(helpers)} not ours")
    if len(wrappers) != 1 or len(formatters) != 1:
        # The helper mirrors the wrapper's error path and formats with the same function.
        raise AnchorDrift(
            path, line, f"def {WRAPPER}", f"exactly one module-level def {WRAPPER} and def {FORMATTER}",
            f"{len(wrappers)} and {len(formatters)}",
        )
    return Helper(line, wrappers[0], bool(helpers))


def anchors(helper: Helper | None, sites: list[Site]) -> tuple[AnchorReport, ...]:
    found = [AnchorReport(f"def {WRAPPER}", helper.line, f"{HELPER} goes after it", TRACEBACK_UTILS_PY)] if helper else []
    found += [AnchorReport(f"{s.qualname}: {WRAPPER}", s.line, f"call in try ({s.shape})", s.path) for s in sites]
    return tuple(found)


class AddErrorPathHelperCommand(BackportCommand):
    DESCRIPTION: str = f"Add traceback_utils.{HELPER}, the error path of {WRAPPER} as a function."
    VERSION = "1"

    def __init__(self, context: CodemodContext, helper: Helper | None = None) -> None:
        """`helper`: `analyze_helper` of the module to transform, when the caller made it (the
        series hands over its check's: the module is neither rendered nor parsed again)."""
        super().__init__(context)
        self._given = helper

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        path = self.context.filename or TRACEBACK_UTILS_PY
        helper = self._given or analyze_helper(tree, ast.parse(tree.code), path)
        if helper.present:
            raise SkipFile(f"{HELPER} is there already")
        assert helper.wrapper is not None
        new = cst.ensure_type(pieces()["helper"], cst.FunctionDef).with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        body = list(tree.body)
        at = next(i for i, s in enumerate(body) if s is helper.wrapper) + 1
        return tree.with_changes(body=[*body[:at], new, *body[at:]])


class _PutObjectName(cst.CSTTransformer):
    """Puts upstream's `object_name=` expression in place of the template's `OBJECT_NAME`."""

    def __init__(self, value: cst.BaseExpression) -> None:
        super().__init__()
        self.value = value

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.value if original_node.value == OBJECT_NAME else updated_node


def call_site(wrap: cst.SimpleStatementLine, call: cst.SimpleStatementLine) -> cst.Try:
    """The `try` replacing the pair: upstream's `return` inside, its object_name in `except`."""
    assign = cst.ensure_type(wrap.body[0], cst.Assign)
    object_name = cst.ensure_type(assign.value, cst.Call).args[1].value
    piece = fill(pieces()["call_site"], call)
    filled = cst.ensure_type(piece.visit(_PutObjectName(object_name)), cst.Try)
    # Comment lines above the assignment (Cond's "# Wrap self.call ...") stay above the try.
    return filled.with_changes(leading_lines=[*wrap.leading_lines, *filled.leading_lines])


class CallErrorPathCommand(BackportCommand):
    DESCRIPTION: str = "Call call_fn in try; describe its arguments only in except."
    VERSION = "1"

    def __init__(self, context: CodemodContext, lines: ast.Module | None = None, site: Site | None = None) -> None:
        """`lines`: the `ast` of the same text, when the caller has it (line numbers only);
        `site`: `analyze_site` of the module to transform, when the caller made it (the series
        hands over its check's: the module is not analysed twice)."""
        super().__init__(context)
        self._lines = lines
        self._given = site
        self._site: Site | None = None
        self._path: set[int] = set()


    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        path = self.context.filename or OPERATION_PY
        if path not in SITES:
            raise SkipFile(f"{path} has no call site of this patch")
        site = self._given or analyze_site(tree, self._lines or ast.parse(tree.code), path)
        if site.shape != "fresh":
            raise SkipFile(f"{site.qualname} calls in try already ({site.shape})")
        assert site.branch is not None
        self._site = site
        # Only the nodes from the module down to the `if` are rebuilt: visiting the rest of the
        # module (and of the method) would cost more than the whole analysis.
        owner = next(s for s in tree.body if m.matches(s, m.ClassDef(name=m.Name(site.qualname.split(".")[0]))))
        self._path = {id(n) for n in (tree, owner, owner.body, *site.chain)}
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Descend only towards the `if`; `leave_If` still runs for it (libcst calls on_leave
        # for every node it reaches), and its children are then upstream's nodes themselves.
        return id(node) in self._path and node is not (self._site and self._site.branch)

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        site = self._site
        if site is None or original_node is not site.branch:
            return updated_node
        assert site.wrap is not None and site.call is not None
        block = cst.ensure_type(updated_node.body, cst.IndentedBlock)
        at = list(block.body).index(site.wrap)
        body = [*block.body[:at], call_site(site.wrap, site.call), *block.body[at + 2 :]]
        return updated_node.with_changes(body=block.with_changes(body=body))
