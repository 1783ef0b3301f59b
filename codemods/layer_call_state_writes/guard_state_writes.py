"""Codemod: in `Layer.__call__`, write `self._called = True` and `self.built = True` only when
the flag is not already set (keras-team/keras#23200, merged in keras-nightly).

Both flags only ever go from False to True inside `__call__`, but each assignment goes
through `Layer.__setattr__` (tracking) and, on torch, `nn.Module.__setattr__`, on every call.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import (
    AnchorDrift,
    AnchorReport,
    BackportCommand,
    ast_function,
    ast_lines,
    cst_function,
    fill,
    has_marker,
    statement_ancestors,
    statements,
    template_pieces,
)

NAME = "layer-call-state-writes"
LAYER_PY = "keras/src/layers/layer.py"
#: The two attributes, and the template function guarding each.
FLAGS = {"_called": "called_write", "built": "built_write"}


def _write(attr: str) -> m.SimpleStatementLine:
    """`self.<attr> = True`, alone on its line."""
    return m.SimpleStatementLine(
        body=[m.Assign(targets=[m.AssignTarget(m.Attribute(m.Name("self"), m.Name(attr)))], value=m.Name("True"))]
    )


def _guard(attr: str) -> m.If:
    """`if not self.<attr>: self.<attr> = True` (ours, or upstream's since #23200)."""
    return m.If(
        test=m.UnaryOperation(operator=m.Not(), expression=m.Attribute(m.Name("self"), m.Name(attr))),
        body=m.IndentedBlock(body=[_write(attr)]),
        orelse=None,
    )


@functools.cache
def pieces() -> dict[str, cst.BaseStatement]:
    found = template_pieces(__package__ or "codemods.layer_call_state_writes", "inserted.py")
    return {attr: found[function][0] for attr, function in FLAGS.items()}


@dataclass(frozen=True)
class Write:
    """Where one flag is written in `Layer.__call__`, and in which shape."""

    attr: str
    line: int
    #: The bare assignment (to be guarded), or None when it is guarded already.
    bare: cst.SimpleStatementLine | None
    #: The guard around it, when there is one; `ours` tells forkgen's from upstream's.
    guard: cst.If | None
    ours: bool


def analyze(module: cst.Module, tree: ast.Module, path: str = LAYER_PY) -> list[Write]:
    """Each flag's one write in `Layer.__call__`, or AnchorDrift."""
    call = cst_function(module, "Layer.__call__", path, tree)
    call_ast = ast_function(tree, "Layer.__call__")
    writes = []
    # One read-only pass; matchers only on the two statement kinds that can be anchors.
    nodes = list(statements(call))
    ifs = [n for n in nodes if isinstance(n, cst.If)]
    lines_ = [n for n in nodes if isinstance(n, cst.SimpleStatementLine) and len(n.body) == 1]
    for attr in FLAGS:
        guards = [n for n in ifs if m.matches(n, _guard(attr))]
        guarded = {id(cst.ensure_type(g.body, cst.IndentedBlock).body[0]) for g in guards}
        bare = [n for n in lines_ if m.matches(n, _write(attr)) and id(n) not in guarded]

        def assigns_true(node: ast.AST, attr: str = attr) -> bool:
            return (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and node.value.value is True
                and any(isinstance(t, ast.Attribute) and t.attr == attr for t in node.targets)
            )

        lines = ast_lines(call_ast or tree, assigns_true)
        line = lines[0] if lines else getattr(call_ast, "lineno", 1)
        if len(bare) + len(guards) != 1:
            raise AnchorDrift(
                path, line, f"self.{attr} = True", f"exactly one `self.{attr} = True` in Layer.__call__",
                f"{len(bare)} unguarded and {len(guards)} guarded",
            )
        if guards:
            writes.append(Write(attr, line, None, guards[0], has_marker(guards[0], module, NAME)))
        else:
            writes.append(Write(attr, line, cst.ensure_type(bare[0], cst.SimpleStatementLine), None, False))
    return writes


def anchors(writes: list[Write]) -> tuple[AnchorReport, ...]:
    return tuple(AnchorReport(f"self.{w.attr} = True", w.line, "in Layer.__call__") for w in writes)


class GuardStateWritesCommand(BackportCommand):
    DESCRIPTION: str = "Write self._called and self.built in Layer.__call__ only while they are not yet True."
    VERSION = "1"

    def __init__(self, context: CodemodContext, writes: list[Write] | None = None) -> None:
        """`writes`, when given, must be `analyze` of the module to transform (the series
        passes it: the module is then neither rendered nor parsed again)."""
        super().__init__(context)
        self._writes = writes
        self._bare: dict[int, str] = {}
        self._path: set[int] = set()


    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        path = self.context.filename or LAYER_PY
        writes = self._writes if self._writes is not None else analyze(tree, ast.parse(tree.code), path)
        bare = {id(w.bare): w.attr for w in writes if w.bare is not None}
        if not bare:
            raise SkipFile("both writes are guarded already")
        self._bare = bare
        # Visit only the nodes leading to the writes: the rest of layer.py is kept as it is,
        # without being rebuilt.
        self._path = statement_ancestors(tree, [w.bare for w in writes if w.bare is not None])
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path and super().on_visit(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return node.name.value == "Layer"

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == "__call__"

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement:
        attr = self._bare.get(id(original_node))
        if attr is None:
            return updated_node
        return fill(pieces()[attr], updated_node)
