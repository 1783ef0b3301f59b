"""What `layer-call-single-tensor-bookkeeping` puts at the top of `Layer._set_mask_metadata`.

Parsed by the codemod, never imported. `UPSTREAM` stands for upstream's first three statements
(`flat_outputs = tree.flatten(outputs)`, `mask_already_computed = all(...)` and
`if mask_already_computed: return`), kept node for node in the `else`. `__outputs_mask` is
the read upstream's own `all(...)` makes, applied to `outputs` (`backend.get_keras_mask(outputs)`
in 3.15.1, `getattr(outputs, "_keras_mask", None)` in 3.0).
"""
# ruff: noqa


def leaf_outputs(self, inputs, outputs, previous_mask):
    if not tree.is_nested(outputs):  # forkgen: layer-call-single-tensor-bookkeeping
        if __outputs_mask is not None:
            return
        flat_outputs = [outputs]
    else:
        UPSTREAM
