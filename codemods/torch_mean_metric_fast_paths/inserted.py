"""What `torch-mean-metric-fast-paths` puts into keras/src/metrics/reduction_metrics.py.

Parsed by the codemod, never imported. The body of `update_fast_path` goes in
`Mean.update_state`, right before its `reduce_to_samplewise_values(...)` statement; the body of
`result_fast_path` goes in `Mean.result`, right before its `return ops.divide_no_nan(...)`; when
a fast path does not return, upstream's code below it runs unchanged. The body of `helpers` goes
at the end of the module. The comments are the markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def update_fast_path(self, values, sample_weight):
    # forkgen: torch-mean-metric-fast-paths (float32 torch values: upstream's torch ops alone)
    if (
        _forkgen_torch is not None
        and type(values) is _forkgen_torch.Tensor
        and _forkgen_mean_update(self, values, sample_weight)
    ):
        return


def result_fast_path(self):
    # forkgen: torch-mean-metric-fast-paths (a cpu count that is not 0: `total / count`; cuda: no sync)
    if _forkgen_torch is not None:
        fast_result = _forkgen_mean_result(self)
        if fast_result is not None:
            return fast_result


def helpers():
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
    _forkgen_mean_current_cuda = object()


    def _forkgen_mean_place(device):
        """The `torch.device` the str `device` names when it is one device that is not "meta"
    (cpu, or an index given), `_forkgen_mean_current_cuda` for "cuda" (the current cuda device,
    asked for at each call by `_forkgen_mean_current`), else False (remembered)."""
        try:
            place = _forkgen_torch.device(device)
        except Exception:
            place = False
        else:
            if place.type == "meta" or (place.type != "cpu" and place.index is None):
                place = _forkgen_mean_current_cuda if device == "cuda" else False
        if len(_forkgen_mean_places) < 64:
            _forkgen_mean_places[device] = place
        return place


    def _forkgen_mean_current(place, tensors):
        """For `place` `_forkgen_mean_current_cuda` ("cuda"): the current cuda device, asked for now
    (it changes), when every tensor of `tensors` is on it (`tensor.to("cuda")` returns the
    tensor itself), else None; None for any other `place`."""
        first = tensors[0].device
        if place is not _forkgen_mean_current_cuda or first.type != "cuda":
            return None
        place = _forkgen_torch.device("cuda", _forkgen_torch.cuda.current_device())
        for tensor in tensors:
            if tensor.device != place:
                return None
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
            or total._dtype != "float32"
            or count._dtype != "float32"
            or total._shape != ()
            or count._shape != ()
        ):
            return None
        if total_value.device != place or count_value.device != place:
            place = _forkgen_mean_current(place, (total_value, count_value))
            if place is None:
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
    (upstream's `divide_no_nan` then selects that quotient), on a cuda device as
    `_forkgen_mean_quotient` (no sync); else None."""
        found = _forkgen_mean_state(metric) if _forkgen_mean_unobserved() else None
        if found is None:
            return None
        total, count, place, device = found
        if place.type == "cpu":
            if count.item() == 0:
                return None
            return _forkgen_torch.divide(total, count)
        if place.type == "cuda":
            return _forkgen_mean_quotient(total, count)
        return None


    def _forkgen_mean_quotient(total, count):
        """`where(count == 0, 0, divide(total, count))`: upstream's `divide_no_nan` of two float32
    tensors without its inner `where(count == 0, ones_like(count), count)`, which only changes
    the elements the outer `where` replaces by 0 (3.6-3.14's own form)."""
        torch = _forkgen_torch
        return torch.where(count == 0, 0, torch.divide(total, count))
