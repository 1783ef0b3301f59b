"""Run the three codemods of the patch over one `layer.py` source text."""

from __future__ import annotations

from dataclasses import dataclass

from libcst.codemod import CodemodContext, SkipFile

from codemods._base import PatchCommand
from codemods.add_callspec_fast import AddCallSpecFastCommand
from codemods.anchors import LAYER_PY, AnchorDrift, analyze_module, parse_and_analyze, relocate
from codemods.extend_callspec_fast_path import ExtendCallSpecFastPathCommand
from codemods.guard_callspec_construction import GuardCallSpecConstructionCommand
from codemods.precompute_fast_path_eligibility import (
    PrecomputeFastPathEligibilityCommand,
)

#: The codemods of the base patch (`layer(x)`), in the order they are applied.
BASE_CODEMODS: tuple[type[PatchCommand], ...] = (
    PrecomputeFastPathEligibilityCommand,
    AddCallSpecFastCommand,
    GuardCallSpecConstructionCommand,
)
#: The extension (several positional tensors, `training=<bool>`), applied after the base.
EXTENSION_CODEMODS: tuple[type[PatchCommand], ...] = (ExtendCallSpecFastPathCommand,)
#: Every codemod, in the order they are applied.
CODEMODS = BASE_CODEMODS + EXTENSION_CODEMODS


class PatchRefused(Exception):
    """The source carries more of the patch than was asked for (forkgen never removes code)."""


@dataclass(frozen=True)
class PatchResult:
    source: str
    variant: str
    #: Codemods that changed the source (the others found their piece present).
    applied: tuple[str, ...]
    skipped: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def selected_codemods(extension: bool = True) -> tuple[type[PatchCommand], ...]:
    """The codemods a build runs: the base, and the extension unless switched off."""
    return CODEMODS if extension else BASE_CODEMODS


def codemod_versions(extension: bool = True) -> tuple[tuple[str, str], ...]:
    """(name, version) of every codemod a build runs, for the wheel's provenance."""
    return tuple((c.__name__, c.VERSION) for c in selected_codemods(extension))


def patch_source(source: str, path: str = LAYER_PY, *, extension: bool = True) -> PatchResult:
    """Insert every missing piece of the patch into `source`; the extension
    (several positional tensors, `training=<bool>`) only when `extension`.

    Raises `AnchorDrift` when an anchor is missing, duplicated or reshaped, and
    `PatchRefused` when `source` already carries the extension but
    `extension` is False. An already-patched source comes back byte-identical,
    with every codemod skipped.
    """
    module, analysis = parse_and_analyze(source, path)
    if analysis.applied["extension"] and not extension:
        raise PatchRefused(
            f"{path} already carries the fast-path extension (several positional tensors, training=<bool>); "
            "forkgen adds code and never removes it"
        )
    variant = analysis.variant
    applied: list[str] = []
    skipped: list[str] = []
    for command in selected_codemods(extension):
        try:
            module = command(CodemodContext(filename=path), analysis).transform_module(module)
        except SkipFile:
            skipped.append(command.__name__)
        else:
            applied.append(command.__name__)
            analysis = relocate(analysis, module, command.PIECE)
    result = module.code
    # The result must analyse as fully patched (and so stay byte-identical when
    # patched again). `analyze_module` parses `result` with `ast` too, so text
    # that does not parse is caught without a second libcst parse.
    final = analyze_module(module, path, result)
    if not final.has_pieces(extension):
        missing = ", ".join(k for k, v in final.applied.items() if not v)
        raise AnchorDrift(path, 1, "patch", "every piece present after the codemods", f"{missing} missing")
    return PatchResult(source=result, variant=variant, applied=tuple(applied), skipped=tuple(skipped))
