"""What `functional-graph-fast-paths` puts into Keras. Parsed by the engine, never imported.

`fill_in_tensors` goes into keras/src/ops/symbolic_arguments.py, in `SymbolicArguments.fill_in`,
right after upstream's single-tensor fast path (`KerasTensor` is the module's own import).
`standardize_leaf` goes at the top of `Functional._standardize_inputs` in
keras/src/models/functional.py (`backend`, `tree` and `Functional` are that module's names).
The comments are the markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def fill_in_tensors(self, tensor_dict):
    # forkgen: functional-graph-fast-paths (positional KerasTensors only: what convert returns)
    if (
        type(self.args) is tuple
        and type(self.kwargs) is dict
        and not self.kwargs
        and all(type(x) is KerasTensor for x in self.args)
    ):
        return tuple(tensor_dict.get(id(x), None) for x in self.args), {}


def standardize_leaf(self, inputs):
    # forkgen: functional-graph-fast-paths (one KerasTensor input, a non-nested value)
    if (
        type(self._inputs_struct) is backend.KerasTensor
        and type(self)._maybe_warn_inputs_struct_mismatch is Functional._maybe_warn_inputs_struct_mismatch
        and not isinstance(inputs, (list, dict))
        and not tree.is_nested(inputs)
    ):
        return self._adjust_input_rank(self._convert_inputs_to_tensors([inputs]))
