"""Patch `layer-call-flat-conversion` (ours): `Layer.__call__` converts flat args and kwargs
without the two `tree.map_structure` walks.

Step 1 of `Layer.__call__` converts its inputs with `args = tree.map_structure(maybe_convert,
args)` and the same for kwargs whenever the call is not one tensor of the layer's input dtype
(after `layer-call-training-only-conversion`: nor that tensor with `training=` alone). Blocks
called with masks and caches as keywords (`block(x, mask=m, cache=c, cache_update_index=3)`)
pay both tree walks on every call: about 1.7% of a Transformer `train_on_batch` step and about
6% of a greedy generate loop (issues 13 and 14 of this project).

What is carried:

* For FLAT calls, every positional argument and every kwarg value a leaf (None, an exact
  bool/int/float/str, or a backend tensor / KerasTensor type that the installed tree
  implementation does not treat as a node, asked once per type with `tree.is_nested`),
  `_layer_call_convert_flat` builds what the two `map_structure` calls build: a new tuple and
  a new dict in the caller's key order, calling `maybe_convert` on the same values in the same
  order. That order depends on the tree implementation (optree visits a dict's leaves in
  sorted key order and rebuilds the dict in its original order; torch 2.13's pytree, used by
  `tree` on the torch backend, visits in insertion order; both call the function on None,
  older torch pytrees did not). The helper does not assume either: the first call
  maps a probe tuple and dict with `tree.map_structure` and records the order of the calls,
  whether None is visited and the key order of the result; an implementation that does
  anything else (e.g. rebuilds dicts sorted) disables the patch for the process. Masks
  (`get/set_keras_mask` inside `maybe_convert`), a replaced `dtype_policy.convert_input` and
  exceptions behave as in 3.15.1 since `maybe_convert` itself is unchanged and sees the same
  calls in the same order.
* Everything else keeps upstream's two lines, unchanged: nested values (lists, dicts,
  tuples, namedtuples, registered nodes, subclasses of the scalar types), layers whose
  `_convert_input_args` is False (the gate is not entered), calls the gate skips.

Not carried: nothing upstream to carry (no upstream PR; keras-nightly 3.16.0.dev2026102704
still walks the trees). The patch anchors on the gate's body, so it applies on 3.10-3.15.1's
gate, on `layer-call-training-only-conversion`'s and on keras-nightly's; it does not
`require` that patch. Known limit: a tensor type first seen as a leaf and registered as a tree
node afterwards keeps being treated as a leaf (the per-type cache).

No kill switch: the behaviour does not depend on runtime state.
"""

from __future__ import annotations

from codemods.engine import LAYER_PY, Anchor, Append, DeclaredPatch, Details, Headers, WrapBody

#: The conversion gate's header (`(<or-chain>) and self._convert_input_args`), its first operand
#: kept as `first` (`kwargs`, or `kwargs_may_need_convert` after layer-call-training-only-conversion
#: and in keras-nightly): 4 operands in 3.10-3.15.1 and nightly, fewer in the tests' modules.
HEADERS = tuple(f"if ({' or '.join(['__first', *['__'] * n])}) and self._convert_input_args:" for n in (3, 2, 1))
#: Upstream's two tree walks, the gate's body.
WALKS = "\n    args = tree.map_structure(maybe_convert, args)\n    kwargs = tree.map_structure(maybe_convert, kwargs)"
#: No else (3.10-3.15.1), layer-call-training-only-conversion's `elif`, nightly's `else:`.
BRANCHES = ("", "\nelif __: ___", "\nelse: ___")


def _gate(body: str, name: str = "conversion gate", reported: bool = True) -> Anchor:
    """The gate in each of its shapes, with `body`."""
    first, *others = (header + body + branch for branch in BRANCHES for header in HEADERS)
    return Anchor("Layer.__call__", first, alternatives=tuple(others), name=name, reported=reported,
                  description="a `{first}` gate whose body maps args and kwargs with tree.map_structure")


class LayerCallFlatConversion(DeclaredPatch):
    name = "layer-call-flat-conversion"
    version = "2"
    headers = Headers(
        description=(
            "Layer.__call__ converts flat args and kwargs (leaves only) with one maybe_convert call per value, in "
            "the order tree.map_structure uses on the installed backend, instead of walking the trees; the results "
            "are a new tuple and a new dict in the caller's key order. Nested values keep upstream's two "
            "tree.map_structure calls."
        ),
        origin="ours",
        bug=None,
        forwarded="not-needed",
        applied_upstream=None,
        last_update="2026-12-08",
    )
    files = (LAYER_PY,)
    # The gate's shape (`original_kwargs`, the symbolic operand) that the anchors were checked
    # on exists from 3.10.0; older releases had other tree implementations (dm-tree) too.
    since = "3.10.0"
    codemod = "FlatConversionCommand"
    #: The gate's two walks go under `if flat_converted is None:` (gate_body), the helpers at the
    #: end of the module (after layer-call-training-only-conversion's).
    edits = (
        WrapBody(_gate(WALKS, "conversion gate body", reported=False), "gate_body"),
        Append("helpers"),
    )
    relies_on = (_gate("\n    ___"),)
    details = Details(
        apply="flat args and kwargs are converted without tree.map_structure",
        present="present",
        upstream="",
    )


PATCH = LayerCallFlatConversion()
FlatConversionCommand = PATCH.command
