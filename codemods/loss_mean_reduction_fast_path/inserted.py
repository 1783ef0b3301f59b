"""What `loss-mean-reduction-fast-path` puts into keras/src/losses/loss.py.

Parsed by the codemod, never imported. The body of `mean_fast_path` goes in `reduce_values`,
right before the `if` that picks the divisor of a mean reduction; when it does not return,
upstream's code below it runs unchanged. The body of `helpers` goes at the end of the module.
The comments are the markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def mean_fast_path(values, sample_weight, reduction, loss):
    # forkgen: loss-mean-reduction-fast-path (torch, a float32 sum of 0 < n <= 2**24 values: `loss / n`)
    if (
        _forkgen_torch is not None
        and (reduction != "mean_with_sample_weight" or sample_weight is None)
        and type(loss) is _forkgen_torch.Tensor
        and loss.dtype is _forkgen_torch.float32
    ):
        fast_count = _forkgen_static_count(values.shape)
        if fast_count:
            fast_divisor = ops.convert_to_tensor(fast_count, dtype="float32")
            return scale_loss_for_distribution(ops.divide(loss, fast_divisor))


def helpers():
    # forkgen: loss-mean-reduction-fast-path (torch's module on the torch backend; the ops it stands in for)
    if backend.backend() == "torch":
        import torch as _forkgen_torch
    else:
        _forkgen_torch = None
    _forkgen_mean_reduction_ops = []


    def _forkgen_static_count(shape):
        """Element count of a static `shape` in [1, 2**24] while `ops` has upstream's functions, else 0."""
        if getattr(getattr(_forkgen_torch, "compiler", None), "is_compiling", bool)():
            # Under torch.compile, upstream's divisor is traced: nothing is learnt (the list
            # below filled) while dynamo traces, as in the series' other patches.
            return 0
        if not _forkgen_mean_reduction_ops:
            # Read on first use: `ops` is still being imported when this module is.
            from keras.src.ops import core as ops_core
            from keras.src.ops import numpy as ops_numpy

            _forkgen_mean_reduction_ops.append(
                (ops_core.cast, ops_numpy.prod, ops_core.shape, ops_core.convert_to_tensor,
                 ops_numpy.divide_no_nan, ops_numpy.divide)
            )
        if (
            ops.cast, ops.prod, ops.shape, ops.convert_to_tensor, ops.divide_no_nan, ops.divide
        ) != _forkgen_mean_reduction_ops[0]:
            return 0
        count = 1
        for dim in shape:
            if type(dim) is not int:
                return 0
            count *= dim
        return count if 0 < count <= 16777216 else 0
