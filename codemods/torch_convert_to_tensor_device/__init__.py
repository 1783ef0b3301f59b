"""Patch `torch-convert-to-tensor-device`: backport of keras-team/keras#23189 (merged upstream
as e2e681519, in keras-nightly).

The torch backend's `convert_to_tensor` moves a tensor (or a Variable's value) to
`device = get_device()` under `if x.device != device:`. `get_device()` returns a `str` on every
public path and `torch.device.__ne__` is True against any `str`, so the test never skipped
anything: the patch drops it and keeps its body (the `is_meta` branch of 3.10+, the plain
`x = x.to(device)` before), as upstream did. `x.to(device)` on a tensor already there returns
the tensor itself, so values, dtype, device, requires_grad and identity are unchanged.

Only the removal of the test is carried: the PR branch's other fast paths, its combined
`.to()` and its `cast` changes are not in upstream's merge and are not carried either.

No switch: the equivalence needs no runtime state. The one difference is reachable only by
writing a `torch.device` object into Keras's private global state under `"torch_device"`
(public `device_scope` stores a `str`): then upstream skipped the move when the devices
matched, and the patch calls it, which returns the same tensor, except that a meta tensor
gets a fresh `torch.empty_like` (3.10+ only).
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.patchlib import Check, Headers, Outcome, Patch, Sources, torch_core_path
from codemods.torch_convert_to_tensor_device.drop_device_check import (
    CORE_PY,
    NAME,
    DropDeviceCheckCommand,
    Site,
    analyze,
    anchors,
)


def _site(sources: Sources, path: str) -> Site:
    return sources.analysed(NAME, path, analyze)


class TorchConvertToTensorDevice(Patch):
    name = NAME
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
    files = (CORE_PY,)
    codemods = (DropDeviceCheckCommand,)

    def check(self, sources: Sources) -> Check:
        # keras-nightly has no torch/core.py: its convert_to_tensor lives in torch/ops/core.py.
        path = torch_core_path(sources)
        site = _site(sources, path)
        if site.test is not None:
            return Check(Outcome.APPLIED, "drop `if x.device != device:`, keep its body", anchors(site))
        if site.ours:
            return Check(Outcome.APPLIED, "the device test is gone (forkgen)", anchors(site), present=True)
        return Check(Outcome.UPSTREAM, "convert_to_tensor moves tensors to get_device() without a test", anchors(site))

    def apply(self, sources: Sources) -> None:
        module = sources.module(CORE_PY)
        command = DropDeviceCheckCommand(CodemodContext(filename=CORE_PY), sources.ast(CORE_PY), _site(sources, CORE_PY))
        sources.replace(CORE_PY, command.transform_module(module))


PATCH = TorchConvertToTensorDevice()
