"""Patch `layer-call-state-writes`: backport of keras-team/keras#23200 (keras-nightly).

`Layer.__call__` sets `self._called = True` on entry and `self.built = True` after the call,
on every call; each write runs `Layer.__setattr__` (attribute tracking) and, on torch,
`torch.nn.Module.__setattr__` - about 12% of an eager `Dense(4)(x)`. Both flags only go from
False to True there, so the patch guards each write with `if not <flag>:`, as upstream did.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.layer_call_state_writes.guard_state_writes import (
    LAYER_PY,
    NAME,
    GuardStateWritesCommand,
    Write,
    analyze,
    anchors,
)
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


class LayerCallStateWrites(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description="Layer.__call__ writes self._called and self.built only while they are not yet True.",
        origin="upstream, https://github.com/keras-team/keras/pull/23200",
        bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="https://github.com/keras-team/keras/pull/23200",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    files = (LAYER_PY,)
    codemods = (GuardStateWritesCommand,)

    def _writes(self, sources: Sources) -> list[Write]:
        return sources.analysed(NAME, LAYER_PY, analyze)

    def check(self, sources: Sources) -> Check:
        writes = self._writes(sources)
        if all(w.guard is not None and not w.ours for w in writes):
            return Check(Outcome.UPSTREAM, "both writes are guarded by upstream's `if not ...:`", anchors(writes))
        # Keras 3.0-3.9 guard `built` themselves (#20880 made it unconditional in 3.10): then
        # only `_called` is ours to guard.
        bare = [f"self.{w.attr}" for w in writes if w.bare is not None]
        detail = f"guard {' and '.join(bare)}" if bare else "both writes guarded"
        return Check(Outcome.APPLIED, detail, anchors(writes), not bare)

    def apply(self, sources: Sources) -> None:
        module = sources.module(LAYER_PY)
        writes = self._writes(sources)
        command = GuardStateWritesCommand(CodemodContext(filename=LAYER_PY), writes)
        sources.replace(LAYER_PY, command.transform_module(module))


PATCH = LayerCallStateWrites()
