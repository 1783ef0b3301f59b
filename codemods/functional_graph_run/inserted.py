"""What `functional-graph-run` puts into Keras. Parsed by the engine, never imported.

In keras/src/ops/function.py: `run_nodes` wraps the node loop of `Function._run_through_graph`
(`UPSTREAM`: upstream's loop, kept as it is); `pack_single` goes right before its final
`return tree.pack_sequence_as(...)`; `helpers` is appended to the module (`tree` and
`KerasTensor` are that module's imports). In keras/src/models/functional.py: `import_context`
goes after `from keras.src.ops.function import Function`, and `call_context` replaces the
`operation_fn=` lambda of `Functional.call`. The comments are the markers.
"""
# ruff: noqa


def run_nodes(self, operation_fn, call_fn, nodes_by_depth, depth_keys, tensor_dict):
    # forkgen: functional-graph-run (Functional.call's context as data: no closure per node)
    if (
        call_fn is None
        and type(operation_fn) is _ForkgenCallContext
        and type(self)._get_operation_for_node is Function._get_operation_for_node
        and not hasattr(self, "_nnx_op_mapping")
    ):
        _forkgen_run_nodes(nodes_by_depth, depth_keys, tensor_dict, operation_fn.context)
    else:
        UPSTREAM


def pack_single(self, output_tensors):
    # forkgen: functional-graph-run (one KerasTensor output: the tree returns its one value)
    if type(self._outputs_struct) is KerasTensor and len(output_tensors) == 1:
        return output_tensors[0]


def helpers():
    # forkgen: functional-graph-run
    # The `operation_fn` Functional.call passes: called with an operation, it
    # returns `wrap(operation, **context)`, as the lambda it stands for does; the
    # node loop reads `context` instead and gives each operation its context
    # arguments itself.
    class _ForkgenCallContext:
        __slots__ = ("wrap", "context")

        def __init__(self, wrap, context):
            self.wrap = wrap
            self.context = context

        def __call__(self, operation):
            return self.wrap(operation, **self.context)


    def _forkgen_run_nodes(nodes_by_depth, depth_keys, tensor_dict, context):
        # The nodes in the loop's order. A node whose recorded call is one positional
        # KerasTensor is computable when that tensor has a value, and is called with
        # just it; any other asks `fill_in`. Only context values that are not None go
        # to an operation, and only the ones in its `_call_context_args`, into a copy
        # of its keyword arguments (the closure got its own dict through `**`).
        given = [(name, value) for name, value in context.items() if value is not None]
        for depth in depth_keys:
            for node in nodes_by_depth[depth]:
                operation = node.operation
                if not operation or node.is_input:
                    continue
                arguments = node.arguments
                single = arguments._single_positional_tensor
                if single is not None:
                    if id(single) not in tensor_dict:
                        continue
                    args, kwargs = (tensor_dict[id(single)],), {}
                elif any(id(x) not in tensor_dict for x in node.input_tensors):
                    continue
                else:
                    args, kwargs = arguments.fill_in(tensor_dict)
                if given:
                    kwargs = {**kwargs}
                    accepted = getattr(operation, "_call_context_args", {})
                    for name, value in given:
                        if name in accepted:
                            kwargs[name] = value
                outputs = operation(*args, **kwargs)
                for x, y in zip(node.outputs, tree.flatten(outputs)):
                    tensor_dict[id(x)] = y


def import_context():
    from keras.src.ops.function import _ForkgenCallContext  # forkgen: functional-graph-run


def call_context(training, kwargs):
    # forkgen: functional-graph-run (the context as data: one object, no closure per node)
    _ForkgenCallContext(operation_fn, {"training": training, **kwargs})
