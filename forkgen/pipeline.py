"""The whole pipeline as a list of small stages: fetch -> analyze -> apply -> build."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from forkgen import build as build_stage
from forkgen import patch
from forkgen.cmd import log
from forkgen.fetch import fetch
from forkgen.model import Pin, Source, Wheel


def build_fork(
    pin: Pin,
    *,
    cache_dir: Path,
    workspace: Path,
    out_dir: Path,
    source_root: Path | None = None,
    overlay: Path | None = None,
    isolated: bool = False,
    extension: bool = True,
) -> Wheel:
    """Fetch (or take `source_root`), analyze, apply and build; return the wheel."""
    started = time.monotonic()
    source: Source | None = None
    if source_root is None:
        log(f"[1/4] fetch {pin.distribution}=={pin.version}")
        source = fetch(pin, cache_dir)
        source_root = source.root
    else:
        log(f"[1/4] fetch skipped: building from the local tree {source_root} (no sdist sha256 in the provenance)")
    log(f"[2/4] analyze {source_root}")
    anchors = patch.analyze(source_root)
    for anchor in anchors.anchors:
        log(f"  {anchors.path}:{anchor.line}: {anchor.name}: {anchor.description}")
    tree_dir = workspace / "build" / source_root.name
    log(f"[3/4] apply -> {tree_dir}")
    if tree_dir.exists():
        shutil.rmtree(tree_dir)
    tree = patch.apply(source_root, tree_dir, extension=extension)
    log(f"[4/4] build -> {out_dir}")
    wheel = build_stage.build(tree, source, pin, out_dir, overlay=overlay, isolated=isolated)
    log(f"built {wheel.path.name} (sha256 {wheel.sha256}) in {time.monotonic() - started:.1f} s")
    return wheel
