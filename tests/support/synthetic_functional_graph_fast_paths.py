"""The synthetic files `functional-graph-fast-paths` anchors on.

`FILES` holds a small `keras/src/ops/symbolic_arguments.py` and `keras/src/models/functional.py`
shaped like Keras's (written for these tests; only the anchored statements follow Keras):
`SymbolicArguments` with `convert` and `fill_in` (a single-tensor fast path, a `switch_fn`,
`return self.convert(switch_fn)`), and `Functional` with `_maybe_warn_inputs_struct_mismatch`
and `_standardize_inputs` ending with the flatten / convert / adjust-rank tail.
"""

from __future__ import annotations

import textwrap

SYMBOLIC_ARGUMENTS = "keras/src/ops/symbolic_arguments.py"
FUNCTIONAL = "keras/src/models/functional.py"

SYMBOLIC_ARGUMENTS_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/symbolic_arguments.py."""

    from keras.src import tree
    from keras.src.backend import KerasTensor


    class SymbolicArguments:
        def __init__(self, *args, **kwargs):
            self.args = tree.map_structure(lambda v: v, args)
            self.kwargs = tree.map_structure(lambda v: v, kwargs)
            one = not self.kwargs and len(self.args) == 1
            self._single_positional_tensor = self.args[0] if one and isinstance(self.args[0], KerasTensor) else None

        def convert(self, conversion_fn):
            args = tree.map_structure(conversion_fn, self.args)
            kwargs = tree.map_structure(conversion_fn, self.kwargs)
            return args, kwargs

        def fill_in(self, tensor_dict):
            """Values for the KerasTensors."""
            if self._single_positional_tensor is not None:
                # the one-tensor case
                return (tensor_dict[id(self._single_positional_tensor)],), {}

            def switch_fn(x):
                if isinstance(x, KerasTensor):
                    return tensor_dict.get(id(x), None)
                return x

            return self.convert(switch_fn)
    '''
)

FUNCTIONAL_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/models/functional.py."""

    import warnings

    from keras.src import backend
    from keras.src import ops
    from keras.src import tree
    from keras.src.models.model import Model


    class Functional(Model):
        def _maybe_warn_inputs_struct_mismatch(self, inputs, raise_exception=False):
            try:
                tree.assert_same_structure(tree.lists_to_tuples(inputs), tree.lists_to_tuples(self._inputs_struct))
            except Exception:
                if raise_exception:
                    raise ValueError("mismatch")
                warnings.warn("mismatch")

        def _standardize_inputs(self, inputs):
            raise_exception = False
            if isinstance(self._inputs_struct, list) and len(self._inputs_struct) == 1 and ops.is_tensor(inputs):
                inputs = [inputs]
            self._maybe_warn_inputs_struct_mismatch(
                inputs, raise_exception=raise_exception
            )

            flat_inputs = tree.flatten(inputs)
            flat_inputs = self._convert_inputs_to_tensors(flat_inputs)
            return self._adjust_input_rank(flat_inputs)
    '''
)

FILES: dict[str, str] = {SYMBOLIC_ARGUMENTS: SYMBOLIC_ARGUMENTS_PY, FUNCTIONAL: FUNCTIONAL_PY}
