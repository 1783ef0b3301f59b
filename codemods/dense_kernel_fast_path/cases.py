"""What `dense-kernel-fast-path` makes of dense.py and einsum_dense.py modules shaped like
Keras's (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the
equivalence suite must catch. `FILES` puts both in the CLI tests' synthetic trees."""

import textwrap

from codemods.engine import Case, Mutant, piece_text

DENSE_PY = "keras/src/layers/core/dense.py"
EINSUM_PY = "keras/src/layers/core/einsum_dense.py"

#: The property as 3.14.0-3.15.1 have it (the branches' bodies are ours: only the statements
#: the patch relies on follow Keras).
PROPERTY = '''\
    @property
    def kernel(self):
        from keras.src.quantizers import gptq_core

        if not self.built:
            raise AttributeError("build the layer first")

        mode = self.quantization_mode
        is_gptq = mode == "gptq"
        is_awq = mode == "awq"
        is_int4 = mode == "int4"
        gptq_calibrated = bool(getattr(self, "is_gptq_calibrated", False))
        awq_calibrated = bool(getattr(self, "is_awq_calibrated", False))
        gptq_bits = (
            gptq_core.get_weight_bits_for_layer(self, None) if is_gptq else None
        )

        if is_gptq and gptq_calibrated and gptq_bits != 4:
            kernel = self.quantized_kernel
        else:
            kernel = getattr(self, "_kernel", None)
            if is_int4:
                kernel = quantizers.unpack_int4(kernel, 2)
            elif is_gptq and gptq_calibrated and gptq_bits == 4:
                kernel = quantizers.unpack_int4(self.quantized_kernel, 2)
            elif is_awq and awq_calibrated:
                kernel = quantizers.unpack_int4(self.quantized_kernel, 2)

        if self.lora_enabled:
            kernel = kernel + ops.matmul(self.lora_kernel_a, self.lora_kernel_b)

        return kernel
'''
#: 3.12.0-3.13.2: no AWQ, one `calibrated` flag.
PROPERTY_3_12 = (PROPERTY.replace('        is_awq = mode == "awq"\n', "")
                 .replace('        awq_calibrated = bool(getattr(self, "is_awq_calibrated", False))\n', "")
                 .replace(" gptq_calibrated", " calibrated")
                 .replace("            elif is_awq and awq_calibrated:\n"
                          "                kernel = quantizers.unpack_int4(self.quantized_kernel, 2)\n", ""))
#: keras-nightly: no flag read.
PROPERTY_NIGHTLY = '''\
    @property
    def kernel(self):
        if not self.built:
            raise AttributeError("build the layer first")
        quantized_weight = self._quantized_weight()
        kernel = self._kernel if quantized_weight is None else quantized_weight.unpack()
        if self.lora_enabled:
            kernel = kernel + ops.matmul(self.lora_kernel_a, self.lora_kernel_b)
        return kernel
'''


def module(cls: str, prop: str = PROPERTY) -> str:
    return textwrap.dedent(
        f'''\
        from keras.src import ops
        from keras.src import quantizers
        from keras.src.layers.layer import Layer


        class {cls}:  # a Layer in Keras; here not, so the CLI tests' layer counts stay layer.py's
            def __init__(self, units):
                self.units = units
                self.lora_enabled = False

        '''
    ) + prop + textwrap.dedent(
        '''
            def call(self, inputs):
                return ops.matmul(inputs, self.kernel)
        '''
    )


FAST = piece_text(__file__, "kernel_fast_path", "        ")
HELPERS = piece_text(__file__, "helpers")
HEADER = "    def kernel(self):\n"


def patched(text: str) -> str:
    return text.replace(HEADER, HEADER + FAST, 1) + "\n\n" + HELPERS


def tree(prop: str = PROPERTY, einsum: str | None = None) -> dict[str, str]:
    return {DENSE_PY: module("Dense", prop), EINSUM_PY: module("EinsumDense", einsum or prop)}


FILES = tree()

CASES = (
    Case("the fast path first in both properties, the check at the end of both modules", tree(),
         {path: patched(text) for path, text in tree().items()},
         detail="a fast path first in Dense.kernel and EinsumDense.kernel",
         anchors=(("Dense.kernel", 12), ("EinsumDense.kernel", 12), ("Dense.kernel's body", 12),
                  ("EinsumDense.kernel's body", 12))),
    Case("3.12.0-3.13.2's property", tree(PROPERTY_3_12),
         {path: patched(text) for path, text in tree(PROPERTY_3_12).items()}),
    Case("keras-nightly's property reads no flag", tree(PROPERTY_NIGHTLY), upstream=True,
         detail="the kernel property reads no calibration flag (keras-nightly's `_quantized_weight()`)"),
    *(Case(f"drift: {name}", before, drift=drift) for name, before, drift in (
        ("a statement the proof does not know", tree(PROPERTY.replace(
            "        mode = self.quantization_mode\n", "        self.reads += 1\n        mode = self.quantization_mode\n")),
         f"{DENSE_PY}:6: anchor 'Dense.kernel's body': expected exactly one"),
        ("another branch returns the plain kernel", tree(einsum=PROPERTY.replace(
            "            kernel = getattr(self, \"_kernel\", None)\n", "            kernel = self.kernel_value()\n")),
         f"{EINSUM_PY}:6: anchor 'EinsumDense.kernel's body': expected exactly one"),
        ("one property upstream's, one ours", {DENSE_PY: module("Dense", PROPERTY_NIGHTLY),
                                                 EINSUM_PY: patched(module("EinsumDense"))},
         "expected all pieces present or none; found EinsumDense.kernel, the check in einsum_dense.py forkgen's"),
        ("the fast path without its check", {DENSE_PY: patched(module("Dense")).replace("\n\n" + HELPERS, ""),
                                              EINSUM_PY: patched(module("EinsumDense"))},
         "all pieces present or none"),
    )),
)

MUTANTS = (
    Mutant("the fast path ignores LoRA",
           " and _kernel_flags_unset(self) and not self.lora_enabled:", " and _kernel_flags_unset(self):"),
    Mutant("the check trusts any flag in the instance's __dict__",
           "                if not (state[flag] is True or state[flag] is False):\n",
           "                if False:\n"),
    Mutant("the check does not look where torch's __getattr__ looks",
           '                for store in ("_parameters", "_buffers", "_modules"):\n',
           "                for store in ():\n"),
    Mutant("the class's answer stored while torch.compile traces (a store replayed after every compiled call)",
           '            if not getattr(getattr(torch, "compiler", None), "is_compiling", bool)():\n'
           "                _KERNEL_PLAIN_CLASSES[cls] = plain\n",
           "            _KERNEL_PLAIN_CLASSES[cls] = plain\n"),
)
