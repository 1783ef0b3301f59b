"""Codemod: `flatten` and `map_structure` of the torch tree (keras/src/tree/torchtree_impl.py,
Keras 3.12.0-3.15.1) answer a flat list/tuple (and, for `map_structure`, dict) of leaves
without the `_dict_to_ordered_dict` rebuild and torch's `tree_flatten`/`tree_map`.

Three pieces from `inserted.py`: the import-time gate (`_forkgen_flat_nodes_are_torchs` and the
flag `_FORKGEN_FLAT_FAST_PATHS`, which also reads `torch-tree-node-type-fast-path`'s
`_FORKGEN_NODE_TYPE_IS_TYPE`) at module level right before `def map_structure` (below the node-type gate in every
release), and one guarded branch
at the top of each function, whose upstream statements stay below it. The analysis checks what
the branches stand for: `flatten`'s three statements, `map_structure`'s four (its
`if not none_is_leaf:` wrapper only runs for a false flag), `_dict_to_ordered_dict` in a shape
`torch-tree-leaf-shortcut` knows (3.12.0-3.15.1's, with or without forkgen's short-cut, or
keras-nightly's: each hands a flat list/tuple of leaves back as a list/tuple of the same
leaves), `_tree_is_leaf` torch's leaf test, and the node-type gate assigned above `def map_structure`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
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
    template_pieces,
)
from codemods.torch_tree_leaf_shortcut.add_leaf_shortcut import (
    analyze as analyze_dict_to_ordered_dict,
)
from codemods.torch_tree_node_type_fast_path.add_fast_path import FLAG as NODE_TYPE_FLAG

NAME = "torch-tree-flat-fast-paths"
TORCHTREE_PY = "keras/src/tree/torchtree_impl.py"
FLATTEN = "flatten"
MAP_STRUCTURE = "map_structure"
GATE = "_forkgen_flat_nodes_are_torchs"
FLAG = "_FORKGEN_FLAT_FAST_PATHS"
FLATTEN_ANCHOR = "def flatten(structure): _dict_to_ordered_dict, then torch_tree.tree_flatten"
MAP_ANCHOR = "def map_structure(func, *structures, none_is_leaf=True): ... torch_tree.tree_map(map_func, *structures)"

_STRUCTURE = m.Name("structure")
_TORCH_TREE = m.Name("torch_tree")


def _call(function: m.Name | m.Attribute, *args: m.Arg) -> m.Call:
    return m.Call(func=function, args=list(args))


#: `flatten`'s body in 3.12.0-3.15.1 (and keras-nightly 3.16.0.dev2026102704).
FLATTEN_BODY: list[m.BaseMatcherNode] = [
    m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(_STRUCTURE)],
                value=_call(m.Name("_dict_to_ordered_dict"), m.Arg(_STRUCTURE, keyword=None)),
            )
        ]
    ),
    m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Tuple([m.Element(m.Name("leaves")), m.Element(m.Name("_"))]))],
                value=_call(m.Attribute(_TORCH_TREE, m.Name("tree_flatten")), m.Arg(_STRUCTURE, keyword=None)),
            )
        ]
    ),
    m.SimpleStatementLine(body=[m.Return(m.Name("leaves"))]),
]

#: `map_structure`'s body in 3.12.0-3.15.1 (and nightly): the empty check, `map_func = func`, a
#: wrapper only for a false `none_is_leaf`, then one `tree_map` over every structure.
MAP_BODY: list[m.BaseMatcherNode] = [
    m.If(
        test=m.UnaryOperation(operator=m.Not(), expression=m.Name("structures")),
        body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Raise()])]),
        orelse=None,
    ),
    m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name("map_func"))], value=m.Name("func"))]),
    m.If(test=m.UnaryOperation(operator=m.Not(), expression=m.Name("none_is_leaf")), orelse=None),
    m.SimpleStatementLine(
        body=[
            m.Return(
                _call(
                    m.Attribute(_TORCH_TREE, m.Name("tree_map")),
                    m.Arg(m.Name("map_func"), keyword=None, star=""),
                    m.Arg(m.Name("structures"), keyword=None, star="*"),
                )
            )
        ]
    ),
]

MAP_PARAMS = m.Parameters(
    params=[m.Param(m.Name("func"), default=None)],
    star_arg=m.Param(m.Name("structures"), default=None),
    kwonly_params=[m.Param(m.Name("none_is_leaf"), default=m.Name("True"))],
    star_kwarg=None,
    posonly_params=[],
)


@functools.cache
def pieces() -> tuple[tuple[cst.BaseStatement, ...], cst.If, cst.If]:
    """(the module-level gate: a function and the flag, the branch of `flatten`, that of
    `map_structure`)."""
    found = template_pieces(__package__ or "codemods.torch_tree_flat_fast_paths", "inserted.py")
    gate = tuple(found["module_level"])
    flatten, mapping = found["flatten_fast_path"], found["map_structure_fast_path"]
    assert len(gate) == 2 and m.matches(gate[0], m.FunctionDef(name=m.Name(GATE))), "inserted.py: the gate"
    assert m.matches(gate[1], m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(FLAG))])]))
    assert len(flatten) == 1 and len(mapping) == 1, "inserted.py: one `if` per function"
    branches = (cst.ensure_type(flatten[0], cst.If), cst.ensure_type(mapping[0], cst.If))
    for piece in (cst.ensure_type(gate[0], cst.FunctionDef), *branches):
        assert any(line.comment and line.comment.value.startswith(f"# forkgen: {NAME}") for line in piece.leading_lines)
    return gate, branches[0], branches[1]


@dataclass(frozen=True)
class Site:
    """`flatten` and `map_structure` of one tree."""

    path: str
    flatten_line: int
    map_line: int
    flatten: cst.FunctionDef
    map_structure: cst.FunctionDef
    #: The branches and the gate are in (forkgen's).
    ours: bool


def _defined(module: cst.Module, name: str) -> list[int]:
    """Indexes of the module-level statements that define `name` (a def, or an assignment)."""
    assign = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])])
    return [i for i, s in enumerate(module.body) if m.matches(s, m.FunctionDef(name=m.Name(name)) | assign)]


def _body(
    module: cst.Module, function: cst.FunctionDef, node: ast.FunctionDef | None, expected: Sequence[m.BaseMatcherNode],
    anchor: str, path: str,
) -> bool:
    """Whether forkgen's branch opens `function`; drift unless the rest is `expected`."""
    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    ours = bool(body) and isinstance(body[0], cst.If) and has_marker(body[0], module, NAME)
    rest = body[1:] if ours else body
    lines = [s.lineno for s in node.body][1 if ours else 0:] if node else []
    for index, matcher in enumerate(expected):
        if index >= len(rest) or not m.matches(rest[index], matcher):
            where = lines[index] if index < len(lines) else (node.lineno if node else 1)
            raise AnchorDrift(
                path, where, anchor, f"upstream's statement {index + 1} of {len(expected)}",
                "nothing" if index >= len(rest) else "another statement",
            )
    if len(rest) != len(expected):
        where = lines[len(expected)] if len(expected) < len(lines) else (node.lineno if node else 1)
        raise AnchorDrift(path, where, anchor, f"{len(expected)} statements", f"{len(rest)} statements")
    return ours


def analyze(module: cst.Module, tree: ast.Module, path: str = TORCHTREE_PY) -> Site:
    """Where the branches go and whether they are in; else drift."""
    flatten = cst_function(module, FLATTEN, path, tree)
    mapping = cst_function(module, MAP_STRUCTURE, path, tree)
    flatten_node, map_node = ast_function(tree, FLATTEN), ast_function(tree, MAP_STRUCTURE)
    flatten_line = flatten_node.lineno if flatten_node else 1
    map_line = map_node.lineno if map_node else 1
    if not m.matches(flatten.params, m.Parameters(params=[m.Param(_STRUCTURE, default=None)])):
        raise AnchorDrift(path, flatten_line, f"def {FLATTEN}", f"`def {FLATTEN}(structure)`", "another signature")
    if not m.matches(mapping.params, MAP_PARAMS):
        raise AnchorDrift(
            path, map_line, f"def {MAP_STRUCTURE}", f"`def {MAP_STRUCTURE}(func, *structures, none_is_leaf=True)`",
            "another signature",
        )
    flatten_ours = _body(module, flatten, flatten_node, FLATTEN_BODY, FLATTEN_ANCHOR, path)
    map_ours = _body(module, mapping, map_node, MAP_BODY, MAP_ANCHOR, path)
    # What flatten's slow path does with a flat list/tuple of leaves: a shape the leaf
    # short-cut's analysis knows (it raises drift otherwise, and checks `_tree_is_leaf`).
    analyze_dict_to_ordered_dict(module, tree, path)
    map_index = next(i for i, s in enumerate(module.body) if s is mapping)
    node_type_flag = _defined(module, NODE_TYPE_FLAG)
    if len(node_type_flag) != 1 or node_type_flag[0] > map_index:
        raise AnchorDrift(
            path, map_line, NODE_TYPE_FLAG,
            "torch-tree-node-type-fast-path's gate assigned once above `def map_structure` (that patch first)",
            f"{len(node_type_flag)} assignments" if len(node_type_flag) != 1 else "one below it",
        )
    gates = _defined(module, GATE) + _defined(module, FLAG)
    ours = flatten_ours and map_ours
    if flatten_ours != map_ours:
        raise AnchorDrift(
            path, flatten_line if not flatten_ours else map_line, f"# forkgen: {NAME}",
            "forkgen's branch in both flatten and map_structure", "it in one of them only",
        )
    if ours and len(gates) != 2:
        raise AnchorDrift(path, map_line, f"{GATE} / {FLAG}", "forkgen's gate at module level", f"{len(gates)} of its 2 statements")
    if not ours and gates:
        raise AnchorDrift(path, map_line, f"{GATE} / {FLAG}", "no such name before the patch", "already defined")
    return Site(path, flatten_line, map_line, flatten, mapping, ours)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    return (
        AnchorReport(FLATTEN_ANCHOR, site.flatten_line, "a flat list/tuple of leaves: list(structure)"),
        AnchorReport(MAP_ANCHOR, site.map_line, "one flat list/tuple/dict of leaves: func over its leaves in order"),
    )


class AddFlatFastPathsCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "flatten/map_structure of the torch tree: flat containers of leaves without tree walks."
    VERSION = "1"
    PATH = TORCHTREE_PY
    _flatten: int | None = None
    _map: int | None = None

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.ours:
            raise SkipFile("the flat fast paths are in already")
        self._flatten, self._map = id(site.flatten), id(site.map_structure)
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Only module-level statements are rewritten: nothing below them is visited.
        return isinstance(node, cst.Module)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        gate, flatten_branch, map_branch = pieces()
        body: list[cst.BaseStatement] = []
        for statement in updated_node.body:
            if id(statement) in (self._flatten, self._map):
                function = cst.ensure_type(statement, cst.FunctionDef)
                block = cst.ensure_type(function.body, cst.IndentedBlock)
                branch = flatten_branch if id(statement) == self._flatten else map_branch
                leading = function.leading_lines
                if id(statement) == self._map:
                    gate_def = cst.ensure_type(gate[0], cst.FunctionDef)
                    flag = cst.ensure_type(gate[1], cst.SimpleStatementLine)
                    body += [
                        gate_def.with_changes(leading_lines=[*function.leading_lines, *gate_def.leading_lines]),
                        flag.with_changes(leading_lines=[cst.EmptyLine()] * 2),
                    ]
                    leading = [cst.EmptyLine()] * 2
                statement = function.with_changes(
                    leading_lines=leading, body=block.with_changes(body=[branch, *block.body])
                )
            body.append(statement)
        return updated_node.with_changes(body=body)
