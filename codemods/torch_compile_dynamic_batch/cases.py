"""What `torch-compile-dynamic-batch` makes of loss and metric modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch. The modules are copies of the synthetic ones of `loss-mean-reduction-fast-path` and
`torch-mean-metric-fast-paths` (each holds this patch's anchors), which the series' synthetic tree
takes from those patches' cases."""

from codemods.engine import Case, Mutant, piece_text

LOSS_PY = "keras/src/losses/loss.py"
METRICS_PY = "keras/src/metrics/reduction_metrics.py"
COUNT = '''\
            divisor = ops.cast(
                ops.prod(
                    ops.convert_to_tensor(ops.shape(values), dtype="int32")
                ),
                loss.dtype,
            )
'''
WEIGHT = "        sample_weight = ops.convert_to_tensor(sample_weight, dtype=dtype)\n"
#: loss.py's `reduce_values` as loss-mean-reduction-fast-path's cases have it (a copy).
LOSS_BEFORE = '''\
from keras.src import backend
from keras.src import ops


def reduce_values(values, sample_weight=None, reduction="sum_over_batch_size"):
    if (
        reduction is None
        or reduction == "none"
        or tuple(values.shape) == ()
        or tuple(values.shape) == (0,)
    ):
        return values
    loss = ops.sum(values)
    if reduction in ("sum_over_batch_size", "mean", "mean_with_sample_weight"):
        if reduction == "mean_with_sample_weight" and sample_weight is not None:
            divisor = ops.cast(ops.sum(sample_weight), loss.dtype)
        else:
            divisor = ops.cast(
                ops.prod(
                    ops.convert_to_tensor(ops.shape(values), dtype="int32")
                ),
                loss.dtype,
            )
        loss = ops.divide_no_nan(loss, divisor)
        loss = scale_loss_for_distribution(loss)
    return loss


def scale_loss_for_distribution(value):
    if backend.backend() == "tensorflow":
        value = ops.multiply(value, 1.0)
    return value
'''
#: reduction_metrics.py's `reduce_to_samplewise_values` and `Mean` as torch-mean-metric-fast-paths'
#: cases have them (a copy).
METRICS_BEFORE = '''\
from keras.src import backend
from keras.src import losses
from keras.src import ops
from keras.src.metrics.metric import Metric


def reduce_to_samplewise_values(values, sample_weight, reduce_fn, dtype):
    dtype = dtype or backend.floatx()
    mask = backend.get_keras_mask(values)
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


class Mean(Metric):
    def __init__(self, name="mean", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, values, sample_weight=None):
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

    def result(self):
        return ops.divide_no_nan(self.total, ops.cast(self.count, dtype=self.dtype))
'''
LOSS_AFTER = (LOSS_BEFORE.replace(COUNT, piece_text(__file__, "element_count", " " * 12, upstream=COUNT))
              + "\n\n" + piece_text(__file__, "helpers"))
METRICS_AFTER = METRICS_BEFORE.replace(WEIGHT, piece_text(__file__, "integer_weight", " " * 8, upstream=WEIGHT))
BEFORE = {LOSS_PY: LOSS_BEFORE, METRICS_PY: METRICS_BEFORE}

CASES = (
    Case("the count and the weight made with torch.full while compiling", BEFORE,
         {LOSS_PY: LOSS_AFTER, METRICS_PY: METRICS_AFTER},
         detail="a symbolic batch size stays symbolic while compiling"),
    Case("a release whose divisor is computed otherwise",
         {**BEFORE, LOSS_PY: LOSS_BEFORE.replace('dtype="int32"', 'dtype="int64"')}, drift="reduce_values"),
    Case("a release that converts the weight otherwise",
         {**BEFORE, METRICS_PY: METRICS_BEFORE.replace("convert_to_tensor(sample_weight, dtype=dtype)",
                                                       "convert_to_tensor(sample_weight)")},
         drift="reduce_to_samplewise_values"),
    Case("a module that binds a helper's name", {**BEFORE, LOSS_PY: LOSS_BEFORE + "\n\ndef _forkgen_compiled_count():\n    pass\n"},
         drift="_forkgen_compiled_count"),
)

MUTANTS = (
    Mutant("the count off by one while compiling", "        return _forkgen_compiled_tensor(count, \"int32\", dtype)",
           "        return _forkgen_compiled_tensor(count + 1, \"int32\", dtype)"),
    Mutant("the weight's tensor of another dtype", '_forkgen_compiled_tensor(sample_weight, "int64", dtype)',
           '_forkgen_compiled_tensor(sample_weight, "int64", "float64")'),
    Mutant("the count by torch.as_tensor again (the batch size fixed)",
           "        return ops.cast(_forkgen_compile_torch.full((), value, dtype=integer, device=get_device()), dtype)",
           "        return ops.cast(_forkgen_compile_torch.as_tensor(value, dtype=integer, device=get_device()), dtype)"),
)
#: Not a mutant: the branches taken in eager calls too. Eagerly, `torch.full` of an int and
#: `torch.as_tensor` of it give the same tensor, which no test can tell apart (the patch takes them
#: while compiling only so that eager calls stay upstream's code).
