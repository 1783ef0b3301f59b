"""Run the CallSpec codemods (the base's three, the extension's one) over `layer.py`.

`patch_source` runs them on one source text, as the unit tests and libcst's runner see it;
the series runs them through `shared.run_codemods`, on the parsed modules every patch shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from libcst.codemod import CodemodContext, SkipFile

from codemods.callspec_fast_path._base import PatchCommand
from codemods.callspec_fast_path.add_callspec_fast import AddCallSpecFastCommand
from codemods.callspec_fast_path.anchors import (
    LAYER_PY,
    analyze_module,
    parse_and_analyze,
    relocate,
)
from codemods.callspec_fast_path.guard_callspec_construction import GuardCallSpecConstructionCommand
from codemods.callspec_fast_path.precompute_fast_path_eligibility import (
    PrecomputeFastPathEligibilityCommand,
)
from codemods.callspec_training_fast_path.extend_callspec_fast_path import (
    ExtendCallSpecFastPathCommand,
)
from codemods.patchlib import AnchorDrift

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

