"""Patch `loss-mean-reduction-fast-path` (ours, not upstream): on torch, `reduce_values` divides a
float32 loss sum by its static element count straight away instead of building the divisor from
the shape with three ops and dividing with `divide_no_nan`.

Upstream (`keras/src/losses/loss.py`, 3.8.0-3.15.1 and keras-nightly, the same AST) reduces a
`"sum_over_batch_size"`/`"mean"` loss (the default of every built-in loss, so every compiled
loss of every train and test step) as `ops.divide_no_nan(ops.sum(values), divisor)` with
`divisor = ops.cast(ops.prod(ops.convert_to_tensor(ops.shape(values), dtype="int32")),
loss.dtype)`. On torch CPU (3.15.1 fork) that costs 51 us a call, of which the divisor about 18
us and `divide_no_nan` (result_type, two conversions, two `x2 == 0`, `ones_like`, two
`where`, the division) about 18 us; its autograd graph holds the two `where` nodes too.

The patch puts a guarded fast path right before the `if` that picks the divisor; it returns
`scale_loss_for_distribution(ops.divide(loss, ops.convert_to_tensor(n, dtype="float32")))`
(14 us) and, when a guard is false, upstream's code below it runs unchanged.

Why the result is identical. The fast path runs only on torch, when the divisor branch is the
count one (`reduction != "mean_with_sample_weight" or sample_weight is None`, the negation of the
other branch's test), `loss` is an exact `torch.Tensor` of dtype float32, the six `ops`
functions involved (`cast`, `prod`, `shape`, `convert_to_tensor`, `divide_no_nan`, `divide`) are
their defining modules' own (`keras.src.ops.core`/`numpy`, read on first use since `ops` is still
being imported when `loss.py` is; a function monkeypatched on `keras.src.ops` fails it), torch.compile
is not tracing (under it upstream's divisor is traced, as upstream, and nothing is learnt; traced,
the fast path gives the same one graph and value: the stand-aside is not observable, hence no mutant), and the shape of
`values` is made of Python ints whose product n is in [1, 2**24]. Then, step by step:
(1) upstream's divisor: `ops.shape(values)` is the tuple of those ints; `convert_to_tensor(...,
"int32")` holds them exactly (each is at most n, or the product is 0, excluded); `ops.prod` of
an int32 tensor computes in int32 (no overflow below 2**31) and casts to int32 (no-op); the
cast to float32 is exact for n <= 2**24. So the divisor is a 0-d float32 tensor of value n on
`get_device()`: exactly what `convert_to_tensor(n, dtype="float32")` (`torch.as_tensor(n,
float32, device=get_device())`) gives. (2) `divide_no_nan(loss, divisor)`: its dtype steps (3.15.1:
`result_type(float32, float32, float)`, nightly: `convert_to_tensors_of_same_dtype(..., float)`)
keep float32, so its conversions only do the device move that `ops.divide`'s conversions do
(3.8-3.14 convert without a dtype, as `divide` does); `safe_x2 = where(x2 == 0, ones, x2)`
(3.15.1, nightly) is x2 itself since x2 = n != 0; `where(x2 == 0, 0, torch.divide(x1, x2))`
selects every element of the quotient. So the values are `torch.divide(x1, x2)` on the same
operands, computed by the same kernel, in the same dtype and on the same device. Gradients are the
same: `where`'s backward passes the gradient of the selected branch unchanged, and
`divide`'s backward divides it by the same x2. (3) `scale_loss_for_distribution` is called as
upstream calls it (identity but on tensorflow). NaN and infinities in `loss` go through
the same division. Symbolic tensors, other dtypes (float16, bfloat16, float64, integers), shapes
with a 0, a SymInt or over 2**24 elements, weighted means and other backends run upstream's code.

Not guarded, because no code does it: a torch `__torch_function__` mode observing the
sequence of ops (it sees fewer; the values are the same); the torch backend's own
`divide_no_nan`/`prod`/`convert_to_tensor` replaced at runtime under `keras.src.ops` (only the
`ops` functions are checked). The shapes of the torch backend's `divide_no_nan` relied on above
(three of them: 3.8-3.14, 3.15.x, keras-nightly) were compared by hand; the equivalence test
checks the result on the installed release.

Applies from Keras 3.8.0 (`since`): earlier releases reduce with `loss /= ...` (3.0-3.6) or
without `scale_loss_for_distribution` (3.7). No switch: the fast path keeps no state.
"""

from __future__ import annotations

from codemods.engine import (
    LOSS_PY,
    Anchor,
    Append,
    DeclaredPatch,
    Details,
    Headers,
    InsertBefore,
    applied_piece,
)

FUNCTION = "reduce_values"
#: The divisor choice of a mean reduction, where the fast path goes (above it).
DIVISOR_IF = 'if reduction == "mean_with_sample_weight" and sample_weight is not None: ___\nelse: ___'
LABEL = "reduce_values: if reduction == 'mean_with_sample_weight' and sample_weight is not None: ..."
#: Upstream's whole function, 3.8.0-3.15.1 and keras-nightly (`{}`: where the fast path is, once in).
BODY = """
def reduce_values(values, sample_weight=None, reduction="sum_over_batch_size"):
    if (
        reduction is None
        or reduction == "none"
        or tuple(values.shape) == ()
        or tuple(values.shape) == (0,)
    ):
        return values
    loss = ops.sum(values)
    if reduction in ("sum_over_batch_size", "mean", "mean_with_sample_weight"):{}
        if reduction == "mean_with_sample_weight" and sample_weight is not None:
            divisor = ops.cast(ops.sum(sample_weight), loss.dtype)
        else:
            divisor = ops.cast(
                ops.prod(ops.convert_to_tensor(ops.shape(values), dtype="int32")), loss.dtype
            )
        loss = ops.divide_no_nan(loss, divisor)
        loss = scale_loss_for_distribution(loss)
    return loss
"""
#: `BODY` with `torch-compile-dynamic-batch`'s divisor as that later patch of the series applies
#: it (its piece, from its inserted.py: a branch only dynamo's tracing takes, upstream's statement
#: kept under it), which this patch's analysis of an already patched tree must accept.
UPSTREAM_DIVISOR = """\
            divisor = ops.cast(
                ops.prod(ops.convert_to_tensor(ops.shape(values), dtype="int32")), loss.dtype
            )
"""
BODY_COMPILED_COUNT = BODY.replace(UPSTREAM_DIVISOR, applied_piece(
    "torch-compile-dynamic-batch", "element_count", " " * 12, upstream=UPSTREAM_DIVISOR))


class LossMeanReductionFastPath(DeclaredPatch):
    name = "loss-mean-reduction-fast-path"
    version = "1"
    headers = Headers(
        description="torch: reduce_values divides a float32 loss sum by its static element count (1..2**24) "
        "with ops.divide, without building the divisor from the shape and without divide_no_nan's zero test.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-04",
    )
    files = (LOSS_PY,)
    since = "3.8.0"
    #: Its relied-on function may hold torch-compile-dynamic-batch's divisor (a later patch).
    tolerates = ("torch-compile-dynamic-batch",)
    edits = (
        InsertBefore(Anchor(FUNCTION, DIVISOR_IF, name=LABEL), "mean_fast_path", label=LABEL),
        Append("helpers", label="the helpers"),
    )
    #: The function the fast path mirrors (with the fast path in, once applied); the modules it reads.
    relies_on = (
        Anchor("", BODY.format(""), name="def reduce_values(...) (3.8.0+)", reported=False,
               alternatives=tuple(body.format(fast_path) for body in (BODY, BODY_COMPILED_COUNT)
                                  for fast_path in ("", "\n        if __: ___"))[1:]),
        Anchor("", "from keras.src import ops", reported=False),
        Anchor("", "from keras.src import backend", reported=False),
        Anchor("", "def scale_loss_for_distribution(value): ___", reported=False),
    )
    details = Details(apply="a torch float32 fast path dividing by the static count in reduce_values",
                      present="reduce_values has the fast path (forkgen)", upstream="")


PATCH = LossMeanReductionFastPath()
LossMeanReductionFastPathCommand = PATCH.command
