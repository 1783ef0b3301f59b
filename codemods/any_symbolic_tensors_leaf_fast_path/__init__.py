"""Patch `any-symbolic-tensors-leaf-fast-path` (ours): `any_symbolic_tensors` skips
`tree.is_nested(x)` for values that are leaves of every tree implementation Keras uses.

`any_symbolic_tensors` (keras/src/backend/common/keras_tensor.py) is called by nearly every
`keras.ops` function to choose between the symbolic and the eager path. In 3.15.0+ its loop
tests each argument with `isinstance(x, KerasTensor)` and then `tree.is_nested(x)` (0.15 us
on torch), which for the backend tensors of an eager step is always False. The patch keeps
the KerasTensor test first and, before upstream's `if tree.is_nested(x):` (kept node for
node), `continue`s for:

* `None` and exact `bool`/`int`/`float`/`str` (a tuple of types, not a frozenset: Dynamo
  guards on a frozenset of classes failed in the CallSpec extension);
* instances of a class remembered in a module-level dict keyed by `type(x)`: the first
  instance of each class takes upstream's path, then, if the loop goes on, the class is
  recorded as True when that instance is not nested and `keras.ops.is_tensor` accepts it (a
  backend tensor), else False (the full test runs for it from then on). As argued for
  `_CALLSPEC_FAST_TENSOR_TYPES` in the CallSpec extension, every backend's `is_tensor` is an
  `isinstance` test, and every tree implementation (optree, dm-tree, torch's pytree) decides
  leaf-ness from the class (its registry, sequence/mapping/namedtuple tests), and no backend
  tensor class is a registered node: a class accepted once is a leaf for every instance.
  `keras.ops.is_tensor` is read from `sys.modules` (the same public function in 3.15's
  `backend.core` and nightly's `backend.ops.core` layout; `backend.is_tensor` is gone in
  nightly): nothing is imported, and until `keras.src.ops.core` is loaded nothing is learnt.
  Nothing is learnt either while torch.compile traces (`torch.compiler.is_compiling()`, read
  through `sys.modules` as memoised-result-type does): a global dict changed during tracing
  made Dynamo split a small train step into 6 frames instead of 3.15.1's 2; with the check,
  and with the table empty or learnt beforehand, the count is 3.15.1's.

Every other value takes upstream's statement unchanged, in the same order, with the same
exceptions, so the return value is 3.15.1's for every input (nested structures, KerasTensors
inside dicts, namedtuples, registered nodes, objects whose `is_nested` raises). The only
differences are calls not made: `tree.is_nested` is not called on skipped values, and on the
first value of each new class that upstream's path does not end, `is_nested` and `is_tensor`
are called once more to learn the class.

Not carried: nothing upstream (keras-nightly 3.16.0.dev2026102704 has the same loop).
`since = "3.15.0"`: earlier releases flatten `(args, kwargs)` with `tree.flatten` and have no
per-argument `is_nested` test. "Already upstream" is an unmarked `if ...: continue` before the
`is_nested` test. No switch: the fast path keeps only the per-class table, whose entries hold
for every instance.
"""

from __future__ import annotations

import libcst as cst

from codemods.engine import (
    Analysis,
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    Replace,
    Sources,
    marker,
)

KERAS_TENSOR_PY = "keras/src/backend/common/keras_tensor.py"
FUNCTION = "any_symbolic_tensors"
NESTED = "if tree.is_nested(x):"
KERAS_TENSOR_TEST = "if isinstance(x, KerasTensor): return True"
HELPERS = ("_forkgen_any_symbolic_plain_types", "_forkgen_any_symbolic_leaf_types", "_forkgen_any_symbolic_learn")
#: The inner loop over one of `args` / `kwargs.values()`; any `is_nested` test of the function.
LOOP = Anchor(FUNCTION, "for x in __: ___")
ANY_NESTED = Anchor(FUNCTION, "if __.is_nested(___): ___", alternatives=("if __.is_nested(___): ___\nelse: ___",))


class AnySymbolicTensorsLeafFastPath(DeclaredPatch):
    name = "any-symbolic-tensors-leaf-fast-path"
    version = "1"
    headers = Headers(
        description="any_symbolic_tensors skips tree.is_nested for None, plain scalars and backend "
        "tensors (classes keras.ops.is_tensor accepted, remembered per class).",
        origin="ours", bug=None, forwarded="not-needed", applied_upstream=None, last_update="2026-12-01",
    )
    files = (KERAS_TENSOR_PY,)
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    since = "3.15.0"
    #: Upstream's `if tree.is_nested(x):` goes where the loop body of inserted.py says `UPSTREAM`;
    #: the tables and the learning helper go at module level right before the function.
    edits = (
        Replace(Anchor(FUNCTION, f"{NESTED} ___", name=NESTED,
                       description=f"in {FUNCTION}'s loop, after the KerasTensor test"), "loop_body", enclosed=True),
        Helper(Anchor("", f"def {FUNCTION}(___): ___", reported=False), "module_level", before=True),
    )
    #: Upstream's leaf shortcut: an unmarked `if ...: continue` before the nested test.
    upstream_patterns = (
        Anchor(FUNCTION, f"{NESTED} ___", name=NESTED, description=f"{FUNCTION} skips leaves before it (upstream)"),
        Anchor(FUNCTION, "if __: continue", reported=False),
    )
    details = Details("skip tree.is_nested for certain leaves", "the leaf fast path is in (forkgen)",
                      "any_symbolic_tensors skips leaves before tree.is_nested")

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        self.explain(sources, None, todo=not analysis.check.present)

    def explain(self, sources: Sources, drift: AnchorDrift | None, todo: bool = True) -> None:
        """The loop's shape (one `for x`, the KerasTensor test first), worded as before the engine."""
        # `for x in <a name>:`; drift when the function is not there exactly once.
        loops = [(n, at) for n, at in self.matches(sources, LOOP) if isinstance(getattr(n, "iter", None), cst.Name)]
        if not sources.exists(KERAS_TENSOR_PY):
            return  # the engine's "no such file"
        at = self.matches(sources, self.edits[1].anchor)[0][1]
        line = min([n for _, n in self.matches(sources, ANY_NESTED)] or [at])

        def fail(anchor: str, expected: str, found: str, where: int = line) -> None:
            raise AnchorDrift(KERAS_TENSOR_PY, where, anchor, expected, found)

        if len(loops) != 1:
            fail("for x in items:", f"exactly one `for x in ...` loop in {FUNCTION}", f"{len(loops)}", at)
        body = cst.ensure_type(cst.ensure_type(loops[0][0], cst.For).body, cst.IndentedBlock).body
        nested = [s for s in body if self.edits[0].anchor.compiled.match(s) is not None]
        if len(nested) != 1:
            fail(NESTED, f"exactly one `{NESTED}` in the loop of {FUNCTION}", f"{len(nested)}")
        if Anchor(FUNCTION, KERAS_TENSOR_TEST).compiled.match(body[0]) is None:
            fail(KERAS_TENSOR_TEST, "the first statement of the loop", "another statement")
        defined = {n: sum(len(self.matches(sources, Anchor("", p))) for p in (f"{n} = __", f"def {n}(___): ___"))
                   for n in HELPERS}
        if marker(self.name) in sources.module(KERAS_TENSOR_PY).code_for_node(loops[0][0]):
            if list(defined.values()) != [1, 1, 1]:
                fail(" / ".join(HELPERS), "forkgen's 3 module-level names, once each",
                     ", ".join(f"{k}: {v}" for k, v in defined.items()))
        elif any(defined.values()):
            fail(", ".join(k for k, v in defined.items() if v), "no such module-level name before the patch", "defined")
        elif todo and list(body) != [body[0], nested[0]]:
            fail(NESTED, "the loop's second and last statement", f"{len(body)} statements")

PATCH = AnySymbolicTensorsLeafFastPath()
AnySymbolicTensorsLeafFastPathCommand = PATCH.command
