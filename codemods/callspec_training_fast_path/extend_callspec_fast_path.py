"""Codemod: extend the fast path to every call that binds."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from codemods.callspec_fast_path._base import PatchCommand
from codemods.callspec_fast_path.templates import ExtensionTemplate, load_extension


class ExtendCallSpecFastPathCommand(PatchCommand):
    DESCRIPTION: str = (
        "Extend the CallSpec fast path, on top of the base patch, to every call that binds "
        "(any keyword, nested and non-tensor arguments) through CallSpec._fast_bound."
    )
    PIECE = "extension"
    VERSION = "2"
    TARGETS: ClassVar[tuple[str, ...]] = ("base_flag_statement", "guard_statement", "callspec_class")
    DESCEND_INTO: ClassVar[tuple[str, ...]] = ("__init__", "__call__")
    REQUIRES: ClassVar[tuple[str, ...]] = ("eligibility", "fast_constructor", "guard")

    @property
    def extension(self) -> ExtensionTemplate:
        return load_extension(self.analysis.variant)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        # Right after the base's `self._call_spec_fast_path = ...`: the bindings
        # read the plan's kill switch and may widen the flag the base just set.
        if original_node is self.analysis.base_flag_statement:
            return cst.FlattenSentinel([updated_node, *self.extension.bindings_piece])
        return updated_node

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        # The base's guard: its fast branch stays first (`layer(x)` pays nothing
        # more), the extension's `elif` comes before upstream's `else`.
        if original_node is not self.analysis.guard_statement:
            return updated_node
        return updated_node.with_changes(
            orelse=self.extension.branch_piece.with_changes(orelse=updated_node.orelse)
        )

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if original_node is not self.analysis.callspec_class:
            return updated_node
        # `_fast_bound` after `_fast`; the module piece between the base's and
        # `class CallSpec`, after every name it uses is bound.
        body = cst.ensure_type(updated_node.body, cst.IndentedBlock)
        callspec = updated_node.with_changes(
            body=body.with_changes(body=[*body.body, self.extension.fast_bound_piece])
        )
        return cst.FlattenSentinel([*self.extension.module_piece, callspec])
