"""Patch `layer-call-state-writes`: backport of keras-team/keras#23200 (keras-nightly).

`Layer.__call__` sets `self._called = True` on entry and `self.built = True` after the call,
on every call; each write runs `Layer.__setattr__` (attribute tracking) and, on torch,
`torch.nn.Module.__setattr__` - about 12% of an eager `Dense(4)(x)`. Both flags only go from
False to True there, so the patch guards each write with `if not <flag>:`, as upstream did.
"""

from __future__ import annotations

from codemods.engine import LAYER_PY, Anchor, DeclaredPatch, Details, Headers, Wrap


class LayerCallStateWrites(DeclaredPatch):
    name = "layer-call-state-writes"
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
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    codemod = "GuardStateWritesCommand"
    #: Each flag's one write in `Layer.__call__` goes inside its guard of inserted.py. The same
    #: guard without forkgen's marker is upstream's: keras-nightly guards both (#23200), Keras
    #: 3.0-3.9 guard `built` themselves (#20880 made it unconditional in 3.10), where only
    #: `_called` is ours to guard.
    edits = (
        Wrap(Anchor("Layer.__call__", "self._called = True"), "called_write", label="self._called"),
        Wrap(Anchor("Layer.__call__", "self.built = True"), "built_write", label="self.built"),
    )
    upstream_per_piece = True
    details = Details(
        apply="guard {todo}",
        present="both writes guarded",
        upstream="both writes are guarded by upstream's `if not ...:`",
    )


PATCH = LayerCallStateWrites()
GuardStateWritesCommand = PATCH.command
