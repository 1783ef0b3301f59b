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

from libcst.codemod import CodemodContext

from codemods.any_symbolic_tensors_leaf_fast_path.leaf_fast_path import (
    KERAS_TENSOR_PY,
    NAME,
    AnySymbolicTensorsLeafFastPathCommand,
    Site,
    analyze,
    anchors,
)
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


def _site(sources: Sources) -> Site:
    return sources.analysed(NAME, KERAS_TENSOR_PY, analyze)


class AnySymbolicTensorsLeafFastPath(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description="any_symbolic_tensors skips tree.is_nested for None, plain scalars and backend "
        "tensors (classes keras.ops.is_tensor accepted, remembered per class).",
        origin="ours",
        bug=None,
        forwarded="not-needed",
        applied_upstream=None,
        last_update="2026-12-01",
    )
    files = (KERAS_TENSOR_PY,)
    since = "3.15.0"
    codemods = (AnySymbolicTensorsLeafFastPathCommand,)

    def check(self, sources: Sources) -> Check:
        site = _site(sources)
        if site.ours:
            return Check(Outcome.APPLIED, "the leaf fast path is in (forkgen)", anchors(site), present=True)
        if site.upstream:
            return Check(Outcome.UPSTREAM, "any_symbolic_tensors skips leaves before tree.is_nested", anchors(site))
        return Check(Outcome.APPLIED, "skip tree.is_nested for certain leaves", anchors(site))

    def apply(self, sources: Sources) -> None:
        module = sources.module(KERAS_TENSOR_PY)
        command = AnySymbolicTensorsLeafFastPathCommand(
            CodemodContext(filename=KERAS_TENSOR_PY), sources.ast(KERAS_TENSOR_PY), _site(sources)
        )
        sources.replace(KERAS_TENSOR_PY, command.transform_module(module))


PATCH = AnySymbolicTensorsLeafFastPath()
