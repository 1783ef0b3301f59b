"""`forkgen effects SRC`: per Layer subclass of a Keras tree, which steps of `Layer.__call__` an
instance of exactly that class may skip, and why not (issue 43; the analysis is
codemods/engine/effects.py and verdicts.py, the rules docs/patches.md "Per-class verdicts").

The tree is read as `forkgen report` reads it (`report.read_tree`: parsed, never imported).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemods.engine import STEPS, ClassVerdict, Verdicts, deep
from codemods.engine import analyse_effects as analyse
from forkgen.report import read_tree

#: Keras's backends, whose modules the analysis resolves for one of them.
BACKENDS = ("torch", "jax", "tensorflow", "numpy")


@dataclass
class EffectsReport:
    source: str
    verdicts: Verdicts

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, **self.verdicts.to_json()}

    def to_text(self) -> str:
        v = self.verdicts
        lines = [f"{self.source}: {len(v.classes)} Layer subclasses, backend {v.backend}",
                 "may skip: " + ", ".join(f"{step} {n}" for step, n in v.counts().items()), ""]
        for c in v.classes:
            lines += _class_text(c)
        return "\n".join(lines).rstrip()


def _class_text(c: ClassVerdict) -> list[str]:
    lines = [f"{c.key}  ({c.path}:{c.line})"]
    for s in c.steps:
        if s.skip:
            cond = "; ".join(f"if self.{attr} is one of {', '.join(f.rpartition('.')[2] for f in fns)}" for attr, fns in s.conditions)
            lines.append(f"  {s.step}: skip{' ' + cond if cond else ''}")
        else:
            lines.append(f"  {s.step}: keep")
            lines += [f"    {r}" for r in s.reasons]
    if c.assumes:
        lines.append(f"  assumes: {', '.join(c.assumes)}")
    return lines


def effects(root: Path, backend: str = "torch", progress: bool = True) -> EffectsReport:
    """Read the tree at `root` and give the verdicts of its Layer subclasses for `backend`."""
    files = read_tree(root)

    def tell(done: int, total: int, name: str) -> None:
        if progress:
            print(f"\ranalysing {done + 1}/{total}: {name[:70]:70s}", end="", file=sys.stderr, flush=True)

    verdicts = deep(lambda: analyse(files, backend, tell))
    if progress:
        print("\r" + " " * 90 + "\r", end="", file=sys.stderr, flush=True)
    return EffectsReport(str(root), verdicts)


__all__ = ["BACKENDS", "STEPS", "EffectsReport", "effects"]
