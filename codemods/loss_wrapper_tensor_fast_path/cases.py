"""What `loss-wrapper-tensor-fast-path` makes of loss and tree modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from codemods.engine import Case, Mutant, applied_piece, piece_text

LOSSES = "keras/src/losses/losses.py"
TREE_API = "keras/src/tree/tree_api.py"
TORCHTREE = "keras/src/tree/torchtree_impl.py"
IMPORTS = '''\
import warnings

from keras.src import backend
from keras.src import ops
from keras.src import tree
from keras.src.losses.loss import Loss
from keras.src.losses.loss import squeeze_or_expand_to_same_rank


'''
HEAD = '''\
class LossFunctionWrapper(Loss):
    def __init__(self, fn, reduction="sum_over_batch_size", name=None, **kwargs):
        super().__init__(name=name, reduction=reduction)
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true, y_pred):
'''
BODY = '''\
        y_true_y_pred = tree.map_structure(
            squeeze_or_expand_to_same_rank, y_true, y_pred
        )
        y_true = tree.map_structure_up_to(y_true, lambda x: x[0], y_true_y_pred)
        y_pred = tree.map_structure_up_to(y_pred, lambda x: x[1], y_true_y_pred)
        return self.fn(y_true, y_pred, **self._fn_kwargs)
'''
TAIL = '''\

    def get_config(self):
        return {"fn": self.fn.__name__, **self._fn_kwargs}


def mean_squared_error(y_true, y_pred):
    y_true = ops.convert_to_tensor(y_true)
    y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
    return ops.mean(ops.square(y_true - y_pred), axis=-1)
'''
BEFORE = IMPORTS + HEAD + BODY + TAIL
FAST_PATH = piece_text(__file__, "call_fast_path", "        ")
HELPERS = "\n\n" + piece_text(__file__, "helpers")
AFTER = IMPORTS + HEAD + FAST_PATH + BODY + TAIL + HELPERS

TREE_API_PY = '''\
"""Synthetic stand-in for keras/src/tree/tree_api.py (its implementation choice and two maps)."""

from keras.src.backend.config import backend
from keras.src.utils.module_utils import dmtree
from keras.src.utils.module_utils import optree

if backend() == "torch":
    # torch's own pytree on the torch backend.
    from keras.src.tree import torchtree_impl as tree_impl
elif optree.available:
    from keras.src.tree import optree_impl as tree_impl
elif dmtree.available:
    from keras.src.tree import dmtree_impl as tree_impl
else:
    raise ImportError("Install optree.")


def map_structure(func, *structures, none_is_leaf=True):
    """`func` over the leaves of `structures`."""
    if len(structures) == 1 and not tree_impl.is_nested(structures[0]):
        if structures[0] is None and not none_is_leaf:
            return None
        return func(structures[0])
    return tree_impl.map_structure(func, *structures, none_is_leaf=none_is_leaf)


def map_structure_up_to(shallow_structure, func, *structures):
    """`func` over `structures` down to the leaves of `shallow_structure`."""
    return tree_impl.map_structure_up_to(shallow_structure, func, *structures)
'''
#: The part of torchtree_impl.py the patch relies on: the leaf test and the two maps, shaped like
#: Keras's (the series' synthetic tree takes the whole module from torch-tree-flat-fast-paths'
#: cases, which has these three too).
TORCHTREE_PY = '''\
"""Synthetic stand-in for keras/src/tree/torchtree_impl.py (its leaf test and two maps)."""

from torch.utils import _pytree as torch_tree


def _tree_is_leaf(tree, is_leaf=None):
    if is_leaf is not None and is_leaf(tree):
        return True
    return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES


def map_structure(func, *structures, none_is_leaf=True):
    if not structures:
        raise ValueError("Must provide at least one structure")

    map_func = func
    if not none_is_leaf:

        def skip_none(*args):
            if args[0] is None:
                if any(arg is not None for arg in args):
                    raise ValueError(f"None against a value: {args}.")
                return None
            return func(*args)

        map_func = skip_none

    return torch_tree.tree_map(map_func, *structures)


def map_structure_up_to(shallow_structure, func, *structures):
    if not structures:
        raise ValueError("Must provide at least one structure")

    # The shallow structure's leaves must be leaves.
    def func_with_check_without_shallow_structure(shallow, *args):
        if not _tree_is_leaf(shallow):
            raise ValueError("Structures don't have the same nested structure.")
        return func(*args)

    return torch_tree.tree_map(
        func_with_check_without_shallow_structure,
        shallow_structure,
        *structures,
    )
'''
#: 3.12.0-3.14.x: tree_api's map_structure without the one-structure short-cut.
SHORT_CUT = '''\
    if len(structures) == 1 and not tree_impl.is_nested(structures[0]):
        if structures[0] is None and not none_is_leaf:
            return None
        return func(structures[0])
'''
LABEL = "LossFunctionWrapper.call: first statement"
CALL = "anchor 'def call(self, y_true, y_pred): map_structure, map_structure_up_to twice, fn (3.8.0+)': expected exactly one"


def tree(**changes: str) -> dict[str, str]:
    """The three files, `losses` (BEFORE unless given), tree_api's and torchtree_impl's."""
    return {LOSSES: changes.get("losses", BEFORE), TREE_API: changes.get("tree_api", TREE_API_PY),
            TORCHTREE: changes.get("torchtree", TORCHTREE_PY)}


def _drift(name: str, file: str, old: str, new: str, drift: str) -> Case:
    text = tree()[{"losses": LOSSES, "tree_api": TREE_API, "torchtree": TORCHTREE}[file]]
    assert text.count(old) == 1, old
    return Case(name, tree(**{file: text.replace(old, new)}), drift=drift)


CASES = (
    Case("the fast path first in LossFunctionWrapper.call, the helpers at the end", tree(), {LOSSES: AFTER},
         detail="a torch fast path first in LossFunctionWrapper.call for two plain tensors",
         anchors=((LABEL, 16),)),
    Case("3.12.0-3.14.x: tree_api's map_structure without the one-structure short-cut",
         tree(tree_api=TREE_API_PY.replace(SHORT_CUT, "")), {LOSSES: AFTER}),
    Case("torch-tree-flat-fast-paths' branch first in torchtree_impl.map_structure",
         tree(torchtree=TORCHTREE_PY.replace(
             "def map_structure(func, *structures, none_is_leaf=True):\n",
             "def map_structure(func, *structures, none_is_leaf=True):\n"
             + applied_piece("torch-tree-flat-fast-paths", "map_structure_fast_path", "    "))), {LOSSES: AFTER}),
    # A branch that is not that patch's piece (tolerated is its applied form, word for word).
    Case("another branch first in torchtree_impl.map_structure",
         tree(torchtree=TORCHTREE_PY.replace(
             "def map_structure(func, *structures, none_is_leaf=True):\n",
             "def map_structure(func, *structures, none_is_leaf=True):\n"
             "    if _FORKGEN_FLAT_FAST_PATHS and none_is_leaf is True and len(structures) == 1:\n"
             "        return [func(x) for x in structures[0]]\n")),
         drift="torchtree_impl.map_structure: torch_tree.tree_map(map_func, *structures)"),
    _drift("3.0-3.6's call: the rank match without the tree", "losses",
           "        y_true_y_pred = tree.map_structure(\n            squeeze_or_expand_to_same_rank, y_true, y_pred\n"
           "        )\n        y_true = tree.map_structure_up_to(y_true, lambda x: x[0], y_true_y_pred)\n"
           "        y_pred = tree.map_structure_up_to(y_pred, lambda x: x[1], y_true_y_pred)\n",
           "        y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)\n", CALL),
    _drift("fn called with something else", "losses", "return self.fn(y_true, y_pred, **self._fn_kwargs)",
           "return self.fn(y_pred, y_true, **self._fn_kwargs)", CALL),
    _drift("another rank match", "losses", "            squeeze_or_expand_to_same_rank, y_true, y_pred\n",
           "            squeeze_to_same_rank, y_true, y_pred\n", CALL),
    _drift("no tree import", "losses", "from keras.src import tree\n", "from keras.src.tree import tree_api as tree\n",
           "anchor 'from keras.src import tree'"),
    _drift("optree on torch too (3.8.0-3.11.x)", "tree_api",
           'if backend() == "torch":\n    # torch\'s own pytree on the torch backend.\n'
           "    from keras.src.tree import torchtree_impl as tree_impl\nelif optree.available:",
           "if optree.available:", "anchor 'tree_api: torchtree_impl on the torch backend'"),
    _drift("tree_api's map_structure converting first", "tree_api",
           "    return tree_impl.map_structure(func, *structures, none_is_leaf=none_is_leaf)\n",
           "    structures = [list(s) for s in structures]\n"
           "    return tree_impl.map_structure(func, *structures, none_is_leaf=none_is_leaf)\n",
           "anchor 'tree_api.map_structure: tree_impl.map_structure(func, *structures, ...)'"),
    _drift("torchtree_impl's map_structure_up_to checking something else", "torchtree",
           "        if not _tree_is_leaf(shallow):\n", "        if _tree_is_leaf(args[0]):\n",
           "anchor 'torchtree_impl.map_structure_up_to: torch_tree.tree_map(check, shallow, *structures)'"),
    _drift("a leaf test of another kind", "torchtree", "torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES",
           "not isinstance(tree, (list, tuple, dict))",
           "anchor 'torchtree_impl._tree_is_leaf: not in torch_tree.SUPPORTED_NODES'"),
    Case("a helper name taken", tree(losses=BEFORE + "\n_forkgen_pytree = None\n"),
         drift="expected names free for helpers (forkgen's helper); found already bound"),
    _drift("a local named like the fast path's", "losses", "    def call(self, y_true, y_pred):\n",
           "    def call(self, y_true, y_pred):\n        fast_pair = None\n",
           "expected names free for call_fast_path; found used"),
    Case("half applied", tree(losses=AFTER.replace(HELPERS, "\n")), drift="expected all pieces present or none"),
    Case("an unmarked fast path is not upstream's",
         tree(losses=AFTER.replace("# forkgen: loss-wrapper-tensor-fast-path (two", "# (two")),
         drift="expected to edit, or edited by forkgen; found an edited form without forkgen's marker"),
)

MUTANTS = (
    Mutant("a nested y_true taken for a tensor", "        and type(y_true) is _forkgen_torch.Tensor\n", ""),
    Mutant("torch.Tensor registered as a pytree node still taken for a leaf",
           "        and _forkgen_torch.Tensor not in _forkgen_pytree.SUPPORTED_NODES\n", ""),
    Mutant("a monkeypatched tree.map_structure_up_to bypassed",
           "        and (tree.map_structure, tree.map_structure_up_to, squeeze_or_expand_to_same_rank)\n",
           "        and (tree.map_structure, _forkgen_wrapper_call_functions[1], squeeze_or_expand_to_same_rank)\n"),
    Mutant("a monkeypatched rank match taken (its StopIteration escapes)",
           "        and (tree.map_structure, tree.map_structure_up_to, squeeze_or_expand_to_same_rank)\n",
           "        and (tree.map_structure, tree.map_structure_up_to, _forkgen_wrapper_call_functions[2])\n"),
)


#: The synthetic files of the series' whole synthetic tree (tests/support/synthetic.py); its
#: torchtree_impl.py is torch-tree-flat-fast-paths' (a superset of TORCHTREE_PY's functions).
FILES = {LOSSES: BEFORE, TREE_API: TREE_API_PY}
