"""Patch `layer-call-single-tensor-bookkeeping`: ours, after keras-team/keras#23300 (open
upstream, not in keras-nightly): the `_set_mask_metadata` part of its single-tensor fast paths.

`Layer.__call__` runs `self._set_mask_metadata(call_spec.first_arg, outputs, previous_mask)`
for every call of a layer that supports masking (`Dense`, most built-in layers). Its first
three statements flatten `outputs`, build a generator over the flat list and call `all()` on it,
to learn whether every output carries a mask already; nearly always the output is one tensor
without a mask. The patch puts in front of them, for a non-nested `outputs`:

    if not tree.is_nested(outputs):  # forkgen: layer-call-single-tensor-bookkeeping
        if backend.get_keras_mask(outputs) is not None:
            return
        flat_outputs = [outputs]
    else:
        <upstream's three statements, node for node>

and keeps the rest of the method (`compute_mask`, setting the masks) as it is.

Why it is the same for every input: when `tree.is_nested(outputs)` is False, `tree.flatten`
returns `[outputs]` (3.15.1's `tree.flatten` starts with that very test and returns that list;
the optree, dm-tree and torch tree implementations that earlier releases call directly flatten a
non-nested value to itself alone), and `all()` over one element is that element's test. So
the same early return happens for the same outputs, and when it does not, `flat_outputs` holds
the same one object: `compute_mask` is called with the same arguments, once, and masks are set
as before. Nested outputs, `None` outputs, outputs that carry a mask already, and every mask
returned by `compute_mask` take upstream's statements or their consequences unchanged.
The only extra work is one `tree.is_nested` call for nested outputs (upstream's flatten makes
that call too). Measured on torch 2.13 (2-core CPU under load, best of 40 interleaved runs of
5,000 calls, the method against 3.15.1's logic in the same process): one output tensor
1.24 -> 0.85 us; a list of two 9.8 -> 10.2 us. Within a whole `Dense(4)(x)` call (~110 us on
this loaded machine) the saving is below the noise.

Not carried (all of #23300 beyond this could not be read here, and the rest touches code whose
behaviour is harder to prove equal): the fast paths in `__call__`'s mask lookup of the inputs
and in `Node`/`symbolic_arguments` detection; they stay upstream's. Nor keras-nightly's changed
mask propagation (a masked Embedding -> LSTM -> GlobalAveragePooling1D model computes other
values than 3.15.1): nothing about which masks are computed or set changes here.

The three statements have the same shape in 3.0.0-3.15.1 and nightly except for how a mask is
read (`getattr(x, "_keras_mask", None)` in 3.0-3.3, `backend.get_keras_mask(x)` later, a bare
`get_keras_mask(x)` in nightly); the fast path reads `outputs`' mask with that same expression.
(3.0's `tree` is dm-tree itself, whose `flatten` of a non-nested value is `[value]` too.) No switch:
the fast path depends only on its argument.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from codemods.engine import LAYER_PY, Anchor, DeclaredPatch, Details, Edit, Headers, Wrap

FUNCTION = "Layer._set_mask_metadata"
#: Upstream's first three statements, a run kept node for node in the `else` of inserted.py.
#: `__read` is how the release reads `x`'s mask (`mask_already_computed = ...`, its words below).
TOP = """
flat_outputs = tree.flatten(outputs)
mask_already_computed = all(__read is not None for x in flat_outputs)
if mask_already_computed:
    return
"""
#: The reads of a mask: `backend.get_keras_mask(x)` (3.4-3.15.1), a bare `get_keras_mask(x)`
#: (nightly), `getattr(x, "_keras_mask", None)` (3.0-3.3): the fast path reads `outputs`' alike.
READS = ("backend.get_keras_mask(x)", "get_keras_mask(x)", "getattr(x, __, None)")
READ = Anchor(FUNCTION, f"mask_already_computed = all({READS[0]} is not None for x in flat_outputs)", reported=False,
              alternatives=tuple(f"mask_already_computed = all({r} is not None for x in flat_outputs)" for r in READS[1:]))


class LayerCallSingleTensorBookkeeping(DeclaredPatch):
    name = "layer-call-single-tensor-bookkeeping"
    version = "1"
    headers = Headers(
        description="Layer._set_mask_metadata: a single (non-nested) output is checked for a mask "
        "directly, without tree.flatten and an all(...) generator (ours, after keras-team/keras#23300, "
        "whose text could not be read here: its _set_mask_metadata fast path only).",
        origin="ours",
        bug=None,
        forwarded="https://github.com/keras-team/keras/pull/23300",
        applied_upstream=None,
        last_update="2026-12-01",
    )
    files = (LAYER_PY,)
    codemod = "MaskFastPathCommand"
    #: `flat_outputs`: upstream's own variable, set to what its tree.flatten(outputs) would return.
    edits = (Wrap(Anchor(FUNCTION, TOP, description=f"top of {FUNCTION}", name="flat_outputs = tree.flatten(outputs); "
                         "mask_already_computed = all(...); if mask_already_computed: return"), "leaf_outputs",
                  rebinds=("flat_outputs",)),)
    #: The read is one of those the fast path knows how to write for `outputs` (`fill`).
    relies_on = (READ,)
    names = {"tree": "layer.py's `from keras.src import tree` (not checked before the engine)"}
    details = Details(apply="test a non-nested output's mask before flattening",
                      present="the leaf fast path is in (forkgen)", upstream="")

    def fill(self, edit: Edit, captures: Mapping[str, cst.CSTNode]) -> Mapping[str, cst.CSTNode]:
        """`__outputs_mask`: upstream's read of `x`'s mask, made to read `outputs`' (its first argument)."""
        read = cst.ensure_type(captures["read"], cst.Call)
        return {"outputs_mask": read.with_changes(args=[read.args[0].with_changes(value=cst.Name("outputs")), *read.args[1:]])}


PATCH = LayerCallSingleTensorBookkeeping()
MaskFastPathCommand = PATCH.command
