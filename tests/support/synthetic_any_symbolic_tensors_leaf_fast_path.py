"""The synthetic file `any-symbolic-tensors-leaf-fast-path` anchors on.

`FILES` holds a minimal `keras/src/backend/common/keras_tensor.py` shaped like Keras
3.15's: a `KerasTensor` class and `any_symbolic_tensors` whose inner loop tests
`isinstance(x, KerasTensor)` then `tree.is_nested(x)` (written for these tests; only the
anchored statements follow Keras). `tree` is a tiny stand-in that counts its calls.
"""

from __future__ import annotations

import textwrap

KERAS_TENSOR_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/common/keras_tensor.py."""

    from tests.support.synthetic_any_symbolic_tensors_leaf_fast_path import tree


    class KerasTensor:
        def __init__(self, shape):
            self.shape = shape


    def any_symbolic_tensors(args=None, kwargs=None):
        for items in (args or (), kwargs.values() if kwargs else ()):
            for x in items:
                if isinstance(x, KerasTensor):
                    return True
                if tree.is_nested(x):
                    for nested in tree.flatten(x):
                        if isinstance(nested, KerasTensor):
                            return True
        return False
    '''
)

FILES = {"keras/src/backend/common/keras_tensor.py": KERAS_TENSOR_PY}


class _Tree:
    """Lists, tuples and dicts are nested; everything else is a leaf. Counts `is_nested`."""

    def __init__(self) -> None:
        self.calls = 0

    def is_nested(self, x: object) -> bool:
        self.calls += 1
        return isinstance(x, (list, tuple, dict))

    def flatten(self, x: object) -> list[object]:
        if isinstance(x, dict):
            x = list(x.values())
        if isinstance(x, (list, tuple)):
            return [leaf for item in x for leaf in self.flatten(item)]
        return [x]


tree = _Tree()
