"""What `loss-mean-reduction-fast-path` makes of loss modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from codemods.engine import Case, Mutant, piece_text

HEAD = '''\
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
'''
CHOICE = '''\
        if reduction == "mean_with_sample_weight" and sample_weight is not None:
            divisor = ops.cast(ops.sum(sample_weight), loss.dtype)
        else:
            divisor = ops.cast(
                ops.prod(
                    ops.convert_to_tensor(ops.shape(values), dtype="int32")
                ),
                loss.dtype,
            )
'''
TAIL = '''\
        loss = ops.divide_no_nan(loss, divisor)
        loss = scale_loss_for_distribution(loss)
    return loss


def scale_loss_for_distribution(value):
    if backend.backend() == "tensorflow":
        value = ops.multiply(value, 1.0)
    return value
'''
BEFORE = HEAD + CHOICE + TAIL
FAST_PATH = piece_text(__file__, "mean_fast_path", " " * 8)
HELPERS = "\n\n" + piece_text(__file__, "helpers")
AFTER = HEAD + FAST_PATH + CHOICE + TAIL + HELPERS
LABEL = "reduce_values: if reduction == 'mean_with_sample_weight' and sample_weight is not None: ..."
SHAPE = "anchor 'def reduce_values(...) (3.8.0+)': expected exactly one"


def _drift(name: str, old: str, new: str, drift: str = SHAPE) -> Case:
    assert BEFORE.count(old) == 1, old
    return Case(name, BEFORE.replace(old, new), drift=drift)


CASES = (
    Case("the fast path above the divisor choice, the helpers at the end", BEFORE, AFTER,
         detail="a torch float32 fast path dividing by the static count in reduce_values", anchors=((LABEL, 15),)),
    _drift("3.7's reduction: no scale_loss_for_distribution", "        loss = scale_loss_for_distribution(loss)\n", ""),
    _drift("a divisor computed otherwise", 'dtype="int32"', 'dtype="int64"'),
    _drift("the zero test gone", "ops.divide_no_nan(loss, divisor)", "ops.divide(loss, divisor)"),
    _drift("another reduction list", '("sum_over_batch_size", "mean", "mean_with_sample_weight")',
           '("sum_over_batch_size", "mean")'),
    _drift("no ops import", "from keras.src import ops\n", "from keras.src import ops as ops_module\n",
           "anchor 'ops': expected bound where mean_fast_path goes"),
    Case("a helper name taken", BEFORE + "\n_forkgen_static_count = None\n",
         drift="expected names free for helpers (forkgen's helper); found already bound"),
    _drift("a local named like the fast path's", "    loss = ops.sum(values)\n",
           "    fast_count = 0\n    loss = ops.sum(values)\n",
           "anchor 'reduce_values: fast_count': expected names free for mean_fast_path; found used"),
    Case("half applied", AFTER.replace(HELPERS, "\n"),
         drift="expected all pieces present or none"),
    Case("an unmarked fast path is not upstream's",
         AFTER.replace("# forkgen: loss-mean-reduction-fast-path (torch, a", "# (torch, a"),
         drift="expected to edit, or edited by forkgen; found an edited form without forkgen's marker"),
)

MUTANTS = (
    Mutant("a weighted mean divided by the count",
           '        and (reduction != "mean_with_sample_weight" or sample_weight is None)\n', ""),
    Mutant("a float16 loss divided by a float32 count (dtype guard dropped)",
           "        and loss.dtype is _forkgen_torch.float32\n", ""),
    Mutant("an empty shape divided by zero (a count of 0 let through)",
           "        if fast_count:\n", "        if fast_count is not None:\n"),
)


#: The synthetic files of the series' whole synthetic tree (tests/support/synthetic.py).
FILES = {"keras/src/losses/__init__.py": "", "keras/src/losses/loss.py": BEFORE}
