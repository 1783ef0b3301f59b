# The rule of CallSpec variant V2 (Keras 3.1.0 - 3.3.3; see docs/keras-releases.md):
# whether `CallSpec.__init__` classifies a default as a plain, non-tensor
# argument. Spliced by the codemods into layer.py with the rest of
# callspec_common.py; never imported.
# ruff: noqa


def _callspec_fast_default_is_plain(value):
    """Whether CallSpec.__init__ (V2) classifies default `value` as a plain,
    non-tensor argument, without raising.

    Mirrors its loop: a non-empty nested default made only of tensors is a
    tensor argument (None counts as a non-tensor); one mixing tensors and
    other values raises. A default whose classification raises (e.g. a
    registered nested type without `__len__`) is not plain either.
    """
    try:
        if is_backend_tensor_or_symbolic(value):
            return False
        if tree.is_nested(value) and len(value) > 0:
            flat_values = tree.flatten(value)
            if all(is_backend_tensor_or_symbolic(x) for x in flat_values):
                return False
            if any(is_backend_tensor_or_symbolic(x) for x in flat_values):
                return False
    except Exception:
        return False
    return True
