"""The synthetic files `functional-graph-run` anchors on.

`FILES` holds a small `keras/src/ops/function.py` (a `Function` whose `_get_operation_for_node`
and `_run_through_graph` have Keras's shape: the node loop, the outputs gathered, one
`tree.pack_sequence_as` at the end), `keras/src/ops/symbolic_arguments.py` (the earlier patch's)
and `keras/src/models/functional.py`: the earlier patch's `Functional`, written for these tests,
plus a `call` whose `operation_fn=` is the lambda and the module's `operation_fn`. Only the
anchored statements follow Keras.
"""

from __future__ import annotations

import textwrap

from tests.support import synthetic_functional_graph_fast_paths as earlier

FUNCTION = "keras/src/ops/function.py"
SYMBOLIC_ARGUMENTS = earlier.SYMBOLIC_ARGUMENTS
FUNCTIONAL = earlier.FUNCTIONAL

FUNCTION_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/function.py."""

    from keras.src import tree
    from keras.src.backend import KerasTensor
    from keras.src.ops.operation import Operation


    class Function(Operation):
        def _get_operation_for_node(self, node):
            operation = node.operation
            if hasattr(self, "_nnx_op_mapping") and id(operation) in getattr(self, "_nnx_op_mapping", {}):
                return self._nnx_op_mapping[id(operation)]
            return operation

        def _run_through_graph(self, inputs, operation_fn=lambda op: op, call_fn=None):
            inputs = tree.flatten(inputs)
            tensor_dict = {}
            for x, y in zip(self.inputs, inputs):
                tensor_dict[id(x)] = y
            nodes_by_depth = self._nodes_by_depth
            depth_keys = list(nodes_by_depth.keys())
            depth_keys.sort(reverse=True)

            for depth in depth_keys:
                nodes = nodes_by_depth[depth]
                for node in nodes:
                    if not node.operation or node.is_input:
                        continue  # an input
                    if any(id(x) not in tensor_dict for x in node.input_tensors):
                        continue  # not computable
                    args, kwargs = node.arguments.fill_in(tensor_dict)
                    if call_fn is not None:
                        op = operation_fn(node.operation)
                        outputs = call_fn(op, *args, **kwargs)
                    else:
                        operation = self._get_operation_for_node(node)
                        op = operation_fn(operation)
                        outputs = op(*args, **kwargs)
                    for x, y in zip(node.outputs, tree.flatten(outputs)):
                        tensor_dict[id(x)] = y

            output_tensors = []
            for x in self.outputs:
                output_tensors.append(tensor_dict[id(x)])
            return tree.pack_sequence_as(self._outputs_struct, output_tensors)
    '''
)

FUNCTIONAL_IMPORT = "from keras.src.models.model import Model\n"
FUNCTIONAL_PY = earlier.FUNCTIONAL_PY.replace(
    FUNCTIONAL_IMPORT, FUNCTIONAL_IMPORT + "from keras.src.ops.function import Function\n", 1
).replace("class Functional(Model):", "class Functional(Function, Model):", 1) + textwrap.dedent(
    '''\

        def call(self, inputs, training=None, mask=None, **kwargs):
            inputs = self._standardize_inputs(inputs)
            outputs = self._run_through_graph(
                inputs,
                operation_fn=lambda op: operation_fn(
                    op, training=training, **kwargs
                ),
            )
            return outputs


    def operation_fn(operation, **call_context_args):
        def call(*args, **kwargs):
            # the context arguments the operation takes
            for name, value in call_context_args.items():
                if (
                    name in getattr(operation, "_call_context_args", {})
                    and value is not None
                ):
                    kwargs[name] = value

            return operation(*args, **kwargs)

        return call
    '''
)

FILES: dict[str, str] = {**earlier.FILES, FUNCTION: FUNCTION_PY, FUNCTIONAL: FUNCTIONAL_PY}
