"""Patch `functional-graph-run` (ours, not upstream): running a Functional (or Sequential) model
eagerly, the node loop hands each layer its context arguments itself instead of through a
closure per node, and a one-output model's result skips `tree.pack_sequence_as`.

What upstream does (3.11.0-3.15.1). `Functional.call` passes `_run_through_graph` the
`operation_fn` `lambda op: operation_fn(op, training=training, **kwargs)`; per node the loop
then tests `any(id(x) not in tensor_dict ...)`, calls `fill_in`, `self._get_operation_for_node`
(whose `hasattr(self, "_nnx_op_mapping")` is an AttributeError raised through
`torch.nn.Module.__getattr__` on torch, about 1.3 us), builds the `call` closure of
`functional.operation_fn` and calls the layer through it; at the end `tree.pack_sequence_as`
(about 1.8 us) repacks the outputs. Measured on the fork (torch 2.13 CPU, layers stubbed out):
this bookkeeping is 28 us of a 5-Dense MLP's `Functional.call`, 10 us with the patch.

What the patch changes. `Functional.call` passes `_ForkgenCallContext(operation_fn, {"training":
training, **kwargs})` instead of the lambda: called with an operation it returns
`operation_fn(op, **context)`, what the lambda returns (the same dict, in the same order: the
call's signature keeps `training` out of `kwargs`). `_run_through_graph` runs its node loop
through `_forkgen_run_nodes` when `call_fn is None`, `operation_fn` is exactly such an object,
the model's class keeps `Function._get_operation_for_node` and the model has no
`_nnx_op_mapping`; otherwise upstream's loop runs. Before its final `pack_sequence_as`, a model
whose `_outputs_struct` is exactly a `KerasTensor` with one gathered value returns that value.

Why the result is identical, step by step. (1) Order: the same `depth_keys` (computed by
upstream's code above the loop) and the same `nodes_by_depth[depth]` lists, in order. (2) Skips:
`not node.operation or node.is_input` as upstream. For a node whose arguments have a
`_single_positional_tensor`, `SymbolicArguments.__init__` set it only for one positional
KerasTensor and no kwargs, so `keras_tensors` (= `node.input_tensors`) is `[that tensor]`:
upstream's `any(...)` is `id(single) not in tensor_dict`, and `fill_in`'s first branch returns
`(tensor_dict[id(single)],), {}`, which the loop builds itself; other nodes keep `any(...)` and
`fill_in`. (3) The operation: with Function's own `_get_operation_for_node` and no
`_nnx_op_mapping` it returns `node.operation` (the attribute is only set by
`_setup_nnx_op_mapping`, from `__init__`, so it is tested once per run, not per node). (4)
kwargs: the closure gets a fresh dict through `**kwargs`, sets `kwargs[name] = value` for each
context item, in order, whose value is not None and whose name is in the operation's
`_call_context_args` (default `{}`), and calls `operation(*args, **kwargs)`: the loop copies
the dict (`{**kwargs}`) when some value is not None, sets the same names in the same order, and
calls the operation with the same arguments; with every value None the closure adds nothing.
(5) Outputs: the same `zip(node.outputs, tree.flatten(outputs))` writes. (6) Packing: for a
non-nested structure, torchtree's and optree's `tree_unflatten` of a leaf spec and dmtree's
`pack_sequence_as` return the one value of a one-element list (their error needs another
length, excluded by the guard). Exceptions raised by a layer propagate unchanged (one closure
frame fewer in the traceback). Assumed, as Keras code never does it: `_call_context_args` read
without side effects (it is read once per node, not once per context item, and not at all when
every value is None), no `_nnx_op_mapping` set on a model while it runs, and
`keras.src.models.functional.operation_fn` not replaced between `Functional.call` and the run.

Left out: Function.call and `compute_output_spec` (default `operation_fn`) keep upstream's loop
(their callers are symbolic); NNX models keep it; `Sequential.call`, `_standardize_inputs`
(functional-graph-fast-paths) and Layer.__call__ are not touched.

Applies from 3.11.0 (`since`; 3.10 has no `_get_operation_for_node`) through 3.15.1. keras-nightly
3.16.0.dev2026102704 calls `self._run_through_graph(inputs)` without the closure (#23364, which
also changed how the context reaches layers): upstream's, the patch leaves it as it is.
"""

from __future__ import annotations

from codemods.engine import (
    Anchor,
    Append,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    InsertBefore,
    ReplaceExpression,
    Wrap,
)

FUNCTION_PY, FUNCTIONAL_PY = "keras/src/ops/function.py", "keras/src/models/functional.py"
SYMBOLIC_ARGUMENTS_PY = "keras/src/ops/symbolic_arguments.py"
RUN, CALL = "Function._run_through_graph", "Functional.call"
#: Upstream's node loop (3.11.0-3.15.1, keras-nightly): what `_forkgen_run_nodes` mirrors.
LOOP = """for depth in depth_keys:
    nodes = nodes_by_depth[depth]
    for node in nodes:
        if not node.operation or node.is_input:
            continue
        if any(id(x) not in tensor_dict for x in node.input_tensors):
            continue
        args, kwargs = node.arguments.fill_in(tensor_dict)
        if call_fn is not None:
            op = operation_fn(node.operation)
            outputs = call_fn(op, *args, **kwargs)
        else:
            operation = self._get_operation_for_node(node)
            op = operation_fn(operation)
            outputs = op(*args, **kwargs)
        for x, y in zip(node.outputs, tree.flatten(outputs)):
            tensor_dict[id(x)] = y"""
LAMBDA = "lambda op: operation_fn(op, training=training, **kwargs)"
#: The closure the loop does without, and the operation `_get_operation_for_node` returns.
OPERATION_FN = """def operation_fn(operation, **call_context_args):
    ___
    def call(*args, **kwargs):
        for name, value in call_context_args.items():
            if name in getattr(operation, "_call_context_args", {}) and value is not None:
                kwargs[name] = value
        return operation(*args, **kwargs)
    return call"""
GET_OPERATION = """def _get_operation_for_node(self, node):
    ___
    operation = node.operation
    if hasattr(self, "_nnx_op_mapping") and __:
        return __
    return operation"""
PACK = "return tree.pack_sequence_as(self._outputs_struct, output_tensors)"
#: keras-nightly: `Functional.call` runs the graph without the closure.
NIGHTLY = (Anchor(CALL, "outputs = self._run_through_graph(inputs)", path=FUNCTIONAL_PY,
                  description="no per-op closure (theirs, #23364)"),)


def _relied(scope: str, pattern: str, path: str, name: str | None = None) -> Anchor:
    return Anchor(scope, pattern, path=path, reported=False, name=name)


class FunctionalGraphRun(DeclaredPatch):
    name = "functional-graph-run"
    version = "1"
    headers = Headers(
        description="Functional.call's graph run hands each layer its context arguments without a closure per node, "
        "reads a single positional tensor directly, skips the NNX look-up per node, and returns a one-output "
        "model's value without tree.pack_sequence_as.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561", forwarded="not-needed",
        applied_upstream=None, last_update="2026-12-04",
    )
    files = (FUNCTION_PY, FUNCTIONAL_PY, SYMBOLIC_ARGUMENTS_PY)
    since = "3.11.0"
    edits = (
        Wrap(Anchor(RUN, LOOP, path=FUNCTION_PY, name="for depth in depth_keys: (the node loop)",
                    description="runs through _forkgen_run_nodes for Functional.call ({state})"),
             "run_nodes", label="the node loop"),
        InsertBefore(Anchor(RUN, PACK, path=FUNCTION_PY, reported=False), "pack_single", label="one output"),
        Append("helpers", label="the helpers"),
        Helper(Anchor("", "from keras.src.ops.function import Function", path=FUNCTIONAL_PY, reported=False),
               "import_context", blank_lines=0, label="the import"),
        ReplaceExpression(Anchor(CALL, LAMBDA, expression=True, path=FUNCTIONAL_PY, name="operation_fn=lambda op: ...",
                                 description="the context as data ({state})"), "call_context"),
    )
    relies_on = (
        _relied("Function", GET_OPERATION, FUNCTION_PY, "Function._get_operation_for_node"),
        _relied("", OPERATION_FN, FUNCTIONAL_PY, "def operation_fn (the closure)"),
        _relied("", "def operation_fn(___): ___", FUNCTIONAL_PY),
        _relied("SymbolicArguments.fill_in", "if self._single_positional_tensor is not None:\n"
                "    return (tensor_dict[id(self._single_positional_tensor)],), {}", SYMBOLIC_ARGUMENTS_PY),
        _relied("", "from keras.src.backend import KerasTensor", FUNCTION_PY),
        _relied("", "from keras.src import tree", FUNCTION_PY),
    )
    upstream_patterns = NIGHTLY
    details = Details("run Functional.call's nodes without a closure per node",
                      "Functional.call's graph run is in (forkgen)",
                      "keras-nightly runs the graph without the closure (#23364): left as it is")


PATCH = FunctionalGraphRun()
FunctionalGraphRunCommand = PATCH.command
