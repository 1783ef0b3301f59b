"""What `any-symbolic-tensors-leaf-fast-path` makes of keras_tensor.py modules shaped like Keras
3.15's (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the
equivalence suite must catch. (tests/support/synthetic_any_symbolic_tensors_leaf_fast_path.py
holds the runnable module the behaviour tests and the synthetic trees use.)"""

from codemods.engine import Case, Mutant

BEFORE = '''\
from keras.src import tree


class KerasTensor:
    def __init__(self, shape):
        self.shape = shape


def any_symbolic_tensors(args=None, kwargs=None):
    for items in (args or (), kwargs.values() if kwargs else ()):
        for x in items:
            if isinstance(x, KerasTensor):
                return True
            if tree.is_nested(x):
                for nested in tree.flatten(x):
                    if isinstance(nested, KerasTensor):
                        return True
    return False
'''
NESTED = "            if tree.is_nested(x):\n"
#: The tables and the learning helper right before the function; the leaf test before upstream's
#: `if tree.is_nested(x):` (after the KerasTensor test), the learning after it.
AFTER = BEFORE.replace("def any_symbolic_tensors(", '''\
# forkgen: any-symbolic-tensors-leaf-fast-path (values that are leaves of every tree)
# Exact types that no tree implementation Keras uses (optree, dm-tree, torch's
# pytree) treats as nested. A tuple, not a frozenset: torch.compile guards on it.
_forkgen_any_symbolic_plain_types = (bool, int, float, str)
# The classes seen by `any_symbolic_tensors`, mapped to True when an instance was a
# leaf that `keras.ops.is_tensor` accepted (a backend tensor: a leaf for every
# instance, as both tests look at the class only), else False (the full test runs).
_forkgen_any_symbolic_leaf_types = {}


def _forkgen_any_symbolic_learn(x):
    # Reads `keras.ops.is_tensor` only once its module is loaded (never imports). Not
    # while torch.compile traces: Dynamo splits the graph after a global dict changes.
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():
        return
    is_tensor = getattr(sys.modules.get("keras.src.ops.core"), "is_tensor", None)
    if is_tensor is not None:
        _forkgen_any_symbolic_leaf_types[type(x)] = not tree.is_nested(x) and bool(is_tensor(x))


def any_symbolic_tensors(''').replace(NESTED, '''\
            # forkgen: any-symbolic-tensors-leaf-fast-path (no tree.is_nested for certain leaves)
            leaf = _forkgen_any_symbolic_leaf_types.get(type(x))
            if leaf or x is None or type(x) in _forkgen_any_symbolic_plain_types:
                continue
''' + NESTED).replace("    return False\n", '''\
            if leaf is None:
                _forkgen_any_symbolic_learn(x)
    return False
''')

CASES = (
    Case("the leaf test around upstream's nested test, the helpers before the function", BEFORE, AFTER,
         detail="skip tree.is_nested for certain leaves", anchors=(("if tree.is_nested(x):", 14),)),
    Case("an unmarked leaf skip is upstream's",
         BEFORE.replace(NESTED, "            if x is None:\n                continue\n" + NESTED), upstream=True),
    Case("the nested test gone", BEFORE.replace(NESTED, "            if tree.is_leaf(x):\n"),
         drift=":9: anchor 'if tree.is_nested(x):': expected exactly one `if tree.is_nested(x):` in the loop "
         "of any_symbolic_tensors; found 0"),
    Case("the KerasTensor test gone", BEFORE.replace("            if isinstance(x, KerasTensor):\n                return True\n", ""),
         drift=":12: anchor 'if isinstance(x, KerasTensor): return True': expected the first statement of the loop; "
         "found another statement"),
    Case("the loop over another name", BEFORE.replace("        for x in items:", "        for y in items:"),
         drift=":9: anchor 'for x in items:': expected exactly one `for x in ...` loop in any_symbolic_tensors; found 0"),
    Case("a helper's name taken", BEFORE + "\n\ndef _forkgen_any_symbolic_learn(x):\n    pass\n",
         drift=":14: anchor '_forkgen_any_symbolic_learn': expected no such module-level name before the patch; "
         "found defined"),
    Case("a statement after the nested test", BEFORE.replace("    return False\n", "            print(x)\n    return False\n"),
         drift=":14: anchor 'if tree.is_nested(x):': expected the loop's second and last statement; found 3 statements"),
)

MUTANTS = (
    Mutant("tuples taken for plain leaves (a KerasTensor in a tuple missed)",
           "    _forkgen_any_symbolic_plain_types = (bool, int, float, str)\n",
           "    _forkgen_any_symbolic_plain_types = (bool, int, float, str, tuple)\n"),
    Mutant("every leaf class learnt as a certain leaf, tensor or not",
           "            _forkgen_any_symbolic_leaf_types[type(x)] = not tree.is_nested(x) and bool(is_tensor(x))\n",
           "            _forkgen_any_symbolic_leaf_types[type(x)] = not tree.is_nested(x)\n"),
)
