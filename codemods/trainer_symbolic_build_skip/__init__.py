"""Patch `trainer-symbolic-build-skip`: keras-nightly's early return in `Trainer._symbolic_build`,
narrowed to where it is exactly Keras 3.15.1's behaviour (ours).

What: every `train_on_batch`/`test_on_batch`/`predict_on_batch` (and `fit`/`evaluate`/`predict`
once) calls `Trainer._symbolic_build`. When the model, the compiled metrics, the compiled loss
and the optimizer are all built it builds nothing, but still ends with `self._post_build()`. On
jax/tensorflow/numpy that is `Operation._post_build` (`pass`); on torch it is
`TorchLayer._post_build`, which (outside a stateless scope) assigns a new
`torch.nn.ParameterDict({v.path: v.value for v in self.variables})` to `self._torch_params` on
every step (~90 us and garbage for the collector; -5% of a small Transformer's torch
`train_on_batch` step). keras-nightly (3.16.0.dev2026102704) returns right after the flags when
none is set (`_get_unbuilt_components`), which skips `_post_build` unconditionally.

Carried: the early return, right after the four `*_unbuilt` flags, only when none is set AND the
module-level helper `_forkgen_post_build_is_noop(self)` (inserted in trainer.py) says that
`self._post_build()` would change nothing observable:
- the `_post_build` that attribute lookup finds (no instance attribute, no custom
  `__getattribute__`; the first class of the MRO defining it) is `keras.src.ops.operation.Operation`'s
  (`pass`: nothing to skip); or
- it is `keras.src.backend.torch.layer.TorchLayer`'s and either a stateless scope is active
  (3.15.1 returns at once) or `_track_variables` is TorchLayer's too and the model already holds,
  as `_torch_params` (read from the instance's `__dict__`/`_modules`, never through `hasattr` or
  the `torch_params` property, which would build it), a `torch.nn.ParameterDict` whose
  `_parameters` and `_keys` are exactly what `_track_variables` would build now: the same keys,
  in the order a fresh `ParameterDict` built from `{v.path: v.value for v in self.variables}`
  (the same expression, so duplicate paths collapse alike) gives them (torch sorts a plain dict's
  items; found once per class by building a two-key one), each value the very object (`is`, never
  `==` on tensors) `v.value` returns.
Anything else (another `_post_build` or `_track_variables` anywhere, an unexpected type, a
variable whose `_value` was replaced, one added or removed, a value `v.value` wraps or casts, e.g.
under autocast) makes the helper answer no, and upstream's code runs unchanged: `_post_build` is
called, so overrides are still called on every step.

Why exact: a skipped `_post_build` would have replaced `_torch_params` by a `ParameterDict` with
the same keys, the same order and the same Parameter objects, so `named_parameters()`,
`parameters()`, `state_dict()`, `torch_params` and the variables see the same things. The
helper itself reads `self.variables` and `v.path`/`v.value`, which 3.15.1's `_track_variables`
reads too (when it answers no, they are read once more by upstream's code).

Left out, with why:
- nightly's unconditional return: on torch it stops re-tracking variables whose `_value` was
  replaced or that were removed (a behaviour change), and it skips `_post_build` overrides.
- nightly's `_get_unbuilt_components` refactoring: no behaviour of its own.

The remaining difference: where the helper answers yes on torch, 3.15.1 replaced the
`ParameterDict` object with an equal fresh one (a new object, with torch's global module
registration hooks called for it); the fork keeps the old object, with anything a user may have
attached to it (hooks, attributes). Nothing Keras or torch reads depends on which of the two
equal objects it is.

"Already upstream": keras-nightly's `if not (model_unbuilt or ... or optimizer_unbuilt): return`
right after the flags is recognised as UPSTREAM, although it is the unconditional version.

No switch: the helper answers from the model's state at each call.

Measured (torch 2.13, CPU, a small Transformer of 18 variables, built and compiled):
`_symbolic_build` 214 us (3.15.1's) -> 42 us (the fork's, of which ~30 us is the helper's
identity check); the numpy backend's trainer has its own `_symbolic_build`, which this patch
does not touch.

Keras 3.0.x has no `keras/src/trainers`, 3.1.0-3.4.1 compute three flags (no
`compile_loss_unbuilt`) and 3.5.0's `TorchLayer` tracks its variables as `torch_params`, not
`_torch_params`: `since = "3.6.0"`. The check also reads torch/layer.py and ops/operation.py and
reports drift unless their `_post_build`/`_track_variables` are 3.15.1's.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.patchlib import Check, Headers, Outcome, Patch, Sources
from codemods.trainer_symbolic_build_skip.early_return import (
    ABSENT,
    NAME,
    OPERATION_PY,
    OURS,
    TORCH_LAYER_PY,
    TRAINER_PY,
    EarlyReturnCommand,
    analyze,
    anchors,
    check_post_builds,
)


class TrainerSymbolicBuildSkip(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description="Trainer._symbolic_build returns before self._post_build() when everything is built "
        "and that _post_build would change nothing observable.",
        origin="keras-nightly's early return in Trainer._symbolic_build, narrowed (ours)",
        bug=None,
        forwarded="not-needed",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    # The check also reads TORCH_LAYER_PY and OPERATION_PY, which nothing rewrites.
    files = (TRAINER_PY,)
    codemods = (EarlyReturnCommand,)
    since = "3.6.0"

    def check(self, sources: Sources) -> Check:
        analysis = analyze(sources.module(TRAINER_PY), sources.ast(TRAINER_PY))
        found = anchors(analysis)
        if analysis.state in (ABSENT, OURS):
            check_post_builds(
                (sources.module(TORCH_LAYER_PY), sources.ast(TORCH_LAYER_PY)),
                (sources.module(OPERATION_PY), sources.ast(OPERATION_PY)),
            )
        if analysis.state == ABSENT:
            return Check(Outcome.APPLIED, "return early from _symbolic_build when _post_build is a no-op", found)
        if analysis.state == OURS:
            return Check(Outcome.APPLIED, "_symbolic_build returns early when _post_build is a no-op (forkgen)", found, present=True)
        return Check(Outcome.UPSTREAM, "_symbolic_build returns early when everything is built", found)

    def apply(self, sources: Sources) -> None:
        module = sources.module(TRAINER_PY)
        command = EarlyReturnCommand(CodemodContext(filename=TRAINER_PY), sources.ast(TRAINER_PY))
        sources.replace(TRAINER_PY, command.transform_module(module))


PATCH = TrainerSymbolicBuildSkip()
__all__ = ["PATCH", "EarlyReturnCommand"]
