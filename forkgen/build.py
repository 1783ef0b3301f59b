"""Build stage: stamp the fork's version and provenance into a copy of the tree, build the wheel."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

import forkgen
from codemods.engine import AnchorDrift, switching
from codemods.stamp_version import (
    OTHER_VERSION_SOURCES,
    VERSION_PY,
    has_version_literal,
    stamp_version,
)
from forkgen import locking
from forkgen import overlay as overlay_readme
from forkgen.cmd import log, run, tail
from forkgen.errors import BuildError, UpstreamDriftError, UsageError
from forkgen.fetch import sha256_of
from forkgen.model import PatchedTree, Pin, Source, Wheel
from forkgen.provenance import PROVENANCE_PY, codemods_digest, parse_module, render_module


def fork_version(upstream: str, label: str) -> str:
    """The upstream version with the fork's PEP 440 local label, e.g. 3.15.1+fastcallspec.1."""
    try:
        version = Version(f"{upstream}+{label}")
    except InvalidVersion:
        raise BuildError(f"{upstream}+{label} is not a valid PEP 440 version") from None
    return str(version)


def source_date_epoch(source: Source | None) -> int:
    """A timestamp derived from the pinned input: the newest member of the sdist."""
    if source is None:
        return 315532800  # 1980-01-01, the earliest time a zip file can hold
    with tarfile.open(source.archive, "r:*") as tar:
        return max(315532800, max(int(m.mtime) for m in tar.getmembers()))


def switches_of(root: Path) -> dict[str, dict[str, Any]]:
    """Each switched patch's run-time switch, from the tree's switches module (written by the
    series): how to disable it, and which patches go with it."""
    path = root / switching.SWITCHES_PY
    if not path.is_file():
        return {}
    requires, groups = switching.read_switches(path.read_text(encoding="utf-8"))
    return {name: {"disable": f"{switching.VARIABLE}={name}",
                   "also_disables": [p for p in requires if p in switching.closure({name}, requires, groups) - {name}]}
            for name in requires}


def make_provenance(
    source: Source | None, tree: PatchedTree, pin: Pin, version: str, epoch: int
) -> dict[str, Any]:
    analysis = tree.analysis
    patched = sorted({*analysis.files, *(f for p in analysis.applied for f in p.files)})
    switched = switches_of(tree.root)
    return {
        "upstream": {
            "distribution": pin.distribution,
            "version": pin.version,
            "sdist_sha256": source.sha256 if source else None,
            "sdist": source.archive.name if source else None,
        },
        "fork_version": version,
        "callspec_variant": analysis.callspec_variant,
        "codemods": {name: codemod_version for name, codemod_version in tree.codemods},
        # Every patch of the selection with its outcome on this release, in series order.
        "patches": [
            {"name": p.name, "version": p.version, "outcome": p.outcome, "origin": p.origin, "forwarded": p.forwarded,
             "files": list(p.files), **({"switch": switched[p.name]} if p.name in switched else {}),
             **({"facts": dict(p.facts)} if p.facts else {})}
            for p in analysis.patches
        ],
        "series_label": analysis.label,
        "training_fast_path": any(p.name == "callspec-training-fast-path" for p in analysis.applied),
        "forkgen_version": forkgen.__version__,
        "codemods_digest": codemods_digest(),
        "source_date_epoch": epoch,
        "build_timestamp": dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(),
        "patched_files": {f: hashlib.sha256((tree.root / f).read_bytes()).hexdigest() for f in patched},
    }


def _stage(tree: PatchedTree, staging: Path, pin: Pin, version: str,
           provenance: dict[str, Any], overlay: Path | None) -> None:
    shutil.copytree(tree.root, staging, symlinks=True)
    # setuptools regenerates the egg-info; a stale one would carry the upstream version.
    for stale in staging.glob("*.egg-info"):
        shutil.rmtree(stale)
    if not (staging / VERSION_PY).is_file():
        raise UpstreamDriftError(f"upstream drift: {VERSION_PY} not found in {tree.root}")
    for relative in (VERSION_PY, *OTHER_VERSION_SOURCES):
        path = staging / relative
        if not path.is_file():
            continue
        source = path.read_bytes().decode("utf-8")
        if relative != VERSION_PY and not has_version_literal(source):
            continue
        try:
            stamped = stamp_version(source, pin.version, version, relative)
        except AnchorDrift as error:
            raise UpstreamDriftError(f"upstream drift: {error}") from None
        path.write_bytes(stamped.encode("utf-8"))
    (staging / PROVENANCE_PY).write_text(render_module(provenance), encoding="utf-8")
    if overlay is not None:
        for item in sorted(overlay.rglob("*")):
            if item.is_file():
                target = staging / item.relative_to(overlay)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(item, target)
        readme = overlay / overlay_readme.README
        if readme.is_file():  # the long description: what changes with the series is generated
            text = overlay_readme.fill(readme.read_text(encoding="utf-8"), provenance)
            (staging / overlay_readme.README).write_text(text, encoding="utf-8")


def _normalise_wheel(path: Path, epoch: int) -> None:
    """Rewrite the wheel so that nothing of the build machine is in it: every entry gets
    the timestamp derived from the pin and mode 0644 (the builder's umask and the
    sdist's own modes otherwise leak in), in the order the build wrote them."""
    stamp = dt.datetime.fromtimestamp(max(epoch, 315532800), dt.UTC).timetuple()[:6]
    normalised = path.with_name(path.name + ".normalised")
    with zipfile.ZipFile(path) as original, zipfile.ZipFile(normalised, "w", zipfile.ZIP_DEFLATED) as target:
        for entry in original.infolist():
            info = zipfile.ZipInfo(entry.filename, date_time=stamp)
            info.external_attr = (0o100644 if not entry.is_dir() else 0o40755) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, so that the mode above is read
            target.writestr(info, original.read(entry.filename))
    os.replace(normalised, path)


def _check_wheel(path: Path, pin: Pin, version: str, provenance: dict[str, Any]) -> None:
    """The built wheel must carry the version, the provenance and every patched file as patched."""
    name, wheel_version, _, _ = parse_wheel_filename(path.name)
    if canonicalize_name(name) != canonicalize_name(pin.distribution) or str(wheel_version) != version:
        raise BuildError(f"built {path.name}, expected {pin.distribution} {version}")
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        for required in (PROVENANCE_PY, VERSION_PY, *provenance["patched_files"]):
            if required not in names:
                raise BuildError(f"built wheel {path.name} lacks {required}")
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = HeaderParser().parsestr(wheel.read(metadata_name).decode("utf-8"))
        if metadata["Version"] != version:
            raise BuildError(f"built wheel says version {metadata['Version']}, expected {version}")
        if parse_module(wheel.read(PROVENANCE_PY).decode("utf-8")) != provenance:
            raise BuildError(f"built wheel {path.name} carries different provenance")
        for relative, digest in provenance["patched_files"].items():
            if hashlib.sha256(wheel.read(relative)).hexdigest() != digest:
                raise BuildError(f"{relative} in the built wheel is not the patched file")


def build(
    tree: PatchedTree,
    source: Source | None,
    pin: Pin,
    out_dir: Path,
    *,
    overlay: Path | None = None,
    isolated: bool = False,
) -> Wheel:
    """Build the fork's wheel from `tree` into `out_dir` with the PyPA build frontend."""
    if overlay is not None and not overlay.is_dir():
        raise UsageError(
            f"the overlay directory {overlay} ([tool.forkgen] overlay) does not exist",
            hint="restore it (it holds the fork's README, the wheel's long description) or remove the setting",
        )
    version = fork_version(pin.version, pin.local_label or tree.analysis.label)
    epoch = source_date_epoch(source)
    provenance = make_provenance(source, tree, pin, version, epoch)
    out_dir.mkdir(parents=True, exist_ok=True)
    with locking.staging_dir(out_dir, "build") as tmp:
        staging = tmp / "src"
        _stage(tree, staging, pin, version, provenance, overlay)
        dist = tmp / "dist"
        log(f"building {pin.distribution} {version} with the PyPA build frontend")
        args = [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist)]
        if not isolated:
            args.append("--no-isolation")
        result = run([*args, str(staging)], env={"SOURCE_DATE_EPOCH": str(epoch)}, capture=True)
        if result.returncode != 0:
            hint = None
            if "Missing dependencies" in result.stdout:
                hint = "install the build requirements next to forkgen, or pass --isolated-build"
            raise BuildError(f"python -m build failed:\n{tail(result.stdout, 12)}", hint=hint)
        wheels = sorted(dist.glob("*.whl"))
        if len(wheels) != 1:
            raise BuildError(f"python -m build produced {len(wheels)} wheels, expected 1")
        _normalise_wheel(wheels[0], epoch)
        _check_wheel(wheels[0], pin, version, provenance)
        target = out_dir / wheels[0].name
        os.replace(wheels[0], target)
    return Wheel(path=target, version=version, sha256=sha256_of(target))
