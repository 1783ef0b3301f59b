"""What `layer-call-single-tensor-bookkeeping` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch. BEFORE and AFTER also run side by side in tests/unit/test_layer_call_single_tensor_bookkeeping.py."""

from codemods.engine import Case, Mutant, piece_text

MARK = "# forkgen: layer-call-single-tensor-bookkeeping"
TOP_NAME = "flat_outputs = tree.flatten(outputs); mask_already_computed = all(...); if mask_already_computed: return"

#: A Layer shaped like Keras 3.9-3.15.1's around `_set_mask_metadata`.
BEFORE = '''\
class Layer:
    def compute_mask(self, inputs, previous_mask):
        return previous_mask

    def _set_mask_metadata(self, inputs, outputs, previous_mask):
        flat_outputs = tree.flatten(outputs)

        mask_already_computed = all(
            backend.get_keras_mask(x) is not None for x in flat_outputs
        )
        if mask_already_computed:
            return

        output_masks = self.compute_mask(inputs, previous_mask)
        if output_masks is None:
            return

        flat_masks = tree.flatten(output_masks)
        for tensor, mask in zip(flat_outputs, flat_masks):
            if backend.get_keras_mask(tensor) is None and mask is not None:
                backend.set_keras_mask(tensor, mask)
'''
TOP = """\
        flat_outputs = tree.flatten(outputs)

        mask_already_computed = all(
            backend.get_keras_mask(x) is not None for x in flat_outputs
        )
        if mask_already_computed:
            return
"""
#: Upstream's three statements in the `else` of the leaf test, their blank line kept (`__outputs_mask`:
#: upstream's own read of a mask, here `backend.get_keras_mask(...)`, on `outputs`).
AFTER = BEFORE.replace(TOP, piece_text(__file__, "leaf_outputs", "        ", upstream=TOP).replace(
    "__outputs_mask", "backend.get_keras_mask(outputs)", 1))
#: Keras 3.0-3.3: the mask read with getattr.
OLD, OLD_AFTER = (text.replace("backend.get_keras_mask(x)", 'getattr(x, "_keras_mask", None)').replace(
    "backend.get_keras_mask(outputs)", 'getattr(outputs, "_keras_mask", None)') for text in (BEFORE, AFTER))
#: keras-nightly: a bare get_keras_mask.
NIGHTLY, NIGHTLY_AFTER = (text.replace("backend.get_keras_mask(", "get_keras_mask(").replace(
    "backend.set_keras_mask(", "set_keras_mask(") for text in (BEFORE, AFTER))
RESHAPED = f":5: anchor '{TOP_NAME}': expected exactly one `{TOP_NAME}` in Layer._set_mask_metadata; found 0 unguarded and 0 guarded"

CASES = (
    Case("wraps the first three statements and nothing else", BEFORE, AFTER,
         detail="test a non-nested output's mask before flattening", anchors=((TOP_NAME, 6),)),
    Case("the 3.0 getattr read", OLD, OLD_AFTER),
    Case("nightly's bare getter", NIGHTLY, NIGHTLY_AFTER),
    # Where the three statements stand, and the method's other parameters, do not matter to the fast path.
    Case("a statement before", BEFORE.replace("    def _set_mask_metadata(self, inputs, outputs, previous_mask):\n",
                                              "    def _set_mask_metadata(self, inputs, outputs, previous_mask, extra=None):\n"
                                              "        outputs = list(outputs)\n"),
         AFTER.replace("    def _set_mask_metadata(self, inputs, outputs, previous_mask):\n",
                       "    def _set_mask_metadata(self, inputs, outputs, previous_mask, extra=None):\n"
                       "        outputs = list(outputs)\n")),
    Case("flatten reshaped", BEFORE.replace("tree.flatten(outputs)", "tree.flatten(outputs, 1)"), drift=RESHAPED),
    Case("a filtered generator", BEFORE.replace("for x in flat_outputs", "for x in flat_outputs if x"), drift=RESHAPED),
    Case("any instead of all", BEFORE.replace("all(\n", "any(\n"), drift=RESHAPED),
    Case("the test inverted", BEFORE.replace("is not None for x", "is None for x"), drift=RESHAPED),
    Case("return None", BEFORE.replace("        if mask_already_computed:\n            return\n",
                                       "        if mask_already_computed:\n            return None\n"), drift=RESHAPED),
    Case("a read the fast path cannot write for outputs", BEFORE.replace("backend.get_keras_mask(x)", "x._keras_mask"),
         drift=":5: anchor 'mask_already_computed = all(backend.get_keras_mask(x) is not None for x in flat_outputs)': "
         "expected exactly one `mask_already_computed = all(backend.get_keras_mask(x) is not None for x in flat_outputs)` "
         "in Layer._set_mask_metadata; found 0"),
    Case("the method renamed", BEFORE.replace("def _set_mask_metadata(", "def _set_masks("),
         drift=":1: anchor 'Layer._set_mask_metadata': expected exactly one def _set_mask_metadata; found 0"),
    Case("an unmarked leaf test", AFTER.replace(f"  {MARK}", ""),
         drift=f":6: anchor '{TOP_NAME}': expected unguarded, or guarded by forkgen; found a guard without forkgen's marker"),
)

MUTANTS = (
    Mutant("a single output is never given its computed mask", "        flat_outputs = [outputs]\n",
           "        flat_outputs = []\n"),
    Mutant("a single output without a mask returns early", "        if __outputs_mask is not None:\n",
           "        if __outputs_mask is None:\n"),
)
