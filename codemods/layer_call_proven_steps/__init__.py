"""Patch `layer-call-proven-steps` (ours, issue 43): an eager one-tensor `layer(x)` with no keyword
skips the steps of `Layer.__call__` that the release's own code proves its class's `call()`
never reads: the name scope, the call context, the autocast scope.

Which steps a class may skip is a property of its `call()` and of all the Keras code that call
reaches, which no run-time guard can see. forkgen's analysis (codemods/engine/effects.py and
verdicts.py, `forkgen effects`) derives it at build time from the release being patched, per
class, and this patch writes what it proved into layer.py as data (`__table`): the classes, each
with its steps, the names no instance attribute may shadow, the modules whose attributes the
proof read and the stored callables (`self.activation`) a step's proof is conditional on.

The verdicts are those of the release as downloaded: the series changes speed, never behaviour
(every patch, and every combination `KERAS_FORKGEN_DISABLE` leaves on, computes what upstream
computes from the same state), so what upstream's code provably never reads, the series' code
does not read either. The table covers torch (the analysis is per backend); on the other backends
no class is proven.

At run time a step is skipped only for an instance of exactly a class of the table, on the fast
lane (`layer-call-fast-lane`: one eager backend tensor, not TensorFlow, not while torch.compile
traces), with no keyword at all (a user's `training=` writes the shared call context), while the
facts the proof assumed hold: no instance attribute shadows `call`, `forward` or a method the
proof reached; the modules the proof read hold the callables and modules their import left there
(a dict watcher, CPython 3.12 and later, sees every later write to them, a user's monkeypatch
before or after the first call, keeps what the key held and moves a generation counter, and the
class is checked again; where the interpreter has none, 3.11 included, no class is proven); no
torch module hook, global or the layer's own; no rematerialization; exactly
Keras's `DTypePolicy` (no quantization, the autocast decision the analysis assumed); no variable
waiting for its value (`uninitialized_variables` empty); and each stored callable one of the
functions its proof allows. The name scope further needs the layer's `_parent_path` set (else the
step sets it), no activity regularizer and no distribution (both run inside the scope and read the
path).

What each skip keeps:
1. Call context: the outermost call (no context yet) still clears the layer's losses, the only
   thing the step does that outlives it; nested calls write the inherited `training` back
   unchanged (no keyword, so no user value), which nothing reads.
2. Name scope: a `contextlib.nullcontext()` instead of the scope, whose push and pop nothing
   inside reads.
3. Autocast: `super().__call__(*args, **kwargs)` at once; the scope the step may enter is read
   by nothing inside (a class reading a Variable keeps the step: `Variable.value` reads it).
The dispatch (`torch.nn.Module.__call__`, `Operation.__call__`) stays, and so do tracebacks.

Applies from Keras 3.11.0, with `layer-call-fast-lane`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import libcst as cst

from codemods.engine import (
    LAYER_PY,
    Anchor,
    Check,
    DeclaredPatch,
    Details,
    Edit,
    Headers,
    Helper,
    InsertAfter,
    Outcome,
    ProvenClass,
    ReplaceExpression,
    Sources,
    Wrap,
    analysed,
    proven_cached,
)

CALL = "Layer.__call__"
#: The fast lane's input-spec check, the last statement of the piece that binds its flag (this
#: patch's own flag follows the piece, which stays one run of statements).
LANE = "if not (fast_lane and _layer_call_fast_lane_spec_passes(self, call_spec.first_arg)): ___"
CONTEXT = "call_context = self._get_call_context()\nfor context_arg in self._call_context_args: ___"
#: The `with` statements of several statements (step 7's; the build step's and the autocast scope's
#: hold one): only their headers are searched for the name scope, in either form.
SCOPE_WITH = "with __:\n    __\n    __\n    ___"
AUTOCAST = (
    "current_scope = backend.get_autocast_scope()\n"
    "new_scope = None\n"
    "if current_scope is not None: ___\nelif self.compute_dtype != self.variable_dtype: ___\n"
    "if new_scope is not None: ___\nelse: ___"
)
#: keras-nightly imports `get_autocast_scope` by name.
NIGHTLY_AUTOCAST = AUTOCAST.replace("backend.get_autocast_scope()", "get_autocast_scope()")
#: The backend the table is derived for.
BACKEND = "torch"


def table_source(table: Mapping[str, ProvenClass]) -> str:
    """The table as the Python literal the helper holds, one class a line, sorted."""
    if not table:
        return "{}"
    lines = []
    for key in sorted(table):
        c = table[key]
        conditions = tuple((attr, bits, fns) for attr, bits, fns in c.conditions)
        lines.append(f"    {key!r}: ({c.steps}, {c.methods!r}, {c.modules!r}, {conditions!r}),")
    return "{\n" + "\n".join(lines) + "\n}"


class LayerCallProvenSteps(DeclaredPatch):
    name = "layer-call-proven-steps"
    version = "1"
    headers = Headers(
        description="Layer.__call__ skips, for the classes whose call() the build-time analysis proves "
        "never reads them, the name scope, the call context and the autocast scope of an eager one-tensor call.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-07",
    )
    files = (LAYER_PY,)
    requires = ("layer-call-fast-lane",)
    since = "3.11.0"
    edits = (
        InsertAfter(Anchor(CALL, LANE, name="the fast lane's check"), "proven", label="the flag"),
        Wrap(Anchor(CALL, CONTEXT, name="call context"), "call_context", label="call context"),
        ReplaceExpression(Anchor(CALL, "self._open_name_scope()", expression=True, within=(SCOPE_WITH,),
                                 name="name scope"), "name_scope", label="name scope"),
        Wrap(Anchor(CALL, AUTOCAST, name="autocast", alternatives=(NIGHTLY_AUTOCAST,)), "autocast", label="autocast",
             rebinds=("outputs",)),
        Wrap(Anchor(CALL, "self._maybe_reset_call_context()", name="context reset"), "reset", label="context reset"),
        Helper(Anchor("", "class Layer: ___", name="class Layer"), "helper", before=True,
               label="the table and its checks"),
    )
    names = {"proven_steps": "proven binds it right after the fast lane's input-spec check"}
    details = Details(apply="the classes proven skip the name scope, call context and autocast steps",
                      present="Layer.__call__ skips the proven steps (forkgen)", upstream="")

    def table(self, sources: Sources) -> dict[str, ProvenClass]:
        """The proven classes of the tree (its files as they were before this run's patches), kept
        in the sources' store."""
        def derive() -> dict[str, ProvenClass]:
            files = {path: text for path in sources.paths() if analysed(path)
                     and (text := sources.original(path)) is not None}
            return proven_cached(files, BACKEND, sources.store) if files else {}
        return sources.memoised(f"{__name__}.table", derive)

    def check(self, sources: Sources) -> Check:
        checked = super().check(sources)
        if checked.outcome is not Outcome.APPLIED or checked.present:
            return checked
        table = self.table(sources)
        counts = {step: sum(1 for c in table.values() if c.steps & bit) for step, bit in
                  (("name scope", 1), ("call context", 2), ("autocast", 4))}
        proven = "; ".join(f"{step} {n}" for step, n in counts.items())
        return replace(checked, detail=f"{checked.detail} ({len(table)} classes: {proven})",
                       facts={**checked.facts, "proven_steps": f"{BACKEND}: {len(table)} classes; {proven}"})

    def apply(self, sources: Sources) -> None:
        self._table = self.table(sources)
        try:
            super().apply(sources)
        finally:
            del self._table

    def fill(self, edit: Edit, captures: Mapping[str, cst.CSTNode]) -> Mapping[str, cst.CSTNode]:
        if edit.piece != "helper":
            return captures
        return {**captures, "table": cst.parse_expression(table_source(getattr(self, "_table", {})))}


PATCH = LayerCallProvenSteps()
LayerCallProvenStepsCommand = PATCH.command
