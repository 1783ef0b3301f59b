"""Patch `torch-compile-dynamic-batch` (ours, forkgen issue 27): a compiled train step takes a
new batch size once, as a dynamic dimension, instead of recompiling for every size.

Under `torch.compile`, torch makes a dimension dynamic the first time its size changes, unless
the graph needs the size as a number. Two statements of every train step turn the batch size into
a tensor through `ops.convert_to_tensor`, i.e. `torch.as_tensor` of a Python int, and dynamo fixes
the int to the value it traced (a guard `batch == 33`): the loss's mean reduction in
`reduce_values` (`ops.convert_to_tensor(ops.shape(values), dtype="int32")`, for its element
count) and the loss tracker's update in `reduce_to_samplewise_values` (`sample_weight`, the batch
size the torch trainer hands it, `ops.convert_to_tensor(sample_weight, dtype=dtype)`). So each new
batch size recompiled the whole step (`nox -s bench -- --compile`: recompiles 1, then 1 again).

The patch gives each of them a branch taken only while `torch.compiler.is_compiling()` (torch
backend):
- `reduce_values`: the divisor is upstream's value, the int32 product of the dimensions cast to
  the loss's dtype, made from the dimensions as they are (maybe symbolic ints) with `torch.full`
  into an int32 tensor on Keras's device, then `ops.cast`; a count that may not fit an int32 takes
  upstream's statement (its int32 product would wrap). `divide_no_nan` below is upstream's.
- `reduce_to_samplewise_values`: an int sample weight (a Python int or a symbolic one, not a bool)
  becomes `ops.cast(<an int64 tensor of it, by torch.full, on Keras's device>, dtype)`, the value
  `ops.convert_to_tensor(sample_weight, dtype=dtype)` gives.

Why it changes nothing else: outside dynamo's tracing neither branch is taken, so eager calls are
upstream's code. While tracing, each tensor holds the value upstream's holds, of the same dtype on
the same device; `torch.full` with an int fill value does not fix a symbolic int. A train step
compiled for a batch of n is then recompiled once, for n+1 with a dynamic batch, and serves n+2
from that graph.

Keras's device is `get_device()` of the torch backend's core module, found as the module of the
backend's `compute_output_spec` (3.x's `backend/torch/core.py`, keras-nightly's
`backend/torch/ops/core.py`). Version 1 imported it from `keras.src.backend.torch.core`, which
keras-nightly does not have: a `ModuleNotFoundError` whenever a loss was reduced under
`torch.compile` (the engine now refuses such an import as drift).

`since = "3.7.0"`: Keras 3.0-3.6 divide the loss in place (`loss /= ops.cast(...)`, no
`divide_no_nan`), and 3.0-3.1 convert the sample weight otherwise; those keep the recompile.
"""

from __future__ import annotations

from codemods.engine import LOSS_PY, Anchor, Append, DeclaredPatch, Details, Headers, Replace
from codemods.engine import REDUCTION_METRICS_PY as METRICS_PY

COUNT = 'divisor = ops.cast(ops.prod(ops.convert_to_tensor(ops.shape(values), dtype="int32")), loss.dtype)'
WEIGHT = "sample_weight = ops.convert_to_tensor(sample_weight, dtype=dtype)"


class TorchCompileDynamicBatch(DeclaredPatch):
    name = "torch-compile-dynamic-batch"
    version = "2"
    headers = Headers(
        description="while dynamo traces, the loss's element count and the loss tracker's batch-size weight "
        "are made with torch.full, which keeps a symbolic batch size symbolic: a compiled train step takes a "
        "new batch size once, as a dynamic dimension.",
        origin="ours", bug="forkgen issue 27", forwarded="not-needed", applied_upstream=None,
        last_update="2026-12-06",
    )
    files = (LOSS_PY, METRICS_PY)
    since = "3.7.0"
    edits = (
        Replace(Anchor("reduce_values", COUNT, description="in reduce_values: the element-count divisor"),
                "element_count", label="reduce_values's element count", rebinds=("divisor",)),
        Replace(Anchor("reduce_to_samplewise_values", WEIGHT, path=METRICS_PY,
                       description="in reduce_to_samplewise_values"),
                "integer_weight", label="the sample weight's conversion", rebinds=("sample_weight",)),
        Append("helpers", label="the helpers"),
    )
    #: What the pieces read: `divide_no_nan` after the divisor; the `losses` module in reduction_metrics.py.
    relies_on = (
        Anchor("reduce_values", "loss = ops.divide_no_nan(loss, divisor)", reported=False),
        Anchor("", "from keras.src import losses", path=METRICS_PY, reported=False),
        Anchor("", "from keras.src import backend", reported=False),
    )
    details = Details(
        apply="a symbolic batch size stays symbolic while compiling",
        present="a symbolic batch size stays symbolic while compiling (forkgen)",
        upstream="",
    )


PATCH = TorchCompileDynamicBatch()
TorchCompileDynamicBatchCommand = PATCH.command
