"""Codemod: in `Layer.__call__`, convert FLAT args and kwargs (every value a leaf) with one
`maybe_convert` call per value instead of the two `tree.map_structure(maybe_convert, ...)`.

Anchor: the conversion gate of `Layer.__call__`, `if (<kwargs or flag> or ...) and
self._convert_input_args:` whose body is upstream's two lines::

    args = tree.map_structure(maybe_convert, args)
    kwargs = tree.map_structure(maybe_convert, kwargs)

in any of its three shapes: 3.10-3.15.1's (test on `kwargs`, no else), as
`layer-call-training-only-conversion` leaves it (test on `kwargs_may_need_convert`, `elif`
copy) and keras-nightly's (the same flag, `else:` copy). Only the body is rewritten: the two
lines move, unchanged, under `if flat_converted is None:` after a marked
`flat_converted = _layer_call_convert_flat(maybe_convert, args, kwargs)`, with
`else: args, kwargs = flat_converted`; the helpers are appended to the module.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from codemods.layer_call_training_only_conversion.skip_training_only_conversion import (
    _GATE_BODY,
    _GATE_TEST,
    FLAG,
    ConversionGateCommand,
    leftmost,
    statements,
)
from codemods.patchlib import (
    AnchorDrift,
    AnchorReport,
    ast_function,
    ast_lines,
    cst_function,
    has_marker,
    module_level_names,
    template_pieces,
)

NAME = "layer-call-flat-conversion"
LAYER_PY = "keras/src/layers/layer.py"
RESULT = "flat_converted"
HELPER = "_layer_call_convert_flat"
#: Every module-level name the patch appends (each must be free in a fresh layer.py).
ADDED = (
    "_LAYER_CALL_FLAT_SCALARS",
    "_LAYER_CALL_FLAT_LEAVES",
    "_LAYER_CALL_FLAT_TREE",
    "_layer_call_flat_tree",
    "_layer_call_is_flat_leaf",
    HELPER,
)
#: Module-level names the helpers use.
USED = ("tree", "is_backend_tensor_or_symbolic")

#: The patched gate body: the marked call, then upstream's body under `if ... is None:`.
PATCHED_BODY = m.IndentedBlock(
    body=[
        m.SimpleStatementLine(
            body=[
                m.Assign(
                    targets=[m.AssignTarget(m.Name(RESULT))],
                    value=m.Call(func=m.Name(HELPER), args=[m.Arg(m.Name("maybe_convert")), m.Arg(m.Name("args")), m.Arg(m.Name("kwargs"))]),
                )
            ]
        ),
        m.If(
            test=m.Comparison(left=m.Name(RESULT), comparisons=[m.ComparisonTarget(m.Is(), m.Name("None"))]),
            body=_GATE_BODY,
            orelse=m.Else(),
        ),
    ]
)


@functools.cache
def pieces() -> dict[str, list[cst.BaseStatement]]:
    return template_pieces(__package__ or "codemods.layer_call_flat_conversion", "inserted.py")


@dataclass(frozen=True)
class Analysis:
    #: "fresh" (to apply) or "present" (forkgen's).
    state: str
    detail: str
    gate: cst.If
    anchors: tuple[AnchorReport, ...]


def _is_gate(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.BoolOp)
        and isinstance(node.test.op, ast.And)
        and isinstance(node.test.values[-1], ast.Attribute)
        and node.test.values[-1].attr == "_convert_input_args"
    )


def analyze(module: cst.Module, tree: ast.Module, path: str = LAYER_PY) -> Analysis:
    """The conversion gate of `Layer.__call__` and the patch's state, or AnchorDrift."""
    call = cst_function(module, "Layer.__call__", path, tree)
    call_ast = ast_function(tree, "Layer.__call__")
    call_line = getattr(call_ast, "lineno", 1)
    gate_lines = ast_lines(call_ast, _is_gate) if call_ast is not None else []
    gate_line = gate_lines[0] if gate_lines else call_line
    gates = [
        n
        for n in statements(call)
        if isinstance(n, cst.If)
        and m.matches(n, m.If(test=_GATE_TEST))
        and m.matches(leftmost(n.test), m.Name("kwargs") | m.Name(FLAG))
    ]
    if len(gates) != 1:
        raise AnchorDrift(
            path, gate_line, "conversion gate",
            "exactly one `if (kwargs or ...) and self._convert_input_args:` in Layer.__call__", f"{len(gates)}",
        )
    gate = gates[0]
    names = module_level_names(module)
    ours = sorted(n for n in ADDED if n in names)
    if m.matches(gate.body, _GATE_BODY):
        if ours:
            raise AnchorDrift(
                path, 1, "helper names", f"{', '.join(ADDED)} unbound in a module without the patch",
                f"{', '.join(ours)} already bound",
            )
        state = "fresh"
    elif m.matches(gate.body, PATCHED_BODY) and has_marker(gate.body, module, NAME):
        # The marker heads the first statement the patch appends.
        heads = [
            s for s in module.body
            if m.matches(s, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(ADDED[0]))])]))
        ]
        if set(ours) != set(ADDED) or len(heads) != 1 or not has_marker(heads[0], module, NAME):
            raise AnchorDrift(
                path, 1, "helpers", f"forkgen's {', '.join(ADDED)} beside the patched gate",
                f"{', '.join(ours) or 'none'} bound",
            )
        state = "present"
    else:
        raise AnchorDrift(
            path, gate_line, "conversion gate body",
            "`args = tree.map_structure(maybe_convert, args)` then the same for kwargs "
            f"(or forkgen's `{RESULT} = {HELPER}(...)` around them)",
            "another body",
        )
    missing = [n for n in USED if n not in names]
    if missing:
        raise AnchorDrift(path, 1, "module-level names", f"{', '.join(USED)} bound at module level",
                          f"{', '.join(missing)} unbound")
    shape = "a `kwargs` gate" if m.matches(leftmost(gate.test), m.Name("kwargs")) else f"a `{FLAG}` gate"
    anchors = (
        AnchorReport("conversion gate", gate_line, f"{shape} whose body maps args and kwargs with tree.map_structure"),
    )
    detail = "flat args and kwargs are converted without tree.map_structure" if state == "fresh" else "present"
    return Analysis(state, detail, gate, anchors)


class FlatConversionCommand(ConversionGateCommand):
    DESCRIPTION: str = (
        "Layer.__call__: flat args and kwargs (leaves only) are converted one maybe_convert call per value, "
        "in tree.map_structure's order, instead of walking the trees."
    )
    VERSION = "1"
    PATCH_NAME = NAME

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Analysis:
        return analyze(module, tree, path)

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.BaseStatement:
        if id(original_node) != self._gate:
            return updated_node
        body = cst.ensure_type(updated_node.body, cst.IndentedBlock)
        call, branch = pieces()["gate_body"]
        branch = cst.ensure_type(branch, cst.If)
        inner = cst.ensure_type(branch.body, cst.IndentedBlock)
        # Upstream's two lines, node for node, in place of the placeholder.
        placeholder = inner.body[0]
        filled = branch.with_changes(body=inner.with_changes(body=[*body.body]))
        assert m.matches(placeholder, m.SimpleStatementLine(body=[m.Expr(m.Name("UPSTREAM"))]))
        return updated_node.with_changes(body=body.with_changes(body=[call, filled]))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        added = [*pieces()["helpers"]]
        first = cst.ensure_type(added[0], cst.SimpleStatementLine)
        added[0] = first.with_changes(
            leading_lines=[cst.EmptyLine(indent=False), cst.EmptyLine(indent=False), *first.leading_lines]
        )
        return updated_node.with_changes(body=[*updated_node.body, *added])

