"""What `torch-flash-probe-compile-skip` makes of torch nn modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), the breaks of its inserted code the equivalence suite must
catch, and the synthetic nn.py of the series' synthetic tree.

`torch-conv-single-copy` and `torch-max-pool-channels-last` anchor on the same file:
`TREE_APPENDS` puts a flash-attention probe shaped like Keras 3.7-3.15's (written for these
tests: only the anchored statements follow Keras) at the end of their synthetic nn.py in the
series' tree (tests/support/synthetic.py's `patch_files`), so that every patch finds its anchors
in the one tree."""

from codemods.engine import Case, Mutant, piece_text

NN_PY = "keras/src/backend/torch/nn.py"
NIGHTLY_NN_PY = "keras/src/backend/torch/ops/nn.py"
HEAD = '''\
import torch


def _can_use_flash_attention(
    query, key, value, mask=None, is_causal=False, raise_error=False
):
    """Whether flash attention can run these inputs."""
'''
PROBE = '''\
    try:
        from torch.backends.cuda import SDPAParams
        from torch.backends.cuda import can_use_flash_attention
    except ImportError:
        if raise_error:
            raise ImportError("No flash attention in this torch.")
        return False

    try:
        spda_params = SDPAParams(query, key, value, mask, 0.0, is_causal, False)
    except TypeError:
        # An older torch takes no `enable_gqa`.
        spda_params = SDPAParams(query, key, value, mask, 0.0, is_causal)
    if raise_error and can_use_flash_attention(spda_params, True) is False:
        raise RuntimeError("Flash attention cannot run these inputs.")
    return can_use_flash_attention(spda_params, False)


def dot_product_attention(query, key, value, mask=None, is_causal=False, flash_attention=None):
    if flash_attention is None:
        flash_attention = _can_use_flash_attention(query, key, value, mask, is_causal)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
'''
SKIP = piece_text(__file__, "probe_skip", "    ")
BEFORE = HEAD + PROBE
AFTER = HEAD + SKIP + "\n" + PROBE
#: keras-nightly's form (keras#23327): the same early return, written with `hasattr`.
NIGHTLY = HEAD + '''\
    if (
        not raise_error
        and hasattr(torch.compiler, "is_compiling")
        and torch.compiler.is_compiling()
    ):
        # The probe breaks dynamo's graph.
        return False

''' + PROBE
UPSTREAM = "_can_use_flash_attention answers False while compiling"

CASES = (
    Case("an early return first in the probe", BEFORE, AFTER,
         anchors=(("def _can_use_flash_attention", 4),)),
    Case("keras-nightly's early return is upstream's", NIGHTLY, upstream=True, detail=UPSTREAM),
    Case("keras-nightly's torch/ops/nn.py", {NIGHTLY_NN_PY: NIGHTLY}, upstream=True),
    Case("a release without the probe's fallback for an older torch",
         BEFORE.replace("    try:\n        spda_params = SDPAParams(query, key, value, mask, 0.0, is_causal, False)\n"
                        "    except TypeError:\n        # An older torch takes no `enable_gqa`.\n"
                        "        spda_params = SDPAParams(query, key, value, mask, 0.0, is_causal)\n",
                        "    spda_params = SDPAParams(query, key, value, mask, 0.0, is_causal, False)\n"),
         drift="spda_params = SDPAParams(...)"),
    Case("a release that answers otherwise than from the probe",
         BEFORE.replace("    return can_use_flash_attention(spda_params, False)\n", "    return False\n"),
         drift="return can_use_flash_attention(spda_params, False)"),
    Case("no probe in the module (a release before 3.7.0)", BEFORE.replace("_can_use_flash_attention", "_probe"),
         drift="_can_use_flash_attention"),
)

MUTANTS = (
    Mutant("an explicit flash_attention=True no longer raises while compiling",
           "    if not raise_error and getattr(", "    if getattr("),
    Mutant("the probe skipped in eager calls too",
           'getattr(getattr(torch, "compiler", None), "is_compiling", bool)()', "True"),
)

#: What the series' synthetic nn.py (the torch nn patches' `FILES`) gets at its end.
TREE_APPENDS = {NN_PY: BEFORE.replace("import torch\n\n\n", "", 1)}
