"""Codemod: two fast paths of a Functional model's call (keras/src/ops/symbolic_arguments.py and
keras/src/models/functional.py), each inserted from `inserted.py` where its anchor is.

(a) `SymbolicArguments.fill_in`: after upstream's single-tensor fast path (the one statement
`if self._single_positional_tensor is not None: ...`), a node whose arguments are a plain tuple
of exact `KerasTensor`s and no keyword arguments returns what `self.convert(switch_fn)` returns.
(b) `Functional._standardize_inputs`: at the top, a model whose input structure is one exact
`backend.KerasTensor` called with a value that is no list, no dict and not nested returns
`self._adjust_input_rank(self._convert_inputs_to_tensors([inputs]))`.

The analysis checks, with exact counts, the statements the equivalence rests on (upstream's
`convert`, its `switch_fn`, the fallback `return self.convert(switch_fn)`, and in
`_standardize_inputs` the tail `flat_inputs = tree.flatten(inputs)` / `_convert_inputs_to_tensors`
/ `return self._adjust_input_rank(flat_inputs)`) and that the guards' names are bound as expected.
No upstream shape is known: only forkgen's marker counts as present.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import (
    AnchorDrift,
    AnchorReport,
    BackportCommand,
    ancestors,
    ast_function,
    cst_function,
    has_marker,
    marker,
    template_pieces,
)

def bindings(nodes: Iterable[ast.AST], descend: bool) -> Iterator[tuple[str, ast.AST]]:
    """(name, node) for every name the code of `nodes` binds or deletes, in that scope.

    With `descend`, nested functions, classes and comprehensions count too (an
    over-approximation: a name bound anywhere in a method is refused, never guessed about).
    """
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node
            if not descend:
                stack.extend(node.decorator_list)
                continue
        if isinstance(node, ast.Lambda) and not descend:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node.id, node
        elif isinstance(node, ast.arg):
            yield node.arg, node
        elif isinstance(node, ast.alias):
            yield (node.asname or node.name.split(".")[0]), node
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name, node
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            yield node.name, node
        elif isinstance(node, ast.MatchMapping) and node.rest:
            yield node.rest, node
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                yield name, node
        stack.extend(ast.iter_child_nodes(node))


NAME = "functional-graph-fast-paths"
SYMBOLIC_ARGUMENTS_PY = "keras/src/ops/symbolic_arguments.py"
FUNCTIONAL_PY = "keras/src/models/functional.py"
FILL_IN = "SymbolicArguments.fill_in"
CONVERT = "SymbolicArguments.convert"
STANDARDIZE = "Functional._standardize_inputs"
FILL_IN_ANCHOR = "if self._single_positional_tensor is not None:"
STANDARDIZE_ANCHOR = "flat_inputs = tree.flatten(inputs)"
BUILTINS = ("type", "tuple", "dict", "list", "all", "id", "isinstance")


def _arg(value: m.BaseExpression) -> m.Arg:
    return m.Arg(value, keyword=None, star="")


def _self_attr(name: str) -> m.Attribute:
    return m.Attribute(value=m.Name("self"), attr=m.Name(name))


def _line(*small: m.BaseSmallStatement) -> m.SimpleStatementLine:
    return m.SimpleStatementLine(body=list(small))


#: `if self._single_positional_tensor is not None:` (upstream's fast path, 3.x), any body.
SINGLE = m.If(
    test=m.Comparison(
        left=_self_attr("_single_positional_tensor"),
        comparisons=[m.ComparisonTarget(m.IsNot(), m.Name("None"))],
    ),
    orelse=None,
)
#: `return self.convert(switch_fn)`: fill_in's last statement.
FALLBACK = _line(m.Return(m.Call(func=_self_attr("convert"), args=[_arg(m.Name("switch_fn"))])))
#: `return tensor_dict.get(id(x), None)`: what switch_fn returns for a KerasTensor.
SWITCH_GET = _line(
    m.Return(
        m.Call(
            func=m.Attribute(value=m.Name("tensor_dict"), attr=m.Name("get")),
            args=[_arg(m.Call(func=m.Name("id"), args=[_arg(m.Name("x"))])), _arg(m.Name("None"))],
        )
    )
)


def _map(target: str, source: str) -> m.SimpleStatementLine:
    """`<target> = tree.map_structure(conversion_fn, self.<source>)`."""
    return _line(
        m.Assign(
            targets=[m.AssignTarget(m.Name(target))],
            value=m.Call(
                func=m.Attribute(value=m.Name("tree"), attr=m.Name("map_structure")),
                args=[_arg(m.Name("conversion_fn")), _arg(_self_attr(source))],
            ),
        )
    )


#: `convert`'s body in every release that has the class.
CONVERT_BODY = [
    _map("args", "args"),
    _map("kwargs", "kwargs"),
    _line(m.Return(m.Tuple([m.Element(m.Name("args")), m.Element(m.Name("kwargs"))]))),
]
#: The tail of `_standardize_inputs`.
STANDARDIZE_TAIL = [
    _line(
        m.Assign(
            targets=[m.AssignTarget(m.Name("flat_inputs"))],
            value=m.Call(func=m.Attribute(value=m.Name("tree"), attr=m.Name("flatten")), args=[_arg(m.Name("inputs"))]),
        )
    ),
    _line(
        m.Assign(
            targets=[m.AssignTarget(m.Name("flat_inputs"))],
            value=m.Call(func=_self_attr("_convert_inputs_to_tensors"), args=[_arg(m.Name("flat_inputs"))]),
        )
    ),
    _line(m.Return(m.Call(func=_self_attr("_adjust_input_rank"), args=[_arg(m.Name("flat_inputs"))]))),
]
#: `self._maybe_warn_inputs_struct_mismatch(inputs, raise_exception=...)`: the warning upstream emits.
WARN_CALL = _line(m.Expr(m.Call(func=_self_attr("_maybe_warn_inputs_struct_mismatch"))))


@functools.cache
def pieces() -> tuple[cst.If, cst.If]:
    """(the fill_in fast path, the _standardize_inputs fast path)."""
    found = template_pieces(__package__ or "codemods.functional_graph_fast_paths", "inserted.py")
    fill_in, standardize = found["fill_in_tensors"], found["standardize_leaf"]
    assert [len(fill_in), len(standardize)] == [1, 1], "inserted.py: one `if` per fast path"
    result = cst.ensure_type(fill_in[0], cst.If), cst.ensure_type(standardize[0], cst.If)
    for piece in result:
        assert any(line.comment and line.comment.value.startswith(marker(NAME)) for line in piece.leading_lines)
    return result


def _body(function: cst.FunctionDef) -> list[cst.BaseStatement]:
    return list(cst.ensure_type(function.body, cst.IndentedBlock).body)


def _lineno(tree: ast.Module, qualname: str) -> int:
    node = ast_function(tree, qualname)
    return node.lineno if node else 1


def _stmt_line(tree: ast.Module, qualname: str, index: int) -> int:
    """The line of the `index`-th top-level statement of `qualname` (its def line if none)."""
    node = ast_function(tree, qualname)
    if node is None:
        return 1
    return node.body[index].lineno if 0 <= index < len(node.body) else node.lineno


def _module_imports(tree: ast.Module, name: str) -> list[tuple[int, str]]:
    """(line, how) of every module-level binding of `name`; `how` is `from X import Y`,
    `class`, or `other`."""
    found = []
    for bound, node in bindings(tree.body, descend=False):
        if bound != name:
            continue
        parent = next(
            (s for s in ast.walk(tree) if isinstance(s, (ast.Import, ast.ImportFrom)) and node in s.names), None
        )
        if isinstance(parent, ast.ImportFrom) and isinstance(node, ast.alias) and node.asname is None and parent.level == 0:
            found.append((parent.lineno, f"from {parent.module} import {node.name}"))
        elif isinstance(node, ast.ClassDef):
            found.append((node.lineno, "class"))
        else:
            found.append((getattr(parent or node, "lineno", 1), "other"))
    return sorted(found)


def check_names(tree: ast.Module, path: str, qualname: str, wanted: dict[str, str]) -> None:
    """Each guard name is bound exactly once at module level, the expected way (builtins:
    never), and not bound inside the method."""
    for name in (*wanted, *BUILTINS):
        found = _module_imports(tree, name)
        expected = [wanted[name]] if name in wanted else []
        if [how for _, how in found] != expected:
            raise AnchorDrift(
                path, found[0][0] if found else 1, f"module-level {name}",
                f"exactly one binding, `{wanted[name]}`" if name in wanted else "no binding (the builtin)",
                ", ".join(f"line {line}: {how}" for line, how in found) or "none",
            )
    function = ast_function(tree, qualname)
    assert function is not None  # cst_function found it
    local = [(n, node) for n, node in bindings([*function.body, function.args], descend=True) if n in (*wanted, *BUILTINS)]
    if local:
        name, node = local[0]
        raise AnchorDrift(path, getattr(node, "lineno", function.lineno), qualname,
                          "no local binding of the guard's names", f"`{name}` bound")


@dataclass(frozen=True)
class Site:
    """Where one fast path goes: after `after` statements of `function`'s body."""

    path: str
    qualname: str
    line: int
    function: cst.FunctionDef
    index: int
    ours: bool


def analyze_fill_in(module: cst.Module, tree: ast.Module, path: str = SYMBOLIC_ARGUMENTS_PY) -> Site:
    function = cst_function(module, FILL_IN, path, tree)
    convert = cst_function(module, CONVERT, path, tree)
    check_names(tree, path, FILL_IN, {"KerasTensor": "from keras.src.backend import KerasTensor"})
    if not m.matches(cst.IndentedBlock(body=_body(convert)), m.IndentedBlock(body=CONVERT_BODY)):
        raise AnchorDrift(path, _lineno(tree, CONVERT), CONVERT, "args/kwargs = tree.map_structure(conversion_fn, "
                          "self.args/self.kwargs); return args, kwargs", "another body")
    body = _body(function)
    singles = [i for i, s in enumerate(body) if m.matches(s, SINGLE)]
    if len(singles) != 1:
        line = _stmt_line(tree, FILL_IN, singles[1]) if len(singles) > 1 else _lineno(tree, FILL_IN)
        raise AnchorDrift(path, line, FILL_IN_ANCHOR, f"exactly one such statement in {FILL_IN}", f"{len(singles)}")
    index = singles[0]
    line = _stmt_line(tree, FILL_IN, index)
    if not body or not m.matches(body[-1], FALLBACK):
        raise AnchorDrift(path, _stmt_line(tree, FILL_IN, len(body) - 1), FILL_IN,
                          "`return self.convert(switch_fn)` as the last statement", "another statement")
    switches = [s for s in body if m.matches(s, m.FunctionDef(name=m.Name("switch_fn")))]
    gets = [n for s in switches for n in _body(cst.ensure_type(s, cst.FunctionDef))]
    if len(switches) != 1 or not any(
        m.matches(n, m.If(body=m.IndentedBlock(body=[SWITCH_GET]))) for n in gets
    ):
        raise AnchorDrift(path, line, f"{FILL_IN}: switch_fn", "one switch_fn returning `tensor_dict.get(id(x), None)` "
                          "for a KerasTensor", f"{len(switches)} switch_fn")
    if has_marker(function, module, NAME):
        ours = [s for s in body if has_marker(s, module, NAME)]
        if len(ours) != 1 or index + 1 >= len(body) or body[index + 1] is not ours[0]:
            raise AnchorDrift(path, line, FILL_IN, "forkgen's fast path right after upstream's", f"{len(ours)} marked")
        return Site(path, FILL_IN, line, function, index + 1, ours=True)
    return Site(path, FILL_IN, line, function, index + 1, ours=False)


def analyze_standardize(module: cst.Module, tree: ast.Module, path: str = FUNCTIONAL_PY) -> Site:
    function = cst_function(module, STANDARDIZE, path, tree)
    check_names(tree, path, STANDARDIZE, {
        "backend": "from keras.src import backend",
        "tree": "from keras.src import tree",
        "Functional": "class",
    })
    cst_function(module, "Functional._maybe_warn_inputs_struct_mismatch", path, tree)
    body = _body(function)
    marked = bool(body) and has_marker(body[0], module, NAME)
    upstream = body[1:] if marked else body
    line = _stmt_line(tree, STANDARDIZE, len(body) - 3)
    if len(upstream) < 3 or not m.matches(cst.IndentedBlock(body=upstream[-3:]), m.IndentedBlock(body=STANDARDIZE_TAIL)):
        raise AnchorDrift(path, line, STANDARDIZE_ANCHOR,
                          "the method ending with flatten / _convert_inputs_to_tensors / return _adjust_input_rank",
                          "another ending")
    warns = [s for s in upstream if m.matches(s, WARN_CALL)]
    if len(warns) != 1 or upstream[-4] is not warns[0]:
        raise AnchorDrift(path, line, f"{STANDARDIZE}: _maybe_warn_inputs_struct_mismatch",
                          "exactly one call, right before the flatten", f"{len(warns)} such call(s)")
    if has_marker(function, module, NAME) and not marked:
        raise AnchorDrift(path, _lineno(tree, STANDARDIZE), STANDARDIZE, "forkgen's fast path first", "a marker elsewhere")
    return Site(path, STANDARDIZE, line, function, 0, ours=marked)


def anchors(fill_in: Site, standardize: Site) -> tuple[AnchorReport, ...]:
    return (
        AnchorReport(FILL_IN_ANCHOR, fill_in.line, "positional KerasTensors only: filled in without tree walks"),
        AnchorReport(STANDARDIZE_ANCHOR, standardize.line, "one KerasTensor input, a leaf: no tree walks"),
    )


class FunctionalGraphFastPathsCommand(BackportCommand):
    """Inserts the fast path of whichever of the two files it is given."""

    DESCRIPTION: str = "Fast paths for SymbolicArguments.fill_in and Functional._standardize_inputs."
    VERSION = "1"

    def __init__(self, context: CodemodContext, tree: ast.Module | None = None) -> None:
        super().__init__(context)
        self._tree = tree
        self._site: Site | None = None
        self._path: set[int] = set()

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        filename = self.context.filename or ""
        parsed = self._tree or ast.parse(tree.code)
        if filename.endswith(FUNCTIONAL_PY):
            site = analyze_standardize(tree, parsed, filename)
        elif filename.endswith(SYMBOLIC_ARGUMENTS_PY):
            site = analyze_fill_in(tree, parsed, filename)
        else:
            raise SkipFile(f"{NAME} rewrites {SYMBOLIC_ARGUMENTS_PY} and {FUNCTIONAL_PY} only")
        if site.ours:
            raise SkipFile(f"the {site.qualname} fast path is in already")
        self._site = site
        self._path = {id(tree)} | ancestors(tree, site.function)
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path and (self._site is None or node is not self._site.function)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        site = self._site
        if site is None or original_node is not site.function:
            return updated_node
        fill_in, standardize = pieces()
        piece = fill_in if site.qualname == FILL_IN else standardize
        body = _body(updated_node)
        if site.index == 0:
            first = body[0]
            # Upstream's comment lines above its first statement stay above it.
            piece = piece.with_changes(leading_lines=[*getattr(first, "leading_lines", ()), *piece.leading_lines])
            body[0] = first.with_changes(leading_lines=[]) if hasattr(first, "leading_lines") else first
        body[site.index:site.index] = [piece]
        block = cst.ensure_type(updated_node.body, cst.IndentedBlock)
        return updated_node.with_changes(body=block.with_changes(body=body))
