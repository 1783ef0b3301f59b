"""Patch `loss-wrapper-tensor-fast-path` (ours, not upstream): on torch, `LossFunctionWrapper.call`
matches the ranks of two plain tensors with one `squeeze_or_expand_to_same_rank` call and calls
`fn`, without the three pytree walks that hand the same two tensors to `fn`.

Upstream (`keras/src/losses/losses.py`, the same `call` from 3.8.0 through 3.15.1 and keras-nightly)
wraps every function loss (`loss="mse"`, `"sparse_categorical_crossentropy"`, the built-in classes
`MeanSquaredError`, `SparseCategoricalCrossentropy`, ...: every compiled loss but a `Loss`
subclass's own `call`) and calls it once per train and test step, from `Loss.__call__`, with the
tensors it converted:

    y_true_y_pred = tree.map_structure(squeeze_or_expand_to_same_rank, y_true, y_pred)
    y_true = tree.map_structure_up_to(y_true, lambda x: x[0], y_true_y_pred)
    y_pred = tree.map_structure_up_to(y_pred, lambda x: x[1], y_true_y_pred)
    return self.fn(y_true, y_pred, **self._fn_kwargs)

For two tensors these are three torch pytree `tree_map`s (each a flatten, a `flatten_up_to` and
an unflatten) around one call: about 8 us of a 72 us compiled loss (3.15.1 fork, torch CPU, the
issue's MLP), 2-3% of an `evaluate` or `train_on_batch` step.

The patch puts a fast path first in `call`; when it does not return, upstream's body runs
unchanged. It returns `self.fn(fast_pair[0], fast_pair[1], **self._fn_kwargs)` with
`fast_pair = squeeze_or_expand_to_same_rank(y_true, y_pred)`, when: the backend is torch (read
when the module is imported), `y_true` and `y_pred` are both exactly `torch.Tensor` (what
`Loss.__call__`'s `convert_to_tensor` returns for a plain tensor or array), `torch.Tensor` is
not a registered pytree node type (`SUPPORTED_NODES`), and `tree.map_structure`,
`tree.map_structure_up_to` and the module's `squeeze_or_expand_to_same_rank` are the functions
the module was imported with (a function monkeypatched on `keras.src.tree` or on the module
fails it).

Why the result is identical (3.12.0-3.15.1 and keras-nightly; the relied-on anchors below hold the
shapes it reads). On the torch backend, `tree_api` takes `torchtree_impl` as its `tree_impl`
(3.12.0+). (1) `tree.map_structure(f, y_true, y_pred)` has two structures, so tree_api's
one-structure short-cut (3.15.1) and torch-tree-flat-fast-paths' (one structure only) do not
apply: it returns `torchtree_impl.map_structure(f, y_true, y_pred, none_is_leaf=True)`, which
(`none_is_leaf` true: `map_func = func`) returns `torch_tree.tree_map(f, y_true, y_pred)`. A
tensor whose type is no pytree node is a leaf (`_get_node_type` is its type, not a namedtuple),
so torch's `tree_map` flattens `y_true` to `[y_true]` with the leaf spec, whose
`flatten_up_to(y_pred)` is `[y_pred]`, and unflattens `map(f, [y_true], [y_pred])`: a list of
one value, `f(y_true, y_pred)`, returned as it is. So `y_true_y_pred` is the pair
`squeeze_or_expand_to_same_rank(y_true, y_pred)` returns (every path of upstream's function
ends `return x1, x2`). (2) `tree.map_structure_up_to(y_true, g, pair)` is
`torchtree_impl.map_structure_up_to`, i.e. `torch_tree.tree_map(check, y_true, pair)`: the leaf
`y_true` flattens to `[y_true]`, the leaf spec takes `pair` whole (`[pair]`), and `check(y_true,
pair)` tests `_tree_is_leaf(y_true)` (true: the same `SUPPORTED_NODES` test) and returns
`g(pair) = pair[0]`, returned as it is by the leaf spec's unflatten. Likewise `y_pred` becomes
`pair[1]`. (3) So `fn` gets `pair[0]`, `pair[1]` and the same keyword arguments, after the same
one call of the same function on the same tensors: the fast path makes exactly these calls, in
this order, and no other. The tensor ops run are the same, on the same operands, so the values,
dtypes, devices, masks set by `fn` and autograd graphs (hence gradients) are the same; the pytree
walks create no tensors and have no side effect. An exception raised by the rank match or by `fn`
propagates as it would (only the traceback is shorter). Lists, dicts, tuples, numpy arrays,
`Parameter`s, subclasses of `torch.Tensor`, `KerasTensor`s and other backends take upstream's
body.

Not guarded, because no code does it: `tree_api.tree_impl` reassigned, or the functions of
`torchtree_impl` or torch's `_pytree` monkeypatched (only the three functions `call` names are
checked); a `StopIteration` raised by `squeeze_or_expand_to_same_rank` (upstream's `map` would
turn it into torch's length error): upstream's function, the only one the guard lets through,
reads shapes and calls `ops.expand_dims`/`ops.squeeze`, which raise none. A torch
`__torch_function__` mode sees the same ops (the tree walks run none).

Applies from Keras 3.12.0 (`since`), the first release whose tree on torch is `torchtree_impl`:
3.8.0-3.11.x have the same `call` but walk with optree on torch (another proof, not carried), and
3.0.0-3.6.x call `squeeze_or_expand_to_same_rank` (3.0: `squeeze_to_same_rank`) directly, as the
fast path does. No switch: the fast path keeps no state.
"""

from __future__ import annotations

from codemods.engine import (
    TORCHTREE_PY,
    Anchor,
    Append,
    DeclaredPatch,
    Details,
    Headers,
    Prepend,
    applied_piece,
)

LOSSES_PY = "keras/src/losses/losses.py"
TREE_API_PY = "keras/src/tree/tree_api.py"
#: torchtree_impl's map_structure (3.12.0-3.15.1, keras-nightly), `{}` where torch-tree-flat-fast-paths's
#: branch goes (a patch this one tolerates: its applied piece, read through the engine).
MAP_STRUCTURE = """\
def map_structure(func, *structures, none_is_leaf=True):
    {}if not structures: raise __
    map_func = func
    if not none_is_leaf: ___
    return torch_tree.tree_map(map_func, *structures)"""
MAP_BRANCH = applied_piece("torch-tree-flat-fast-paths", "map_structure_fast_path", "    ").lstrip(" ") + "    "
SCOPE = "LossFunctionWrapper.call"
#: Upstream's `call`, 3.8.0-3.15.1 and keras-nightly (`{}`: where the fast path is, once in).
CALL = """\
def call(self, y_true, y_pred):
    {}y_true_y_pred = tree.map_structure(squeeze_or_expand_to_same_rank, y_true, y_pred)
    y_true = tree.map_structure_up_to(y_true, lambda x: x[0], y_true_y_pred)
    y_pred = tree.map_structure_up_to(y_pred, lambda x: x[1], y_true_y_pred)
    return self.fn(y_true, y_pred, **self._fn_kwargs)"""
FAST = "if __: ___\n    "
#: tree_api's choice of implementation: torch's pytree on the torch backend (3.12.0+).
TREE_IMPL = """\
if backend() == "torch":
    from keras.src.tree import torchtree_impl as tree_impl
elif optree.available:
    from keras.src.tree import optree_impl as tree_impl
elif dmtree.available:
    from keras.src.tree import dmtree_impl as tree_impl
else:
    raise __"""
#: tree_api's map_structure (a docstring, 3.15.1's one-structure short-cut, the delegation).
API_MAP = """\
def map_structure(func, *structures, none_is_leaf=True):
    __
    {}return tree_impl.map_structure(func, *structures, none_is_leaf=none_is_leaf)"""
API_SHORT_CUT = "if len(structures) == 1 and not tree_impl.is_nested(structures[0]): ___\n    "
API_UP_TO = """\
def map_structure_up_to(shallow_structure, func, *structures):
    __
    return tree_impl.map_structure_up_to(shallow_structure, func, *structures)"""
#: torchtree_impl's map_structure_up_to and leaf test (3.12.0-3.15.1, keras-nightly).
UP_TO = """\
def map_structure_up_to(shallow_structure, func, *structures):
    if not structures: raise __
    def func_with_check_without_shallow_structure(shallow, *args):
        if not _tree_is_leaf(shallow): raise __
        return func(*args)
    return torch_tree.tree_map(func_with_check_without_shallow_structure, shallow_structure, *structures)"""
IS_LEAF = """\
def _tree_is_leaf(tree, is_leaf=None):
    if is_leaf is not None and is_leaf(tree): return True
    return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES"""
LABEL = "LossFunctionWrapper.call: first statement"


class LossWrapperTensorFastPath(DeclaredPatch):
    name = "loss-wrapper-tensor-fast-path"
    version = "1"
    headers = Headers(
        description="torch: LossFunctionWrapper.call matches the ranks of two plain tensors with one "
        "squeeze_or_expand_to_same_rank call and calls fn, without the three pytree walks.",
        origin="ours", bug="forkgen issue 26", forwarded="not-needed", applied_upstream=None,
        last_update="2026-12-05",
    )
    files = (LOSSES_PY,)
    since = "3.12.0"
    #: torchtree_impl.map_structure, which it relies on, may hold torch-tree-flat-fast-paths's branch.
    tolerates = ("torch-tree-flat-fast-paths",)
    edits = (
        Prepend(SCOPE, "call_fast_path", label=LABEL,
                description="two torch tensors: the rank match, then fn, without tree walks ({state})"),
        Append("helpers", label="the helpers"),
    )
    #: The body the fast path mirrors (below it, once in), the names it reads, and the tree code
    #: upstream's body runs through on torch.
    relies_on = (
        Anchor("LossFunctionWrapper", CALL.format(""), alternatives=(CALL.format(FAST),),
               name="def call(self, y_true, y_pred): map_structure, map_structure_up_to twice, fn (3.8.0+)",
               reported=False),
        Anchor("", "from keras.src import backend", reported=False),
        Anchor("", "from keras.src import tree", reported=False),
        Anchor("", "from keras.src.losses.loss import squeeze_or_expand_to_same_rank", reported=False),
        Anchor("", TREE_IMPL, path=TREE_API_PY, name="tree_api: torchtree_impl on the torch backend",
               reported=False),
        Anchor("", API_MAP.format(""), alternatives=(API_MAP.format(API_SHORT_CUT),), path=TREE_API_PY,
               name="tree_api.map_structure: tree_impl.map_structure(func, *structures, ...)", reported=False),
        Anchor("", API_UP_TO, path=TREE_API_PY, reported=False,
               name="tree_api.map_structure_up_to: tree_impl.map_structure_up_to(...)"),
        Anchor("", MAP_STRUCTURE.format(""), alternatives=(MAP_STRUCTURE.format(MAP_BRANCH),), path=TORCHTREE_PY,
               name="torchtree_impl.map_structure: torch_tree.tree_map(map_func, *structures)", reported=False),
        Anchor("", UP_TO, path=TORCHTREE_PY, reported=False,
               name="torchtree_impl.map_structure_up_to: torch_tree.tree_map(check, shallow, *structures)"),
        Anchor("", IS_LEAF, path=TORCHTREE_PY, reported=False,
               name="torchtree_impl._tree_is_leaf: not in torch_tree.SUPPORTED_NODES"),
    )
    details = Details(apply="a torch fast path first in LossFunctionWrapper.call for two plain tensors",
                      present="LossFunctionWrapper.call has the fast path (forkgen)", upstream="")


PATCH = LossWrapperTensorFastPath()
LossWrapperTensorFastPathCommand = PATCH.command
