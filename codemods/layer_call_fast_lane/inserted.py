"""What `layer-call-fast-lane` inserts into keras/src/layers/layer.py.

Parsed by the engine, never imported. Each function's body is one piece: `UPSTREAM` stands
for upstream's statement (or run), kept node for node; `__get_mask` is the mask getter the
release's own `previous_mask` line calls (`backend.get_keras_mask` or `get_keras_mask`).
`helper` is appended to the module.
"""
# ruff: noqa


def positional_check(args):
    if not (len(args) == 1 and is_backend_tensor_or_symbolic(args[0])):  # forkgen: layer-call-fast-lane
        UPSTREAM


def input_spec_check(self, original_args, call_spec):
    # forkgen: layer-call-fast-lane (one eager tensor, no mask argument, stock mask and spec methods)
    fast_lane = _layer_call_fast_lane(self, original_args, call_spec)
    if not (fast_lane and _layer_call_fast_lane_spec_passes(self, call_spec.first_arg)):  # forkgen: layer-call-fast-lane
        UPSTREAM
        _layer_call_fast_lane_spec_passed(self, call_spec.first_arg)


def mask_arguments(fast_lane):
    if not fast_lane:  # forkgen: layer-call-fast-lane
        UPSTREAM


def previous_mask(fast_lane, kwargs, call_spec):
    if fast_lane and "mask" not in kwargs and __get_mask(call_spec.first_arg) is None:  # forkgen: layer-call-fast-lane
        previous_mask = None
    else:
        UPSTREAM


def mask_metadata(fast_lane, previous_mask, outputs):
    if not (fast_lane and previous_mask is None and is_backend_tensor_or_symbolic(outputs)):  # forkgen: layer-call-fast-lane
        UPSTREAM


def node(fast_lane, original_kwargs):
    if not (fast_lane and _layer_call_fast_lane_plain_kwargs(original_kwargs)):  # forkgen: layer-call-fast-lane
        UPSTREAM


def helper():
    # forkgen: layer-call-fast-lane
    import sys as _layer_call_fast_lane_sys
    from weakref import WeakKeyDictionary as _layer_call_fast_lane_weak_dict

    #: The Layer attributes whose stock versions the lane's skips rely on.
    _LAYER_CALL_FAST_LANE_ATTRS = (
        "input_spec", "_assert_input_compatibility", "supports_masking", "compute_mask", "_set_mask_metadata",
    )
    _LAYER_CALL_FAST_LANE_STOCK = tuple(Layer.__dict__[name] for name in _LAYER_CALL_FAST_LANE_ATTRS)
    #: Per class: whether it keeps every one of them (computed on its first eager call).
    _layer_call_fast_lane_classes = {}
    #: Per InputSpec: (shape, dtype, the spec's attributes) of the last input it accepted.
    _layer_call_fast_lane_specs = _layer_call_fast_lane_weak_dict()

    def _layer_call_fast_lane(layer, args, call_spec):
        """Whether `layer(x)` is one eager backend tensor passed alone as the
    first argument of a `call()` that takes no `mask`, on a class whose
    input-spec and mask methods are Layer's own (not on TensorFlow), and
    torch.compile is not tracing."""
        if (
            _layer_call_fast_lane_compiling()
            or len(args) != 1
            or not call_spec.eager
            or call_spec.first_arg is not args[0]
            or len(call_spec.tensor_arguments_dict) != 1
            or "mask" in call_spec.argument_names
        ):
            return False
        cls = type(layer)
        stock = _layer_call_fast_lane_classes.get(cls)
        if stock is None:
            stock = all(
                getattr(cls, name, None) is attr
                for name, attr in zip(_LAYER_CALL_FAST_LANE_ATTRS, _LAYER_CALL_FAST_LANE_STOCK)
            )
            _layer_call_fast_lane_classes[cls] = stock
        return stock and backend.backend() != "tensorflow"

    def _layer_call_fast_lane_compiling():
        """Whether torch.compile is tracing: then upstream's steps are traced (dynamo
    would guard on the weak-keyed spec records, whose entries may go before its guards
    are built)."""
        torch = _layer_call_fast_lane_sys.modules.get("torch")
        return torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)()

    def _layer_call_fast_lane_spec_passes(layer, x):
        """Whether `layer._assert_input_compatibility(x)` is known to pass: no
    spec, or the same spec, unchanged, accepted an input of this shape and
    dtype before."""
        spec = layer._input_spec
        if spec is None:
            return True
        passed = _layer_call_fast_lane_specs.get(spec)
        return (
            passed is not None
            and passed[1] is x.dtype
            and passed[0] == x.shape
            and passed[2] == spec.__dict__
        )

    def _layer_call_fast_lane_spec_passed(layer, x):
        """Remember that `layer`'s single `InputSpec` accepted the tensor `x`
    (not while torch.compile traces: dynamo would replay the store after every
    compiled call)."""
        if _layer_call_fast_lane_compiling():
            return
        spec = layer._input_spec
        if (
            type(spec) is input_spec.InputSpec
            and type(spec.__dict__.get("axes")) is dict
            and _layer_call_fast_lane_classes.get(type(layer))
            and is_backend_tensor_or_symbolic(x)
            and not isinstance(x, KerasTensor)
        ):
            state = dict(spec.__dict__)
            state["axes"] = dict(state["axes"])
            _layer_call_fast_lane_specs[spec] = (x.shape, x.dtype, state)

    def _layer_call_fast_lane_plain_kwargs(kwargs):
        """Whether every keyword value is None, True or False."""
        for value in kwargs.values():
            if not (value is None or value is True or value is False):
                return False
        return True
