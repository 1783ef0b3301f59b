"""Patch `torch-mean-metric-fast-paths` (ours, forkgen issue 26): on torch, `Mean.update_state`
and `Mean.result` run upstream's torch ops alone for float32 tensors, without the Keras layers
around each of them.

Every train and test step updates the loss tracker (`Mean.update_state(loss, sample_weight=
batch_size)`) and each compiled `MeanMetricWrapper` (accuracy, MAE, ...: `Mean.update_state(
values)`), then reads every metric's `result()` for the step's logs. Upstream
(`keras/src/metrics/reduction_metrics.py`, 3.6.0-3.15.1 and keras-nightly) goes through
`reduce_to_samplewise_values` (mask look-up, casts, conversions, `squeeze_or_expand_to_same_rank`,
`broadcast_to`), `ops.sum`, `ops.shape`, `ops.cast` and two `Variable.assign_add`s (`__add__`
-> `backend.numpy.add`, `assign` -> `_convert_to_tensor`, `shape_equal`, `_direct_assign`
under `torch.no_grad`), and `result` through `ops.cast` and `divide_no_nan`. On the fork (torch
2.13 CPU, the 5-layer MLP of the benchmark, batch 32) that is 32.6 us for the loss tracker's
update, 23.6 us for an accuracy's `Mean` part and 15.4 us a `result()` (two a step); the torch
ops inside are a few microseconds. With the patch: 15.1, 11.6 and 4.6 us; `compute_metrics`
102 -> 61 us; `convert_to_tensor` 57 -> 35 calls an `evaluate` batch; `evaluate` (32 batches)
28.9 -> 25.5 ms and `fit` (one epoch) 58.3 -> 54.8 ms, medians of 8 interleaved runs.

The patch puts a guarded fast path before `Mean.update_state`'s first statement and before
`Mean.result`'s return; when it does not return, upstream's code below it runs unchanged.

Guards (every read is side-effect free, nothing is written before all pass): torch backend with
`torch.compiler.is_compiling` and the two `torch._C` mode probes; first, before any tensor is
touched (`_forkgen_mean_unobserved`): not compiling (Dynamo traces upstream's code), no torch
function mode, no dispatch mode, no functorch transform (each would see the ops); then
(`_forkgen_mean_state`) the functions upstream's code reads from module globals
(`reduce_to_samplewise_values`, `ops.sum`, `shape`, `cast`, `convert_to_tensor`, `broadcast_to`,
`divide_no_nan`, `losses.loss.squeeze_or_expand_to_same_rank`, and for an update the mask getter
under both names a release reads it by, `backend.get_keras_mask` (3.x) and the module's
`get_keras_mask` (nightly), where bound) are their defining modules' own; the metric's class
has `Metric.dtype` and binds neither `total`, `count` nor `_dtype` in its MRO, nor a `__getattribute__` of its own (so `self.total`,
`self.count`, `self.dtype` are instance-dict reads, in whatever order); its `_dtype` is the str
"float32"; `total` and `count` are exact `backend.Variable`s whose class has the nine methods
and properties captured at import (`assign_add`, `assign`, `__add__`, `_convert_to_tensor`,
`_direct_assign`, `_maybe_autocast`, `value`, `shape`, `dtype`) and whose instances do not shadow
a method; no stateless scope; no autocast scope, or neither variable autocasts; `get_device()`
of the torch core module (the one `convert_to_tensor` calls) is a str naming one non-meta device
(cpu or an index), or exactly "cuda" (a default GPU machine's, version 2): then the device is
the current cuda device, `torch.device("cuda", torch.cuda.current_device())`, asked at the call
(`_forkgen_mean_current`) once the total's parameter is found on a cuda device, never remembered
(`torch.cuda.set_device` and `with torch.cuda.device(i)` change it, per thread); each variable's `_value` is an exact `torch.nn.Parameter`, float32, strided,
0-d, not requiring grad, not an inference tensor, on that device, `_dtype` "float32", `_shape`
`()`. For an update: `values` is an exact float32 strided `torch.Tensor` of rank <= 1 on that
device and `sample_weight` is None (rank 1: at most 2**24 values), an `int` in [0, 2**24] with
rank-0 values, or an exact float32 strided tensor of the values' shape on that device; with a
weight, `get_keras_mask(values)` is None.

Why the result is identical. Under these guards (3.15.1's code; the other releases below):
`self.value` of each variable is its `_value` (no scope, no autocast, not "meta": the getter's
branches return `_value`), `convert_to_tensor` returns a tensor on the current device of its
dtype as it is (`x.to(device)`/`x.to(dtype)` return `x`; for "cuda", aten's `to` fills the index
in with `ensure_has_index`, the device guard's current device, which `torch.cuda.current_device()`
reads too, so `x.to("cuda")` is `x` exactly on the device asked for in the same call), and `cast` to float32 returns a
float32 tensor as it is. So upstream's `update_state` runs these torch ops, in this order:
no weight: `reduce_to_samplewise_values` returns `(values, None)` (the mask is read but unused
without a weight; rank <= 1: no `reduce_fn`); `total.assign_add(ops.sum(values))` is
`total._value.copy_(torch.add(total._value, torch.sum(values)))` (`sum`'s cast to float32 is a
no-op; `assign` converts the float32 0-d sum to float32, its shape equals `()`, `_direct_assign`
copies under `torch.no_grad`); `num_samples` is `values.shape[0]` (rank 1) or 1, `ops.cast(n,
"float32")` is `torch.as_tensor(n, dtype=float32, device=get_device())` (3.6-3.14 go through
`np.array(n)`; exact either way for n <= 2**24), added and copied into `count` the same way.
int weight n, rank 0: the weight is `as_tensor(n, float32, device)`; `squeeze_or_expand` returns
both (same rank), no reduction, `broadcast_to(w, ())` is a view of w with the same size, stride
and storage (same bits for every kernel), `values * w`; the total is updated with
`torch.sum(values * w)` and the count with `torch.sum(w)`. float32 weight of the values' shape:
the same with the weight itself (its conversion and same-shape `broadcast_to` return it or an
identical view). The fast path (`_forkgen_mean_accumulate`) calls those very torch functions
on the same operands in the same order (the count's sum is read after the total's copy, as
upstream reads it), so every value, dtype, device and variable state is the same bits. It runs
the ops under `torch.no_grad` when an input requires grad (upstream builds and drops a graph:
nothing it returns or keeps holds it; the copies are under `no_grad` upstream too); otherwise
no op records anything anyway. `update_state` returns None in both. `result()`: `ops.cast(count,
"float32")` is the count's parameter; `divide_no_nan(total, c)` converts both to themselves and
computes `where(c == 0, 0, divide(total, where(c == 0, ones_like(c), c)))` (3.6-3.14: `where(c ==
0, 0, divide(total, c))`; nightly: 3.15.1's, its conversions through
`convert_to_tensors_of_same_dtype`, float32 here). On the cpu the fast path reads the count
(`item()`, no sync) and, when it is not 0 (NaN included, -0.0 excluded), returns `torch.divide(
total, count)`: the `where`s select every element of that same quotient (c != 0), so the
0-d float32 cpu tensor has the same bits, and neither requires grad (the parameters do not).
On a cuda device (version 2) reading the count would be a sync: the fast path returns
`torch.where(c == 0, 0, torch.divide(total, c))` (`_forkgen_mean_quotient`, 3.6-3.14's own
form, three kernels for upstream's five and no sync). Where c != 0 (NaN included) upstream's
inner `where(c == 0, ones_like(c), c)` selects c's element itself (a select copies it), so both
divide the same two float32 values with the same kernel: the same bits; where c == 0 (0.0 or
-0.0) the outer `where`, the same call in both, gives 0 whatever the quotient (ours inf or NaN,
upstream's total / 1). That `where` of a bool tensor, the Python 0 (a wrapped scalar, which
does not promote) and a 0-d float32 tensor is a 0-d float32 tensor on the count's device, +0.0
where c == 0; not requiring grad. tests/equivalence compares its bits with `divide_no_nan`'s
(on the cpu) for signed zeros, NaN, infinities, tiny and huge totals and counts.
On the cpu a count of 0, another device ("mps:0", "xpu:0": upstream's code), or any failed
guard runs upstream's code. Exceptions: none of the
guarded cases raises upstream (valid shapes, dtypes and devices; no inference tensor to write).

Other releases, compared by hand: 3.6.0-3.14 (`Variable.assign` converts to `self.dtype`, which
is "float32" without autocast; `convert_to_tensor` returns a variable's `value`, and moves a
tensor with `.to(device)` only when on another device); keras-nightly (`add` and
`divide_no_nan` convert through `convert_to_tensors_of_same_dtype`, float32 for float32
operands; `sum` calls `torch.sum(x, dim=None, keepdim=False)`, the same full reduction as
`torch.sum(x)`; `_direct_assign` first tests `self._value.data` for a DTensor: an exact
`Parameter` is not one, and `nn.Parameter` of a DTensor is a DTensor). The equivalence test
checks the installed release.

Skipped side effects: the fork's `result_type` memo (`memoised-result-type`) is not filled; a
function mode or profiler would see fewer ops (guarded: no mode runs the fast path).
Not guarded, because no code does it: the torch backend's own `add`/`sum`/`cast`/
`convert_to_tensor`/`divide_no_nan` or the stateless/autocast scope getters replaced at runtime
(only the names upstream's reduction code reads are checked); a class attribute named `total`,
`count` or `_dtype` added to a metric class after its first update (the class check is
remembered); forward-mode AD dual tensors (the same ops run, grad mode aside).

Left out: `Sum` (no trainer uses it per step), ranks above 1 (`reduce_fn` over the trailing
axes), other weights (a float or numpy weight, an int weight with rank-1 values:
`squeeze_or_expand` and broadcasting), masked weighted values, float16/bfloat16/float64 metrics,
results on a device other than the cpu and cuda (their kernels untested here), index-less devices
other than "cuda" ("mps", "xpu": their current device is not asked for); `MeanMetricWrapper`'s own
steps and `CompileMetrics`' loops (about 4 us a step).

Applies from Keras 3.6.0 (`since`), the first release with 3.15.1's `reduce_to_samplewise_values`
(3.3-3.5 convert the weight with `cast`, without `get_keras_mask`). No switch: the fast paths
keep no state but the remembered devices and classes.

"cuda" (version 2, forkgen issue 41): the cpu paths are unchanged (the device compares are the
same; the marker is tested only after one fails, which a cpu parameter never does); measured on torch 2.13 CPU, one process, before/after helpers side by side, 31
interleaved rounds on a loaded 2-core machine: the loss tracker's `update_state(loss, 32)` 25.4 ->
24.9 us, `result()` 8.04 -> 8.14 us (medians: noise, 2026-12-07).
The stand-in torch of tests/support/torch_current_cuda.py (tests/unit and tests/equivalence)
changes the current cuda device between calls.
"""

from __future__ import annotations

from codemods.engine import REDUCTION_METRICS_PY as REDUCTION_PY
from codemods.engine import (
    Anchor,
    Append,
    DeclaredPatch,
    Details,
    Headers,
    InsertBefore,
    applied_piece,
)

METRIC_PY = "keras/src/metrics/metric.py"
#: Where each fast path goes (above it).
UPDATE = "values, sample_weight = reduce_to_samplewise_values(values, sample_weight, reduce_fn=ops.mean, dtype=self.dtype)"
RESULT = "return ops.divide_no_nan(self.total, ops.cast(self.count, dtype=self.dtype))"
UPDATE_LABEL = "Mean.update_state: values, sample_weight = reduce_to_samplewise_values(...)"
RESULT_LABEL = "Mean.result: return ops.divide_no_nan(...)"
#: Upstream's methods, 3.6.0-3.15.1 and keras-nightly (`{}`: where the fast path is, once in).
UPDATE_BODY = """
def update_state(self, values, sample_weight=None):{}
    values, sample_weight = reduce_to_samplewise_values(
        values, sample_weight, reduce_fn=ops.mean, dtype=self.dtype
    )
    self.total.assign_add(ops.sum(values))
    if sample_weight is not None:
        num_samples = ops.sum(sample_weight)
    elif len(values.shape) >= 1:
        num_samples = ops.shape(values)[0]
    else:
        num_samples = 1
    self.count.assign_add(ops.cast(num_samples, dtype=self.dtype))
"""
RESULT_BODY = """
def result(self):{}
    return ops.divide_no_nan(self.total, ops.cast(self.count, dtype=self.dtype))
"""
#: Upstream's reduction, 3.6.0-3.15.1 (`{}`: how the mask is read; keras-nightly: `get_keras_mask`).
REDUCE_BODY = """
def reduce_to_samplewise_values(values, sample_weight, reduce_fn, dtype):
    dtype = dtype or backend.floatx()
    mask = {}(values)
    values = ops.cast(values, dtype=dtype)
    if sample_weight is not None:
        sample_weight = ops.convert_to_tensor(sample_weight, dtype=dtype)
        if mask is not None:
            sample_weight = losses.loss.apply_mask(sample_weight, mask, dtype=dtype, reduction="sum")
        values, sample_weight = losses.loss.squeeze_or_expand_to_same_rank(values, sample_weight)
        weight_ndim = len(sample_weight.shape)
        values_ndim = len(values.shape)
        if values_ndim > weight_ndim:
            values = reduce_fn(values, axis=list(range(weight_ndim, values_ndim)))
        sample_weight = ops.broadcast_to(sample_weight, ops.shape(values))
        values = values * sample_weight
        if weight_ndim > 1:
            sample_weight = reduce_fn(sample_weight, axis=list(range(1, weight_ndim)))
    values_ndim = len(values.shape)
    if values_ndim > 1:
        values = reduce_fn(values, axis=list(range(1, values_ndim)))
    return values, sample_weight
"""
APPLIED = "\n    if __: ___"
#: `REDUCE_BODY` with `torch-compile-dynamic-batch`'s weight conversion as that later patch of the
#: series applies it (its piece, from its inserted.py: a branch only dynamo's tracing takes,
#: upstream's statement kept in its `else`), which this patch's analysis of an already patched
#: tree must accept.
UPSTREAM_WEIGHT = "        sample_weight = ops.convert_to_tensor(sample_weight, dtype=dtype)\n"
REDUCE_BODY_COMPILED_WEIGHT = REDUCE_BODY.replace(UPSTREAM_WEIGHT, applied_piece(
    "torch-compile-dynamic-batch", "integer_weight", " " * 8, upstream=UPSTREAM_WEIGHT))


class TorchMeanMetricFastPaths(DeclaredPatch):
    name = "torch-mean-metric-fast-paths"
    version = "2"
    headers = Headers(
        description="torch: Mean.update_state and Mean.result run upstream's torch ops alone for float32 "
        "tensors (the loss tracker, MeanMetricWrapper metrics such as accuracy), without the Keras layers "
        "around each op.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-07",
    )
    files = (REDUCTION_PY,)
    since = "3.6.0"
    #: Its relied-on methods may hold torch-compile-dynamic-batch's integer weight (a later patch).
    tolerates = ("torch-compile-dynamic-batch",)
    edits = (
        InsertBefore(Anchor("Mean.update_state", UPDATE, name=UPDATE_LABEL), "update_fast_path", label=UPDATE_LABEL),
        InsertBefore(Anchor("Mean.result", RESULT, name=RESULT_LABEL), "result_fast_path", label=RESULT_LABEL),
        Append("helpers", label="the helpers"),
    )
    #: The code the fast paths mirror (with a fast path in, once applied); the names they read.
    relies_on = (
        Anchor("Mean", UPDATE_BODY.format(""), name="Mean.update_state (3.6.0+)", reported=False,
               alternatives=(UPDATE_BODY.format(APPLIED),)),
        Anchor("Mean", RESULT_BODY.format(""), name="Mean.result (3.6.0+)", reported=False,
               alternatives=(RESULT_BODY.format(APPLIED),)),
        Anchor("", REDUCE_BODY.format("backend.get_keras_mask"), name="def reduce_to_samplewise_values(...) (3.6.0+)",
               reported=False, alternatives=tuple(body.format(mask) for body in (REDUCE_BODY, REDUCE_BODY_COMPILED_WEIGHT)
                                                  for mask in ("backend.get_keras_mask", "get_keras_mask"))[1:]),
        Anchor("", "from keras.src import backend", reported=False),
        Anchor("", "from keras.src import losses", reported=False),
        Anchor("", "from keras.src import ops", reported=False),
        Anchor("", "from keras.src.metrics.metric import Metric", reported=False),
        Anchor("Metric", "@property\ndef dtype(self): return self._dtype", path=METRIC_PY, reported=False,
               name="Metric.dtype returns self._dtype"),
    )
    details = Details(apply="torch fast paths in Mean.update_state and Mean.result",
                      present="Mean.update_state and Mean.result have the torch fast paths (forkgen)", upstream="")


PATCH = TorchMeanMetricFastPaths()
TorchMeanMetricFastPathsCommand = PATCH.command
