"""What `functional-graph-run` makes of the synthetic function.py / functional.py
(tests/support/synthetic_functional_graph_run.py, shared with the series' synthetic tree; run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant
from tests.support.synthetic_functional_graph_run import (
    FILES,
    FUNCTION,
    FUNCTION_PY,
    FUNCTIONAL,
    FUNCTIONAL_PY,
)

LOOP_START = "        for depth in depth_keys:\n"
LOOP = FUNCTION_PY[FUNCTION_PY.index(LOOP_START):FUNCTION_PY.index("\n        output_tensors = []")]
GUARD = (
    "        # forkgen: functional-graph-run (Functional.call's context as data: no closure per node)\n"
    "        if (\n"
    "            call_fn is None\n"
    "            and type(operation_fn) is _ForkgenCallContext\n"
    "            and type(self)._get_operation_for_node is Function._get_operation_for_node\n"
    "            and not hasattr(self, \"_nnx_op_mapping\")\n"
    "        ):\n"
    "            _forkgen_run_nodes(nodes_by_depth, depth_keys, tensor_dict, operation_fn.context)\n"
    "        else:\n"
)
PACK = "        return tree.pack_sequence_as(self._outputs_struct, output_tensors)\n"
SINGLE = (
    "        # forkgen: functional-graph-run (one KerasTensor output: the tree returns its one value)\n"
    "        if type(self._outputs_struct) is KerasTensor and len(output_tensors) == 1:\n"
    "            return output_tensors[0]\n"
)
HELPERS = '''

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
'''
FUNCTION_AFTER = FUNCTION_PY.replace(LOOP, GUARD + textwrap.indent(LOOP, "    "), 1).replace(PACK, SINGLE + PACK, 1)
IMPORT = "from keras.src.ops.function import Function\n"
LAMBDA = "            operation_fn=lambda op: operation_fn(\n                op, training=training, **kwargs\n            ),\n"
FUNCTIONAL_AFTER = FUNCTIONAL_PY.replace(
    IMPORT, IMPORT + "from keras.src.ops.function import _ForkgenCallContext  # forkgen: functional-graph-run\n", 1
).replace(
    "        outputs = self._run_through_graph(\n",
    "        # forkgen: functional-graph-run (the context as data: one object, no closure per node)\n"
    "        outputs = self._run_through_graph(\n", 1,
).replace(LAMBDA, '            operation_fn=_ForkgenCallContext(operation_fn, {"training": training, **kwargs}),\n', 1)
#: keras-nightly's `Functional.call`: no closure.
NIGHTLY_CALL = FUNCTIONAL_PY.replace(
    "        outputs = self._run_through_graph(\n            inputs,\n" + LAMBDA + "        )\n",
    "        outputs = self._run_through_graph(inputs)\n", 1)


def _after(function: str) -> bool:
    return function.startswith(FUNCTION_AFTER) and HELPERS in function


def drift(name: str, words: str, function: str = FUNCTION_PY, functional: str = FUNCTIONAL_PY) -> Case:
    return Case(name, {**FILES, FUNCTION: function, FUNCTIONAL: functional}, drift=words)


def _applied() -> str:
    """The whole applied function.py (the helpers' body as inserted.py has it)."""
    from codemods.engine import Sources
    from codemods.functional_graph_run import PATCH

    sources = Sources(FILES.get)
    PATCH.apply(sources)
    text = sources.text(FUNCTION)
    assert text is not None and _after(text), "the applied function.py is not FUNCTION_AFTER + HELPERS"
    return text


CASES = (
    Case("the node loop, the one-output return, the helpers, the import and the context object",
         dict(FILES), {FUNCTION: _applied(), FUNCTIONAL: FUNCTIONAL_AFTER},
         detail="run Functional.call's nodes without a closure per node",
         anchors=(("for depth in depth_keys: (the node loop)", 24), ("operation_fn=lambda op: ...", 37))),
    Case("keras-nightly: Functional.call without the closure", {**FILES, FUNCTIONAL: NIGHTLY_CALL}, upstream=True),
    drift("half applied", "expected all pieces present or none",
          function=_applied()),
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
