"""Patch `torch-tree-node-type-fast-path` (ours, not upstream): the torch tree's `is_nested`
answers for a non-tuple type with `type(x) in SUPPORTED_NODES` directly.

On the torch backend `keras.tree` is `keras/src/tree/torchtree_impl.py` (3.12.0 on). Its
`is_nested(structure)` is `not _tree_is_leaf(structure)`, i.e. `torch_tree._get_node_type(x) in
torch_tree.SUPPORTED_NODES`, and `_get_node_type` runs `is_namedtuple_class(type(x))` (an
isinstance/issubclass/getattr chain) for every object, tensors included. `Dense(4)(x)` calls
`is_nested` about 11 times (about a tenth of the call; keras-team/keras#22561 is about that cost).

What torch 2.13.0's `torch/utils/_pytree.py` does: `_get_node_type(x)` is `namedtuple` when
`is_namedtuple_class(type(x))`, else `type(x)`, and `is_namedtuple_class(cls)` is a conjunction
whose second term is `issubclass(cls, tuple)`. So when `type(x)` is not a tuple subclass,
`_get_node_type(x) is type(x)` and `is_nested(x)` is `type(x) in SUPPORTED_NODES`, which the
inserted branch returns. Tuples, namedtuples and other tuple subclasses take upstream's line.
The pieces compute what upstream computes, by the same operations:
- `type(x)`, never `x.__class__`: an object whose `__class__` lies (a `Mock(spec=...)`, a proxy)
  is classified by its real type, as torch does;
- `issubclass(type(x), tuple)` is the call torch makes; it goes to `type(tuple).__subclasscheck__`,
  i.e. `type`'s (the MRO), so a metaclass of `type(x)` overriding `__subclasscheck__`/
  `__instancecheck__` cannot change it (nor torch's answer);
- the dict lookup `type(x) in SUPPORTED_NODES` is torch's, so a metaclass's `__hash__`/`__eq__`
  give (or raise) the same; a type registered at run time is seen at once (no cache).

The gate. Older torch releases had other `_get_node_type`s (e.g. a `_is_namedtuple_instance` test
on `type(x).__bases__`, which a metaclass can make lie), and later ones may change it again. So the
branch runs only when `_FORKGEN_NODE_TYPE_IS_TYPE`, computed once at import: `_get_node_type` and
`is_namedtuple_class` are plain functions of `torch.utils._pytree` (not wrapped), with that module
as globals, that module does not shadow `type`/`isinstance`/`issubclass`/`tuple`, and the
sha256 of each function's source (`inspect.getsource`) is torch 2.13.0's. Any other torch, or
source that cannot be read, leaves 3.15.1's code path as it is. (Torch functions replaced after
Keras is imported are not re-checked: monkeypatching torch's private pytree helpers is out of
scope.)

Site: `is_nested`, not `_tree_is_leaf`. `is_nested` is the hot caller (layer call, `Operation`
argument checks), and leaving `_tree_is_leaf` untouched keeps `torch-tree-leaf-shortcut`, whose
codemod checks `_tree_is_leaf`'s exact body, applicable before or after this patch. The other
callers of `_tree_is_leaf` (`traverse`, `map_structure_up_to`, `assert_same_structure`, the leaf
short-cut) keep torch's full test: not carried, to keep the patch small.

Applies to 3.12.0-3.15.1 (`since`: the module is new in 3.12.0; `is_nested` and `_tree_is_leaf`
are the same in every release since and in keras-nightly 3.16.0.dev2026102704, which has no
such branch, so there is no "already upstream" shape). No switch: the gate decides at import.
"""

from __future__ import annotations

from codemods.engine import TORCHTREE_PY, Anchor, DeclaredPatch, Details, Headers, Helper, Prepend

FLAG = "_FORKGEN_NODE_TYPE_IS_TYPE"
UPSTREAM_LINE = "return not _tree_is_leaf(structure)"

#: `_tree_is_leaf`, torch's leaf test (what `tree_flatten` applies), as 3.12.0-3.15.1 and
#: keras-nightly have it.
TREE_IS_LEAF = Anchor("", """\
def _tree_is_leaf(tree, is_leaf=None):
    if is_leaf is not None and is_leaf(tree): return True
    return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES""", name="def _tree_is_leaf", reported=False)

class TorchTreeNodeTypeFastPath(DeclaredPatch):
    name = "torch-tree-node-type-fast-path"
    version = "1"
    headers = Headers(
        description="torch tree: is_nested answers type(x) in SUPPORTED_NODES for a non-tuple type, "
        "behind an import-time check that torch's _get_node_type is torch 2.13.0's.",
        origin="ours",
        bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed",
        applied_upstream=None,
        last_update="2026-12-01",
    )
    files = (TORCHTREE_PY,)
    # keras/src/tree/torchtree_impl.py first ships in 3.12.0; is_nested/_tree_is_leaf are the
    # same in 3.12.0-3.15.1.
    since = "3.12.0"
    codemod = "AddNodeTypeFastPathCommand"
    #: The branch first in `is_nested`, above upstream's line; the gate (a function and the
    #: flag) at module level right before `def is_nested`.
    edits = (
        Prepend("is_nested", "is_nested_fast_path", reported=False, keep_comments=True),
        Helper(Anchor("", "def is_nested(___): ___", reported=False), "module_level", before=True),
    )
    #: `is_nested(structure)` is upstream's one line (below forkgen's branch, once in), and
    #: `_tree_is_leaf` torch's leaf test: what the branch answers in its place.
    relies_on = (
        Anchor("", f"def is_nested(structure): {UPSTREAM_LINE}",
               alternatives=(f"def is_nested(structure):\n    if {FLAG}: ___\n    {UPSTREAM_LINE}",),
               name=f"def is_nested(structure): {UPSTREAM_LINE}",
               description="non-tuple types answer with type(x) in SUPPORTED_NODES"),
        TREE_IS_LEAF,
    )
    details = Details("is_nested: type(x) in SUPPORTED_NODES for non-tuple types",
                      "the node-type fast path is in (forkgen)", "upstream has the node-type fast path (no release does)")


PATCH = TorchTreeNodeTypeFastPath()
AddNodeTypeFastPathCommand = PATCH.command
