"""Patch `layer-call-training-only-conversion`: backport of keras-nightly's training-only
conversion skip in `Layer.__call__` with keras-team/keras#23296 (the kwargs copy).

Step 1 of `Layer.__call__` maps args and kwargs through `maybe_convert` (two
`tree.map_structure`, 15-35 us on torch) whenever kwargs is non-empty, although for
`layer(x, training=True)` - every layer call of a Functional model in `fit` - there is nothing
to convert. keras-nightly gates on "kwargs other than `training` alone" instead and copies
kwargs otherwise; #23296 (closes #23294) is the copy: without conversion `kwargs` aliases the
`original_kwargs` that step 8 records in the Node, and steps 3-6 write into it.

What is carried, and what is not:

* The skip, in a narrower form than nightly's: only when the kwargs are exactly
  `training=None|True|False` (which `maybe_convert` returns unchanged: nightly also skips a
  numpy or tensor `training`, which 3.15.1 converts), the layer converts its inputs and its
  dtype policy's `convert_input` is `DTypePolicy.convert_input` (which returns a tensor of the
  input dtype unchanged). The rest of the gate (one backend or symbolic tensor of the layer's
  input dtype) is upstream's, unchanged: it is the skip 3.15.1 takes for `layer(x)`.
  Outputs, masks, call-context values and errors are the same as 3.15.1's.
* The copy in the form `elif kwargs:` (spec section 9), NOT nightly's unconditional `else:`,
  which also changes what calls without kwargs record (model.operations, get_config()).
  Calls that 3.15.1 converted get a fresh dict either way; the copy only matters for layers
  with `_convert_input_args = False` (Functional, Sequential's model, preprocessing layers)
  called symbolically with kwargs: their Node now records the kwargs as passed (e.g.
  `training=True`), no longer what `CallSpec` popped or steps 5-6 injected. That is the
  #23294 fix, a deliberate change, and the only one.
* None of nightly's RNN/mask changes (#23235) or #23166's context-default change.

No kill switch: the behaviour does not depend on runtime state.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.layer_call_training_only_conversion.skip_training_only_conversion import (
    LAYER_PY,
    NAME,
    SkipTrainingOnlyConversionCommand,
    analyze,
)
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


class LayerCallTrainingOnlyConversion(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description=(
            "Layer.__call__ skips the tree.map_structure input conversion for calls whose only kwarg is "
            "training=None|True|False, and copies non-empty kwargs it does not convert, so that the Node of "
            "a symbolic call records them as passed (keras-team/keras#23296, `elif kwargs:` form)."
        ),
        origin="upstream, https://github.com/keras-team/keras/pull/23296",
        bug="https://github.com/keras-team/keras/issues/23294",
        forwarded="https://github.com/keras-team/keras/pull/23296",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    files = (LAYER_PY,)
    # `original_kwargs = kwargs` (the Node's kwargs aliasing `kwargs`, which the copy is for)
    # and the symbolic operand of the gate first appear in 3.10.0; before, symbolic calls
    # always converted and the Node was recorded from the converted kwargs.
    since = "3.10.0"
    codemods = (SkipTrainingOnlyConversionCommand,)

    def check(self, sources: Sources) -> Check:
        analysis = analyze(sources.module(LAYER_PY), sources.ast(LAYER_PY))
        if analysis.state == "upstream":
            return Check(Outcome.UPSTREAM, analysis.detail, analysis.anchors)
        return Check(Outcome.APPLIED, analysis.detail, analysis.anchors, analysis.state == "present")

    def apply(self, sources: Sources) -> None:
        command = SkipTrainingOnlyConversionCommand(CodemodContext(filename=LAYER_PY), sources.ast(LAYER_PY))
        sources.replace(LAYER_PY, command.transform_module(sources.module(LAYER_PY)))


PATCH = LayerCallTrainingOnlyConversion()
