"""Patch `layer-call-single-name-scope`: backport of keras-team/keras#23301 (keras-nightly),
closing keras-team/keras#23290.

`Layer.__call__` opens the layer's name scope twice per call, as two siblings: around step 4
(`self._maybe_build(call_spec)`) and around the call itself (step 7). Once the layer is built,
`_maybe_build` returns at once, so the first scope only costs a `backend.name_scope` object,
a push and a pop (about 2 us per layer call on torch). Upstream moved the scope inside
`_maybe_build`, after its `if self.built: return`. The patch gets the same effect with one
wrap in `__call__` and no change to `_maybe_build`:

    if self.built and backend.backend() != "tensorflow":  # forkgen: layer-call-single-name-scope
        self._maybe_build(call_spec)
    else:
        <upstream's `with self._open_name_scope(): self._maybe_build(call_spec)`>

Not carried, on purpose:
- TensorFlow. Inside a graph (`tf.function`, `tf.data`, a FuncGraph), entering a `tf.name_scope`
  reserves its name, so with upstream 3.15.1 the ops of a built layer's call are named
  `dense_1/...`. Nightly names them `dense/...`. That is visible in traced graphs, SavedModels,
  TensorBoard and TF error messages. On the TF backend the patch keeps the first scope, so
  graphs are unchanged; eager TF loses only this small saving.
- The method split (`_build_from_call_spec`) of the upstream PR. It is not needed for the wrap.

What is the same on every other backend (JAX's `jax.named_scope` only labels the ops made
inside it, and none are made there; torch, numpy and openvino use Keras's own stack):
variable paths and names, `current_path()` in every build and call, and the layer's
`_parent_path` value. Building calls (`built` False) take upstream's own statement.

Two differences remain, as in nightly: (1) a layer that is built before its first call
(e.g. stateless layers that set `built = True` in `__init__`) gets its `_parent_path` at the
call scope (step 7) instead of step 4. It is the same value, since nothing between the two
steps changes the scope stack; it differs only when steps 5-6 raise on that first call.
(2) A subclass overriding the private `_maybe_build` runs it outside the scope once built.
Nothing in Keras does that.

No switch: the condition depends only on `built` and the backend, both handled above.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.layer_call_single_name_scope.single_scope import (
    LAYER_PY,
    NAME,
    SingleNameScopeCommand,
    Site,
    analyze,
    anchors,
)
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


def _site(sources: Sources) -> Site:
    return sources.analysed(NAME, LAYER_PY, analyze)


class LayerCallSingleNameScope(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description="Layer.__call__ opens the layer's name scope around _maybe_build only while the layer "
        "is not built (always on TensorFlow).",
        origin="upstream, https://github.com/keras-team/keras/pull/23301",
        bug="https://github.com/keras-team/keras/issues/23290",
        forwarded="https://github.com/keras-team/keras/pull/23301",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    files = (LAYER_PY,)
    codemods = (SingleNameScopeCommand,)

    def check(self, sources: Sources) -> Check:
        site = _site(sources)
        if site.scope is None:
            return Check(Outcome.UPSTREAM, "Layer._maybe_build opens the name scope itself", anchors(site))
        if site.guard is not None:
            return Check(Outcome.APPLIED, "the build-step scope is guarded (forkgen)", anchors(site), present=True)
        return Check(Outcome.APPLIED, "guard the name scope around self._maybe_build(call_spec)", anchors(site))

    def apply(self, sources: Sources) -> None:
        module = sources.module(LAYER_PY)
        command = SingleNameScopeCommand(CodemodContext(filename=LAYER_PY), sources.ast(LAYER_PY), _site(sources))
        sources.replace(LAYER_PY, command.transform_module(module))


PATCH = LayerCallSingleNameScope()
