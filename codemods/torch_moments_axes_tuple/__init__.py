"""Patch `torch-moments-axes-tuple` (ours, forkgen issue 27): while dynamo traces, the torch
backend's `moments` hands torch its `axes` as a tuple.

`BatchNormalization` keeps its reduction axes in an attribute, so Keras's tracking makes them a
`TrackedList` (a `list` subclass), and its training call passes them to `ops.moments`. The
torch backend's `moments` calls `torch.mean(x, dim=axes, keepdim=True)` (twice) and
`torch.squeeze(..., axes)` with them. Dynamo cannot turn a user-defined `list` subclass into a
graph argument ("Failed to convert args/kwargs to proxy"): under `torch.compile` every
`BatchNormalization` training call breaks the graph three times (the bench's ConvNet train
step: 16 graphs, 15 breaks; one `BatchNormalization(training=True)` alone: 4 graphs, 3 breaks).

The patch puts first in `moments`: while `torch.compiler.is_compiling()`, a `list` (of any
subclass) of axes becomes `tuple(axes)`. The one `BatchNormalization` call then traces as one
graph.

Why it changes nothing else: outside dynamo's tracing `is_compiling()` is False and `axes` is
left as it is, so eager calls are upstream's. While tracing, the tuple holds the same ints in
the same order, and `torch.mean(dim=...)` and `torch.squeeze(dim=...)` take a tuple of dims as
they take a list: the traced graph computes what the list would. Reading the list's items has
no effect (`TrackedList` tracks on writes only). Anything not a `list` (an int, a tuple, None)
is left as it is.
"""

from __future__ import annotations

from codemods.engine import NIGHTLY_TORCH_NN_PY as NIGHTLY_NN_PY
from codemods.engine import TORCH_NN_PY as NN_PY
from codemods.engine import Anchor, DeclaredPatch, Details, Headers, Prepend

FUNCTION = "moments"


class TorchMomentsAxesTuple(DeclaredPatch):
    name = "torch-moments-axes-tuple"
    version = "1"
    headers = Headers(
        description="torch moments hands torch a tuple of axes while dynamo traces (a TrackedList of "
        "BatchNormalization's reduction axes broke the graph three times per call).",
        origin="ours", bug="forkgen issue 27", forwarded="not-needed", applied_upstream=None,
        last_update="2026-12-05",
    )
    files = (NN_PY,)
    moved = {NN_PY: NIGHTLY_NN_PY}
    since = "3.0.0"
    edits = (
        Prepend(FUNCTION, "axes_tuple", label=f"def {FUNCTION}", blank_lines=1, rebinds=("axes",),
                description="first statement: a tuple of axes while compiling ({state})"),
    )
    #: Where `axes` goes: torch's reductions, which take a tuple of dims as they take a list.
    relies_on = (
        Anchor(FUNCTION, "mean = torch.mean(x, dim=axes, keepdim=True)", reported=False),
    )
    details = Details(
        apply="a tuple of axes while dynamo traces",
        present="moments hands torch a tuple of axes while compiling (forkgen)",
        upstream="",
    )


PATCH = TorchMomentsAxesTuple()
TorchMomentsAxesTupleCommand = PATCH.command
