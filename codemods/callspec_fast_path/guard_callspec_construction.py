"""Codemod: route `layer(x)` in `Layer.__call__` through `CallSpec._fast`."""

from __future__ import annotations

import libcst as cst

from codemods.callspec_fast_path._base import PatchCommand


class GuardCallSpecConstructionCommand(PatchCommand):
    DESCRIPTION: str = (
        "Make the CallSpec construction in Layer.__call__ the else branch of a "
        "guard that sends layer(x) on an eligible layer to CallSpec._fast."
    )
    PIECE = "guard"
    VERSION = "2"
    TARGETS = ("construction_statement",)
    DESCEND_INTO = ("__call__",)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement:
        # Only the construction in __call__: the ones in compute_output_spec and
        # (master/nightly) stateless_call keep binding, as upstream does.
        if original_node is not self.analysis.construction_statement:
            return updated_node
        guard = self.template.guard_piece
        orelse = cst.ensure_type(guard.orelse, cst.Else)
        block = cst.ensure_type(orelse.body, cst.IndentedBlock)
        # Upstream's comment lines stay above the construction, now above the if;
        # the statement itself is kept node for node as the else body.
        upstream = updated_node.with_changes(leading_lines=[])
        return guard.with_changes(
            leading_lines=[*updated_node.leading_lines, *guard.leading_lines],
            orelse=orelse.with_changes(body=block.with_changes(body=[upstream])),
        )
