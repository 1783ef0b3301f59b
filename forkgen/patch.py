"""Analyze and apply stages: run the codemods over a source tree, atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from codemods.anchors import LAYER_PY, AnchorDrift, analyze_source
from codemods.patch import PatchRefused, codemod_versions, patch_source
from forkgen.cmd import log
from forkgen.errors import UpstreamDriftError, UsageError
from forkgen.model import Anchors, PatchedTree


def _drift(error: AnchorDrift) -> UpstreamDriftError:
    return UpstreamDriftError(f"upstream drift: {error}")


def require_keras_tree(root: Path) -> None:
    """Refuse (usage error, exit 2) a `root` that is not a Keras 3 source tree at all.

    A Keras 3 tree, whether an unpacked sdist or a site-packages directory, holds the package
    `keras/src/`; one that has it but lacks the code the patch needs is upstream drift (exit 5),
    reported by the caller.
    """
    if not root.is_dir():
        raise UsageError(f"source tree {root} does not exist or is not a directory")
    if (root / "keras" / "src").is_dir():
        return
    inner = sorted(p for p in root.iterdir() if (p / "keras" / "src").is_dir()) if root.is_dir() else []
    hint = "SRC is the root of an unpacked Keras 3 sdist (what `forkgen fetch` prints) or a site-packages directory"
    if len(inner) == 1:
        hint = f"did you mean {inner[0]}? " + hint
    raise UsageError(f"{root} is not a Keras source tree (it has no keras/src/)", hint=hint)


def _read_layer(root: Path) -> str:
    require_keras_tree(root)
    layer = root / LAYER_PY
    if not layer.is_file():
        raise UpstreamDriftError(
            f"upstream drift: {root}: no {LAYER_PY}",
            hint="this Keras tree keeps Layer elsewhere: pin a release forkgen supports",
        )
    return layer.read_bytes().decode("utf-8")


def analyze(root: Path) -> Anchors:
    """Locate every anchor of the patch in the tree at `root`."""
    try:
        analysis = analyze_source(_read_layer(root), LAYER_PY)
    except AnchorDrift as error:
        raise _drift(error) from None
    return Anchors(
        root=root,
        path=analysis.path,
        variant=analysis.variant,
        anchors=analysis.anchors,
        applied=dict(analysis.applied),
        required_names=analysis.required_names,
    )


def apply(root: Path, out: Path, *, extension: bool = True) -> PatchedTree:
    """Write the patched copy of the tree at `root` to `out`, which must not exist;
    with the fast-path extension (several positional tensors, `training=<bool>`)
    unless `extension` is False.

    `out` appears only once complete: the copy is made next to it and renamed.
    """
    if out.exists():
        raise UsageError(f"output directory {out} already exists", hint="remove it or choose another --out")
    source = _read_layer(root)
    try:
        result = patch_source(source, LAYER_PY, extension=extension)
    except AnchorDrift as error:
        raise _drift(error) from None
    except PatchRefused as error:
        raise UsageError(str(error), hint="build from the unpatched upstream tree, or leave the extension on") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        staged = tmp / "tree"
        shutil.copytree(root, staged, symlinks=True)
        (staged / LAYER_PY).write_bytes(result.source.encode("utf-8"))
        os.replace(staged, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if result.changed:
        log(f"patched {LAYER_PY} (variant {result.variant}): {', '.join(result.applied)}")
    else:
        log(f"{LAYER_PY} is already patched; nothing changed")
    return PatchedTree(
        root=out,
        variant=result.variant,
        codemods=codemod_versions(extension),
        changed=result.changed,
        extension=extension,
    )
