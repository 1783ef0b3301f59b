"""`forkgen effects SRC`: per Layer subclass of a Keras tree, which steps of `Layer.__call__` an
instance of exactly that class may skip, and why not (issue 43; the analysis is
codemods/engine/effects.py and verdicts.py, the rules docs/patches.md "Per-class verdicts").

The tree is read as `forkgen report` reads it (`report.read_tree`: parsed, never imported).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemods.engine import STEPS, ClassVerdict, Verdicts
from codemods.engine import analyse_effects as analyse
from forkgen.report import read_tree

#: Keras's backends, whose modules the analysis resolves for one of them.
BACKENDS = ("torch", "jax", "tensorflow", "numpy")
#: The analysis follows deep call chains (a layer's call() down to a backend's conversions).
_RECURSION = 40_000
_STACK = 512 * 1024 * 1024


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

    result: list[Verdicts] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            result.append(analyse(files, backend, tell))
        except BaseException as error:  # re-raised in the caller's thread
            failed.append(error)

    # Deep call chains: a large recursion limit, on a thread with a stack to match.
    limit, size = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(limit, _RECURSION))
    threading.stack_size(_STACK)
    try:
        thread = threading.Thread(target=work, name="forkgen-effects")
        thread.start()
        thread.join()
    finally:
        threading.stack_size(size)
        sys.setrecursionlimit(limit)
    if progress:
        print("\r" + " " * 90 + "\r", end="", file=sys.stderr, flush=True)
    if failed:
        raise failed[0]
    return EffectsReport(str(root), result[0])


__all__ = ["BACKENDS", "STEPS", "EffectsReport", "effects"]
