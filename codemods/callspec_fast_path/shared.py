"""What the two CallSpec patches share when the series runs them: one analysis per tree state."""

from __future__ import annotations

from libcst.codemod import CodemodContext, SkipFile

from codemods.callspec_fast_path._base import PatchCommand
from codemods.callspec_fast_path.anchors import LAYER_PY, Analysis, analyze_module, relocate
from codemods.patchlib import AnchorDrift, Sources


def sources_analysis(sources: Sources) -> Analysis:
    """The CallSpec analysis of the current `layer.py` of `sources`, shared by both patches."""
    return sources.memoised(
        "callspec", lambda: analyze_module(sources.module(LAYER_PY), LAYER_PY, sources.text(LAYER_PY), sources.ast(LAYER_PY))
    )


def run_codemods(sources: Sources, commands: tuple[type[PatchCommand], ...], pieces: tuple[str, ...]) -> None:
    """Run `commands` over `layer.py` in `sources`; afterwards every one of `pieces` must be present."""
    analysis = sources_analysis(sources)
    module = sources.module(LAYER_PY)
    for command in commands:
        try:
            module = command(CodemodContext(filename=LAYER_PY), analysis).transform_module(module)
        except SkipFile:
            continue
        analysis = relocate(analysis, module, command.PIECE)
    sources.replace(LAYER_PY, module)
    final = sources_analysis(sources)
    missing = [p for p in pieces if not final.applied[p]]
    if missing:
        raise AnchorDrift(LAYER_PY, 1, "patch", "every piece present after the codemods", f"{', '.join(missing)} missing")
