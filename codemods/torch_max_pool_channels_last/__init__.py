"""Patch `torch-max-pool-channels-last`: after keras-team/keras#23645 ("perf(torch): pool
channels_last inputs in channels_last memory", issue #23649; open, already in keras-nightly
3.16.0.dev2026102704's torch pooling), narrowed to what gives 3.15.1's result stride for stride.

In 3.15.x the torch backend's `max_pool` turns a `channels_last` input into channels-first axes
with `_transpose_spatial_inputs`, which permutes NHWC to NCHW and copies the view to the default
layout (`.contiguous()`, since 3.15.0): a full copy of the input on every call. The permuted view
of a densely laid out NHWC tensor has torch's channels_last strides already, and torch's CPU
max_pool2d reads that layout directly (and faster: 0.45 ms -> 0.08 ms a call in the bench's
ConvNet predict). Upstream's change asks `_transpose_spatial_inputs` for
`.contiguous(memory_format=torch.channels_last)` from the pooling ops.

Not carried as written: torch gives the pooled output the input's memory format, so after the
permutation back upstream's form returns a contiguous NHWC tensor where 3.15.1 returns a permuted
view of an NCHW one (strides like (27, 3, 1, 9) instead of (27, 9, 3, 1)): observable through
`stride()` and `is_contiguous()`, and passed on to whatever consumes the result.

Carried: for `max_pool` only, 2-D only, `data_format="channels_last"`, padding other than
"same" (3.15.1's `padding = 0`), an exact `torch.Tensor` on the CPU, strided, of dtype float16,
float32 or float64, laid out densely (canonical NHWC strides, size-1 axes included),
whose channels-first view is not contiguous already (more than one channel and a spatial size
above 1: the other layouts are 3.15.1's copy-free case), with no autograd recording it
(`torch.is_grad_enabled()` and `requires_grad`: the graph, its grad_fn chain and saved tensors,
would differ), outside `torch.compile` tracing and `torch.func` transforms, and with
`get_device()` not "meta". Then `max_pool` pools the view itself, and copies the output
(a quarter of the input for 2x2 pooling) into the default layout with
`clone(memory_format=torch.contiguous_format)` right after `tnn.max_pool2d`: the tensor 3.15.1's
max_pool2d returns for its contiguous copy (torch picks the default format for that input, as
its channels are not of size 1), stride for stride; a max selects one input element, and both
kernels scan a window in the same order and take a NaN or the first of equal values, so the
values, ±0.0 and NaN positions included, are 3.15.1's. `.to(device)` and the permutation back
are 3.15.1's steps, unchanged. A clone and not `.contiguous()`: a channels_last output of 1x1
spatial size counts as contiguous already, and `.contiguous()` would hand it on with strides
3.15.1's does not have. Every other call takes 3.15.1's statements.

Not carried: bfloat16 inputs (torch 2.13's channels_last CPU kernel for bfloat16 writes a NaN of
its own, 0xFFFF, sign bit set, where the default-layout kernel passes the input's NaN on, e.g.
0x7FC0: the same NaN positions, but `torch.signbit` and the bits differ; float16, float32 and
float64 pass NaNs on in both layouts); average_pool and the adaptive pools (the same flag upstream, but their sums may
be accumulated in another order by torch's channels_last kernels: the values could differ in
the last bits); 1-D and 3-D max pooling (no channels_last format for 3-D tensors; 3-D pooling
not proven here); "same" padding (the padded copy is made either way); inputs on other devices
(CUDA's kernels not verified here); calls under autograd.

Not applicable before 3.15.0: 3.14.x's `_transpose_spatial_inputs` returns the permuted view
itself, so its `max_pool` copies nothing to save (`tests/matrix.py --analyze-only --nightly`:
not applicable 3.0.0-3.14.1, applied 3.15.0-3.15.1, upstream in keras-nightly
3.16.0.dev2026102704). No switch: the patched code gives 3.15.1's results.

Measured (torch 2.13.0, CPU, one thread, one process, the helper swapped for one answering None
to get 3.15.1's steps, medians of 15 alternating rounds): the bench's `conv_predict`
(`predict_on_batch`, batch 8 of 32x32x3) 3.06 -> 2.22 ms a call (-27%); `max_pool(x, 2)` alone
0.61 -> 0.082 ms for x of shape (8, 32, 32, 16), 0.31 -> 0.042 ms for (8, 16, 16, 32).
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.patchlib import Check, Headers, Outcome, Patch, Sources
from codemods.torch_max_pool_channels_last.channels_last_view import (
    NAME,
    NIGHTLY_NN_PY,
    NN_PY,
    Analysis,
    ChannelsLastViewCommand,
    analyze,
    anchors,
)


def _analysis(sources: Sources, path: str) -> Analysis:
    return sources.analysed(NAME, path, analyze)


class TorchMaxPoolChannelsLast(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description="torch max_pool pools a dense channels_last 2-D input through its channels-first view "
        "instead of a copy (no autograd, CPU, float16/32/64, valid padding), then copies the smaller "
        "output into the default layout: the tensor 3.15.1 returned, stride for stride.",
        origin="upstream, https://github.com/keras-team/keras/pull/23645",
        bug="https://github.com/keras-team/keras/issues/23649",
        forwarded="https://github.com/keras-team/keras/pull/23645",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    files = (NN_PY,)
    since = "3.15.0"
    codemods = (ChannelsLastViewCommand,)

    def check(self, sources: Sources) -> Check:
        # keras-nightly has no torch/nn.py: its max_pool lives in torch/ops/nn.py.
        path = NN_PY if sources.exists(NN_PY) or not sources.exists(NIGHTLY_NN_PY) else NIGHTLY_NN_PY
        analysis = _analysis(sources, path)
        if analysis.upstream:
            return Check(Outcome.UPSTREAM, "max_pool asks _transpose_spatial_inputs for channels_last memory itself",
                         anchors(analysis))
        if analysis.present:
            return Check(Outcome.APPLIED, "max_pool pools forkgen's channels-first view (forkgen)", anchors(analysis),
                         present=True)
        return Check(Outcome.APPLIED, "max_pool pools a dense input's channels-first view instead of a copy",
                     anchors(analysis))

    def apply(self, sources: Sources) -> None:
        module = sources.module(NN_PY)
        command = ChannelsLastViewCommand(CodemodContext(filename=NN_PY), sources.ast(NN_PY), _analysis(sources, NN_PY))
        sources.replace(NN_PY, command.transform_module(module))


PATCH = TorchMaxPoolChannelsLast()
