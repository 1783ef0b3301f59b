"""Patch `functional-graph-fast-paths` (ours, not upstream): two `tree` walks of a Functional
model's call whose result is known are skipped. Running a Functional (or Sequential) model goes
through `Functional._standardize_inputs` and, per node of the graph, `SymbolicArguments.fill_in`.

(a) keras/src/ops/symbolic_arguments.py, `SymbolicArguments.fill_in`: 3.15.1 has a fast path
for one positional KerasTensor only; a node with several (`x + y`, `MultiHeadAttention()(x, x)`)
pays `self.convert(switch_fn)`, two `tree.map_structure` walks. Inserted right after upstream's
fast path: when `type(self.args) is tuple`, `type(self.kwargs) is dict`, `not self.kwargs` and
every item of `self.args` is exactly a `KerasTensor`, return
`(tuple(tensor_dict.get(id(x), None) for x in self.args), {})`. Exact: on every backend's tree
(torchtree, optree, dmtree) a KerasTensor is a leaf, `map_structure` over a plain tuple of leaves
returns a new plain tuple of `switch_fn`'s values, and over `{}` a new `{}`; `switch_fn` returns
`tensor_dict.get(id(x), None)` for a KerasTensor and calls nothing else.

(b) keras/src/models/functional.py, `Functional._standardize_inputs`: inserted at the top: when
`self._inputs_struct` is exactly a `backend.KerasTensor`, `_maybe_warn_inputs_struct_mismatch`
is Functional's own (not overridden by the class), and `inputs` is neither a list nor a dict
(subclasses included) nor `tree.is_nested`, return
`self._adjust_input_rank(self._convert_inputs_to_tensors([inputs]))`. Exact: for such inputs
3.15.1 takes none of its branches, its `_maybe_warn_inputs_struct_mismatch` compares two leaves
(`lists_to_tuples` changes no leaf that is not a list; that is why list subclasses, which the
torch and optree trees take for leaves but `lists_to_tuples` turns into tuples and then warns
about, keep upstream's path), which neither warns nor raises, and `tree.flatten(inputs)` is
`[inputs]` (None included). The same two methods are called, so their overrides run. Not
covered: a `_maybe_warn_inputs_struct_mismatch` replaced on the instance itself.

Measured on the built fork (medians, 2-core CPU, torch 2.13): `fill_in` of a two-tensor node
8.95 -> 0.68 us, `_standardize_inputs` of one tensor 9.24 -> 3.84 us; bench `mlp` -5.2%,
`transformer` (inference) -5.1%.

Not carried: nothing upstream; list/dict inputs, several inputs and nested values keep upstream's
code. Both pieces or neither (every release it targets has both anchors). `since = "3.6.0"`
(through keras-nightly 3.16.0.dev2026102704, whose new dict branch the guard leaves to upstream):
3.4.0-3.5.0 have no `_maybe_warn_inputs_struct_mismatch`, and 3.0.0-3.3.3's `switch_fn` reads
`tensor_dict` another way. No switch: the fast paths keep no state.
"""

from __future__ import annotations

import libcst as cst

from codemods import engine
from codemods.engine import (
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    InsertAfter,
    Prepend,
    Sources,
    lines,
    names_of,
)

SYMBOLIC_ARGUMENTS_PY, FUNCTIONAL_PY = "keras/src/ops/symbolic_arguments.py", "keras/src/models/functional.py"
FILL_IN, STANDARDIZE = "SymbolicArguments.fill_in", "Functional._standardize_inputs"
SINGLE = "if self._single_positional_tensor is not None:"
#: Per fast path, its file and the names its guard reads that must be upstream's: the one
#: module-level statement binding each (None: a builtin, bound nowhere), none bound in the method.
BUILTINS = dict.fromkeys(("type", "tuple", "dict", "list", "all", "id", "isinstance"))
NAMES: dict[str, tuple[str, dict[str, str | None]]] = {
    FILL_IN: (SYMBOLIC_ARGUMENTS_PY, {"KerasTensor": "from keras.src.backend import KerasTensor", **BUILTINS}),
    STANDARDIZE: (FUNCTIONAL_PY, {"backend": "from keras.src import backend", "tree": "from keras.src import tree",
                                  "Functional": "class Functional: ___", **BUILTINS}),
}


def _relied(scope: str, pattern: str, path: str = SYMBOLIC_ARGUMENTS_PY, name: str | None = None) -> Anchor:
    return Anchor(scope, pattern, path=path, reported=False, name=name)  # checked, not reported


class FunctionalGraphFastPaths(DeclaredPatch):
    name = "functional-graph-fast-paths"
    version = "1"
    headers = Headers(
        description="SymbolicArguments.fill_in fills a tuple of positional KerasTensors without tree walks; "
        "Functional._standardize_inputs skips its tree walks for one KerasTensor input and a leaf value.",
        origin="ours", bug=None, forwarded="not-needed", applied_upstream=None, last_update="2026-12-01",
    )
    files = (SYMBOLIC_ARGUMENTS_PY, FUNCTIONAL_PY)
    since = "3.6.0"
    edits = (
        InsertAfter(Anchor(FILL_IN, f"{SINGLE} ___", name=SINGLE, path=SYMBOLIC_ARGUMENTS_PY,
                           description="positional KerasTensors only: filled in without tree walks"),
                    "fill_in_tensors", label=FILL_IN),
        Prepend(STANDARDIZE, "standardize_leaf", label=STANDARDIZE, path=FUNCTIONAL_PY, reported=False),
    )
    #: What the equivalence rests on: `convert`, `switch_fn`, `fill_in`'s fallback; the end of
    #: `_standardize_inputs` (one warning call, then flatten / convert / rank), and the names.
    relies_on = (
        Anchor(STANDARDIZE, "flat_inputs = tree.flatten(inputs)", path=FUNCTIONAL_PY, file_shown=False,
               description="one KerasTensor input, a leaf: no tree walks"),
        _relied("SymbolicArguments", "def convert(self, conversion_fn):\n    args = tree.map_structure(conversion_fn, "
                "self.args)\n    kwargs = tree.map_structure(conversion_fn, self.kwargs)\n    return args, kwargs",
                name="SymbolicArguments.convert"),
        _relied("SymbolicArguments", "def fill_in(___):\n    ___\n    return self.convert(switch_fn)",
                name=f"{FILL_IN}: return self.convert(switch_fn) last"),
        _relied(f"{FILL_IN}.switch_fn", "if __: return tensor_dict.get(id(x), None)"),
        _relied("Functional", "def _standardize_inputs(___):\n    ___\n    self._maybe_warn_inputs_struct_mismatch(___)\n"
                "    flat_inputs = tree.flatten(inputs)\n    flat_inputs = self._convert_inputs_to_tensors(flat_inputs)\n"
                "    return self._adjust_input_rank(flat_inputs)", FUNCTIONAL_PY, name=f"{STANDARDIZE}: its ending"),
        _relied(STANDARDIZE, "self._maybe_warn_inputs_struct_mismatch(___)", FUNCTIONAL_PY),
        _relied("Functional", "def _maybe_warn_inputs_struct_mismatch(___): ___", FUNCTIONAL_PY),
        *(_relied("", how, path) for path, names in NAMES.values() for how in names.values() if how),
    )
    details = Details("fill_in and _standardize_inputs: fast paths for the common cases",
                      "the Functional graph fast paths are in (forkgen)", "(no upstream shape is known)")

    def verify(self, sources: Sources, analysis: engine.Analysis) -> None:
        """Semantic (the engine only asks that a name be bound): each name a guard reads is the
        module's import or class relied on, bound once, or the builtin; none is bound in the method."""
        for f, o in ((file, o) for file in analysis.files for o in file.occurrences):
            names = NAMES[o.edit.anchor.scope][1]
            for name, how in names.items():
                found = [s for s in f.module.body if name in names_of([s], into_defs=False)[1]]
                if len(found) != (1 if how else 0):
                    at = lines(f.module, found)
                    raise AnchorDrift(f.path, at[id(found[0])] if found else 1, f"module-level {name}",
                                      f"exactly one binding, `{how}`" if how else "no binding (the builtin)",
                                      ", ".join(f"line {at[id(s)]}" for s in found) or "none")
            function = cst.ensure_type(o.scope, cst.FunctionDef)
            if local := sorted(set(names) & names_of([function.params, function.body])[1]):
                raise AnchorDrift(f.path, lines(f.module, [function])[id(function)], o.edit.anchor.scope,
                                  "no local binding of the guard's names", f"`{local[0]}` bound")


PATCH = FunctionalGraphFastPaths()
FunctionalGraphFastPathsCommand = PATCH.command
