"""`DeclaredCommand`: the libcst command the engine makes for every declared patch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import libcst as cst
from libcst.codemod import Codemod, CodemodContext, SkipFile, VisitorBasedCodemodCommand

from codemods.engine.finding import Analysis, FileAnalysis, State
from codemods.engine.patch import AnchorDrift, Check, Outcome, Sources

if TYPE_CHECKING:
    from codemods.engine.declared import DeclaredPatch


def _explained(patch: DeclaredPatch, alone: Sources, drift: AnchorDrift, path: str, filename: str | None) -> NoReturn:
    """Raise `drift` as the patch's `explain` words it, naming the file the command was given."""
    try:
        patch.explain(alone, drift)
    except AnchorDrift as told:
        drift = told
    if drift.path != path or not filename:
        raise drift
    raise AnchorDrift(filename, drift.line, drift.anchor, drift.expected, drift.found) from None


class DeclaredCommand(VisitorBasedCodemodCommand):
    """The libcst command of a `DeclaredPatch`: its edits of one file, by one transformer that
    visits only the statements leading to them (the rest of the module is kept, not rebuilt).

    It uses no libcst metadata and no matcher decorators, so it skips what those cost: the deep
    copy `Codemod.transform_module` makes for a MetadataWrapper (of a 2,000-line layer.py), and
    `MatcherDecoratableTransformer`'s search for decorated methods on every instance and its
    bookkeeping on every node visited."""

    PATCH: ClassVar[DeclaredPatch]

    def __init__(self, context: CodemodContext, analysis: FileAnalysis | None = None,
                 patch: DeclaredPatch | None = None) -> None:
        """`analysis`: the patch's analysis of the module to transform, when the caller made it
        (the series hands over its check's: the module is then not analysed again); `patch`: the
        instance that plans the edits (the series' own, whose `fill` may use what its `apply`
        derived from the whole tree; default `PATCH`)."""
        Codemod.__init__(self, context)  # without MatcherDecoratableTransformer's initialisation
        self._given = analysis
        self._planner = patch or self.PATCH
        self._path: set[int] = set()
        self._plan: dict[int, Callable[[Any], Any]] = {}

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        analysis = self._given
        if analysis is None or analysis.module is not tree:
            patch, filename = self.PATCH, self.context.filename
            path = next((f for f in patch.files if filename and filename.endswith(f)), patch.files[0])
            # Alone, the module is the tree: upstream's shape of it is no drift either; else the
            # drift is worded as in the series (`explain`), naming the file given.
            alone = Sources(lambda p: tree.code if p == path else None)
            try:
                analysis = patch.analyze_module(tree, path, filename or path)
            except AnchorDrift as drift:
                upstream = patch._upstream(alone)
                if upstream is None:
                    _explained(patch, alone, drift, path, filename)
                raise SkipFile(f"{patch.name}: upstream's already ({upstream[0]})") from None
            # As in the series: upstream's shape, partial presence, names, relied-on anchors, verify.
            upstream = None if any(o.state is State.OURS for o in analysis.occurrences) else patch._upstream(alone)
            try:
                theirs = upstream is not None or patch.decide([analysis]) is Outcome.UPSTREAM
                if not theirs:
                    patch.check_names(analysis)
                    for anchor in (a for a in patch.relies_on if patch.file_of(a) == path):
                        patch._relied_on(alone, anchor)
                    patch.verify(alone, Analysis((analysis,), Check(Outcome.APPLIED, "", (), present=not analysis.todo)))
            except AnchorDrift as drift:
                _explained(patch, alone, drift, path, filename)
            if theirs:
                raise SkipFile(f"{patch.name}: upstream's already ({(upstream or (patch.details.upstream,))[0]})")
        if not analysis.todo:
            raise SkipFile(f"{self.PATCH.name}: applied already")
        self._path, self._plan = self._planner.plan(analysis)
        return super().transform_module_impl(tree)

    def transform_module(self, tree: cst.Module) -> cst.Module:
        return self.transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    on_visit_attribute = cst.CSTTransformer.on_visit_attribute
    on_leave_attribute = cst.CSTTransformer.on_leave_attribute

    def on_leave(self, original_node: Any, updated_node: Any) -> Any:
        edit = self._plan.get(id(original_node))
        return updated_node if edit is None else edit(updated_node)
