"""The CallSpec patches on one `layer.py` text, outside the series: what `forkgen report` reads of
a tree (`analyze_source`) and what the unit tests run (`patch_source`)."""

from __future__ import annotations

from dataclasses import dataclass

from codemods.callspec_fast_path import PATCH as BASE
from codemods.callspec_fast_path.variants import LAYER_PY
from codemods.callspec_training_fast_path import PATCH as EXTENSION
from codemods.engine import State
from codemods.patchlib import AnchorDrift, Sources

#: The base patch's pieces by the names reports give them (the plan's helpers and its statements
#: in `Layer.__init__` are one: "eligibility"); "extension" is the whole of the other patch.
BASE_PIECES = ("eligibility", "fast_constructor", "guard")
_REPORTED = {"helpers": "eligibility", "eligibility": "eligibility", "fast": "fast_constructor", "guard": "guard"}


class PatchRefused(Exception):
    """The source carries more of the patch than was asked for (forkgen never removes code)."""


@dataclass(frozen=True)
class SourceAnalysis:
    variant: str
    #: Piece name -> whether the source carries it (`BASE_PIECES` and "extension").
    applied: dict[str, bool]

    @property
    def fully_applied(self) -> bool:
        return all(self.applied.values())


@dataclass(frozen=True)
class PatchResult:
    source: str
    variant: str
    #: The commands that changed the source, and those that found their patch present.
    applied: tuple[str, ...]
    skipped: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def _sources(source: str, path: str) -> Sources:
    return Sources(lambda p: source if p in (path, LAYER_PY) else None)


def _analysis(sources: Sources) -> SourceAnalysis:
    base = BASE.analyze(sources)
    applied = dict.fromkeys(BASE_PIECES, True)
    for occurrence in (o for f in base.files for o in f.occurrences):
        applied[_REPORTED[occurrence.edit.piece]] &= occurrence.state is State.OURS
    try:
        applied["extension"] = all(applied.values()) and EXTENSION.check(sources).present
    except AnchorDrift:
        if all(applied.values()):
            raise
        applied["extension"] = False  # no base for it to build on
    return SourceAnalysis(BASE.variant_of(sources).name, applied)


def analyze_source(source: str, path: str = LAYER_PY) -> SourceAnalysis:
    """Which pieces of the CallSpec patches `source` carries, or AnchorDrift."""
    return _analysis(_sources(source, path))


def patch_source(source: str, path: str = LAYER_PY, *, extension: bool = True) -> PatchResult:
    """`source` with every missing piece of the base patch, and of the extension when `extension`;
    `PatchRefused` when it carries the extension and `extension` is False."""
    sources = _sources(source, path)
    if _analysis(sources).applied["extension"] and not extension:
        raise PatchRefused(f"{path} already carries the fast-path extension (several positional tensors, "
                           "training=<bool>); forkgen adds code and never removes it")
    applied: list[str] = []
    skipped: list[str] = []
    for patch in (BASE, EXTENSION)[: 2 if extension else 1]:
        done = patch.check(sources).present
        (skipped if done else applied).append(patch.codemod)
        if not done:
            patch.apply(sources)
    return PatchResult(sources.text(LAYER_PY) or source, BASE.variant_of(sources).name, tuple(applied), tuple(skipped))
