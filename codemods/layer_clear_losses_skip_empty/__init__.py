"""Patch `layer-clear-losses-skip-empty` (ours, not upstream): `Layer._clear_losses` clears a
layer's `_losses` and `_loss_ids` only when there is something to clear.

Upstream (3.0.0 to keras-nightly, the same two statements): the outermost `Layer.__call__` calls
`self._clear_losses()`, which calls `self._losses.clear()` and `self._loss_ids.clear()` and
recurses into every sublayer. Nearly always both are empty. Eager, that is a few method calls
per layer. Under `torch.compile` it costs every call: dynamo traces each `clear()` (guards on
each container's class, its `tracker`, its instance dict) and, because a traced `clear()` is a
mutation of an object that lives outside the graph, replays it after every compiled call (one
list store per layer: the MLP's compiled call spent about 20 us in them and their guards).

The patch wraps each clear in `if container or not _clear_losses_empty_noop(container):`.

Why that is upstream's behaviour. `_clear_losses_empty_noop(c)` holds only when `type(c)` is
exactly `list` or `set` (built-in types: their `clear` cannot be replaced, and their instances
take no attributes), or exactly `TrackedList` or `TrackedSet` whose class still has the `clear`
the module saw at import and whose instance has no `clear` of its own: then `c.clear()` is
`list.clear`/`set.clear` (no effect on an empty container) or `TrackedList.clear` /
`TrackedSet.clear`, which untrack each value (none) and call the base class's `clear` (no
effect). The check reads a plain list's or set's instance dictionary never: dynamo cannot
trace that read (a graph break in every Functional model's call). So when the container is empty and the check holds, skipping the call skips nothing.
When the container is not empty, or is of any other class, upstream's call runs as it is. The
truth test `if container` is the container's length for these four classes (none defines
`__bool__` or `__len__`).

Applies to every release the matrix knows (3.0.0 on). No switch: it keeps no state.
"""

from __future__ import annotations

from codemods.engine import LAYER_PY, Anchor, Append, DeclaredPatch, Details, Headers, Wrap

FUNCTION = "Layer._clear_losses"


class LayerClearLossesSkipEmpty(DeclaredPatch):
    name = "layer-clear-losses-skip-empty"
    version = "1"
    headers = Headers(
        description="Layer._clear_losses clears a layer's _losses and _loss_ids only when they are not empty "
        "(no list store for dynamo to replay after every compiled call).",
        origin="ours", bug="forkgen issue 44", forwarded="not-needed", applied_upstream=None,
        last_update="2026-12-08",
    )
    files = (LAYER_PY,)
    since = "3.0.0"
    edits = (
        Wrap(Anchor(FUNCTION, "self._losses.clear()"), "losses_clear", label="self._losses.clear()"),
        Wrap(Anchor(FUNCTION, "self._loss_ids.clear()"), "loss_ids_clear", label="self._loss_ids.clear()"),
        Append("helpers", label="the empty-container check"),
    )
    details = Details(
        apply="an empty _losses or _loss_ids is not cleared",
        present="Layer._clear_losses skips clearing empty containers (forkgen)",
        upstream="",
    )


PATCH = LayerClearLossesSkipEmpty()
LayerClearLossesSkipEmptyCommand = PATCH.command
