"""Codemod: `is_nested` of the torch tree (keras/src/tree/torchtree_impl.py, Keras 3.12.0-3.15.1)
answers for an object whose type is not a tuple subclass with `type(x) in SUPPORTED_NODES`,
without the `_tree_is_leaf` -> `torch_tree._get_node_type` -> `is_namedtuple_class` calls.

Two pieces from `inserted.py`: the import-time gate (`_forkgen_node_type_is_type` and the flag
`_FORKGEN_NODE_TYPE_IS_TYPE`) at module level right before `def is_nested`, and the guarded
branch at the top of `is_nested`, above upstream's `return not _tree_is_leaf(structure)`, which
stays for tuples and whenever the gate is off. `_tree_is_leaf` is checked (it must be torch's
leaf test) but not edited, so `torch-tree-leaf-shortcut`, which anchors on it, composes in
either order.
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
    template_pieces,
)
from codemods.torch_tree_leaf_shortcut.add_leaf_shortcut import check_helper

NAME = "torch-tree-node-type-fast-path"
TORCHTREE_PY = "keras/src/tree/torchtree_impl.py"
FUNCTION = "is_nested"
GATE = "_forkgen_node_type_is_type"
FLAG = "_FORKGEN_NODE_TYPE_IS_TYPE"
ANCHOR = "def is_nested(structure): return not _tree_is_leaf(structure)"

_STRUCTURE = m.Name("structure")

#: `return not _tree_is_leaf(structure)`: `is_nested`'s only statement in 3.12.0-3.15.1 (and
#: in keras-nightly 3.16.0.dev2026102704).
UPSTREAM_RETURN = m.SimpleStatementLine(
    body=[
        m.Return(
            m.UnaryOperation(
                operator=m.Not(),
                expression=m.Call(func=m.Name("_tree_is_leaf"), args=[m.Arg(_STRUCTURE, keyword=None)]),
            )
        )
    ]
)


@functools.cache
def pieces() -> tuple[tuple[cst.BaseStatement, ...], tuple[cst.BaseStatement, ...]]:
    """(the module-level gate: a function and the flag, the branch for `is_nested`)."""
    found = template_pieces(__package__ or "codemods.torch_tree_node_type_fast_path", "inserted.py")
    gate, branch = tuple(found["module_level"]), tuple(found["is_nested_fast_path"])
    assert len(gate) == 2 and m.matches(gate[0], m.FunctionDef(name=m.Name(GATE))), "inserted.py: the gate"
    assert m.matches(gate[1], m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(FLAG))])]))
    assert len(branch) == 1 and isinstance(branch[0], cst.If), "inserted.py: one `if` for is_nested"
    for piece in (cst.ensure_type(gate[0], cst.FunctionDef), cst.ensure_type(branch[0], cst.If)):
        assert any(line.comment and line.comment.value.startswith(f"# forkgen: {NAME}") for line in piece.leading_lines)
    return gate, branch


@dataclass(frozen=True)
class Site:
    """`is_nested` of one tree."""

    path: str
    line: int
    function: cst.FunctionDef
    #: The branch and the gate are in (forkgen's).
    ours: bool


def _defined(module: cst.Module, name: str) -> list[cst.CSTNode]:
    """Module-level statements that define `name` (a def, or an assignment to it)."""
    assign = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])])
    return [s for s in module.body if m.matches(s, m.FunctionDef(name=m.Name(name)) | assign)]


def analyze(module: cst.Module, tree: ast.Module, path: str = TORCHTREE_PY) -> Site:
    """Where the branch goes and whether it is in; else drift."""
    function = cst_function(module, FUNCTION, path, tree)
    node = ast_function(tree, FUNCTION)
    line = node.lineno if node else 1
    if not m.matches(function.params, m.Parameters(params=[m.Param(_STRUCTURE, default=None)])):
        raise AnchorDrift(path, line, f"def {FUNCTION}", f"`def {FUNCTION}(structure)`", "another signature")
    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    index, ours = 0, False
    if body and isinstance(body[0], cst.If) and has_marker(body[0], module, NAME):
        index, ours = 1, True
    body_lines = [s.lineno for s in node.body] if node else []
    where = body_lines[index] if index < len(body_lines) else line
    if len(body) != index + 1 or not m.matches(body[index], UPSTREAM_RETURN):
        raise AnchorDrift(
            path, where, ANCHOR, f"`return not _tree_is_leaf(structure)` as the only statement of {FUNCTION}",
            f"{len(body) - index} statements" if len(body) != index + 1 else "another statement",
        )
    check_helper(module, tree, path)
    gates = _defined(module, GATE) + _defined(module, FLAG)
    if ours and len(gates) != 2:
        raise AnchorDrift(path, line, f"{GATE} / {FLAG}", "forkgen's gate at module level", f"{len(gates)} of its 2 statements")
    if not ours and gates:
        raise AnchorDrift(path, line, f"{GATE} / {FLAG}", "no such name before the patch", "already defined")
    return Site(path, line, function, ours)


def anchors(site: Site) -> tuple[AnchorReport, ...]:
    return (AnchorReport(ANCHOR, site.line, "non-tuple types answer with type(x) in SUPPORTED_NODES"),)


class AddNodeTypeFastPathCommand(AnalysedCommand[Site]):
    DESCRIPTION: str = "is_nested of the torch tree: type(x) in SUPPORTED_NODES for a non-tuple type."
    VERSION = "1"
    PATH = TORCHTREE_PY
    _function: int | None = None

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Site:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        site = self.site(tree)
        if site.ours:
            raise SkipFile("the node-type fast path is in already")
        self._function = id(site.function)
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Only module-level statements are rewritten: nothing below them is visited.
        return isinstance(node, cst.Module)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        gate, branch = pieces()
        body: list[cst.BaseStatement] = []
        for statement in updated_node.body:
            if id(statement) == self._function:
                function = cst.ensure_type(statement, cst.FunctionDef)
                block = cst.ensure_type(function.body, cst.IndentedBlock)
                gate_def = cst.ensure_type(gate[0], cst.FunctionDef)
                flag = cst.ensure_type(gate[1], cst.SimpleStatementLine)
                body += [
                    gate_def.with_changes(leading_lines=[*function.leading_lines, *gate_def.leading_lines]),
                    flag.with_changes(leading_lines=[cst.EmptyLine()] * 2),
                ]
                statement = function.with_changes(
                    leading_lines=[cst.EmptyLine()] * 2, body=block.with_changes(body=[*branch, *block.body])
                )
            body.append(statement)
        return updated_node.with_changes(body=body)
