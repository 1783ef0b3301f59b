"""Patch `layer-call-training-only-conversion`: backport of keras-nightly's training-only
conversion skip in `Layer.__call__`, without keras-team/keras#23296's behaviour change.

Step 1 of `Layer.__call__` maps args and kwargs through `maybe_convert` (two
`tree.map_structure`, 15-35 us on torch) whenever kwargs is non-empty, although for
`layer(x, training=True)` - every layer call of a Functional model in `fit` - there is nothing
to convert. keras-nightly gates on "kwargs other than `training` alone" instead, and copies
kwargs it does not convert (#23296, closing #23294: without conversion `kwargs` aliases the
`original_kwargs` that step 8 records in the Node, and steps 5-6 write into it).

* Carried: the skip, narrower than nightly's: only for kwargs exactly `training=None|True|False`
  (which `maybe_convert` returns unchanged; nightly also skips a numpy or tensor `training`,
  which 3.15.1 converts), on a layer that converts its inputs with the stock
  `DTypePolicy.convert_input`. The rest of the gate (one tensor of the layer's input dtype) is
  upstream's: the skip 3.15.1 takes for `layer(x)`. Outputs, masks, call-context values and
  errors are 3.15.1's.
* Carried: a copy of the kwargs of exactly the calls that take the skip (`elif kwargs and
  self._convert_input_args: kwargs = dict(kwargs)`: with `_convert_input_args` true and kwargs
  non-empty, the gate is false only then). 3.15.1 converted those calls and `tree.map_structure`
  handed steps 5-6 a fresh dict, so their Node records the kwargs as passed, as in 3.15.1.
* NOT #23296's copy (nightly's unconditional `else:`, or the reviewed `elif kwargs:`): for
  layers with `_convert_input_args = False` (Functional and Sequential models) called
  symbolically with kwargs, and for calls without kwargs, 3.15.1 records in the Node the very
  dict that CallSpec pops from and steps 5-6 write into (e.g. a nested model's
  `{"training": True, "mask": None}`); the copy would change model.operations, get_config()
  and the recorded Nodes: a bug fix, but a behaviour change this fork does not carry.
* None of nightly's RNN/mask changes (#23235) or #23166's context-default change.

No kill switch: the behaviour does not depend on runtime state.
"""

from __future__ import annotations

from codemods.engine import (
    LAYER_PY,
    AddElse,
    Anchor,
    Append,
    DeclaredPatch,
    Details,
    Headers,
    InsertAfter,
    ReplaceExpression,
)

CALL = "Layer.__call__"
#: The conversion gate of `Layer.__call__` (3.0.0-3.15.1 and nightly): `(<or-chain>) and ...`,
#: as upstream has it and with forkgen's `elif` copy.
GATE = "if (__ or __) and self._convert_input_args: ___"
GATES = (GATE, GATE + "\nelif __: ___")
MAYBE_CONVERT = "def maybe_convert(___): ___"
NIGHTLY = "upstream gates conversion on `kwargs_may_need_convert`"
CHANGED = " (Node recording already changed)"


def _upstream(copy: str, branch: str) -> tuple[str, tuple[Anchor, ...]]:
    """keras-nightly's shape (#23296 and the training-only gate): its flag, not our helper."""
    detail = f"{NIGHTLY} {copy}"
    return detail, (Anchor(CALL, GATE + branch, name="conversion gate", description=detail),
                    Anchor(CALL, "kwargs_may_need_convert = __", reported=False),
                    Anchor("", "def _layer_call_kwargs_may_need_convert(___): ___", 0, reported=False))


class LayerCallTrainingOnlyConversion(DeclaredPatch):
    name = "layer-call-training-only-conversion"
    version = "2"
    headers = Headers(
        description="Layer.__call__ skips the tree.map_structure input conversion for calls whose only kwarg is "
        "training=None|True|False, and gives those calls the fresh kwargs dict the conversion gave them in 3.15.1. "
        "Not carried: #23296's copy of the kwargs of every unconverted call, which changes the Node recorded for "
        "layers that do not convert their inputs (a behaviour change).",
        origin="upstream, https://github.com/keras-team/keras/pull/23296 (keras-nightly's training-only conversion "
        "gate in Layer.__call__ only: the PR's kwargs copy, a behaviour change, is not carried)",
        bug="https://github.com/keras-team/keras/issues/23294", forwarded="https://github.com/keras-team/keras/pull/23296",
        applied_upstream="keras-nightly 3.16.0.dev2026102704 (with #23296's copy, not carried here)",
        last_update="2026-12-01",
    )
    files = (LAYER_PY,)
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    # `original_kwargs = kwargs` (the Node's kwargs aliasing `kwargs`, which the copy keeps
    # apart for skipped calls) and the symbolic operand of the gate first appear in 3.10.0;
    # before, symbolic calls always converted and the Node was recorded from the converted kwargs.
    since = "3.10.0"
    codemod = "SkipTrainingOnlyConversionCommand"
    codemod_version = "1"
    #: The gate gets its copy and the flag as its first operand (for `kwargs`); the flag goes
    #: between `def maybe_convert` and the gate, the helper at the end of the module.
    edits = (
        AddElse(Anchor(CALL, GATE, name="conversion gate", reported=False), "gate_copy", label="the kwargs copy"),
        ReplaceExpression(Anchor(CALL, "kwargs", expression=True, within=GATES, name="the gate's first operand",
                                 reported=False), "gate_operand", label="the flag in the gate", marked=False),
        InsertAfter(Anchor(CALL, MAYBE_CONVERT, reported=False), "gate_flag", label="the flag", blank_lines=1),
        Append("helper", label="the helper"),
    )
    names = {"kwargs_may_need_convert": "gate_flag binds it right before the gate"}
    #: As reported: the Node's kwargs aliasing `kwargs` (why the copy), `maybe_convert` running
    #: `convert_input` (why the skip changes nothing), the gate and its two tree walks (its body
    #: or, after layer-call-flat-conversion, inside it), the `dtype_policies` the helper reads.
    relies_on = (
        Anchor(CALL, "original_kwargs = kwargs", description="in Layer.__call__"),
        Anchor(CALL, MAYBE_CONVERT, name="maybe_convert", description="calls self.dtype_policy.convert_input"),
        Anchor(f"{CALL}.maybe_convert", "self.dtype_policy.convert_input(___)", expression=True, reported=False),
        Anchor(CALL, GATES[0], alternatives=GATES[1:], name="conversion gate",
               description="`if (kwargs or ...) and self._convert_input_args:`"),
        Anchor(CALL, "args = tree.map_structure(maybe_convert, args)", reported=False),
        Anchor(CALL, "kwargs = tree.map_structure(maybe_convert, kwargs)", reported=False),
        Anchor("", "from __ import dtype_policies", alternatives=("class dtype_policies: ___",), name="dtype_policies",
               description="module-level import"),
    )
    upstream_shapes = (
        _upstream("with nightly's unconditional `else: kwargs = dict(kwargs)`" + CHANGED, "\nelse: ___"),
        _upstream("with #23296's `elif kwargs:` copy" + CHANGED, "\nelif kwargs: kwargs = dict(kwargs)"),
        _upstream("with an `elif` copy", "\nelif __: ___"),
        _upstream("without a kwargs copy", ""),
    )
    details = Details("training-only calls skip the conversion and get a copy of their kwargs", "present", NIGHTLY)


PATCH = LayerCallTrainingOnlyConversion()
SkipTrainingOnlyConversionCommand = PATCH.command
