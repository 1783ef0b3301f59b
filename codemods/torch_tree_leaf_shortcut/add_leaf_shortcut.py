"""Codemod: a leaf returns at once from `traverse_children` in the torch tree's
`_dict_to_ordered_dict` (the speed part of keras-team/keras#23201, issue #23281).

`_dict_to_ordered_dict` (keras/src/tree/torchtree_impl.py, Keras 3.12.0-3.15.1) sorts a top-level
`dict`/`defaultdict` and otherwise calls its nested `traverse_children()`, which flattens the
structure one level with `torch_tree.tree_flatten(structure, is_leaf=<every node but the root>)`
and returns `structure` itself when the spec is a single leaf (`num_nodes == 1 and
num_leaves == 1`). That spec arises exactly when torch's own leaf test holds for the root,
`_get_node_type(structure) not in SUPPORTED_NODES` (the `is_leaf` lambda is False for the root),
which is what the module's `_tree_is_leaf(structure)` computes: the inserted
`if _tree_is_leaf(structure): return structure` returns the same object without building the
`TreeSpec`, the leaves list and the lambda. Every traversed leaf of `traverse`,
`flatten_with_path`, `pack_sequence_as`, `map_shape_structure` and `lists_to_tuples` goes
through here.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import SkipFile

from codemods.patchlib import (
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    ast_function,
    cst_function,
    has_marker,
    statement_ancestors,
    statements,
    template_pieces,
)

NAME = "torch-tree-leaf-shortcut"
TORCHTREE_PY = "keras/src/tree/torchtree_impl.py"
FUNCTION = "_dict_to_ordered_dict"
INNER = "traverse_children"
HELPER = "_tree_is_leaf"
ANCHOR = "children, treedef = torch_tree.tree_flatten(structure, ...)"

_STRUCTURE = m.Name("structure")
_RETURN_STRUCTURE = m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(_STRUCTURE)])])

#: `if _tree_is_leaf(structure): return structure`: forkgen's piece inside `traverse_children`,
#: or (as the first statement of `_dict_to_ordered_dict` itself) the form #23201 first proposed.
LEAF_SHORTCUT = m.If(
    test=m.Call(func=m.Name(HELPER), args=[m.Arg(_STRUCTURE, keyword=None)]),
    body=_RETURN_STRUCTURE,
    orelse=None,
)

#: `structure_id = id(structure)`: on master after keras#23111 (not in any release), paired
#: with the `id()` form of the `is_leaf` lambda.
STRUCTURE_ID = m.SimpleStatementLine(
    body=[m.Assign(targets=[m.AssignTarget(m.Name("structure_id"))],
                   value=m.Call(func=m.Name("id"), args=[m.Arg(_STRUCTURE)]))]
)


def _root_is_not_leaf(with_id: bool) -> m.Lambda:
    """The `is_leaf` lambda, False for the root only and without side effects: `x is not
    structure` (3.12.0-3.15.1) or `id(x) != structure_id` (master after keras#23111)."""
    x = m.Name("x")
    body = (
        m.Comparison(m.Call(func=m.Name("id"), args=[m.Arg(x)]), [m.ComparisonTarget(m.NotEqual(), m.Name("structure_id"))])
        if with_id
        else m.Comparison(x, [m.ComparisonTarget(m.IsNot(), _STRUCTURE)])
    )
    return m.Lambda(params=m.Parameters(params=[m.Param(x, default=None)]), body=body)


def tree_flatten(with_id: bool) -> m.SimpleStatementLine:
    """`children, treedef = torch_tree.tree_flatten(structure, is_leaf=<lambda>)`."""
    return m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Tuple([m.Element(m.Name("children")), m.Element(m.Name("treedef"))]))],
                value=m.Call(
                    func=m.Attribute(m.Name("torch_tree"), m.Name("tree_flatten")),
                    args=[m.Arg(_STRUCTURE, keyword=None), m.Arg(_root_is_not_leaf(with_id), keyword=m.Name("is_leaf"))],
                ),
            )
        ]
    )


def _equals_one(attribute: str) -> m.Comparison:
    return m.Comparison(
        m.Attribute(m.Name("treedef"), m.Name(attribute)), [m.ComparisonTarget(m.Equal(), m.Integer("1"))]
    )


#: `if treedef.num_nodes == 1 and treedef.num_leaves == 1: return structure` (then an `else`
#: that rebuilds the node): the single-leaf spec the short-cut stands for.
SINGLE_LEAF = m.If(
    test=m.BooleanOperation(left=_equals_one("num_nodes"), operator=m.And(), right=_equals_one("num_leaves")),
    body=_RETURN_STRUCTURE,
)

#: `_tree_is_leaf(tree, is_leaf=None)` of 3.12.0-3.15.1: with no `is_leaf`, exactly torch's
#: leaf test, `_get_node_type(tree) not in SUPPORTED_NODES`, which `tree_flatten` applies.
_TORCH_TREE = m.Name("torch_tree")
HELPER_DEF = m.FunctionDef(
    name=m.Name(HELPER),
    params=m.Parameters(
        params=[m.Param(m.Name("tree"), default=None), m.Param(m.Name("is_leaf"), default=m.Name("None"))],
    ),
    body=m.IndentedBlock(
        body=[
            m.If(
                test=m.BooleanOperation(
                    left=m.Comparison(m.Name("is_leaf"), [m.ComparisonTarget(m.IsNot(), m.Name("None"))]),
                    operator=m.And(),
                    right=m.Call(func=m.Name("is_leaf"), args=[m.Arg(m.Name("tree"))]),
                ),
                body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(m.Name("True"))])]),
                orelse=None,
            ),
            m.SimpleStatementLine(
                body=[
                    m.Return(
                        m.Comparison(
                            m.Call(func=m.Attribute(_TORCH_TREE, m.Name("_get_node_type")), args=[m.Arg(m.Name("tree"))]),
                            [m.ComparisonTarget(m.NotIn(), m.Attribute(_TORCH_TREE, m.Name("SUPPORTED_NODES")))],
                        )
                    )
                ]
            ),
        ]
    ),
)

#: keras-nightly 3.16.0.dev2026102704 (keras#23201 as merged, with #23647's shape): a helper
#: `_dict_to_ordered_dict_with_changed` returns `structure, False` when
#: `SUPPORTED_NODES.get(...)` found no node definition.
UPSTREAM_LEAF_RETURN = m.If(
    test=m.Comparison(m.Name(), [m.ComparisonTarget(m.Is(), m.Name("None"))]),
    body=m.IndentedBlock(
        body=[
            m.SimpleStatementLine(
                body=[m.Return(_STRUCTURE | m.Tuple([m.Element(_STRUCTURE), m.ZeroOrMore()]))]
            )
        ]
    ),
)


@functools.cache
def pieces() -> tuple[cst.BaseStatement, ...]:
    """The template's statement: the marked `if _tree_is_leaf(structure): return structure`."""
    found = template_pieces(__package__ or "codemods.torch_tree_leaf_shortcut", "inserted.py")
    body = tuple(found["leaf_shortcut"])
    assert len(body) == 1 and isinstance(body[0], cst.If), "inserted.py: one `if` statement"
    assert any(line.comment and line.comment.value.startswith(f"# forkgen: {NAME}") for line in body[0].leading_lines)
    return body


@dataclass(frozen=True)
class Site:
    """`_dict_to_ordered_dict` of one tree."""

    path: str
    line: int
    #: The nested `traverse_children` of 3.12.0-3.15.1, or None when upstream has the short-cut.
    inner: cst.FunctionDef | None
    ours: bool
    function: cst.FunctionDef
    #: What shows the short-cut is upstream (with `inner` None, or the PR's first form).
    upstream: str = ""


def _lines(tree: ast.Module) -> tuple[int, int, list[int]]:
    """The line of `_dict_to_ordered_dict`, of its nested `traverse_children` (else the
    function's) and of each statement of the latter's body."""
    function = ast_function(tree, FUNCTION)
    if function is None:
        return 1, 1, []
    inner = [s for s in function.body if isinstance(s, ast.FunctionDef) and s.name == INNER]
    if len(inner) != 1:
        return function.lineno, function.lineno, []
    return function.lineno, inner[0].lineno, [s.lineno for s in inner[0].body]


def _first_form(function: cst.FunctionDef) -> bool:
    """`_dict_to_ordered_dict` itself starts with `if _tree_is_leaf(structure): return structure`
    (the form keras#23201 first proposed)."""
    return m.matches(cst.ensure_type(function.body, cst.IndentedBlock).body[0], LEAF_SHORTCUT)


def _nightly_form(module: cst.Module) -> str:
    """The function of the `_dict_to_ordered_dict` family that returns a leaf as it is (keras-nightly's
    `_dict_to_ordered_dict_with_changed`), or ""."""
    family = m.FunctionDef(name=m.Name(value=m.MatchIfTrue(lambda n: n.startswith(FUNCTION))))
    for statement in module.body:
        if m.matches(statement, family) and any(m.matches(n, UPSTREAM_LEAF_RETURN) for n in statements(statement)):
            return cst.ensure_type(statement, cst.FunctionDef).name.value
    return ""


def check_helper(module: cst.Module, tree: ast.Module, path: str) -> None:
    """`_tree_is_leaf`, which the piece calls, is the module's and is torch's leaf test; else drift."""
    helper = cst_function(module, HELPER, path, tree)
    if not m.matches(helper, HELPER_DEF):
        node = ast_function(tree, HELPER)
        raise AnchorDrift(
            path, node.lineno if node else 1, f"def {HELPER}",
            "`if is_leaf is not None and is_leaf(tree): return True` then "
            "`return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES`",
            "another body or signature",
        )


def analyze(module: cst.Module, tree: ast.Module, path: str = TORCHTREE_PY) -> Site:
    """Where the short-cut goes, whether it is in (forkgen's or upstream's); else drift."""
    function = cst_function(module, FUNCTION, path, tree)
    function_line, line, lines = _lines(tree)
    if not m.matches(function.params, m.Parameters(params=[m.Param(_STRUCTURE, default=None)])):
        raise AnchorDrift(path, function_line, f"def {FUNCTION}", f"`def {FUNCTION}(structure)`", "another signature")
    if _first_form(function):
        return Site(
            path, function_line, None, False, function, f"{FUNCTION} returns a leaf first (keras#23201's first form)"
        )
    inner = [
        s for s in cst.ensure_type(function.body, cst.IndentedBlock).body if m.matches(s, m.FunctionDef(name=m.Name(INNER)))
    ]
    helper = "" if inner else _nightly_form(module)
    if helper:
        return Site(
            path, function_line, None, False, function, f"{helper} returns a leaf as it is (keras-nightly's shape)"
        )
    if len(inner) != 1:
        raise AnchorDrift(
            path, line, f"def {INNER}", f"exactly one nested in {FUNCTION}, or upstream's leaf short-cut",
            f"{len(inner)}" if inner else "neither",
        )
    found = cst.ensure_type(inner[0], cst.FunctionDef)
    body = list(cst.ensure_type(found.body, cst.IndentedBlock).body)

    def where(index: int) -> int:
        return lines[index] if index < len(lines) else line

    index, ours = 0, False
    # forkgen's piece is known by its marker (whatever its test: the mutants change it).
    if body and isinstance(body[0], cst.If) and has_marker(body[0], module, NAME):
        index, ours = 1, True
    elif body and m.matches(body[0], LEAF_SHORTCUT):
        raise AnchorDrift(path, where(0), "if _tree_is_leaf(structure):", "forkgen's marker above it",
                          "a short-cut without it")
    with_id = index < len(body) and m.matches(body[index], STRUCTURE_ID)
    index += with_id
    if index >= len(body) or not m.matches(body[index], tree_flatten(with_id)):
        expected = "`structure_id = id(structure)` then " if with_id else ""
        raise AnchorDrift(
            path, where(index), ANCHOR,
            f"{expected}a one-level flatten whose is_leaf is "
            + ("`lambda x: id(x) != structure_id`" if with_id else "`lambda x: x is not structure`")
            + f" at the top of {INNER}",
            "another statement",
        )
    if index + 1 >= len(body) or not m.matches(body[index + 1], SINGLE_LEAF):
        raise AnchorDrift(
            path, where(index + 1), "if treedef.num_nodes == 1 and treedef.num_leaves == 1:",
            "`return structure` for a single-leaf spec right after the flatten", "another statement",
        )
    check_helper(module, tree, path)
    return Site(path, where(index), found, ours, function)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    if site.inner is None:
        return (AnchorReport(f"def {FUNCTION}", site.line, site.upstream),)
    return (AnchorReport(ANCHOR, site.line, f"in {FUNCTION}'s {INNER}: the round trip a leaf skips"),)


class AddLeafShortcutCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "Return a leaf at once from traverse_children in the torch tree's _dict_to_ordered_dict."
    VERSION = "1"
    PATH = TORCHTREE_PY
    _inner: int | None = None
    _path: set[int]

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.inner is None:
            raise SkipFile(f"upstream has the leaf short-cut: {site.upstream}")
        if site.ours:
            raise SkipFile("the leaf short-cut is in already")
        self._inner = id(site.inner)
        # Visit only the nodes leading to traverse_children: the rest stays as it is.
        self._path = {id(tree)} | statement_ancestors(site.function, [site.inner])
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if id(original_node) != self._inner:
            return updated_node
        block = cst.ensure_type(updated_node.body, cst.IndentedBlock)
        return updated_node.with_changes(body=block.with_changes(body=[*pieces(), *block.body]))
