"""Patch `dense-kernel-fast-path` (ours, not upstream): the `kernel` property of `Dense` and of
`EinsumDense` returns `_kernel` at once for a built layer that is not quantized and has no LoRA.

`Dense.call` reads `self.kernel` on every call, and so does `EinsumDense.call` (the four
projections of every `MultiHeadAttention`). Since 3.12.0 the property first imports `gptq_core`,
reads `quantization_mode`, compares it three times and looks up its calibration flags with
`bool(getattr(self, flag, False))`: on torch, a flag the layer does not have goes through
`torch.nn.Module.__getattr__`, which raises an `AttributeError` with a formatted message, once
per flag. Measured on the fork (one process, interleaved, CPU time): the property as a plain
`self._kernel` read would make `Dense(4)(x)` 0.835 of its time and the MLP's `model(x)` 0.903.

The fast path is the property's first statement: `if self.built and self.quantization_mode is
None and _kernel_flags_unset(self) and not self.lora_enabled: return getattr(self, "_kernel",
None)`, its reads in the order of upstream's (a read that raises raises as there). Why that is upstream's value, with nothing else of upstream's body observable:
- upstream's body (relied on, in its 3.12.0-3.13.2 and 3.14.0-3.15.1 forms) with the layer
  built and `mode` None takes no quantized branch (`is_gptq`, `is_awq`, `is_int4` are False:
  `None == "gptq"` is False), so `kernel = getattr(self, "_kernel", None)`, and with
  `lora_enabled` false it returns that;
- the statements the fast path skips: the import of `keras.src.quantizers.gptq_core` (already
  imported with Keras: binds a local only `is_gptq` uses), the compares, `gptq_bits` (None when
  not `is_gptq`) and `bool(getattr(self, flag, False))` of each flag, whose value only a
  quantized branch reads. Those look-ups run no code when `_kernel_flags_unset` holds: per
  class, attribute look-up is Python's own (no `__getattribute__` of its own, no `__getattr__`
  but torch's `Module.__getattr__`, which only reads the parameters, buffers and sub-modules
  dicts), no class attribute named like a flag (or `built`, `lora_enabled`: instance attributes,
  so reading them twice when the fast path declines is reading them twice) and
  `quantization_mode` is `Layer`'s property (reads only); per instance, a flag is a bool
  (Keras's quantizers set `True`/`False`) or absent everywhere `__getattr__` looks, so `getattr`
  gives a bool or False and `bool()` of it runs no code;
- the fast path reads `built`, `quantization_mode` and `lora_enabled` as upstream does, and
  declines (upstream's body then runs whole) otherwise: an unbuilt layer gets upstream's error.
Not guarded (no code does it): a class changed after its first `kernel` read (a flag, `built`
or `lora_enabled` made a class attribute, a `__getattr__` or `__getattribute__` set on it, torch's
`Module.__getattr__` patched): the per-class answer is cached, as patch 28's is. An earlier
version (branch `i26-kern`) walked the classes on every read and saved too little to carry.
No switch: the per-class table holds only whether a class's look-ups are plain.

Left out: keras-nightly's property reads no flag (`self._quantized_weight()`): *upstream*.
3.0.0-3.11.3's property reads no flag either: not applicable before 3.12.0.
"""

from __future__ import annotations

from codemods.engine import Anchor, Append, DeclaredPatch, Details, Headers, Prepend

DENSE_PY = "keras/src/layers/core/dense.py"
EINSUM_PY = "keras/src/layers/core/einsum_dense.py"
CLASSES = (("Dense", DENSE_PY), ("EinsumDense", EINSUM_PY))
#: Upstream's property, 3.14.0-3.15.1 (GPTQ, AWQ and int4), after the fast path once applied.
BODY = """@property
def kernel(self):{}
    from keras.src.quantizers import gptq_core
    if not self.built: ___
    mode = self.quantization_mode
    is_gptq = mode == "gptq"
    is_awq = mode == "awq"
    is_int4 = mode == "int4"
    gptq_calibrated = bool(getattr(self, "is_gptq_calibrated", False))
    awq_calibrated = bool(getattr(self, "is_awq_calibrated", False))
    gptq_bits = gptq_core.get_weight_bits_for_layer(self, None) if is_gptq else None
    if is_gptq and gptq_calibrated and gptq_bits != 4: ___
    else:
        kernel = getattr(self, "_kernel", None)
        if is_int4: ___
        elif is_gptq and gptq_calibrated and gptq_bits == 4: ___
        elif is_awq and awq_calibrated: ___
    if self.lora_enabled: ___
    return kernel"""
#: 3.12.0-3.13.2: GPTQ and int4 only, one `calibrated` flag.
BODY_3_12 = (BODY.replace('    is_awq = mode == "awq"\n', "")
             .replace('    awq_calibrated = bool(getattr(self, "is_awq_calibrated", False))\n', "")
             .replace("        elif is_awq and awq_calibrated: ___\n", "").replace(" gptq_calibrated", " calibrated"))
FAST = "\n    if __: return getattr(self, \"_kernel\", None)"


def _body(cls: str, path: str) -> Anchor:
    return Anchor(cls, BODY.format(""), alternatives=(BODY.format(FAST), BODY_3_12.format(""), BODY_3_12.format(FAST)),
                  path=path, name=f"{cls}.kernel's body", description="built, not quantized, no LoRA: `_kernel`")


class DenseKernelFastPath(DeclaredPatch):
    name = "dense-kernel-fast-path"
    #: 2: the fast path's reads in upstream's order (v1 read `lora_enabled` before the flags).
    version = "3"
    headers = Headers(
        description="The kernel property of Dense and EinsumDense returns _kernel at once for a built layer "
        "that is not quantized and has no LoRA, when its calibration-flag look-ups would find a bool or nothing.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-08",
    )
    files = (DENSE_PY, EINSUM_PY)
    since = "3.12.0"
    #: The fast path first in each property, the check at the end of each module.
    edits = tuple(edit for cls, path in CLASSES for edit in (
        Prepend(f"{cls}.kernel", "kernel_fast_path", label=f"{cls}.kernel", path=path,
                description="first statement (fast path: {state})"),
        Append("helpers", label=f"the check in {path.rsplit('/', 1)[1]}", path=path),
    ))
    relies_on = tuple(_body(cls, path) for cls, path in CLASSES)
    #: keras-nightly's property reads no flag.
    upstream_shapes = (("the kernel property reads no calibration flag (keras-nightly's `_quantized_weight()`)", tuple(
        Anchor(f"{cls}.kernel", "quantized_weight = self._quantized_weight()", path=path, name=f"{cls}.kernel",
               description="quantized_weight = self._quantized_weight() (theirs)") for cls, path in CLASSES)),)
    report_paths = True
    details = Details(apply="a fast path first in Dense.kernel and EinsumDense.kernel",
                      present="the kernel properties have the fast path (forkgen)",
                      upstream="the kernel property reads no calibration flag")


PATCH = DenseKernelFastPath()
DenseKernelFastPathCommand = PATCH.command
