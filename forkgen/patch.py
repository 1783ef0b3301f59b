"""Analyze and apply stages: run the patch series over a source tree, atomically."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemods import series
from codemods.engine import LAYER_PY, AnchorReport, Patch
from codemods.stamp_version import VERSION_PY, read_version
from forkgen import locking
from forkgen.cmd import log
from forkgen.errors import UpstreamDriftError, UsageError
from forkgen.fetch import default_cache_dir, tree_digest
from forkgen.model import Analysis, PatchedTree, PatchOutcome


def require_keras_tree(root: Path) -> None:
    """Refuse (usage error, exit 2) a `root` that is not a Keras 3 source tree at all.

    A Keras 3 tree, whether an unpacked sdist or a site-packages directory, holds the package
    `keras/src/`; one that has it but lacks the code a patch needs is upstream drift (exit 5),
    reported by the caller.
    """
    if not root.is_dir():
        raise UsageError(f"source tree {root} does not exist or is not a directory")
    if (root / "keras" / "src").is_dir():
        return
    inner = sorted(p for p in root.iterdir() if (p / "keras" / "src").is_dir())
    hint = "SRC is the root of an unpacked Keras 3 sdist (what `forkgen fetch` prints) or a site-packages directory"
    if len(inner) == 1:
        hint = f"did you mean {inner[0]}? " + hint
    raise UsageError(f"{root} is not a Keras source tree (it has no keras/src/)", hint=hint)


class DerivedStore:
    """What the series derives from a tree (`codemods.engine.Store`), as files under `root`
    (`$FORKGEN_CACHE_DIR/derived`): written atomically (a private file renamed into place, so
    concurrent runs see a whole entry or none); a directory that cannot be read or written is
    passed by (the patch derives again)."""

    KEY = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        if not self.KEY.fullmatch(key) or ".." in key.split("/"):
            raise ValueError(f"not a key of the derived store: {key!r}")
        return self.root / key

    def get(self, key: str) -> str | None:
        try:
            return self._path(key).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def put(self, key: str, text: str) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=".", suffix=".tmp",
                                             delete=False) as f:
                f.write(text)
        except OSError:
            return
        try:
            os.replace(f.name, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(f.name)


def _listing(root: Path) -> Callable[[], list[str]]:
    """The tree's Python files, relative (what a patch analysing the whole tree reads)."""
    def listing() -> list[str]:
        return [p.relative_to(root).as_posix() for p in (root / "keras").rglob("*.py") if p.is_file()]

    return listing


def _reader(root: Path) -> Callable[[str], str | None]:
    def read(relative: str) -> str | None:
        path = root / relative
        return path.read_bytes().decode("utf-8") if path.is_file() else None

    return read


def selection(
    configured: Sequence[str] | None = None, only: Sequence[str] = (), without: Sequence[str] = ()
) -> tuple[Patch, ...]:
    """The patches to apply: [tool.forkgen] patches, then --patch / --without-patch."""
    try:
        return series.select(series.load_series(), configured, only, without)
    except series.SelectionError as error:
        raise UsageError(str(error), hint="`forkgen series` lists the patches") from None


def analyze_series(root: Path, selected: Sequence[Patch] | None = None) -> Analysis:
    """Every selected patch's outcome on the tree at `root` (drift included, not raised)."""
    require_keras_tree(root)
    chosen = tuple(selected) if selected is not None else selection()
    version_py = root / VERSION_PY
    release = read_version(version_py.read_text(encoding="utf-8")) if version_py.is_file() else None
    if not (root / LAYER_PY).is_file():
        raise UpstreamDriftError(
            f"upstream drift: {root}: no {LAYER_PY}",
            hint="this Keras tree keeps Layer elsewhere: pin a release forkgen supports",
        )
    result = series.run(_reader(root), chosen, release=release, series=series.load_series(),
                        listing=_listing(root), store=DerivedStore(default_cache_dir() / "derived"))
    if result.present_but_unselected:
        raise UsageError(
            f"{root} already carries {', '.join(result.present_but_unselected)}, which the selection leaves out; "
            "forkgen adds code and never removes it",
            hint="build from the unpatched upstream tree, or keep those patches selected",
        )
    outcomes = tuple(
        PatchOutcome(
            name=r.patch.name,
            version=r.patch.version,
            outcome=r.outcome.value,
            present=r.check.present,
            detail=r.check.detail,
            anchors=r.check.anchors,
            files=_outcome_files(root, r.patch.files, r.check.anchors),
            codemods=tuple(r.patch.codemod_versions().items()),
            origin=r.patch.headers.origin,
            forwarded=r.patch.headers.forwarded,
            facts=tuple(sorted(r.check.facts.items())),
        )
        for r in result.results
    )
    variant = next((r.check.facts["callspec_variant"] for r in result.results if "callspec_variant" in r.check.facts), None)
    return Analysis(
        root=root,
        release=release,
        patches=outcomes,
        files=result.files,
        label=result.label(),
        callspec_variant=variant,
    )


class SeriesDriftError(UpstreamDriftError):
    """Drift of one or more patches of the series, with the whole analysis (every patch's
    outcome) for reports such as the rebase summary."""

    def __init__(self, message: str, analysis: Analysis) -> None:
        super().__init__(message)
        self.analysis = analysis


def drift_error(analysis: Analysis) -> SeriesDriftError | None:
    """The error for every drifted patch of `analysis` (None when none drifted)."""
    if not analysis.drifts:
        return None
    lines = [f"upstream drift: {p.detail}" + (f" (patch {p.name})" if len(analysis.patches) > 1 else "") for p in analysis.drifts]
    return SeriesDriftError("\n".join(lines), analysis)


def _outcome_files(root: Path, declared: Sequence[str], anchors: Sequence[AnchorReport]) -> tuple[str, ...]:
    """The files a patch reads in this tree: those it declares that the tree has, then the
    files its anchors name (a patch that finds its code elsewhere in some releases, such as
    keras-nightly's `backend/torch/ops/core.py`, names that file on its anchors); the declared
    ones when neither is found (a patch that does not apply)."""
    found = [f for f in declared if (root / f).is_file()]
    found += [a.path for a in anchors if a.path and (root / a.path).is_file()]
    return tuple(dict.fromkeys(found)) or tuple(declared)


def analyze(root: Path, selected: Sequence[Patch] | None = None) -> Analysis:
    """Every selected patch's outcome on the tree at `root`; raise on drift."""
    analysis = analyze_series(root, selected)
    error = drift_error(analysis)
    if error is not None:
        raise error
    return analysis


def write(analysis: Analysis, out: Path) -> PatchedTree:
    """Write the patched copy of `analysis.root` to `out`, which must not exist.

    `out` appears only once complete: the copy is made in a private directory beside it and
    renamed. A run that finds `out` made meanwhile by another run with the same files counts
    as done; other files there are refused.
    """
    if out.exists():
        raise UsageError(f"output directory {out} already exists", hint="remove it or choose another --out")
    with locking.staging_dir(out.parent, out.name) as tmp:
        staged = tmp / "tree"
        shutil.copytree(analysis.root, staged, symlinks=True)
        for relative, text in analysis.files.items():
            (staged / relative).write_bytes(text.encode("utf-8"))
        if not locking.rename_dir(staged, out):
            if tree_digest(out) != tree_digest(staged):
                raise UsageError(
                    f"output directory {out} appeared while this run wrote it, with other files",
                    hint="another run wrote there at the same time; remove it or choose another --out",
                )
            log(f"another run wrote the same patched tree to {out} first; keeping it")
    for patch in analysis.patches:
        state = "already in the tree" if patch.present else patch.outcome
        log(f"  {patch.name} {patch.version}: {state}" + (f" ({patch.detail})" if patch.outcome != "applied" else ""))
    if analysis.changed:
        log(f"patched {', '.join(sorted(analysis.files))}")
    else:
        log("the tree already carries every applied patch; nothing changed")
    return PatchedTree(root=out, analysis=analysis)


def apply(root: Path, out: Path, selected: Sequence[Patch] | None = None) -> PatchedTree:
    """Analyze the tree at `root` and write its patched copy to `out` (see `write`)."""
    if out.exists():
        raise UsageError(f"output directory {out} already exists", hint="remove it or choose another --out")
    return write(analyze(root, selected), out)


@dataclass(frozen=True)
class AnalysisReport:
    """What `forkgen analyze` prints: the series' analysis of the tree at `src` (as given), and
    the drift that stops it, if any."""

    src: str
    analysis: Analysis
    error: UpstreamDriftError | None = None

    def to_json(self) -> dict[str, Any]:
        document = {"ok": self.error is None, **_analysis_json(self.analysis)}
        if self.error is not None:
            document.update(exit_code=self.error.exit_code, error=self.error.message)
        return document

    def to_text(self) -> str:
        analysis = self.analysis
        lines = [f"{self.src}: keras {analysis.release or '(no version)'}"
                 + (f", CallSpec variant {analysis.callspec_variant}" if analysis.callspec_variant else "")]
        for outcome in analysis.patches:
            lines.append(f"  {outcome.name} {outcome.version}: {_state(outcome)}: {outcome.detail}")
            lines += [f"    {a.path or outcome.files[0]}:{a.line}: {a.name}: {a.description}" for a in outcome.anchors]
        if self.error is None:
            lines.append(f"the series can be applied: wheel label {analysis.label}" if analysis.changed
                         else f"the tree already carries every applied patch: wheel label {analysis.label}")
        return "\n".join(lines)


def _analysis_json(analysis: Analysis) -> dict[str, Any]:
    return {
        "source": str(analysis.root),
        "release": analysis.release,
        "callspec_variant": analysis.callspec_variant,
        "label": analysis.label,
        "patches": [
            {
                "name": p.name,
                "version": p.version,
                "outcome": p.outcome,
                "present": p.present,
                "detail": p.detail,
                "files": list(p.files),
                "anchors": [
                    {"name": a.name, "file": a.path or p.files[0], "line": a.line, "description": a.description}
                    for a in p.anchors
                ],
            }
            for p in analysis.patches
        ],
        "changes": sorted(analysis.files),
    }


def _state(outcome: PatchOutcome) -> str:
    if outcome.outcome == "applied":
        return "applied (already in the tree)" if outcome.present else "applied (can be applied)"
    return outcome.outcome


@dataclass(frozen=True)
class SeriesListing:
    """What `forkgen series` prints: every patch with its DEP-3 headers, and which are selected."""

    patches: Sequence[Patch]
    selected: frozenset[str]

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"name": p.name, "version": p.version, "selected": p.name in self.selected, "files": list(p.files),
             "requires": list(p.requires), "since": p.since, "switch": p.switch,
             "codemods": p.codemod_versions(), **{k.replace("_", "-"): v for k, v in vars(p.headers).items()}}
            for p in self.patches
        ]

    def to_text(self) -> str:
        lines = []
        for p in self.patches:
            h = p.headers
            lines += [f"{' ' if p.name in self.selected else '-'} {p.name} {p.version}",
                      f"    Description: {h.description}", f"    Origin: {h.origin}"]
            lines += [f"    Bug: {h.bug}"] if h.bug else []
            lines += [f"    Forwarded: {h.forwarded}", f"    Applied-Upstream: {h.applied_upstream or 'no'}",
                      f"    Last-Update: {h.last_update}",
                      f"    Files: {', '.join(p.files)}" + (f"; requires {', '.join(p.requires)}" if p.requires else "")
                      + (f"; since Keras {p.since}" if p.since else "") + (f"; switch {p.switch}=0" if p.switch else "")]
        lines.append(f"({len(self.selected)} of {len(self.patches)} selected; '-' marks the ones left out)")
        return "\n".join(lines)
