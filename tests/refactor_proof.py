"""Prove a refactor of the patch machinery changes nothing: patched trees and outcomes, per release.

For each source tree given (the root of an unpacked Keras sdist, as `forkgen fetch` prints it),
runs forkgen's own analyze + apply (`forkgen.patch.analyze_series`, then `forkgen.patch.write`,
what `forkgen apply` runs, except that a drift is logged instead of stopping the run) over the
whole series, and writes to OUT/<tree's directory name>/:

- `tree/`: the patched tree, as `forkgen apply --out` writes it;
- `outcomes.txt`: the release, the series label, then per patch its name, version, outcome,
  whether it was already present, its detail (a drifted patch's: its drift message), its
  codemods with their versions, and every anchor it reports (name, line, description, file).
  A drift of the tree as a whole (`UpstreamDriftError`: no `Layer` module, say) is logged there
  as `drift: <message>`, without a tree, and the run goes on with the next source.

Run it once with the code before the refactor and once after, then compare:

    git worktree add --detach /tmp/before HEAD           # the code before (or: git stash)
    PYTHONPATH=/tmp/before .venv/bin/python tests/refactor_proof.py /tmp/proof-before SRC...
    .venv/bin/python tests/refactor_proof.py /tmp/proof-after SRC...
    diff -r /tmp/proof-before /tmp/proof-after            # no output: identical

(`PYTHONPATH` comes before the editable install's finder, so the first run imports forkgen and
`codemods` from the worktree.) Exit status 0 once every tree is written, whatever the outcomes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from forkgen import patch
from forkgen.errors import UpstreamDriftError
from forkgen.model import Analysis


def outcomes_log(analysis: Analysis) -> str:
    """Every patch's outcome on one tree, one block per patch, in series order."""
    lines = [f"release: {analysis.release}", f"label: {analysis.label}", f"changed files: {sorted(analysis.files)}"]
    for p in analysis.patches:
        lines.append(f"{p.name} {p.version}: {p.outcome}{' (present)' if p.present else ''}: {p.detail}")
        lines.append(f"  codemods: {', '.join(f'{name}=={version}' for name, version in p.codemods)}")
        lines.append(f"  files: {', '.join(p.files)}")
        lines.extend(f"  anchor {a.name!r} line {a.line}: {a.description}" + (f" [{a.path}]" if a.path else "")
                     for a in p.anchors)
    return "\n".join(lines) + "\n"


def prove(source: Path, out: Path) -> Analysis | None:
    """Analyze and apply the whole series to `source`; write the patched tree and the log under `out`
    (a drift of the whole tree: the log says so, no tree, None)."""
    out.mkdir(parents=True, exist_ok=False)
    try:
        analysis = patch.analyze_series(source, patch.selection())
    except UpstreamDriftError as drift:
        (out / "outcomes.txt").write_text(f"drift: {drift}\n", encoding="utf-8")
        return None
    patch.write(analysis, out / "tree")
    (out / "outcomes.txt").write_text(outcomes_log(analysis), encoding="utf-8")
    return analysis


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output directory (must not exist)")
    parser.add_argument("sources", type=Path, nargs="+", help="unpacked Keras source trees")
    args = parser.parse_args(argv)
    if args.out.exists():
        parser.error(f"{args.out} exists")
    for source in args.sources:
        analysis = prove(source.resolve(), args.out / source.resolve().name)
        if analysis is None:
            print(f"{source.name}: drift (see its outcomes.txt)", file=sys.stderr)
            continue
        counts: dict[str, int] = {}
        for p in analysis.patches:
            counts[p.outcome] = counts.get(p.outcome, 0) + 1
        print(f"{source.name}: {', '.join(f'{n} {o}' for o, n in sorted(counts.items()))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
