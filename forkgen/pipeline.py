"""The whole pipeline as a list of small stages: fetch -> analyze -> apply -> build.

`forkgen build` and `forkgen rebase` both build through `build_fork`: there is one build path.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from codemods.engine import Patch
from forkgen import build as build_stage
from forkgen import locking, patch
from forkgen.cmd import log
from forkgen.errors import UsageError
from forkgen.fetch import default_cache_dir, fetch
from forkgen.model import Analysis, PatchedTree, Pin, Source, Wheel


@dataclass(frozen=True)
class BuildResult:
    """What each stage of one build produced."""

    source: Source | None
    analysis: Analysis
    tree: PatchedTree
    wheel: Wheel


def _overlaps(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def check_source_outside(source_root: Path, workspace: Path, out_dir: Path) -> None:
    """Refuse a local source tree that the build would clear or write into (before touching anything)."""
    for place, what in ((workspace, "the workspace"), (out_dir, "the output directory")):
        if _overlaps(source_root, place):
            raise UsageError(
                f"--source {source_root} overlaps {what} {place}, which the build clears and writes into",
                hint="copy the tree somewhere outside it (e.g. /tmp/keras-src) and build from there",
            )


def build_fork(
    pin: Pin,
    *,
    cache_dir: Path | None,
    workspace: Path,
    out_dir: Path,
    source_root: Path | None = None,
    overlay: Path | None = None,
    isolated: bool = False,
    selected: Sequence[Patch] | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> BuildResult:
    """Fetch (or take `source_root`), analyze, apply and build into `out_dir`.

    The patched tree is written to `workspace/build/<name>`; `on_stage` is told the name of
    each stage as it starts ("fetch", "analyze", "apply", "build"). `cache_dir` None: the
    default download cache (not used with `source_root`).
    """
    started = time.monotonic()
    stage = on_stage or (lambda name: None)
    if source_root is not None:
        check_source_outside(source_root, workspace, out_dir)
    stage("fetch")
    source: Source | None = None
    if source_root is None:
        log(f"[1/4] fetch {pin.distribution}=={pin.version}")
        source = fetch(pin, cache_dir if cache_dir is not None else default_cache_dir())
        source_root = source.root
    else:
        log(f"[1/4] fetch skipped: building from the local tree {source_root} (no sdist sha256 in the provenance)")
    stage("analyze")
    log(f"[2/4] analyze {source_root}")
    analysis = patch.analyze(source_root, selected)
    for outcome in analysis.patches:
        log(f"  {outcome.name} {outcome.version}: {outcome.outcome} ({outcome.detail})")
        for anchor in outcome.anchors:
            log(f"    {anchor.path or outcome.files[0]}:{anchor.line}: {anchor.name}: {anchor.description}")
    stage("apply")
    tree_dir = workspace / "build" / source_root.name
    log(f"[3/4] apply -> {tree_dir}")
    # Each run patches and builds in a private directory beside the workspace tree; only the
    # finished tree replaces the shared one, under its lock, so concurrent builds never see
    # each other's half-written trees.
    with locking.staging_dir(tree_dir.parent, tree_dir.name) as private:
        tree = patch.write(analysis, private / "tree")
        stage("build")
        log(f"[4/4] build -> {out_dir}")
        wheel = build_stage.build(tree, source, pin, out_dir, overlay=overlay, isolated=isolated)
        with locking.hold(tree_dir.with_name(f".{tree_dir.name}{locking.LOCK_SUFFIX}"), f"the workspace tree {tree_dir}"):
            if tree_dir.exists() or tree_dir.is_symlink():
                tree_dir.rename(private / "replaced")
            tree.root.rename(tree_dir)
    tree = dataclasses.replace(tree, root=tree_dir)
    log(f"built {wheel.path.name} (sha256 {wheel.sha256}) in {time.monotonic() - started:.1f} s")
    return BuildResult(source=source, analysis=analysis, tree=tree, wheel=wheel)
