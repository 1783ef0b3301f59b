"""What the three patch codemods share: analyse first, skip what is already there."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst
from libcst.codemod import CodemodContext, SkipFile, VisitorBasedCodemodCommand

from codemods import templates
from codemods.anchors import LAYER_PY, Analysis, analyze_module
from codemods.templates import Template


class PatchCommand(VisitorBasedCodemodCommand):
    """Base of the codemods that insert one piece of the CallSpec fast path.

    `transform_module_impl` runs the anchor analysis on the module (raising
    `AnchorDrift` when upstream moved), skips the file when the piece is already
    present, and otherwise lets the visitor methods of the subclass insert it.
    """

    #: Key of the piece in `Analysis.applied`.
    PIECE: ClassVar[str]
    #: Bumped whenever the inserted code changes; recorded in the wheel's provenance.
    VERSION: ClassVar[str]

    def __init__(self, context: CodemodContext) -> None:
        super().__init__(context)
        self._analysis: Analysis | None = None
        self._template: Template | None = None

    @property
    def analysis(self) -> Analysis:
        assert self._analysis is not None, "transform_module_impl sets it"
        return self._analysis

    @property
    def template(self) -> Template:
        assert self._template is not None, "transform_module_impl sets it"
        return self._template

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        path = self.context.filename or LAYER_PY
        self._analysis = analyze_module(tree, path)
        if self._analysis.applied[self.PIECE]:
            raise SkipFile(f"{self.PIECE} is already applied")
        self._template = templates.load(self._analysis.variant)
        return super().transform_module_impl(tree)
