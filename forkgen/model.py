"""The frozen values the pipeline stages pass along (pin -> fetch -> analyze -> apply -> build)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from codemods.engine import AnchorReport


@dataclass(frozen=True)
class Pin:
    """Which upstream release to patch, from `[tool.forkgen]` or the command line."""

    distribution: str
    version: str
    #: Expected sha256 of the sdist; None when the release is not pinned.
    sha256: str | None
    #: PEP 440 local label of the wheel; None: the series' own (`fast.<digest>`, see codemods.series).
    local_label: str | None = None


@dataclass(frozen=True)
class Source:
    """A verified, unpacked upstream sdist."""

    distribution: str
    version: str
    sha256: str
    archive: Path
    root: Path


@dataclass(frozen=True)
class PatchOutcome:
    """One patch of the series on one tree: applied, upstream, not applicable or drift."""

    name: str
    version: str
    outcome: str
    #: With "applied": the tree already carried the patch (nothing changed).
    present: bool
    #: Where it goes, what shows it is upstream, why it does not apply, or the drift.
    detail: str
    anchors: tuple[AnchorReport, ...]
    files: tuple[str, ...]
    #: (codemod name, version) of the patch's codemods.
    codemods: tuple[tuple[str, str], ...]
    #: DEP-3 Origin and Forwarded.
    origin: str
    forwarded: str
    #: What the patch found worth recording in the provenance (e.g. how many classes its table proves).
    facts: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Analysis:
    """What the selected patches of the series do to a source tree (nothing written yet)."""

    root: Path
    #: The tree's Keras version (from keras/src/version.py), when it has one.
    release: str | None
    patches: tuple[PatchOutcome, ...]
    #: The new text of every file the series changes (empty when the tree already carries it).
    files: Mapping[str, str] = field(repr=False)
    #: The default local label of a wheel of this tree: names the applied patches and versions.
    label: str
    #: The CallSpec variant of the tree's layer.py (V1-V4), when the CallSpec patches read it.
    callspec_variant: str | None = None

    @property
    def applied(self) -> tuple[PatchOutcome, ...]:
        return tuple(p for p in self.patches if p.outcome == "applied")

    @property
    def drifts(self) -> tuple[PatchOutcome, ...]:
        return tuple(p for p in self.patches if p.outcome == "drift")

    @property
    def changed(self) -> bool:
        return bool(self.files)


@dataclass(frozen=True)
class PatchedTree:
    """A complete source tree carrying the selected patches."""

    root: Path
    analysis: Analysis

    @property
    def changed(self) -> bool:
        """False when the input already carried every applied patch and nothing changed."""
        return self.analysis.changed

    @property
    def codemods(self) -> tuple[tuple[str, str], ...]:
        return tuple(c for p in self.analysis.applied for c in p.codemods)


@dataclass(frozen=True)
class Wheel:
    """A built wheel of the fork."""

    path: Path
    version: str
    sha256: str
