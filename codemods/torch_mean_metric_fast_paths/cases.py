"""What `torch-mean-metric-fast-paths` makes of modules shaped like Keras's reduction_metrics.py
and metric.py (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the
equivalence suite must catch. The synthetic modules are ours: only the statements the patch
anchors on and relies on are shaped like Keras's."""

from codemods.patchlib import Case, Mutant

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
UPDATE = '''\
        # forkgen: torch-mean-metric-fast-paths (float32 torch values: upstream's torch ops alone)
        if (
            _forkgen_torch is not None
            and type(values) is _forkgen_torch.Tensor
            and _forkgen_mean_update(self, values, sample_weight)
        ):
            return
'''
RESULT = '''\
        # forkgen: torch-mean-metric-fast-paths (a cpu count that is not 0: `total / count`)
        if _forkgen_torch is not None:
            fast_result = _forkgen_mean_result(self)
            if fast_result is not None:
                return fast_result
'''
HELPERS = '''\


# forkgen: torch-mean-metric-fast-paths (torch on the torch backend; what Mean's fast paths rely on)
if backend.backend() == "torch":
    import torch as _forkgen_torch
    from keras.src.backend.common.masking import get_keras_mask as _forkgen_get_keras_mask
    from keras.src.backend.common.stateless_scope import in_stateless_scope as _forkgen_in_stateless_scope
    from keras.src.backend.common.variables import get_autocast_scope as _forkgen_get_autocast_scope

    _forkgen_mean_variable = backend.Variable
    _forkgen_mean_core = backend.Variable._convert_to_tensor.__globals__
    _FORKGEN_MEAN_VARIABLE_ATTRIBUTES = (
        backend.Variable.assign_add, backend.Variable.assign, backend.Variable.__add__,
        backend.Variable._convert_to_tensor, backend.Variable._direct_assign,
        backend.Variable._maybe_autocast, backend.Variable.value, backend.Variable.shape,
        backend.Variable.dtype,
    )
    if not (
        hasattr(getattr(_forkgen_torch, "compiler", None), "is_compiling")
        and hasattr(_forkgen_torch._C, "_len_torch_dispatch_stack")
        and hasattr(_forkgen_torch._C, "_are_functorch_transforms_active")
    ):
        _forkgen_torch = None
else:
    _forkgen_torch = None
_forkgen_mean_metric_dtype = Metric.dtype
_forkgen_reduce_to_samplewise_values = reduce_to_samplewise_values
_forkgen_mean_ops = []
_forkgen_mean_classes = {}
_forkgen_mean_places = {}


def _forkgen_mean_place(device):
    """The `torch.device` the str `device` names when it is one device that is not "meta"
    (cpu, or an index given), else False (remembered)."""
    try:
        place = _forkgen_torch.device(device)
    except Exception:
        place = False
    else:
        if place.type == "meta" or (place.type != "cpu" and place.index is None):
            place = False
    if len(_forkgen_mean_places) < 64:
        _forkgen_mean_places[device] = place
    return place


def _forkgen_mean_class(cls):
    """Whether `total`, `count` and `_dtype` of a `cls` instance are read from its `__dict__`
    alone: no class in its MRO binds them, no `__getattribute__` of its own (remembered)."""
    plain = cls.__getattribute__ is object.__getattribute__ and not any(
        "total" in vars(klass) or "count" in vars(klass) or "_dtype" in vars(klass)
        for klass in cls.__mro__
    )
    if len(_forkgen_mean_classes) < 256:
        _forkgen_mean_classes[cls] = plain
    return plain


def _forkgen_mean_unobserved():
    """Whether torch runs as plain eager code: not compiling (Dynamo then traces upstream's code),
    no torch function or dispatch mode, no functorch transform (each would see the ops)."""
    torch = _forkgen_torch
    return not (
        torch.compiler.is_compiling()
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._are_functorch_transforms_active()
    )


def _forkgen_mean_state(metric):
    """`(total, count, place, device)`: the parameters of a float32 `Mean`'s two variables, the
    current device and its str, when upstream's `update_state` and `result` would read and write
    those parameters as they are (see the patch's proof); else None. Once unobserved only."""
    torch = _forkgen_torch
    if not _forkgen_mean_ops:
        # Read on first use: `ops` may still be being imported when this module is.
        from keras.src.losses import loss as losses_loss
        from keras.src.ops import core as ops_core
        from keras.src.ops import numpy as ops_numpy

        _forkgen_mean_ops.append(
            (_forkgen_reduce_to_samplewise_values, ops_numpy.sum, ops_core.shape, ops_core.cast,
             ops_core.convert_to_tensor, ops_numpy.broadcast_to, ops_numpy.divide_no_nan,
             losses_loss.squeeze_or_expand_to_same_rank)
        )
    cls = type(metric)
    if (
        reduce_to_samplewise_values, ops.sum, ops.shape, ops.cast, ops.convert_to_tensor,
        ops.broadcast_to, ops.divide_no_nan, losses.loss.squeeze_or_expand_to_same_rank,
    ) != _forkgen_mean_ops[0] or cls.dtype is not _forkgen_mean_metric_dtype:
        return None
    plain = _forkgen_mean_classes.get(cls)
    if plain is None:
        plain = _forkgen_mean_class(cls)
    if not plain:
        return None
    state = metric.__dict__
    dtype = state.get("_dtype")
    total = state.get("total")
    count = state.get("count")
    variable = _forkgen_mean_variable
    if (
        type(dtype) is not str
        or dtype != "float32"
        or type(total) is not variable
        or type(count) is not variable
        or (
            variable.assign_add, variable.assign, variable.__add__, variable._convert_to_tensor,
            variable._direct_assign, variable._maybe_autocast, variable.value, variable.shape,
            variable.dtype,
        ) != _FORKGEN_MEAN_VARIABLE_ATTRIBUTES
        or _forkgen_in_stateless_scope()
        or ((total._autocast or count._autocast) and _forkgen_get_autocast_scope() is not None)
    ):
        return None
    for own in (total.__dict__, count.__dict__):
        if (
            "assign_add" in own or "assign" in own or "_convert_to_tensor" in own
            or "_direct_assign" in own or "_maybe_autocast" in own
        ):
            return None
    device = _forkgen_mean_core["get_device"]()
    if type(device) is not str:
        return None
    place = _forkgen_mean_places.get(device)
    if place is None:
        place = _forkgen_mean_place(device)
    if place is False:
        return None
    total_value = total._value
    count_value = count._value
    if (
        type(total_value) is not torch.nn.Parameter
        or type(count_value) is not torch.nn.Parameter
        or total_value.dtype is not torch.float32
        or count_value.dtype is not torch.float32
        or total_value.layout is not torch.strided
        or count_value.layout is not torch.strided
        or total_value.dim() != 0
        or count_value.dim() != 0
        or total_value.requires_grad
        or count_value.requires_grad
        or total_value.is_inference()
        or count_value.is_inference()
        or total_value.device != place
        or count_value.device != place
        or total._dtype != "float32"
        or count._dtype != "float32"
        or total._shape != ()
        or count._shape != ()
    ):
        return None
    return total_value, count_value, place, device


def _forkgen_mean_update(metric, values, sample_weight):
    """`Mean.update_state(values, sample_weight)` with torch's ops alone, when upstream's would
    run exactly those: float32 values of rank 0 or 1 without a weight, of rank 0 with an int
    weight in [0, 2**24] (the loss tracker's batch size), or with a float32 weight of their
    shape. Returns whether it did."""
    torch = _forkgen_torch
    if (
        not _forkgen_mean_unobserved()
        or values.dtype is not torch.float32
        or values.layout is not torch.strided
        or values.dim() > 1
    ):
        return False
    if sample_weight is None:
        kind = 0
        if values.dim() and values.shape[0] > 16777216:
            return False
    elif type(sample_weight) is int:
        kind = 1
        if values.dim() or not 0 <= sample_weight <= 16777216:
            return False
    elif (
        type(sample_weight) is torch.Tensor
        and sample_weight.dtype is torch.float32
        and sample_weight.layout is torch.strided
        and sample_weight.shape == values.shape
    ):
        kind = 2
    else:
        return False
    found = _forkgen_mean_state(metric)
    if found is None:
        return False
    total, count, place, device = found
    if values.device != place or (kind == 2 and sample_weight.device != place):
        return False
    # Upstream reads the mask (`backend.get_keras_mask` in 3.x, the module's `get_keras_mask` in
    # keras-nightly) and uses it with a weight.
    if (
        getattr(backend, "get_keras_mask", _forkgen_get_keras_mask) is not _forkgen_get_keras_mask
        or globals().get("get_keras_mask", _forkgen_get_keras_mask) is not _forkgen_get_keras_mask
        or (kind and _forkgen_get_keras_mask(values) is not None)
    ):
        return False
    if torch.is_grad_enabled() and (values.requires_grad or (kind == 2 and sample_weight.requires_grad)):
        with torch.no_grad():
            _forkgen_mean_accumulate(total, count, values, sample_weight, kind, device)
    else:
        _forkgen_mean_accumulate(total, count, values, sample_weight, kind, device)
    return True


def _forkgen_mean_accumulate(total, count, values, sample_weight, kind, device):
    """Upstream's torch ops of `Mean.update_state`, in its order, without those that return
    their argument."""
    torch = _forkgen_torch
    if kind == 0:
        total.copy_(torch.add(total, torch.sum(values)))
        samples = values.shape[0] if values.dim() else 1
        count.copy_(torch.add(count, torch.as_tensor(samples, dtype=torch.float32, device=device)))
    elif kind == 1:
        weight = torch.as_tensor(sample_weight, dtype=torch.float32, device=device)
        total.copy_(torch.add(total, torch.sum(values * weight)))
        count.copy_(torch.add(count, torch.sum(weight)))
    else:
        total.copy_(torch.add(total, torch.sum(values * sample_weight)))
        count.copy_(torch.add(count, torch.sum(sample_weight)))


def _forkgen_mean_result(metric):
    """`Mean.result()` as `torch.divide(total, count)` on the cpu when the count is not 0
    (upstream's `divide_no_nan` then selects that quotient); else None."""
    found = _forkgen_mean_state(metric) if _forkgen_mean_unobserved() else None
    if found is None:
        return None
    total, count, place, device = found
    if place.type != "cpu" or count.item() == 0:
        return None
    return _forkgen_torch.divide(total, count)
'''
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
           'if place.type != "cpu" or count.item() == 0:', 'if place.type != "cpu":'),
    Mutant("an int weight with rank-1 values (the rank test dropped)",
           "if values.dim() or not 0 <= sample_weight <= 16777216:", "if not 0 <= sample_weight <= 16777216:"),
    Mutant("a masked value weighted as if unmasked (the mask test dropped)",
           "or (kind and _forkgen_get_keras_mask(values) is not None)", "or False"),
    Mutant("a grad-requiring loss accumulated with grad on (no_grad dropped)",
           "if torch.is_grad_enabled() and (values.requires_grad", "if False and (values.requires_grad"),
)


#: The synthetic files of the series' whole synthetic tree (tests/support/synthetic.py).
FILES = {"keras/src/metrics/__init__.py": "", PATH: BEFORE, METRIC_PATH: METRIC}
