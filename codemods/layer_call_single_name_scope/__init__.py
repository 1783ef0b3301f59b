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

from codemods.engine import (
    LAYER_PY,
    Analysis,
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    Sources,
    Wrap,
)

ANCHOR = "with self._open_name_scope(): self._maybe_build(call_spec)"
#: Keras 3.0-3.1 open the scope themselves (`_open_name_scope` came in 3.2).
OLD_ANCHOR = "with backend.name_scope(self.name, caller=self): self._maybe_build(call_spec)"
CALL = Anchor("Layer.__call__", "self._maybe_build(call_spec)", description="in Layer.__call__, scope inside _maybe_build")
#: keras-nightly (#23301): `_maybe_build` opens the scope itself, after its early return.
INNER_SCOPE = Anchor("Layer._maybe_build", "with self._open_name_scope(): ___",
                     alternatives=("with backend.name_scope(self.name, caller=self): ___",), reported=False)
#: `_maybe_build` starts by returning when built: what makes the scope around it empty then.
EARLY_RETURN = "if self.built: return"


class LayerCallSingleNameScope(DeclaredPatch):
    name = "layer-call-single-name-scope"
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
    codemod = "SingleNameScopeCommand"
    #: Step 4 of `Layer.__call__` goes in the `else` of the guard of inserted.py.
    edits = (
        Wrap(Anchor("Layer.__call__", ANCHOR, alternatives=(OLD_ANCHOR,), description="step 4 of Layer.__call__"),
             "build_step", form_line=True),
    )
    #: Nightly's shape: the bare call in `__call__`, the scope in `_maybe_build`. An unmarked
    #: guard is no upstream shape: drift.
    upstream_patterns = (CALL, INNER_SCOPE, Anchor("Layer.__call__", ANCHOR, 0, alternatives=(OLD_ANCHOR,)))
    names = {"backend": "layer.py's `from keras.src import backend` (not checked before the engine)"}
    details = Details(
        apply="guard the name scope around self._maybe_build(call_spec)",
        present="the build-step scope is guarded (forkgen)",
        upstream="Layer._maybe_build opens the name scope itself",
    )

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        if not self.starts_with(sources, "Layer._maybe_build", EARLY_RETURN):
            raise AnchorDrift(LAYER_PY, analysis.files[0].occurrences[0].line, EARLY_RETURN, "as the first statement of Layer._maybe_build",
                              "another statement")

    def explain(self, sources: Sources, drift: AnchorDrift) -> None:
        """Step 4's scope gone: say that nightly's shape (the scope in _maybe_build) was looked for too."""
        calls, nested = self.matches(sources, CALL), self.matches(sources, INNER_SCOPE)
        if not self.matches(sources, self.edits[0].anchor):
            raise AnchorDrift(
                LAYER_PY, calls[0][1] if calls else drift.line, ANCHOR,
                f"`{ANCHOR}` in Layer.__call__, or nightly's scope inside _maybe_build",
                f"{len(calls)} `self._maybe_build(call_spec)` and {len(nested)} scope(s) in _maybe_build",
            )


PATCH = LayerCallSingleNameScope()
SingleNameScopeCommand = PATCH.command
