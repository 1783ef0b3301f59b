"""The frozen values the pipeline stages pass along (pin -> fetch -> analyze -> apply -> build)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codemods.anchors import AnchorReport


@dataclass(frozen=True)
class Pin:
    """Which upstream release to patch, from `[tool.forkgen]` or the command line."""

    distribution: str
    version: str
    #: Expected sha256 of the sdist; None when the release is not pinned.
    sha256: str | None
    local_label: str = "fastcallspec.2"


@dataclass(frozen=True)
class Source:
    """A verified, unpacked upstream sdist."""

    distribution: str
    version: str
    sha256: str
    archive: Path
    root: Path


@dataclass(frozen=True)
class Anchors:
    """Where the patch goes in a source tree, and how much of it is there already."""

    root: Path
    path: str
    variant: str
    anchors: tuple[AnchorReport, ...]
    applied: dict[str, bool]
    required_names: tuple[str, ...]


@dataclass(frozen=True)
class PatchedTree:
    """A complete source tree carrying the patch."""

    root: Path
    variant: str
    #: (codemod name, codemod version) of every codemod of the patch.
    codemods: tuple[tuple[str, str], ...]
    #: False when the input was already patched and nothing changed.
    changed: bool
    #: Whether the tree carries the extension (several positional tensors, `training=<bool>`).
    extension: bool = True


@dataclass(frozen=True)
class Wheel:
    """A built wheel of the fork."""

    path: Path
    version: str
    sha256: str
