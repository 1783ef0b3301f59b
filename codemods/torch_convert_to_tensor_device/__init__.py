"""Patch `torch-convert-to-tensor-device`: backport of keras-team/keras#23189 (merged upstream
as e2e681519, in keras-nightly).

The torch backend's `convert_to_tensor` moves a tensor (or a Variable's value) to
`device = get_device()` under `if x.device != device:`. `get_device()` returns a `str` on every
public path (`DEFAULT_DEVICE`, `KERAS_TORCH_DEVICE`, `device_scope` -> `_parse_device_input`)
and `torch.device.__ne__` is True against any `str`, so the test never skipped anything and
only cost the `x.device` property and a comparison on every conversion: the patch drops it and
keeps its body one level out (the `is_meta` branch of 3.10+, the plain `x = x.to(device)`
before), as upstream did. `x.to(device)` on a tensor already there returns the tensor itself,
so values, dtype, device, requires_grad and identity are unchanged.

Only the removal of the test is carried: the PR branch's other fast paths, its combined
`.to()` and its `cast` changes are not in upstream's merge and are not carried either.

No switch: the equivalence needs no runtime state. The one difference is reachable only by
writing a `torch.device` object into Keras's private global state under `"torch_device"`
(public `device_scope` stores a `str`): then upstream skipped the move when the devices
matched, and the patch calls it, which returns the same tensor, except that a meta tensor
gets a fresh `torch.empty_like` (3.10+ only).

Upstream's shape (keras-nightly, in `torch/ops/core.py`): the `is_meta` branch right in the
tensor branch, under no test.
"""

from __future__ import annotations

from codemods.engine import (
    TORCH_CORE_MOVED,
    TORCH_CORE_PY,
    Anchor,
    DeclaredPatch,
    Details,
    Headers,
    Unwrap,
)

FUNCTION = "convert_to_tensor"
ANCHOR = "if x.device != device:"
WHERE = f"in {FUNCTION}'s tensor branch"
IS_META = "if x.is_meta: ___\nelse: ___"


class TorchConvertToTensorDevice(DeclaredPatch):
    name = "torch-convert-to-tensor-device"
    version = "1"
    headers = Headers(
        description="torch convert_to_tensor moves tensors to get_device() without the always-true "
        "`x.device != device` test.",
        origin="upstream, https://github.com/keras-team/keras/pull/23189",
        bug="https://github.com/keras-team/keras/issues/23274",
        forwarded="https://github.com/keras-team/keras/pull/23189",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    files = (TORCH_CORE_PY,)
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    moved = TORCH_CORE_MOVED
    codemod = "DropDeviceCheckCommand"
    edits = (Unwrap(Anchor(FUNCTION, f"{ANCHOR} ___", name=ANCHOR, description=WHERE), "unconditional_move"),)
    #: What makes the test always True (a str against a torch.device), in the one tensor branch.
    relies_on = (
        Anchor(FUNCTION, "device = get_device()", reported=False),
        Anchor(FUNCTION, "if isinstance(x, Variable) or is_tensor(x): ___", name="if ... is_tensor(x):",
               alternatives=("if is_tensor(x): ___",), reported=False),
    )
    #: keras-nightly: the `is_meta` branch under no test at all.
    upstream_patterns = (
        Anchor(FUNCTION, IS_META, name=ANCHOR, description=WHERE),
        Anchor(FUNCTION, "if __:\n    " + IS_META.replace("\n", "\n    "), count=0, reported=False,
               alternatives=("if __:\n    " + IS_META.replace("\n", "\n    ") + "\nelse: ___",)),
    )
    details = Details(
        apply="drop `if x.device != device:`, keep its body",
        present="the device test is gone (forkgen)",
        upstream="convert_to_tensor moves tensors to get_device() without a test",
    )


PATCH = TorchConvertToTensorDevice()
DropDeviceCheckCommand = PATCH.command
