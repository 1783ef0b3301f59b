"""What `any-symbolic-tensors-leaf-fast-path` makes of keras_tensor.py modules shaped like Keras
3.15's, how the patched `any_symbolic_tensors` behaves beside upstream's (both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch; and the runnable module the behaviours and the synthetic trees use: `FILES` holds
`KERAS_TENSOR_PY`, BEFORE with a docstring, which the behaviours run (`run_module`) with its
`from keras.src import tree` given `tree` from here, a tiny stand-in that counts its calls."""

from __future__ import annotations

import sys
import types

import pytest

from codemods.any_symbolic_tensors_leaf_fast_path import PATCH
from codemods.engine import Case, Mutant, Outcome, Sources, piece_text, run_module

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
#: The loop of BEFORE: its KerasTensor test first, then its nested test.
FIRST = "        for x in items:\n            if isinstance(x, KerasTensor):\n                return True\n"
NESTED_TEST = BEFORE[BEFORE.index(NESTED):BEFORE.index("    return False\n")]
#: The tables and the learning helper right before the function; the leaf test before upstream's
#: `if tree.is_nested(x):` (after the KerasTensor test), the learning after it.
AFTER = BEFORE.replace("def any_symbolic_tensors(", piece_text(__file__, "module_level") + "\n\ndef any_symbolic_tensors(").replace(
    FIRST + NESTED_TEST,
    piece_text(__file__, "loop_body", "        ", upstream=NESTED_TEST).replace("        for x in items:\n", FIRST, 1))
#: A runnable keras_tensor.py: BEFORE (its `tree` is handed in: `run_module`, `tree` below).
KERAS_TENSOR_PY = '"""Synthetic stand-in for keras/src/backend/common/keras_tensor.py."""\n\n' + BEFORE

FILES = {"keras/src/backend/common/keras_tensor.py": KERAS_TENSOR_PY}


class _Tree:
    """Lists, tuples and dicts are nested; everything else is a leaf. Counts `is_nested`."""

    def __init__(self) -> None:
        self.calls = 0

    def is_nested(self, x: object) -> bool:
        self.calls += 1
        return isinstance(x, (list, tuple, dict))

    def flatten(self, x: object) -> list[object]:
        if isinstance(x, dict):
            x = list(x.values())
        if isinstance(x, (list, tuple)):
            return [leaf for item in x for leaf in self.flatten(item)]
        return [x]


tree = _Tree()

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


# -- behaviours: upstream's and the patched `any_symbolic_tensors` side by side ------------------

PATH = "keras/src/backend/common/keras_tensor.py"
SOURCE = KERAS_TENSOR_PY
#: What `from keras.src import tree` gets in the synthetic module: the counting `tree` above.
STAND_INS = {"keras.src": types.SimpleNamespace(tree=tree)}


def sources(text: str) -> Sources:
    return Sources({PATH: text}.get)


def patched(text: str = SOURCE) -> str:
    s = sources(text)
    assert PATCH.check(s).outcome is Outcome.APPLIED
    PATCH.apply(s)
    return s.rendered()[PATH]


def _modules(monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, types.ModuleType]:
    upstream = run_module(SOURCE, "synthetic_anysym_upstream", STAND_INS)
    fork = run_module(patched(), "synthetic_anysym_fork", STAND_INS)
    core = types.ModuleType("keras.src.ops.core")
    core.is_tensor = lambda x: isinstance(x, Tensor)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "keras.src.ops.core", core)
    return upstream, fork


class Tensor:
    pass


def patched_function_returns_upstreams_value_and_skips_is_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream, fork = _modules(monkeypatch)
    kt_up, kt_fork = upstream.KerasTensor((1,)), fork.KerasTensor((1,))
    cases = [
        ((), None), ((1, "a", None, 2.0, True), None), ((Tensor(), Tensor()), None), (([1, [2]],), None),
        ((Tensor(), {"a": "K"}), None), ((), {"a": Tensor(), "b": ["K"]}), ((object(), ("K",)), {"c": 3}),
    ]
    for args, kwargs in cases:
        def swap(v: object, kt: object) -> object:
            if v == "K":
                return kt
            if isinstance(v, list):
                return [swap(i, kt) for i in v]
            if isinstance(v, tuple):
                return tuple(swap(i, kt) for i in v)
            if isinstance(v, dict):
                return {k: swap(i, kt) for k, i in v.items()}
            return v
        for _ in range(2):
            assert fork.any_symbolic_tensors(swap(args, kt_fork), swap(kwargs, kt_fork)) == upstream.any_symbolic_tensors(
                swap(args, kt_up), swap(kwargs, kt_up)
            ), (args, kwargs)
    assert upstream.tree is tree and fork.tree is tree  # the counting stand-in, handed in
    before = tree.calls
    fork.any_symbolic_tensors((Tensor(), Tensor(), None, 3, "s"))
    assert tree.calls == before  # Tensor learnt: no is_nested at all
    upstream.any_symbolic_tensors((Tensor(), Tensor(), None, 3, "s"))
    assert tree.calls == before + 5
    assert fork._forkgen_any_symbolic_leaf_types[Tensor] is True
    assert fork._forkgen_any_symbolic_leaf_types[list] is False
    fork.any_symbolic_tensors(([1],))
    assert tree.calls == before + 6  # a nested class keeps upstream's test


def nothing_is_learnt_before_ops_core_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    fork = run_module(patched(), "synthetic_anysym_fork_early", STAND_INS)
    monkeypatch.delitem(sys.modules, "keras.src.ops.core", raising=False)
    assert fork.any_symbolic_tensors((Tensor(),)) is False
    assert fork._forkgen_any_symbolic_leaf_types == {}


BEHAVIOURS = (
    patched_function_returns_upstreams_value_and_skips_is_nested,
    nothing_is_learnt_before_ops_core_is_loaded,
)
