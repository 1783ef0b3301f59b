"""The CallSpec patches on one `layer.py` text, outside the series: what `forkgen report` reads of
a tree (`analyze_source`, offered with the rules as `CALL_RULES`, the patch's `call_rules`) and
what the unit tests run (`patch_source`).

The extension (`callspec-training-fast-path`) requires this patch, not the reverse: this patch
reaches it through the series (`tolerates`, `Patch.tolerated`), never by importing it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The package imports this module (for `CALL_RULES`): its `PATCH` is read when a function runs.
import codemods.callspec_fast_path as callspec
from codemods.callspec_fast_path import rules
from codemods.engine import LAYER_PY, AnchorDrift, CallRules, Sources, State

#: The patch that builds on this one (its "extension"), which the analysis reports as a whole.
EXTENSION = "callspec-training-fast-path"

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


def _extension() -> callspec.ByVariant:
    extension = callspec.PATCH.tolerated(EXTENSION)
    assert isinstance(extension, callspec.ByVariant), extension  # a CallSpec patch, as this one
    return extension


def _sources(source: str, path: str) -> Sources:
    return Sources(lambda p: source if p in (path, LAYER_PY) else None)


def _analysis(sources: Sources) -> SourceAnalysis:
    base = callspec.PATCH.analyze(sources)
    applied = dict.fromkeys(BASE_PIECES, True)
    for occurrence in (o for f in base.files for o in f.occurrences):
        applied[_REPORTED[occurrence.edit.piece]] &= occurrence.state is State.OURS
    try:
        applied["extension"] = all(applied.values()) and _extension().check(sources).present
    except AnchorDrift:
        if all(applied.values()):
            raise
        applied["extension"] = False  # no base for it to build on
    return SourceAnalysis(callspec.PATCH.variant_of(sources).name, applied)


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
    for patch in (callspec.PATCH, *([_extension()] if extension else [])):
        done = patch.check(sources).present
        (skipped if done else applied).append(patch.codemod)
        if not done:
            patch.apply(sources)
    variant = callspec.PATCH.variant_of(sources).name
    return PatchResult(sources.text(LAYER_PY) or source, variant, tuple(applied), tuple(skipped))


class _CallRules:
    """The CallSpec patches' `CallRules`: those of `rules.py`, and what a `layer.py` text carries."""

    base_pieces = BASE_PIECES
    call_parameters = staticmethod(rules.call_parameters)
    plan_reason = staticmethod(rules.plan_reason)
    bindings_reason = staticmethod(rules.bindings_reason)
    unbound_reason = staticmethod(rules.unbound_reason)

    @staticmethod
    def analyze_source(source: str, path: str) -> SourceAnalysis:
        return analyze_source(source, path)


#: What the base patch offers `forkgen report` (`CallSpecFastPath.call_rules`).
CALL_RULES: CallRules = _CallRules()
