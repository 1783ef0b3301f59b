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
module-level helper `_forkgen_post_build_is_noop(self)` (inserted in trainer.py; inserted.py says
how it decides) says that `self._post_build()` would change nothing observable: the
`_post_build` attribute lookup finds is `Operation`'s (`pass`), or `TorchLayer`'s in a stateless
scope, or `TorchLayer`'s with its `_track_variables` and a held `_torch_params` (read without
running code) whose keys, order and values (`is`) are exactly what `_track_variables` would
build now. Anything else (another `_post_build` or `_track_variables`, an unexpected type, a
variable whose `_value` was replaced, one added or removed, a value `v.value` wraps or casts)
answers no, and upstream's code runs unchanged (overrides are still called on every step).

Why exact: a skipped `_post_build` would have replaced `_torch_params` by a `ParameterDict` with
the same keys, the same order and the same Parameter objects, so `named_parameters()`,
`parameters()`, `state_dict()`, `torch_params` and the variables see the same things. The
helper itself reads `self.variables` and `v.path`/`v.value`, which 3.15.1's `_track_variables`
reads too (when it answers no, they are read once more by upstream's code).

Left out: nightly's unconditional return (on torch it stops re-tracking variables whose `_value`
was replaced or that were removed, a behaviour change, and it skips `_post_build` overrides) and
its `_get_unbuilt_components` refactoring (no behaviour of its own). Nightly's bare
`if not (model_unbuilt or ... or optimizer_unbuilt): return` after the flags is UPSTREAM.

The remaining difference: where the helper answers yes on torch, 3.15.1 replaced the
`ParameterDict` object with an equal fresh one (torch's global module registration hooks called
for it); the fork keeps the old object, with anything a user attached to it. Nothing Keras or
torch reads depends on which of the two equal objects it is. No switch: the helper answers from
the model's state at each call.

Measured (torch 2.13, CPU, a small Transformer of 18 variables, built and compiled):
`_symbolic_build` 214 us (3.15.1's) -> 42 us (the fork's, ~30 us of it the helper's identity
check); the numpy backend's trainer has its own `_symbolic_build`, untouched.

Keras 3.0.x has no `keras/src/trainers`, 3.1.0-3.4.1 compute three flags (no
`compile_loss_unbuilt`) and 3.5.0's `TorchLayer` tracks its variables as `torch_params`, not
`_torch_params`: `since = "3.6.0"`. The patch also relies on torch/layer.py's and
ops/operation.py's `_post_build`/`_track_variables` being 3.15.1's (drift otherwise).
"""

from __future__ import annotations

from codemods.engine import Anchor, DeclaredPatch, Details, Headers, Helper, InsertAfter

TRAINER_PY = "keras/src/trainers/trainer.py"
#: Read only: the `_post_build`s the inserted helper vouches for.
TORCH_LAYER_PY, OPERATION_PY = "keras/src/backend/torch/layer.py", "keras/src/ops/operation.py"
METHOD = "Trainer._symbolic_build"
FLAGS = ("model_unbuilt", "compile_metrics_unbuilt", "compile_loss_unbuilt", "optimizer_unbuilt")
ANCHOR = "optimizer_unbuilt = (...)"
WHERE = f"in {METHOD}: the early return goes after it"
#: keras-nightly (3.16.0.dev2026102704): the bare early return (its class is `BaseTrainer`).
NIGHTLY = f"if not ({' or '.join(FLAGS)}): return"
UPSTREAM = "_symbolic_build returns early when everything is built"
TRACK = "self._torch_params = torch.nn.ParameterDict({variable.path: variable.value for variable in self.variables})"
#: `Operation._post_build` does nothing: `pass`, Keras's docstring, or both.
DOC = '"""Can be overridden for per backend post build actions."""'
NOOP = ("def _post_build(___): pass", f"def _post_build(___): {DOC}", f"def _post_build(___):\n    {DOC}\n    pass")


def _nightly(owner: str) -> tuple[Anchor, ...]:
    return (Anchor(f"{owner}._symbolic_build", NIGHTLY, name=ANCHOR, description=WHERE),)


class TrainerSymbolicBuildSkip(DeclaredPatch):
    name = "trainer-symbolic-build-skip"
    version = "1"
    headers = Headers(
        description="Trainer._symbolic_build returns before self._post_build() when everything is built "
        "and that _post_build would change nothing observable.",
        origin="keras-nightly's early return in Trainer._symbolic_build, narrowed (ours)", bug=None,
        forwarded="not-needed", applied_upstream="keras-nightly 3.16.0.dev2026102704", last_update="2026-12-01",
    )
    files = (TRAINER_PY,)
    since = "3.6.0"
    codemod = "EarlyReturnCommand"
    edits = (
        InsertAfter(Anchor(METHOD, "optimizer_unbuilt = __", name=ANCHOR, description=WHERE), "guard"),
        Helper(Anchor("", "class Trainer: ___", reported=False), "helper", label="the helper"),
    )
    #: The four flags, each assigned once and in this order (the guard reads them all); the
    #: final `self._post_build()`, the one statement the early return skips besides the builds;
    #: the `_post_build`/`_track_variables` of torch's layer and `Operation`, as 3.15.1 has them.
    relies_on = (
        *(Anchor(METHOD, f"{flag} = __", reported=False) for flag in FLAGS),
        Anchor(METHOD, "\n".join(f"{flag} = __" for flag in FLAGS), reported=False,
               name=f"{', '.join(FLAGS)} (in this order)"),
        Anchor(METHOD, "self._post_build()", name="self._post_build()", description=f"the last statement of {METHOD}"),
        Anchor("Trainer", "def _symbolic_build(___):\n    ___\n    self._post_build()", reported=False,
               name=f"self._post_build() as the last statement of {METHOD}"),
        Anchor("TorchLayer", "def _post_build(___):\n    if in_stateless_scope(): return\n    self._track_variables()",
               path=TORCH_LAYER_PY, reported=False,
               name="TorchLayer._post_build: if in_stateless_scope(): return; self._track_variables()"),
        Anchor("TorchLayer", f"def _track_variables(___): {TRACK}", path=TORCH_LAYER_PY, reported=False,
               name="TorchLayer._track_variables: self._torch_params = torch.nn.ParameterDict({v.path: v.value "
               "for v in self.variables})"),
        Anchor("Operation", NOOP[0], alternatives=NOOP[1:], path=OPERATION_PY, reported=False,
               name="Operation._post_build: a body that does nothing (`pass`)"),
    )
    upstream_patterns = _nightly("Trainer")
    upstream_shapes = ((UPSTREAM, _nightly("BaseTrainer")),)
    details = Details("return early from _symbolic_build when _post_build is a no-op",
                      "_symbolic_build returns early when _post_build is a no-op (forkgen)", UPSTREAM)


PATCH = TrainerSymbolicBuildSkip()
EarlyReturnCommand = PATCH.command
