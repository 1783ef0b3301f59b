# The extension's rules for CallSpec variant V4 (Keras 3.10.0 - 3.15.1, master,
# keras-nightly; see docs/keras-releases.md): which keywords `CallSpec.__init__` pops
# from kwargs before binding, what it keeps of them, and how it classifies a
# value that is not a tensor. Spliced by the extension codemod into layer.py with the rest of callspec_bound_common.py;
# never imported.
# ruff: noqa


def _callspec_fast_popped_names(layer, bindings, kwargs):
    """The keywords `CallSpec.__init__` (V4) pops from `kwargs` before
    binding: the layer's call-context arguments that call() does not accept,
    in the order it visits them."""
    return tuple(
        name
        for name in layer._call_context_args
        if name in kwargs and name not in bindings.parameter_names
    )


def _callspec_fast_kept_arguments(popped, user_arguments):
    """`user_arguments_dict` once `CallSpec.__init__` (V4) popped `popped`:
    the popped values first, then what was bound."""
    return {**popped, **user_arguments}


def _callspec_fast_nested_kind(value):
    """How `CallSpec.__init__` (V4) classifies `value`, which is not a
    tensor: True for a nested tensor argument, False for a plain one, None when the
    classification raises (tensors mixed with other values, or a failing
    `tree` call). An empty nested value is a plain argument; None counts as a
    tensor inside a nested one."""
    try:
        if not (tree.is_nested(value) and len(value) > 0):
            return False
        flat_values = tree.flatten(value)
        if all(
            is_backend_tensor_or_symbolic(x, allow_none=True) for x in flat_values
        ):
            return True
        if any(is_backend_tensor_or_symbolic(x) for x in flat_values):
            return None
    except Exception:
        return None
    return False
