"""Patch `torch-flash-probe-compile-skip`: the idea of keras-team/keras#23327 (merged upstream,
in keras-nightly), in our words: while dynamo traces, the torch backend's
`_can_use_flash_attention` answers False without building its probe.

Since 3.7.0, torch `dot_product_attention` (the path of `MultiHeadAttention` with no dropout and
no attention scores returned, and of `ops.dot_product_attention`) calls
`_can_use_flash_attention(query, key, value, mask, is_causal)` when `flash_attention` is None,
the default. That function builds `torch.backends.cuda.SDPAParams(...)`, a pybind11 object,
and asks `can_use_flash_attention(params, False)`. Dynamo cannot trace the pybind11
constructor: under `torch.compile` every attention call breaks the graph there (the bench's
Transformer-style model: 11 graphs and 10 breaks for one forward, all at this probe;
`fullgraph=True` fails).

The patch puts, first in the function, `if not raise_error and torch.compiler.is_compiling():
return False` (with `getattr` fallbacks for a torch without `torch.compiler.is_compiling`,
whose answer is then False, as if not compiling).

Why eager behaviour is upstream's: `torch.compiler.is_compiling()` is False outside dynamo's
tracing (and outside `torch.export`), so the new statement does nothing and upstream's body
runs as it is. With `raise_error=True` (an explicit `flash_attention=True`, whose job is to
raise when the inputs cannot use flash attention) the statement does nothing either, compiling
or not.

What changes under `torch.compile` (auto-detection only): the answer is False without the
probe, so `dot_product_attention` takes its non-flash branch, a plain
`scaled_dot_product_attention` call, which picks its kernel through torch's own dispatcher,
flash attention included when the inputs allow it. On CPU the probe's answer was False anyway
(flash attention needs CUDA), so compiled outputs are the same computation; on CUDA the kernel
torch's dispatcher picks may differ from the forced flash kernel, within the tolerances of
compiled against eager. The graph no longer breaks at the probe.

keras-nightly has upstream's form (the same test, written with `hasattr`) in
`torch/ops/nn.py`: there the outcome is upstream's.
"""

from __future__ import annotations

from codemods.engine import NIGHTLY_TORCH_NN_PY as NIGHTLY_NN_PY
from codemods.engine import TORCH_NN_PY as NN_PY
from codemods.engine import Anchor, DeclaredPatch, Details, Headers, Prepend

FUNCTION = "_can_use_flash_attention"
#: keras-nightly's form of the same early return.
UPSTREAM_FORM = (
    'if not raise_error and hasattr(torch.compiler, "is_compiling") and torch.compiler.is_compiling():\n'
    "    return False"
)


class TorchFlashProbeCompileSkip(DeclaredPatch):
    name = "torch-flash-probe-compile-skip"
    version = "1"
    headers = Headers(
        description="torch _can_use_flash_attention answers False while dynamo traces (auto-detection only), "
        "without the SDPAParams probe dynamo cannot trace: no graph break per attention call.",
        origin="upstream, https://github.com/keras-team/keras/pull/23327",
        bug=None,
        forwarded="https://github.com/keras-team/keras/pull/23327",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-05",
    )
    files = (NN_PY,)
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    moved = {NN_PY: NIGHTLY_NN_PY}
    since = "3.7.0"
    edits = (
        Prepend(FUNCTION, "probe_skip", label=f"def {FUNCTION}", blank_lines=1,
                description="first statement: False while compiling, without the probe ({state})"),
    )
    #: The probe the early return skips, and the answer it gives from it.
    relies_on = (
        Anchor(FUNCTION, "try: ___\nexcept TypeError: ___", name="spda_params = SDPAParams(...)", reported=False),
        Anchor(FUNCTION, "return can_use_flash_attention(spda_params, False)", reported=False),
    )
    upstream_patterns = (Anchor(FUNCTION, UPSTREAM_FORM, name=f"{FUNCTION}: False while compiling"),)
    details = Details(
        apply="False while dynamo traces, without the SDPAParams probe",
        present="the probe is skipped while compiling (forkgen)",
        upstream="_can_use_flash_attention answers False while compiling",
    )


PATCH = TorchFlashProbeCompileSkip()
TorchFlashProbeCompileSkipCommand = PATCH.command
