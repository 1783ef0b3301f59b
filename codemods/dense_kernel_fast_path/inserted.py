"""What `dense-kernel-fast-path` inserts into `keras/src/layers/core/dense.py` and
`keras/src/layers/core/einsum_dense.py`.

Parsed by the engine, never imported. Each function's body is one piece (comments above a
function are notes, not inserted).
"""
# ruff: noqa


# First statement of the `kernel` property of `Dense` and of `EinsumDense`: a built layer that
# is not quantized and has no LoRA gets what upstream's body would give it, the `_kernel`
# attribute, without the body's import, compares and calibration-flag look-ups. The tests read
# what upstream's body reads, in its order (`built`, `quantization_mode`, the flags, then
# `lora_enabled`), so a read that raises raises as it would there.
def kernel_fast_path(self):
    if self.built and self.quantization_mode is None and _kernel_flags_unset(self) and not self.lora_enabled:  # forkgen: dense-kernel-fast-path
        return getattr(self, "_kernel", None)


# At the end of each module: the check that the body's flag look-ups would run no code.
def helpers():
    # forkgen: dense-kernel-fast-path
    import sys as _kernel_fast_path_sys

    #: The flags the `kernel` property reads with `bool(getattr(self, flag, False))`.
    _KERNEL_FLAGS = ("is_gptq_calibrated", "is_awq_calibrated")
    #: Per class: whether its attribute look-ups are Python's own (computed on first use).
    _KERNEL_PLAIN_CLASSES = {}


    def _kernel_flags_unset(layer):
        """Whether `bool(getattr(layer, flag, False))` of each calibration flag
    finds a bool or nothing and runs no code: once per class, no
    `__getattribute__` of its own, no class attribute named like a flag or
    `built`/`lora_enabled`, `quantization_mode` Layer's property and no
    `__getattr__` but torch's `Module.__getattr__`; then a bool or nothing in
    the instance's `__dict__`, and else nothing of that name among the
    parameters, buffers and sub-modules torch's `__getattr__` looks in."""
        cls = type(layer)
        plain = _KERNEL_PLAIN_CLASSES.get(cls)
        if plain is None:
            torch = _kernel_fast_path_sys.modules.get("torch")
            module = getattr(getattr(torch, "nn", None), "Module", None)
            plain = (
                cls.__getattribute__ is object.__getattribute__
                and getattr(cls, "__getattr__", None) in (None, getattr(module, "__getattr__", None))
                and getattr(cls, "quantization_mode", None) is Layer.__dict__.get("quantization_mode")
                and not any(hasattr(cls, name) for name in (*_KERNEL_FLAGS, "built", "lora_enabled"))
            )
            # Not remembered while torch.compile traces: dynamo would replay the store
            # after every compiled call, and its guard on the missing class would
            # recompile the next one.
            if not getattr(getattr(torch, "compiler", None), "is_compiling", bool)():
                _KERNEL_PLAIN_CLASSES[cls] = plain
        if not plain:
            return False
        state = layer.__dict__
        for flag in _KERNEL_FLAGS:
            if flag in state:
                if not (state[flag] is True or state[flag] is False):
                    return False
            else:
                for store in ("_parameters", "_buffers", "_modules"):
                    if flag in state.get(store, ()):
                        return False
        return True
