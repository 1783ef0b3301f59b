"""What `torch-variable-value-fast-path` puts into the torch backend's core module.

Parsed by the codemod, never imported. The body of `module_level` goes right after
`class Variable` (it captures the functions `Variable.value` reaches, as the module was
imported with them). The body of `value_fast_path` goes at the top of the `value` property's
getter, above upstream's body, which is left as it is and runs whenever the fast path does not
return. The comments are the markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def module_level():
    # forkgen: torch-variable-value-fast-path (the originals Variable.value's fast path relies on)
    from threading import local as _forkgen_local_type
    _forkgen_maybe_autocast = KerasVariable._maybe_autocast
    from sys import modules as _forkgen_modules
    _forkgen_autocast_module = _forkgen_modules[_forkgen_maybe_autocast.__module__]
    _forkgen_get_autocast_scope = _forkgen_autocast_module.get_autocast_scope
    _forkgen_in_stateless_scope = in_stateless_scope
    _forkgen_get_device = get_device
    _forkgen_get_global_attribute = global_state.get_global_attribute


def value_fast_path(self):
    # forkgen: torch-variable-value-fast-path (no scope, no autocast, a non-meta str device: `self._value`)
    if (
        type(self)._maybe_autocast is _forkgen_maybe_autocast
        and in_stateless_scope is _forkgen_in_stateless_scope
        and get_device is _forkgen_get_device
        and _forkgen_autocast_module.get_autocast_scope is _forkgen_get_autocast_scope
        and global_state.get_global_attribute is _forkgen_get_global_attribute
    ):
        fast_value = self._value
        fast_tracker = global_state.GLOBAL_STATE_TRACKER
        if fast_value is not None and type(fast_tracker) is _forkgen_local_type:
            fast_state = fast_tracker.__dict__
            if fast_state.get("stateless_scope") is None and (
                not self._autocast or fast_state.get("autocast_scope") is None
            ):
                fast_device = fast_state.get("torch_device")
                if fast_device is None:
                    fast_device = DEFAULT_DEVICE
                if type(fast_device) is str and fast_device != "meta":
                    return fast_value
