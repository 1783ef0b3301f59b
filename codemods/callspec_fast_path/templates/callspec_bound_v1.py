# The extension's rules for CallSpec variant V1 (Keras 3.0.x; see docs/keras-releases.md):
# which keywords `CallSpec.__init__` pops from kwargs before binding, what it
# keeps of them, and how it classifies a value that is not a tensor. Spliced by
# the extension codemod into layer.py with the rest of callspec_bound_common.py;
# never imported.
# ruff: noqa


def _callspec_fast_popped_names(layer, bindings, kwargs):
    """The keywords `CallSpec.__init__` (V1-V3) pops from `kwargs` before
    binding: `training`, when call() does not accept it."""
    if "training" in kwargs and "training" not in bindings.parameter_names:
        return ("training",)
    return ()


def _callspec_fast_kept_arguments(popped, user_arguments):
    """`user_arguments_dict` once `CallSpec.__init__` (V1-V3) popped `popped`:
    only what was bound; the popped values are dropped."""
    return user_arguments


def _callspec_fast_nested_kind(value):
    """How `CallSpec.__init__` (V1) classifies `value`, which is not a tensor:
    True for a nested tensor argument, False for a plain one, None when the
    classification raises (tensors mixed with other values, or a failing
    `tree` call). A nested value needs no length: an empty one is a nested
    tensor argument."""
    try:
        if not tree.is_nested(value):
            return False
        flat_values = tree.flatten(value)
        if all(is_backend_tensor_or_symbolic(x) for x in flat_values):
            return True
        if any(is_backend_tensor_or_symbolic(x) for x in flat_values):
            return None
    except Exception:
        return None
    return False
