"""What `functional-graph-run` makes of the synthetic function.py / functional.py (run by
tests/unit/test_patch_cases.py), the breaks of its inserted code the equivalence suite must catch,
and the synthetic files it anchors on.

`FILES` (shared with the series' synthetic tree) holds a small `keras/src/ops/function.py` (a
`Function` whose `_get_operation_for_node` and `_run_through_graph` have Keras's shape: the node
loop, the outputs gathered, one `tree.pack_sequence_as` at the end) and
`keras/src/models/functional.py`: the `Functional` of functional-graph-fast-paths' cases (the
tree's one functional.py, so both patches' anchors), plus a `call` whose `operation_fn=` is the
lambda and the module's `operation_fn`. Only the anchored statements follow Keras. The cases also
read `SYMBOLIC_ARGUMENTS_PY`, the one statement of `SymbolicArguments.fill_in` this patch relies
on (the tree's symbolic_arguments.py is functional-graph-fast-paths').
"""

import textwrap

from codemods.engine import Case, Mutant, piece_text

FUNCTION = "keras/src/ops/function.py"
SYMBOLIC_ARGUMENTS = "keras/src/ops/symbolic_arguments.py"
FUNCTIONAL = "keras/src/models/functional.py"

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

FUNCTIONAL_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/models/functional.py."""

    import warnings

    from keras.src import backend
    from keras.src import ops
    from keras.src import tree
    from keras.src.models.model import Model
    from keras.src.ops.function import Function


    class Functional(Function, Model):
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

SYMBOLIC_ARGUMENTS_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/symbolic_arguments.py (fill_in's one-tensor case)."""


    class SymbolicArguments:
        def fill_in(self, tensor_dict):
            if self._single_positional_tensor is not None:
                return (tensor_dict[id(self._single_positional_tensor)],), {}
            return self.convert(tensor_dict)
    '''
)

FILES: dict[str, str] = {FUNCTION: FUNCTION_PY, FUNCTIONAL: FUNCTIONAL_PY}
#: What the cases start from: the files the patch reads.
TREE: dict[str, str] = {SYMBOLIC_ARGUMENTS: SYMBOLIC_ARGUMENTS_PY, **FILES}

LOOP_START = "        for depth in depth_keys:\n"
LOOP = FUNCTION_PY[FUNCTION_PY.index(LOOP_START):FUNCTION_PY.index("\n        output_tensors = []")]
PACK = "        return tree.pack_sequence_as(self._outputs_struct, output_tensors)\n"
FUNCTION_AFTER = FUNCTION_PY.replace(LOOP, piece_text(__file__, "run_nodes", " " * 8, upstream=LOOP), 1).replace(
    PACK, piece_text(__file__, "pack_single", " " * 8) + PACK, 1)
#: The helpers appended to function.py (two blank lines above them).
HELPERS = "\n\n" + piece_text(__file__, "helpers")
IMPORT = "from keras.src.ops.function import Function\n"
LAMBDA = "            operation_fn=lambda op: operation_fn(\n                op, training=training, **kwargs\n            ),\n"
#: `call_context`: its marker goes above the statement, its expression instead of the lambda.
CONTEXT_MARK, CONTEXT = piece_text(__file__, "call_context", " " * 8).splitlines(True)
FUNCTIONAL_AFTER = FUNCTIONAL_PY.replace(IMPORT, IMPORT + piece_text(__file__, "import_context"), 1).replace(
    "        outputs = self._run_through_graph(\n", CONTEXT_MARK + "        outputs = self._run_through_graph(\n", 1,
).replace(LAMBDA, f"            operation_fn={CONTEXT.strip()},\n", 1)
#: keras-nightly's `Functional.call`: no closure.
NIGHTLY_CALL = FUNCTIONAL_PY.replace(
    "        outputs = self._run_through_graph(\n            inputs,\n" + LAMBDA + "        )\n",
    "        outputs = self._run_through_graph(inputs)\n", 1)


def drift(name: str, words: str, function: str = FUNCTION_PY, functional: str = FUNCTIONAL_PY) -> Case:
    return Case(name, {**TREE, FUNCTION: function, FUNCTIONAL: functional}, drift=words)


CASES = (
    Case("the node loop, the one-output return, the helpers, the import and the context object",
         dict(TREE), {FUNCTION: FUNCTION_AFTER + HELPERS, FUNCTIONAL: FUNCTIONAL_AFTER},
         detail="run Functional.call's nodes without a closure per node",
         anchors=(("for depth in depth_keys: (the node loop)", 24), ("operation_fn=lambda op: ...", 37))),
    Case("keras-nightly: Functional.call without the closure", {**TREE, FUNCTIONAL: NIGHTLY_CALL}, upstream=True),
    drift("half applied", "expected all pieces present or none",
          function=FUNCTION_AFTER + HELPERS),
    drift("another node loop", "anchor 'for depth in depth_keys: (the node loop)': expected exactly one",
          function=FUNCTION_PY.replace("if any(id(x) not in tensor_dict", "if all(id(x) not in tensor_dict")),
    drift("an NNX look-up of another shape", "anchor 'Function._get_operation_for_node': expected exactly one",
          function=FUNCTION_PY.replace('if hasattr(self, "_nnx_op_mapping") and', 'if getattr(self, "_nnx", None) and')),
    drift("another closure", "anchor 'def operation_fn (the closure)': expected exactly one",
          functional=FUNCTIONAL_PY.replace("and value is not None", "and value")),
    drift("another lambda", "anchor 'operation_fn=lambda op: ...': expected exactly one",
          functional=FUNCTIONAL_PY.replace("op, training=training, **kwargs", "op, training=training")),
    drift("another final pack", "tree.pack_sequence_as(self._outputs_struct, output_tensors)",
          function=FUNCTION_PY.replace(PACK, "        return tree.pack_sequence_as(self._outputs_struct, output_tensors, 1)\n")),
)

MUTANTS = (
    Mutant("context values that are None handed to the operations too",
           "given = [(name, value) for name, value in context.items() if value is not None]",
           "given = list(context.items())"),
    Mutant("the context handed to operations that do not take it", "                    if name in accepted:\n",
           "                    if True:\n"),
    Mutant("a model's NNX mapping ignored", '        and not hasattr(self, "_nnx_op_mapping")\n', ""),
    Mutant("a single-tensor node run when its tensor has no value", "                if id(single) not in tensor_dict:\n",
           "                if False:\n"),
    Mutant("a nested output structure returns its first value",
           "if type(self._outputs_struct) is KerasTensor and len(output_tensors) == 1:",
           "if not isinstance(self._outputs_struct, dict):"),
    Mutant("the nodes run deepest last", "        for depth in depth_keys:\n", "        for depth in reversed(depth_keys):\n"),
)
