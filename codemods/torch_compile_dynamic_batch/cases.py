"""What `torch-compile-dynamic-batch` makes of loss and metric modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch. The modules are the synthetic ones of `loss-mean-reduction-fast-path` and
`torch-mean-metric-fast-paths` (each holds this patch's anchors), which the series' synthetic tree
takes from them."""

from codemods.engine import Case, Mutant, piece_text
from codemods.loss_mean_reduction_fast_path import cases as loss_cases
from codemods.torch_mean_metric_fast_paths import cases as metric_cases

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
LOSS_BEFORE = loss_cases.BEFORE
METRICS_BEFORE = metric_cases.BEFORE
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
