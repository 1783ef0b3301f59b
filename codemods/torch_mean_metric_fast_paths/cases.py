"""What `torch-mean-metric-fast-paths` makes of modules shaped like Keras's reduction_metrics.py
and metric.py, how its helpers decide on a stand-in torch (both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch. The synthetic modules are ours: only the statements the patch anchors on and relies on are
shaped like Keras's."""

import types
from typing import Any

from codemods.engine import Case, Mutant, piece_text

PATH = "keras/src/metrics/reduction_metrics.py"
METRIC_PATH = "keras/src/metrics/metric.py"
METRIC = '''\
class Metric(KerasSaveable):
    def __init__(self, dtype=None, name=None):
        self.name = name
        self._dtype = dtype

    @property
    def dtype(self):
        return self._dtype
'''
HEAD = '''\
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
'''
MIDDLE = '''\
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
'''
TAIL = '''\
        return ops.divide_no_nan(self.total, ops.cast(self.count, dtype=self.dtype))
'''
UPDATE = piece_text(__file__, "update_fast_path", "        ")
RESULT = piece_text(__file__, "result_fast_path", "        ")
HELPERS = "\n\n" + piece_text(__file__, "helpers")
BEFORE = HEAD + MIDDLE + TAIL
AFTER = HEAD + UPDATE + MIDDLE + RESULT + TAIL + HELPERS
UPDATE_LABEL = "Mean.update_state: values, sample_weight = reduce_to_samplewise_values(...)"
RESULT_LABEL = "Mean.result: return ops.divide_no_nan(...)"
NIGHTLY_MASK = ("from keras.src.metrics.metric import Metric\n",
                "from keras.src.metrics.metric import Metric\nfrom keras.src.backend.common import get_keras_mask\n")
NIGHTLY_GET = ("mask = backend.get_keras_mask(values)", "mask = get_keras_mask(values)")


def tree(text: str, metric: str = METRIC) -> dict[str, str]:
    return {PATH: text, METRIC_PATH: metric}


def nightly(text: str) -> str:
    return text.replace(*NIGHTLY_MASK).replace(*NIGHTLY_GET)


def _drift(name: str, old: str, new: str, drift: str) -> Case:
    assert BEFORE.count(old) == 1, old
    return Case(name, tree(BEFORE.replace(old, new)), drift=drift)


REDUCE = "anchor 'def reduce_to_samplewise_values(...) (3.6.0+)': expected exactly one"
UPDATE_SHAPE = "anchor 'Mean.update_state (3.6.0+)': expected exactly one"
RESULT_SHAPE = "anchor 'Mean.result (3.6.0+)': expected exactly one"

CASES = (
    Case("the fast paths before Mean's update and result, the helpers at the end", tree(BEFORE), {PATH: AFTER},
         detail="torch fast paths in Mean.update_state and Mean.result",
         anchors=((UPDATE_LABEL, 37), (RESULT_LABEL, 50))),
    Case("keras-nightly: the mask getter imported into the module", tree(nightly(BEFORE)), {PATH: nightly(AFTER)}),
    _drift("3.4-3.5's reduction: the weight cast, the mask read as an attribute", "mask = backend.get_keras_mask(values)",
           'mask = getattr(values, "_keras_mask", None)', REDUCE),
    _drift("a weight reduction of another shape", "values = values * sample_weight",
           "values = ops.multiply(values, sample_weight)", REDUCE),
    _drift("a count taken otherwise", "num_samples = ops.shape(values)[0]", "num_samples = len(values)", UPDATE_SHAPE),
    _drift("a result without divide_no_nan", "return ops.divide_no_nan(self.total, ops.cast(self.count, dtype=self.dtype))",
           "return ops.divide(self.total, self.count)", "anchor 'Mean.result: return ops.divide_no_nan(...)'"),
    _drift("a result of another shape", "    def result(self):\n",
           "    def result(self):\n        self.count.assign(ops.maximum(self.count, 1))\n", RESULT_SHAPE),
    _drift("no losses import", "from keras.src import losses\n", "from keras.src import losses as losses_module\n",
           "anchor 'losses': expected bound where helpers goes"),
    Case("Metric.dtype reads the policy", tree(BEFORE, METRIC.replace("return self._dtype", "return self._dtype_policy.compute_dtype")),
         drift="anchor 'Metric.dtype returns self._dtype': expected exactly one"),
    Case("a helper name taken", tree(BEFORE + "\n_forkgen_mean_state = None\n"),
         drift="expected names free for helpers (forkgen's helper); found already bound"),
    _drift("a local named like the fast path's", "    def result(self):\n",
           "    def result(self):\n        fast_result = None\n",
           "anchor 'Mean.result: fast_result': expected names free for result_fast_path; found used"),
    Case("half applied", tree(AFTER.replace(HELPERS, "\n")), drift="expected all pieces present or none"),
    Case("an unmarked fast path is not upstream's",
         tree(AFTER.replace("# forkgen: torch-mean-metric-fast-paths (a cpu", "# (a cpu")),
         drift="expected to edit, or edited by forkgen; found an edited form without forkgen's marker"),
)

MUTANTS = (
    Mutant("a count of 0 divided (the zero test dropped)",
           "if count.item() == 0:", "if False:"),
    Mutant("an int weight with rank-1 values (the rank test dropped)",
           "if values.dim() or not 0 <= sample_weight <= 16777216:", "if not 0 <= sample_weight <= 16777216:"),
    Mutant("a masked value weighted as if unmasked (the mask test dropped)",
           "or (kind and _forkgen_get_keras_mask(values) is not None)", "or False"),
    Mutant("a grad-requiring loss accumulated with grad on (no_grad dropped)",
           "if torch.is_grad_enabled() and (values.requires_grad", "if False and (values.requires_grad"),
    # "cuda" (version 2): caught by the stand-in torch (tests/support/torch_current_cuda.py), whose
    # current cuda device the equivalence test changes between calls, and by the quotient's bits.
    Mutant('"cuda": the current cuda device remembered',
           'place = _forkgen_torch.device("cuda", _forkgen_torch.cuda.current_device())',
           'place = _forkgen_mean_places["cuda"] = _forkgen_torch.device("cuda", _forkgen_torch.cuda.current_device())'),
    Mutant('"cuda": any cuda device taken (its index not compared with the current one)',
           'place = _forkgen_torch.device("cuda", _forkgen_torch.cuda.current_device())', "place = first"),
    Mutant('"cuda": the count\'s device not compared', "place = _forkgen_mean_current(place, (total_value, count_value))",
           "place = _forkgen_mean_current(place, (total_value,))"),
    Mutant('"cuda": the result reads the count (a device sync)', 'if place.type == "cpu":', 'if place.type != "mps":'),
    Mutant('"cuda": a count of 0 divided (the where dropped)',
           "return torch.where(count == 0, 0, torch.divide(total, count))", "return torch.divide(total, count)"),
)


#: The synthetic files of the series' whole synthetic tree (tests/support/synthetic.py).
FILES = {"keras/src/metrics/__init__.py": "", PATH: BEFORE, METRIC_PATH: METRIC}


# -- behaviours: the helpers on a stand-in torch whose current cuda device the test sets ---------
# (the `torch_current_cuda` fixture, for Keras's index-less "cuda"). The checkout's `helpers` piece
# is executed (on a backend that is not torch's, so it imports nothing) and given the stand-in's
# torch, variables and ops; `Mean.update_state`'s fast path must be taken exactly when torch's
# `.to(get_device())` would keep both variables and the values where they are (for "cuda": on the
# current cuda device, asked at each call), and `Mean.result`'s on a cuda device must be the
# sync-free quotient, never reading the count.


def executed_helpers(standin: types.ModuleType, torch: Any) -> dict[str, Any]:
    """The helpers piece executed, then given the stand-in's parts."""
    namespace = standin.mean_names(torch)
    exec(piece_text(__file__, "helpers"), namespace)
    assert namespace["_forkgen_torch"] is None  # not the torch backend: nothing imported
    return standin.mean_standin(namespace, torch)  # type: ignore[no-any-return]


def the_fast_paths_follow_torchs_rule_for_every_device_string(torch_current_cuda: types.ModuleType) -> None:
    standin = torch_current_cuda
    for cuda_built in (True, False):  # a cuda torch, a cpu-only torch
        torch = standin.Torch(cuda_built)
        namespace = executed_helpers(standin, torch)
        assert standin.check_mean_state(namespace, torch) > 0
        assert (torch.asked > 0) is cuda_built  # a cpu-only torch is never asked
        assert torch.synced == 0


def cuda_is_the_current_device_at_each_call(torch_current_cuda: types.ModuleType) -> None:
    torch = torch_current_cuda.Torch()
    namespace = executed_helpers(torch_current_cuda, torch)
    torch.keras_device = "cuda"
    metric = type("Mean", (namespace["Metric"],), {})()
    metric._dtype = "float32"
    metric.total = namespace["_forkgen_mean_variable"](torch.nn.Parameter("cuda:1"))
    metric.count = namespace["_forkgen_mean_variable"](torch.nn.Parameter("cuda:1"))
    update, result = namespace["_forkgen_mean_update"], namespace["_forkgen_mean_result"]
    assert update(metric, torch.Tensor("cuda:1"), None) is False and torch.asked == 1
    torch.current = 1  # torch.cuda.set_device(1)
    assert update(metric, torch.Tensor("cuda:1"), None) is True and torch.asked == 2
    assert namespace["ran"][-1][-1] == "cuda"  # the count's `as_tensor` gets the str, as upstream's
    assert update(metric, torch.Tensor("cuda:0"), None) is False
    assert result(metric) == "quotient" and torch.synced == 0
    torch.current = 0
    assert result(metric) is None
    assert namespace["_forkgen_mean_places"]["cuda"] is namespace["_forkgen_mean_current_cuda"]


BEHAVIOURS = (the_fast_paths_follow_torchs_rule_for_every_device_string, cuda_is_the_current_device_at_each_call)
