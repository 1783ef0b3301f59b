"""Rebase: move the pin to another upstream release, only once the fork is proven on it.

fetch -> analyze -> apply -> build (`pipeline.build_fork`, as `forkgen build`) -> verify on torch
(`verify.verify_release`: the equivalence suite against the unpatched release, whole-model parity,
Keras's own tests where the release ships them) -> rewrite the pin.
Any failure leaves pyproject.toml untouched; the exit code says which stage failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomlkit

from codemods.engine import Patch
from forkgen import locking, patch, pipeline, requirements, verify
from forkgen.cmd import log
from forkgen.errors import EXIT_OK, ForkgenError, UsageError, VerificationError
from forkgen.fetch import fetch
from forkgen.model import Analysis, Pin, Wheel

#: The verify stage (a module-level name, so that offline tests can stand in for it).
verify_release = verify.verify_release


@dataclass(frozen=True)
class AnchorMove:
    """Where one anchor of an applied patch is on the pinned release and on the new one."""

    patch: str
    anchor: str
    file: str
    #: Its line on the pinned release; None when the anchor was not there (or not analysed).
    before: int | None
    after: int

    @property
    def delta(self) -> int | None:
        return None if self.before is None else self.after - self.before


@dataclass(frozen=True)
class Moved:
    """What moved upstream between the pinned release and the new one."""

    variant_before: str | None
    variant_after: str | None
    #: The files the series changes, on the pinned release and on the new one.
    files_before: tuple[str, ...]
    files_after: tuple[str, ...]
    anchors: tuple[AnchorMove, ...]
    #: Whether the pinned release could be analysed (otherwise every `before` is None).
    compared: bool
    #: Each patch's outcome on the pinned release (None: not analysed) and on the new one.
    outcomes: tuple[tuple[str, str | None, str], ...] = ()

    def lines(self) -> list[str]:
        """What moved, a line each: the CallSpec variant, each patch's outcome, every anchor's line."""
        lines = [f"  CallSpec variant: {self.variant_before} -> {self.variant_after}"] if self.compared else []
        lines += [f"  patch {name}: " + (f"{was} -> {now}" if was else now) for name, was, now in self.outcomes]
        for a in self.anchors:
            delta = "" if a.delta is None else f" ({a.delta:+d})"
            lines.append(f"  {a.file}: {a.anchor}: line {a.before} -> {a.after}{delta}" if self.compared
                         else f"  {a.file}: {a.anchor}: line {a.after}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "callspec_variant": {"before": self.variant_before, "after": self.variant_after},
            "files": {"before": list(self.files_before), "after": list(self.files_after)},
            "anchors": [
                {"patch": a.patch, "anchor": a.anchor, "file": a.file, "before": a.before, "after": a.after, "delta": a.delta}
                for a in self.anchors
            ],
        }


def _patched_files(analysis: Analysis) -> tuple[str, ...]:
    return tuple(sorted({f for p in analysis.applied for f in p.files}))


def movements(previous: Analysis | None, current: Analysis) -> Moved:
    """The CallSpec variant, each patch's outcome, the files the series changes and every
    anchor's line, before and after."""

    def anchors(analysis: Analysis) -> dict[tuple[str, str], tuple[str, int]]:
        return {(p.name, a.name): (a.path or p.files[0], a.line) for p in analysis.patches for a in p.anchors}

    before = anchors(previous) if previous is not None else {}
    was = {p.name: p.outcome for p in previous.patches} if previous is not None else {}
    return Moved(
        variant_before=previous.callspec_variant if previous is not None else None,
        variant_after=current.callspec_variant,
        files_before=_patched_files(previous) if previous is not None else (),
        files_after=_patched_files(current),
        anchors=tuple(
            AnchorMove(name, anchor, path, before[(name, anchor)][1] if (name, anchor) in before else None, line)
            for (name, anchor), (path, line) in anchors(current).items()
        ),
        compared=previous is not None,
        outcomes=tuple((p.name, was.get(p.name), p.outcome) for p in current.patches),
    )


@dataclass(frozen=True)
class RebaseSummary:
    """Everything a person (or a pull request) needs to judge a rebase: what `rebase` returns,
    whether it succeeded or not (on drift: every patch's outcome and the diagnostic).
    """

    distribution: str
    previous: Pin | None
    #: The release rebased onto (None when it could not be resolved).
    target: str | None = None
    ok: bool = False
    exit_code: int = EXIT_OK
    #: The stage that failed, and its error.
    stage: str | None = None
    error: str | None = None
    hint: str | None = None
    analysis: Analysis | None = None
    previous_analysis: Analysis | None = None
    #: "passed ...", "failed: ...", "skipped (--no-verify)" or "not run (...)".
    equivalence: str = "not run"
    wheel: Wheel | None = None
    #: The wheel's local label, and what it would have been on the pinned release.
    label: str | None = None
    label_before: str | None = None
    #: The label is [tool.forkgen] local-label (fixed), not the series' own.
    label_configured: bool = False
    new_sha256: str | None = None
    pin_moved: bool = False
    #: Where the Markdown summary was written (`write`).
    path: Path | None = None
    notes: tuple[str, ...] = ()
    #: The pin as rewritten (or as it would be), once the wheel is built.
    pin: Pin | None = None

    def failed(self, error: ForkgenError, message: str | None = None, hint: str | None = None) -> RebaseSummary:
        """This summary, of a rebase that stopped at `stage` on `error` (in its words, or `message`
        and `hint`)."""
        equivalence = self.equivalence
        if equivalence == "not run":
            equivalence = f"not run (the rebase stopped at {self.stage or 'start'})"
        return replace(self, ok=False, exit_code=error.exit_code, error=message or error.message,
                       hint=(error.hint if hint is None else hint) or None, equivalence=equivalence)

    @property
    def title(self) -> str:
        before = f"{self.previous.distribution} {self.previous.version}" if self.previous else "no pin"
        return f"forkgen rebase: {before} -> {self.distribution} {self.target or '(unresolved)'}"

    def patches(self) -> list[dict[str, Any]]:
        """Each patch of the selection: its outcome on the pinned release and on the new one."""
        if self.analysis is None:
            return []
        before = {p.name: p.outcome for p in self.previous_analysis.patches} if self.previous_analysis else {}
        rows = []
        for p in self.analysis.patches:
            was = before.get(p.name)
            rows.append({
                "name": p.name,
                "version": p.version,
                "before": was,
                "outcome": p.outcome,
                # Upstream now and not upstream before: the release carries the change; the
                # patch is no longer built, nor named by the label.
                "retired": p.outcome == "upstream" and was != "upstream",
                "detail": p.detail,
                "files": list(p.files),
            })
        return rows

    def retired(self) -> list[str]:
        return [p["name"] for p in self.patches() if p["retired"]]

    def to_json(self) -> dict[str, Any]:
        wheel = None
        if self.wheel is not None:
            wheel = {"name": self.wheel.path.name, "path": str(self.wheel.path), "version": self.wheel.version,
                     "sha256": self.wheel.sha256}
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            **({"error": self.error, "stage": self.stage} if not self.ok else {}),
            "from": {"distribution": self.previous.distribution, "version": self.previous.version,
                     "sha256": self.previous.sha256} if self.previous else None,
            "to": {"distribution": self.distribution, "version": self.target, "sha256": self.new_sha256},
            "patches": self.patches(),
            "retired": self.retired(),
            "drift": [p["name"] for p in self.patches() if p["outcome"] == "drift"],
            "moved": movements(self.previous_analysis, self.analysis).to_json() if self.analysis else None,
            "equivalence": self.equivalence,
            "wheel": wheel,
            "label": {"now": self.label, "before": self.label_before, "configured": self.label_configured,
                      "changed": self.label is not None and self.label != self.label_before},
            "pin_moved": self.pin_moved,
            "notes": list(self.notes),
            "summary_path": str(self.path) if self.path else None,
        }

    def _label_line(self) -> str | None:
        if self.label is None:
            return None
        if self.label_configured:
            return (f"label {self.label}: [tool.forkgen] local-label, fixed: it does not follow the series"
                    + (f" (the series' own would be {self.analysis.label})" if self.analysis else ""))
        if self.label_before is None:
            return f"label {self.label}"
        if self.label == self.label_before:
            return f"label {self.label} (unchanged: the same patches apply)"
        return f"label {self.label} (was {self.label_before} on {self.previous.version if self.previous else 'the pin'}: the set of applied patches changed)"

    def to_text(self) -> str:
        lines = [self.title]
        before_version = self.previous.version if self.previous else "pin"
        for p in self.patches():
            state = "upstream (retired: the release contains it; dropped from the build and the label)" if p["retired"] else p["outcome"]
            was = f"{p['before']} -> " if p["before"] else ""
            lines.append(f"  {p['name']} {p['version']}: {was}{state}" + (f": {p['detail']}" if p["outcome"] != "applied" else ""))
        if self.analysis is not None:
            lines.append(f"what moved since {before_version}:")
            lines += movements(self.previous_analysis, self.analysis).lines()
        lines.append(f"equivalence: {self.equivalence}")
        if self.wheel is not None:
            lines.append(f"wheel: {self.wheel.path.name} sha256 {self.wheel.sha256}")
        label = self._label_line()
        if label:
            lines.append(label)
        lines += self.notes
        if self.ok:
            lines.append(f"pin {'moved to' if self.pin_moved else 'unchanged (not moved), would be'} "
                         f"{self.distribution} {self.target} (sha256 {self.new_sha256})")
        else:
            lines.append(f"FAILED at {self.stage} (exit {self.exit_code}): the pin is unchanged")
            lines += [f"  {line}" for line in (self.error or "").splitlines()]
        if self.path is not None:
            lines.append(f"summary: {self.path}")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The summary as the body of a pull request (or of an issue, on failure)."""

        def cell(text: object) -> str:
            return str(text).replace("|", "\\|").replace("\n", "<br>")

        before_version = self.previous.version if self.previous else "the pin"
        after_version = self.target or "the new release"
        out = [f"## {self.title}", ""]
        if self.ok:
            out.append(f"**Result: {'the pin moves' if self.pin_moved else 'built, pin not moved'}** to "
                       f"`{self.distribution}=={self.target}` (sdist sha256 `{self.new_sha256}`).")
        else:
            out.append(f"**Result: failed at {self.stage} (exit {self.exit_code}); the pin is unchanged.**")
        out.append("")
        rows = self.patches()
        if rows:
            out += [f"| # | patch | on {before_version} | on {after_version} | detail |", "|---|---|---|---|---|"]
            for i, p in enumerate(rows, 1):
                state = "**upstream (retired)**" if p["retired"] else ("**DRIFT**" if p["outcome"] == "drift" else p["outcome"])
                detail = "" if p["outcome"] == "applied" else cell(p["detail"])
                out.append(f"| {i} | `{p['name']}` {p['version']} | {p['before'] or '-'} | {state} | {detail} |")
            out.append("")
        retired = self.retired()
        if retired:
            out.append(f"Retired ({len(retired)}): " + ", ".join(f"`{n}`" for n in retired)
                       + f": {after_version} contains the change, so the patch is dropped from the build and"
                       " from the wheel's label. Fill its `Applied-Upstream` header with this release.")
            out.append("")
        if self.error:
            out += ["### Diagnostic", "", "```text", self.error, "```", ""]
            if self.hint:
                out += [f"Next: {self.hint}", ""]
        if self.analysis is not None:
            m = movements(self.previous_analysis, self.analysis)
            out += ["### What moved", ""]
            if not m.compared:
                out.append(f"({before_version} could not be analysed: lines of {after_version} only.)")
            else:
                out.append(f"- CallSpec variant: {m.variant_before} → {m.variant_after}")
            gone = sorted(set(m.files_before) - set(m.files_after))
            new = sorted(set(m.files_after) - set(m.files_before))
            out.append(f"- files the series changes: {len(m.files_after)}"
                       + (f"; no longer: {', '.join(f'`{f}`' for f in gone)}" if gone else "")
                       + (f"; new: {', '.join(f'`{f}`' for f in new)}" if new else ""))
            shifted = [a for a in m.anchors if a.delta != 0]
            out.append(f"- anchors: {len(m.anchors)}, {len(shifted)} moved or new")
            if shifted:
                out += ["", f"| file | patch | anchor | line on {before_version} | line on {after_version} |", "|---|---|---|---|---|"]
                out += [f"| `{a.file}` | `{a.patch}` | {cell(a.anchor)} | {a.before if a.before is not None else '-'} | "
                        f"{a.after}{f' ({a.delta:+d})' if a.delta is not None else ''} |" for a in shifted]
            out.append("")
        out += ["### Equivalence", "", self.equivalence, ""]
        if self.wheel is not None:
            out += ["### Wheel", "", "| name | sha256 | label |", "|---|---|---|",
                    f"| `{self.wheel.path.name}` | `{self.wheel.sha256}` | `{self.label}` |", ""]
            label = self._label_line()
            if label:
                out += [label[0].upper() + label[1:] + ".", ""]
        out += [note for note in self.notes]
        out.append("<sub>Written by `forkgen rebase`.</sub>")
        return "\n".join(out).rstrip() + "\n"

    def write(self, path: Path) -> RebaseSummary:
        """Write the Markdown summary to `path` (atomically); return this summary, written there."""
        path.parent.mkdir(parents=True, exist_ok=True)
        locking.write_atomic(path, self.to_markdown().encode("utf-8"))
        return replace(self, path=path)


def rewrite_pin(pyproject: Path, pin: Pin, expected: Pin | None = None) -> None:
    """Set version, distribution and sha256 in [tool.forkgen], keeping comments and formatting.

    With `expected` (the pin the rebase started from), refuse when another run moved the pin
    in the meantime: its move is not overwritten.
    """
    with locking.hold(pyproject.with_name(f".{pyproject.name}{locking.LOCK_SUFFIX}"), f"the pin in {pyproject}"):
        document = tomlkit.parse(pyproject.read_text(encoding="utf-8"))
        table = document["tool"]["forkgen"]
        if expected is not None:
            now = (table.get("distribution"), table.get("version"), table.get("sha256"))
            if now != (expected.distribution, expected.version, expected.sha256):
                raise UsageError(
                    f"the pin in {pyproject} changed while this rebase ran (it is now {now[0]} {now[1]}); "
                    f"not moving it to {pin.distribution} {pin.version}",
                    hint="another rebase moved it; rerun this one from the new pin if it is still wanted",
                )
        table["distribution"] = pin.distribution
        table["version"] = pin.version
        table["sha256"] = pin.sha256
        locking.write_atomic(pyproject, tomlkit.dumps(document).encode("utf-8"), mode=pyproject.stat().st_mode & 0o777)


def rebase(
    pin: Pin,
    previous_pin: Pin | None,
    pyproject: Path,
    *,
    cache_dir: Path,
    workspace: Path,
    overlay: Path | None = None,
    torch_spec: str = requirements.TORCH_SPEC,
    verify: bool = True,
    selected: Sequence[Patch] | None = None,
) -> RebaseSummary:
    """Prove the fork on `pin`, then move the pin in `pyproject` to it; return the summary, of a
    success or of the stage that failed (`ok`, `exit_code`, `error`: the pin is then unchanged).

    The wheel is built by `pipeline.build_fork`, the very function `forkgen build` runs, into
    `workspace/rebase/<distribution>-<version>/`; two rebases onto one release take turns in it.
    """
    workdir = workspace / "rebase" / f"{pin.distribution}-{pin.version}"
    summary = RebaseSummary(pin.distribution, previous_pin, target=pin.version, stage="fetch")
    try:
        with locking.hold(workdir.with_name(f".{workdir.name}{locking.LOCK_SUFFIX}"), f"the rebase workspace {workdir}"):
            return _rebase(summary, pin, previous_pin, pyproject, cache_dir=cache_dir, workdir=workdir, overlay=overlay,
                           torch_spec=torch_spec, verify=verify, selected=selected)
    except _Stopped as stopped:
        return stopped.summary


class _Stopped(Exception):
    """A stage failed: the summary so far, failed."""

    def __init__(self, summary: RebaseSummary) -> None:
        super().__init__(summary.error)
        self.summary = summary


def _rebase(
    summary: RebaseSummary,
    pin: Pin,
    previous_pin: Pin | None,
    pyproject: Path,
    *,
    cache_dir: Path,
    workdir: Path,
    overlay: Path | None,
    torch_spec: str,
    verify: bool,
    selected: Sequence[Patch] | None,
) -> RebaseSummary:
    def enter(name: str) -> None:
        nonlocal summary
        summary = replace(summary, stage=name)

    try:
        previous = None
        if previous_pin is not None:
            try:
                previous = patch.analyze_series(fetch(previous_pin, cache_dir).root, selected)
            except ForkgenError as error:
                log(f"(the current pin cannot be analysed for comparison: {error.message})")
                summary = replace(summary, notes=(*summary.notes,
                                                  f"The pinned release could not be analysed for comparison: {error.message}"))
        summary = replace(summary, previous_analysis=previous)
        if previous is not None:
            summary = replace(summary, label_before=previous_pin.local_label if previous_pin and previous_pin.local_label
                              else previous.label)
        try:
            built = pipeline.build_fork(
                pin,
                cache_dir=cache_dir,
                workspace=workdir,
                out_dir=workdir / "dist",
                overlay=overlay,
                selected=selected,
                on_stage=enter,
            )
        except patch.SeriesDriftError as drift:
            summary = replace(summary, analysis=drift.analysis)
            raise
        assert built.source is not None  # built from the index, never from a local tree
        pinned = Pin(pin.distribution, pin.version, built.source.sha256, pin.local_label)
        summary = replace(summary, analysis=built.analysis, wheel=built.wheel, new_sha256=built.source.sha256, pin=pinned,
                          label=built.wheel.version.partition("+")[2] or None, label_configured=pin.local_label is not None)
        log(f"what moved since {previous_pin.version if previous_pin else 'the pin'}:")
        for line in movements(previous, built.analysis).lines():
            log(line)
        for name in summary.retired():
            log(f"  {name}: upstream in {pin.version}: retired (dropped from the build and the label)")
        enter("verify")
        if not verify:
            log("[5/5] equivalence suite skipped (--no-verify): the pin is not rewritten")
            return replace(summary, equivalence="skipped (--no-verify)", ok=True, exit_code=EXIT_OK)
        log("[5/5] verify on torch: the equivalence suite against the unpatched release, parity, "
            "and Keras's own tests where the release ships them")
        results = verify_release(
            built.wheel.path, project=pyproject.parent, upstream_src=built.source.root, work=workdir / "envs",
            reports=workdir / "verify", backends=["torch"], torch_spec=torch_spec,
        )
        summary = replace(summary, equivalence="passed" + (
            ": " + "; ".join(f"{r.name} ({r.summary})" for r in results) if results else ""))
        enter("pin")
        rewrite_pin(pyproject, pinned, expected=previous_pin)
    except ForkgenError as error:
        if summary.stage == "verify" and isinstance(error, VerificationError):
            summary = replace(summary, equivalence=f"failed: {error.message}")
        raise _Stopped(summary.failed(
            error,
            f"rebase onto {pin.distribution} {pin.version} failed at {summary.stage}: {error.message}",
            (error.hint + "; " if error.hint else "") + f"the pin in {pyproject} is unchanged",
        )) from error
    log(f"pin moved to {pin.distribution} {pin.version} (sha256 {pinned.sha256}) in {pyproject}")
    return replace(summary, ok=True, exit_code=EXIT_OK, pin_moved=True, stage=None)
