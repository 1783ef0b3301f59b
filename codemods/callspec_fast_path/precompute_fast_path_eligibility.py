"""Codemod: precompute, once per layer, whether `layer(x)` may take the fast path."""

from __future__ import annotations

import libcst as cst

from codemods.callspec_fast_path._base import PatchCommand


class PrecomputeFastPathEligibilityCommand(PatchCommand):
    DESCRIPTION: str = (
        "Precompute in Layer.__init__ whether layer(x) can build its CallSpec "
        "without signature.bind (the plan and the kill switch go before CallSpec)."
    )
    PIECE = "eligibility"
    VERSION = "2"
    TARGETS = ("call_signature_statement", "callspec_class")
    DESCEND_INTO = ("__init__",)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        # Right after `self._call_signature = inspect.signature(self.call)`: the
        # only statement every release has in Layer.__init__ that the plan needs.
        if original_node is self.analysis.call_signature_statement:
            return cst.FlattenSentinel([updated_node, *self.template.eligibility_piece])
        return updated_node

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        # The plan's helpers go right before `class CallSpec` (a module-level
        # anchor that every release has), after every name they use is bound.
        if original_node is self.analysis.callspec_class:
            return cst.FlattenSentinel([*self.template.module_piece, updated_node])
        return updated_node
