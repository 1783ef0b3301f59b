"""What the three patch codemods share: analyse first, skip what is already there."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst
from libcst.codemod import CodemodContext, SkipFile

from codemods.callspec_fast_path import templates
from codemods.callspec_fast_path.anchors import LAYER_PY, Analysis, analyze_module
from codemods.callspec_fast_path.templates import Template
from codemods.patchlib import PlainCommand, statement_ancestors


class PatchCommand(PlainCommand):
    """Base of the codemods that insert one piece of the CallSpec fast path.

    `transform_module_impl` runs the anchor analysis on the module (raising
    `AnchorDrift` when upstream moved), skips the file when the piece is already
    present, and otherwise lets the visitor methods of the subclass insert it.
    """

    #: Key of the piece in `Analysis.applied`.
    PIECE: ClassVar[str]
    #: Which of Layer's methods the codemod rewrites statements in (empty: none).
    DESCEND_INTO: ClassVar[tuple[str, ...]] = ()
    #: Bumped whenever the inserted code changes; recorded in the wheel's provenance.
    VERSION: ClassVar[str]
    #: Pieces that must be present before this codemod runs.
    REQUIRES: ClassVar[tuple[str, ...]] = ()
    #: The fields of `Analysis` naming the statements the codemod rewrites (the visit only
    #: goes down to them).
    TARGETS: ClassVar[tuple[str, ...]]

    def __init__(self, context: CodemodContext, analysis: Analysis | None = None) -> None:
        """`analysis`, when given, must be that of the module to transform
        (forkgen's pipeline passes it to avoid analysing the module three times)."""
        super().__init__(context)
        self._given_analysis = analysis
        self._analysis: Analysis | None = None
        self._template: Template | None = None
        self._paths: set[int] = set()

    @property
    def analysis(self) -> Analysis:
        assert self._analysis is not None, "transform_module_impl sets it"
        return self._analysis

    @property
    def template(self) -> Template:
        assert self._template is not None, "transform_module_impl sets it"
        return self._template

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Only the nodes leading to the statements the codemod rewrites are visited: the rest
        # of the module is kept as it is, without being rebuilt.
        return id(node) in self._paths and super().on_visit(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        # Only Layer's body holds statements to rewrite; CallSpec is rewritten
        # as a whole in `leave_ClassDef`. Skipping the rest keeps a pass over
        # Keras's 2,000-line layer.py cheap.
        return bool(self.DESCEND_INTO) and node is self.analysis.layer_class

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return ("__init__" in self.DESCEND_INTO and node is self.analysis.layer_init) or (
            "__call__" in self.DESCEND_INTO and node is self.analysis.layer_call
        )

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        path = self.context.filename or LAYER_PY
        self._analysis = self._given_analysis or analyze_module(tree, path)
        if self._analysis.applied[self.PIECE]:
            raise SkipFile(f"{self.PIECE} is already applied")
        missing = [p for p in self.REQUIRES if not self._analysis.applied[p]]
        if missing:
            raise ValueError(f"{type(self).__name__} needs the pieces {', '.join(missing)} applied first")
        self._template = templates.load(self._analysis.variant)
        targets = [getattr(self._analysis, name) for name in self.TARGETS]
        self._paths = statement_ancestors(tree, [t for t in targets if t is not None])
        return super().transform_module_impl(tree)
