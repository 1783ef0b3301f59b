"""Codemod: add the `CallSpec._fast` classmethod that fills the fields of `layer(x)`."""

from __future__ import annotations

import libcst as cst

from codemods.callspec_fast_path._base import PatchCommand


class AddCallSpecFastCommand(PatchCommand):
    DESCRIPTION: str = (
        "Add the classmethod CallSpec._fast, which builds the CallSpec of "
        "layer(x) directly, equal to the one CallSpec.__init__ builds."
    )
    PIECE = "fast_constructor"
    VERSION = "1"
    TARGETS = ("callspec_class",)

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> cst.ClassDef:
        # Appended after `__init__`, the only member CallSpec has in every release.
        if original_node is not self.analysis.callspec_class:
            return updated_node
        body = cst.ensure_type(updated_node.body, cst.IndentedBlock)
        return updated_node.with_changes(
            body=body.with_changes(body=[*body.body, self.template.fast_piece])
        )
