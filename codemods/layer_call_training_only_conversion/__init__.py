"""Patch `layer-call-training-only-conversion`: backport of keras-nightly's training-only
conversion skip in `Layer.__call__`, without keras-team/keras#23296's behaviour change.

Step 1 of `Layer.__call__` maps args and kwargs through `maybe_convert` (two
`tree.map_structure`, 15-35 us on torch) whenever kwargs is non-empty, although for
`layer(x, training=True)` - every layer call of a Functional model in `fit` - there is nothing
to convert. keras-nightly gates on "kwargs other than `training` alone" instead, and copies
kwargs it does not convert (#23296, closing #23294: without conversion `kwargs` aliases the
`original_kwargs` that step 8 records in the Node, and steps 5-6 write into it).

What is carried, and what is not:

* The skip, in a narrower form than nightly's: only when the kwargs are exactly
  `training=None|True|False` (which `maybe_convert` returns unchanged: nightly also skips a
  numpy or tensor `training`, which 3.15.1 converts), the layer converts its inputs and its
  dtype policy's `convert_input` is `DTypePolicy.convert_input` (which returns a tensor of the
  input dtype unchanged). The rest of the gate (one backend or symbolic tensor of the layer's
  input dtype) is upstream's, unchanged: it is the skip 3.15.1 takes for `layer(x)`.
  Outputs, masks, call-context values and errors are the same as 3.15.1's.
* A copy of the kwargs for exactly the calls that take that skip:
  `elif kwargs and self._convert_input_args: kwargs = dict(kwargs)`. With
  `_convert_input_args` true and kwargs non-empty, the gate is false only when the skip was
  taken; 3.15.1 converted those calls, and `tree.map_structure` handed steps 5-6 a fresh dict
  (the only key being `training`, key order cannot differ), so their Node records the kwargs
  as passed, as in 3.15.1.
* NOT #23296's copy (nightly's unconditional `else:`, or the reviewed `elif kwargs:`): for
  layers with `_convert_input_args = False` (Functional and Sequential models, layers that
  set it) called symbolically with kwargs, and for calls without kwargs, 3.15.1 records in the
  Node the very dict that CallSpec pops from and steps 5-6 write into (e.g. a nested model's
  `{"training": True, "mask": None}`); the copy would change that (model.operations,
  get_config(), the recorded Nodes). A bug fix, but a behaviour change, which this fork does
  not carry: those calls stay 3.15.1's.
* None of nightly's RNN/mask changes (#23235) or #23166's context-default change.

No kill switch: the behaviour does not depend on runtime state.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.layer_call_training_only_conversion.skip_training_only_conversion import (
    LAYER_PY,
    NAME,
    Analysis,
    SkipTrainingOnlyConversionCommand,
    analyze,
)
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


def _analysis(sources: Sources) -> Analysis:
    return sources.analysed(NAME, LAYER_PY, analyze)


class LayerCallTrainingOnlyConversion(Patch):
    name = NAME
    version = "2"
    headers = Headers(
        description=(
            "Layer.__call__ skips the tree.map_structure input conversion for calls whose only kwarg is "
            "training=None|True|False, and gives those calls the fresh kwargs dict the conversion gave them in "
            "3.15.1. Not carried: #23296's copy of the kwargs of every unconverted call, which changes the Node "
            "recorded for layers that do not convert their inputs (a behaviour change)."
        ),
        origin=(
            "upstream, https://github.com/keras-team/keras/pull/23296 (keras-nightly's training-only conversion "
            "gate in Layer.__call__ only: the PR's kwargs copy, a behaviour change, is not carried)"
        ),
        bug="https://github.com/keras-team/keras/issues/23294",
        forwarded="https://github.com/keras-team/keras/pull/23296",
        applied_upstream="keras-nightly 3.16.0.dev2026102704 (with #23296's copy, not carried here)",
        last_update="2026-12-01",
    )
    files = (LAYER_PY,)
    # `original_kwargs = kwargs` (the Node's kwargs aliasing `kwargs`, which the copy keeps
    # apart for skipped calls) and the symbolic operand of the gate first appear in 3.10.0;
    # before, symbolic calls always converted and the Node was recorded from the converted kwargs.
    since = "3.10.0"
    codemods = (SkipTrainingOnlyConversionCommand,)

    def check(self, sources: Sources) -> Check:
        analysis = _analysis(sources)
        if analysis.state == "upstream":
            return Check(Outcome.UPSTREAM, analysis.detail, analysis.anchors)
        return Check(Outcome.APPLIED, analysis.detail, analysis.anchors, analysis.state == "present")

    def apply(self, sources: Sources) -> None:
        command = SkipTrainingOnlyConversionCommand(
            CodemodContext(filename=LAYER_PY), sources.ast(LAYER_PY), _analysis(sources)
        )
        sources.replace(LAYER_PY, command.transform_module(sources.module(LAYER_PY)))


PATCH = LayerCallTrainingOnlyConversion()
