"""What `layer-call-training-only-conversion` inserts into keras/src/layers/layer.py.

Parsed by the engine, never imported. Each function's body is one piece: `gate_flag` goes
right after `def maybe_convert` in `Layer.__call__`, just before upstream's conversion gate,
whose first operand `kwargs` becomes `gate_operand`; the `elif` of `gate_copy` is attached to
that gate (its `UPSTREAM` test and body stand for upstream's, which stay as they are), and
`helper` is appended to the module (its docstring is indented here as it reads once at module
level).
"""
# ruff: noqa


def gate_flag(self, kwargs):
    # forkgen: layer-call-training-only-conversion
    # `training=None|True|False` alone gives `maybe_convert` nothing to do:
    # such a call takes the same skip as a call without kwargs.
    kwargs_may_need_convert = bool(kwargs) and (
        _layer_call_kwargs_may_need_convert(self, kwargs)
    )


def gate_operand():
    kwargs_may_need_convert


def gate_copy(self, kwargs):
    if UPSTREAM:
        UPSTREAM
    elif kwargs and self._convert_input_args:  # forkgen: layer-call-training-only-conversion
        # Only a training-only call that skipped the conversion gets here:
        # 3.15.1 converted it, giving steps below a fresh dict to write into
        # (context args, masks) instead of the `original_kwargs` its Node
        # records. The copy keeps that; layers that do not convert their
        # inputs write into `original_kwargs`, as in 3.15.1.
        kwargs = dict(kwargs)


def helper():
    # forkgen: layer-call-training-only-conversion
    def _layer_call_kwargs_may_need_convert(layer, kwargs):
        """Whether `layer.__call__` must keep upstream's conversion gate for
    these (non-empty) kwargs. False only for `training=None|True|False`
    alone on a layer that converts its inputs with the stock
    `DTypePolicy.convert_input`: `maybe_convert` returns such a value
    unchanged, so the call may take the skip that a call without kwargs
    takes (one tensor of the layer's input dtype: the rest of the gate).
    """
        if len(kwargs) != 1 or "training" not in kwargs:
            return True
        training = kwargs["training"]
        if not (training is None or training is True or training is False):
            return True
        if not layer._convert_input_args:
            # Upstream's gate does not convert then; leave it as it was.
            return True
        policy_convert = layer.dtype_policy.convert_input
        stock_convert = dtype_policies.DTypePolicy.convert_input
        return getattr(policy_convert, "__func__", None) is not stock_convert
