"""Patch `layer-call-fast-lane` (ours, not upstream): once its CallSpec is built, an eager
`layer(x)` (one backend tensor, no mask argument, `training=` at most) skips the steps of
`Layer.__call__` that cannot change anything for it.

Upstream runs every step on every call. Measured on the fork before this patch (torch 2.13
CPU, one thread, cProfile of 3,000 `Dense(4)(x)`): the positional-argument check's
`tree.flatten` 4% of the call, `_assert_input_compatibility` 7%, mask population and the
`previous_mask` walk 3%, `_set_mask_metadata` 4%, the closing `any_symbolic_tensors` 2%.

The patch computes a flag `fast_lane` right after the CallSpec (by the CallSpec's own fields:
one positional argument, which is `call_spec.first_arg`, the only tensor argument, eager, and
no `mask` parameter; a class whose `input_spec`, `_assert_input_compatibility`,
`supports_masking`, `compute_mask` and `_set_mask_metadata` are Layer's own, checked once per
class; not TensorFlow; torch.compile not tracing, so that dynamo traces upstream's steps and
guards on none of the lane's records) and guards five steps with it; the rest of `__call__` (conversion gate,
CallSpec, build, call context and `training`, name scope, autocast, `super().__call__`,
distribution, `built`, activity regularizer, context reset) runs as it is.

Why each skipped step would change nothing:
1. Positional check (no flag): for `args == (t,)` with `t` a backend tensor or KerasTensor,
   `tree.flatten(args)` is `[t]` and `t` passes the test: no exception, no effect.
2. `_assert_input_compatibility(x)`: Layer's method does nothing when `self.input_spec` (Layer's
   property: `_input_spec`) is None. Otherwise it is skipped only when this exact `InputSpec`
   (type `InputSpec`), whose attributes (`__dict__`, `axes` copied) compare equal to those
   recorded, was recorded as passing an input with an equal shape and the identical dtype
   object: `assert_input_compatibility` reads nothing of the input but its shape (through
   `standardize_shape`) and dtype, nor of the spec but those attributes, so it passes again.
   Records are made only after upstream's call returned normally, for lane classes.
3. Mask arguments: with one tensor argument and no `mask` parameter, neither branch assigns.
4. `previous_mask`: "mask" is not in `kwargs` (checked), so upstream computes
   `tree.map_structure(get_keras_mask, x)` for a tensor leaf `x`: `get_keras_mask(x)`, checked
   None: the lane sets None.
5. Mask metadata: with `previous_mask` None and `outputs` a tensor leaf, Layer's
   `_set_mask_metadata` returns at its mask test or after Layer's `compute_mask` returns None;
   the warning branch tests `tree.flatten(None)`, which holds no mask.
6. Node: `original_args == (x,)`, eager, and `original_kwargs` values all None/True/False
   (checked) hold no KerasTensor: `any_symbolic_tensors` is False.
The lane reads `call_spec` fields, class attributes, `_input_spec` and the input's mask,
shape and dtype: no side effects. Not guarded (no code does it): methods set on one
instance, an `InputSpec` subclass behaving differently, a class patched after its first call.

Left out: `_maybe_build` (one call that returns at once), the autocast decision and the
conversion gate (caching them saves under 1 us and needs the dtype policy frozen), skipping
`torch.nn.Module.__call__` / `Operation.__call__` (hooks, quantization and remat modes).
Applies from Keras 3.11.0, the first with the `if "mask" in kwargs` form of `previous_mask`.
"""

from __future__ import annotations

from codemods.engine import LAYER_PY, Anchor, Append, DeclaredPatch, Details, Headers, Replace, Wrap

CALL = "Layer.__call__"
SPEC_CHECK = "self._assert_input_compatibility(call_spec.first_arg)"
PREVIOUS_MASK = (
    'if "mask" in kwargs and kwargs["mask"] is not None: ___\n'
    "else: previous_mask = tree.map_structure(__get_mask, call_spec.first_arg)"
)


class LayerCallFastLane(DeclaredPatch):
    name = "layer-call-fast-lane"
    version = "2"
    headers = Headers(
        description="Layer.__call__ skips the positional check, a known-passing input-spec check, mask "
        "population, the previous-mask walk, mask metadata and Node detection for an eager one-tensor call.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-08",
    )
    files = (LAYER_PY,)
    since = "3.11.0"
    edits = (
        Wrap(Anchor(CALL, "if not self._allow_non_tensor_positional_args: ___"), "positional_check",
             label="positional check"),
        Replace(Anchor(CALL, SPEC_CHECK), "input_spec_check",
             label="input-spec check"),
        Wrap(Anchor(CALL, "if len(call_spec.tensor_arguments_dict) == 1: ___\n"
                          "elif len(call_spec.tensor_arguments_dict) > 1: ___", name="mask population"),
             "mask_arguments", label="mask population"),
        Wrap(Anchor(CALL, PREVIOUS_MASK, name="previous_mask"), "previous_mask", label="previous_mask",
             rebinds=("previous_mask",)),
        Wrap(Anchor(CALL, "if self.supports_masking: ___\nelif __: ___", name="mask metadata"), "mask_metadata",
             label="mask metadata"),
        Wrap(Anchor(CALL, "if any_symbolic_tensors(original_args, original_kwargs): ___", name="Node"), "node",
             label="Node"),
        Append("helper", label="the helpers"),
    )
    names = {"fast_lane": "input_spec_check binds it right after the CallSpec"}
    relies_on = (
        Anchor(CALL, "original_args = args", description="in Layer.__call__"),
        Anchor(CALL, "original_kwargs = kwargs", description="in Layer.__call__"),
    )
    details = Details(apply="an eager one-tensor call skips six steps of Layer.__call__",
                      present="Layer.__call__ has the fast lane (forkgen)", upstream="")


PATCH = LayerCallFastLane()
LayerCallFastLaneCommand = PATCH.command
