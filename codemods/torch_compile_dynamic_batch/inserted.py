"""What `torch-compile-dynamic-batch` puts into keras/src/losses/loss.py and
keras/src/metrics/reduction_metrics.py.

Parsed by the engine, never imported. `element_count` takes the place of `reduce_values`'s
element-count divisor statement (`UPSTREAM`: that statement, kept node for node);
`integer_weight` takes the place of `reduce_to_samplewise_values`'s conversion of the sample
weight; `helpers` is appended to loss.py (reduction_metrics.py reaches them as `losses.loss.*`).
"""
# ruff: noqa


def element_count(values, loss):
    # forkgen: torch-compile-dynamic-batch (while compiling: the count without a tensor of the shape)
    divisor = _forkgen_compiled_count(values.shape, loss.dtype)
    if divisor is None:
        UPSTREAM


def integer_weight(sample_weight, dtype):
    # forkgen: torch-compile-dynamic-batch (while compiling: an int weight, a batch size, without torch.as_tensor)
    if losses.loss._forkgen_compiled_int(sample_weight):
        sample_weight = losses.loss._forkgen_compiled_tensor(sample_weight, "int64", dtype)
    else:
        UPSTREAM


def helpers():
    # forkgen: torch-compile-dynamic-batch
    if backend.backend() == "torch":
        import sys as _forkgen_compile_sys
        import torch as _forkgen_compile_torch

        # The torch backend's core module, where `get_device` is (3.x's backend/torch/core.py,
        # keras-nightly's backend/torch/ops/core.py): the module of its `compute_output_spec`.
        _forkgen_compile_core = _forkgen_compile_sys.modules[backend.compute_output_spec.__module__]
    else:
        _forkgen_compile_torch = None
        _forkgen_compile_core = None


    # Whether dynamo is tracing (torch backend).
    def _forkgen_compiling():
        compiler = getattr(_forkgen_compile_torch, "compiler", None)
        return getattr(compiler, "is_compiling", bool)()


    # While dynamo traces: whether `value` is an int (a Python int or a symbolic one: a batch size).
    def _forkgen_compiled_int(value):
        return (_forkgen_compiling() and isinstance(value, (int, _forkgen_compile_torch.SymInt))
                and not isinstance(value, bool))


    # `ops.cast(<a 0-d tensor of `integer_dtype` holding `value`, on Keras's device>, dtype)`, the
    # tensor made by `torch.full`, which keeps a symbolic int symbolic (`torch.as_tensor`, behind
    # `ops.convert_to_tensor`, makes dynamo fix it to the value it traced).
    def _forkgen_compiled_tensor(value, integer_dtype, dtype):
        get_device = _forkgen_compile_core.get_device
        integer = getattr(_forkgen_compile_torch, integer_dtype)
        return ops.cast(_forkgen_compile_torch.full((), value, dtype=integer, device=get_device()), dtype)


    # While dynamo traces: upstream's element-count divisor of `reduce_values`, the int32 product of
    # `shape` cast to `dtype`, made from the (maybe symbolic) dimensions; None otherwise, or when the
    # count may not fit an int32 (upstream's product would wrap).
    def _forkgen_compiled_count(shape, dtype):
        if not _forkgen_compiling():
            return None
        count = 1
        for dim in shape:
            count = count * dim
        if count > 2147483647:
            return None
        return _forkgen_compiled_tensor(count, "int32", dtype)
