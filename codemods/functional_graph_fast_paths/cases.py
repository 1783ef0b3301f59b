"""What `functional-graph-fast-paths` makes of the synthetic symbolic_arguments.py / functional.py,
how the patched `fill_in` behaves beside upstream's (both run by tests/unit/test_patch_cases.py),
the breaks of its inserted code the equivalence suite must catch, and the synthetic files it
anchors on (shared with the series' synthetic tree).

`FILES` holds a small `keras/src/ops/symbolic_arguments.py` and `keras/src/models/functional.py`
shaped like Keras's (written for these tests; only the anchored statements follow Keras):
`SymbolicArguments` with `convert` and `fill_in` (a single-tensor fast path, a `switch_fn`,
`return self.convert(switch_fn)`), and `Functional` with `_maybe_warn_inputs_struct_mismatch`
and `_standardize_inputs` ending with the flatten / convert / adjust-rank tail.
"""

import textwrap
import types
from typing import Any

from codemods.engine import Case, Mutant, piece_text, run_module

SYMBOLIC_ARGUMENTS = "keras/src/ops/symbolic_arguments.py"
FUNCTIONAL = "keras/src/models/functional.py"

SYMBOLIC_ARGUMENTS_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/symbolic_arguments.py."""

    from keras.src import tree
    from keras.src.backend import KerasTensor


    class SymbolicArguments:
        def __init__(self, *args, **kwargs):
            self.args = tree.map_structure(lambda v: v, args)
            self.kwargs = tree.map_structure(lambda v: v, kwargs)
            one = not self.kwargs and len(self.args) == 1
            self._single_positional_tensor = self.args[0] if one and isinstance(self.args[0], KerasTensor) else None

        def convert(self, conversion_fn):
            args = tree.map_structure(conversion_fn, self.args)
            kwargs = tree.map_structure(conversion_fn, self.kwargs)
            return args, kwargs

        def fill_in(self, tensor_dict):
            """Values for the KerasTensors."""
            if self._single_positional_tensor is not None:
                # the one-tensor case
                return (tensor_dict[id(self._single_positional_tensor)],), {}

            def switch_fn(x):
                if isinstance(x, KerasTensor):
                    return tensor_dict.get(id(x), None)
                return x

            return self.convert(switch_fn)
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


    class Functional(Model):
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
    '''
)

FILES: dict[str, str] = {SYMBOLIC_ARGUMENTS: SYMBOLIC_ARGUMENTS_PY, FUNCTIONAL: FUNCTIONAL_PY}

SA, FN, SA_PY, FN_PY = SYMBOLIC_ARGUMENTS, FUNCTIONAL, SYMBOLIC_ARGUMENTS_PY, FUNCTIONAL_PY

SINGLE = "            return (tensor_dict[id(self._single_positional_tensor)],), {}\n"
FILL_IN_FAST = piece_text(__file__, "fill_in_tensors", " " * 8)
STANDARDIZE_DEF = "    def _standardize_inputs(self, inputs):\n"
STANDARDIZE_FAST = piece_text(__file__, "standardize_leaf", " " * 8)
SA_AFTER = SA_PY.replace(SINGLE, SINGLE + FILL_IN_FAST, 1)
FN_AFTER = FN_PY.replace(STANDARDIZE_DEF, STANDARDIZE_DEF + STANDARDIZE_FAST, 1)
WARN = "        self._maybe_warn_inputs_struct_mismatch(\n            inputs, raise_exception=raise_exception\n        )\n"


def drift(name: str, words: str, sa: str = SA_PY, fn: str = FN_PY) -> Case:
    return Case(name, {SA: sa, FN: fn}, drift=words)


CASES = (
    Case("both fast paths, comments and other methods unchanged", {SA: SA_PY, FN: FN_PY}, {SA: SA_AFTER, FN: FN_AFTER},
         detail="fill_in and _standardize_inputs: fast paths for the common cases",
         anchors=(("if self._single_positional_tensor is not None:", 21), ("flat_inputs = tree.flatten(inputs)", 28))),
    drift("half applied", "expected all pieces present or none; found SymbolicArguments.fill_in forkgen's, "
          "Functional._standardize_inputs missing", sa=SA_AFTER),
    drift("an unmarked fast path", "expected to edit, or edited by forkgen; found an edited form without forkgen's marker",
          sa=SA_AFTER.replace(FILL_IN_FAST.splitlines(True)[0], ""), fn=FN_AFTER),
    drift("another single-tensor test", f"{SA}:19: anchor 'if self._single_positional_tensor is not None:': expected "
          "exactly one `if self._single_positional_tensor is not None:` in SymbolicArguments.fill_in; found 0",
          sa=SA_PY.replace("if self._single_positional_tensor is not None:", "if self._single_positional_tensor:")),
    drift("two single-tensor tests", f"{SA}:21: anchor 'if self._single_positional_tensor is not None:': expected "
          "exactly one", sa=SA_PY.replace("        return self.convert(switch_fn)\n",
                                          "        if self._single_positional_tensor is not None:\n            pass\n"
                                          "        return self.convert(switch_fn)\n")),
    drift("another fallback", f"{SA}:7: anchor 'SymbolicArguments.fill_in: return self.convert(switch_fn) last'",
          sa=SA_PY.replace("return self.convert(switch_fn)", "return self.convert(switch_fn, True)")),
    drift("another convert", f"{SA}:7: anchor 'SymbolicArguments.convert': expected exactly one",
          sa=SA_PY.replace("kwargs = tree.map_structure(conversion_fn, self.kwargs)", "kwargs = dict(self.kwargs)")),
    drift("another switch_fn", f"{SA}:25: anchor 'if __: return tensor_dict.get(id(x), None)': expected exactly one "
          "`if __: return tensor_dict.get(id(x), None)` in SymbolicArguments.fill_in.switch_fn; found 0",
          sa=SA_PY.replace("return tensor_dict.get(id(x), None)", "return tensor_dict[id(x)]")),
    drift("KerasTensor from elsewhere", f"{SA}:1: anchor 'from keras.src.backend import KerasTensor': expected exactly "
          "one `from keras.src.backend import KerasTensor` at module level; found 0",
          sa=SA_PY.replace("from keras.src.backend import KerasTensor",
                           "from keras.src.backend.common import KerasTensor")),
    drift("a builtin rebound", f"{SA}:7: anchor 'module-level tuple': expected no binding (the builtin); found line 7",
          sa=SA_PY.replace("class SymbolicArguments", "tuple = list\n\n\nclass SymbolicArguments")),
    drift("tree bound twice", f"{FN}:7: anchor 'module-level tree': expected exactly one binding, `from keras.src "
          "import tree`; found line 7, line 8",
          fn=FN_PY.replace("from keras.src import tree\n", "from keras.src import tree\nfrom keras.src import tree as tree\n")),
    drift("a builtin as a parameter", f"{FN}:20: anchor 'Functional._standardize_inputs': expected no local binding "
          "of the guard's names; found `type` bound", fn=FN_PY.replace(STANDARDIZE_DEF,
                                                                         "    def _standardize_inputs(self, inputs, type=type):\n")),
    drift("another flatten", f"{FN}:20: anchor 'flat_inputs = tree.flatten(inputs)': expected exactly one",
          fn=FN_PY.replace("flat_inputs = tree.flatten(inputs)", "flat_inputs = tree.flatten(inputs, 1)")),
    drift("no warning call", f"{FN}:11: anchor 'Functional._standardize_inputs: its ending': expected exactly one",
          fn=FN_PY.replace(WARN, "")),
    drift("two warning calls", "anchor 'self._maybe_warn_inputs_struct_mismatch(___)': expected exactly one "
          "`self._maybe_warn_inputs_struct_mismatch(___)` in Functional._standardize_inputs; found 2",
          fn=FN_PY.replace("            inputs = [inputs]\n", "            inputs = [inputs]\n" + WARN.replace("\n ", "\n     ").replace("        self", "            self", 1))),
    drift("no _standardize_inputs", "anchor 'Functional._standardize_inputs': expected exactly one def "
          "_standardize_inputs; found 0", fn=FN_PY.replace("    def _standardize_inputs", "    def _standardize_inputs_old")),
)

MUTANTS = (
    Mutant("fill_in's fast path also taken with keyword arguments (they are dropped)",
           "        and not self.kwargs\n", ""),
    Mutant("_standardize_inputs' fast path takes a list subclass the tree calls a leaf",
           "        and not isinstance(inputs, (list, dict))\n", "        and not isinstance(inputs, dict)\n"),
)


# -- behaviours: the patched fill_in answers as upstream's -----------------------------------------


def patched_fill_in_matches_upstream_on_a_stand_in() -> None:
    """Execute both versions of the synthetic class with a tiny tree and KerasTensor."""

    class KerasTensor:
        pass

    class Sub(KerasTensor):
        pass

    def map_structure(fn: Any, s: Any) -> Any:
        if isinstance(s, tuple):
            return tuple(map_structure(fn, x) for x in s)
        if isinstance(s, list):
            return [map_structure(fn, x) for x in s]
        if isinstance(s, dict):
            return {k: map_structure(fn, v) for k, v in s.items()}
        return fn(s)

    def load(text: str) -> Any:
        stand_ins = {"keras.src": types.SimpleNamespace(tree=types.SimpleNamespace(map_structure=map_structure)),
                     "keras.src.backend": types.SimpleNamespace(KerasTensor=KerasTensor)}
        return run_module(text, "symbolic_arguments", stand_ins).SymbolicArguments

    before, after = load(SA_PY), load(SA_AFTER)
    a, b, c, s = KerasTensor(), KerasTensor(), KerasTensor(), Sub()
    values = {id(a): "A", id(b): "B", id(s): "S"}
    cases = [((a, b), {}), ((a, b, c), {}), ((), {}), ((a, s), {}), ((a, [b]), {}), ((a, b), {"k": c}), ((a, 1), {})]
    fast_hits = 0
    for args, kwargs in cases:
        old, new = before(*args, **kwargs).fill_in(values), after(*args, **kwargs).fill_in(values)
        assert old == new and type(new[0]) is type(old[0]) and type(new[1]) is type(old[1])
        fast_hits += all(type(x) is KerasTensor for x in args) and not kwargs
    assert fast_hits == 3


BEHAVIOURS = (patched_fill_in_matches_upstream_on_a_stand_in,)
