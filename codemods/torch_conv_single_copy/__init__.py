"""Patch `torch-conv-single-copy`: backport of keras-team/keras#23199 ("perf(torch): drop
redundant channels_last contiguous copy in conv input path", issue #23279; merged upstream, in
keras-nightly 3.16.0.dev2026102704).

In 3.15.x the torch backend's `conv` copies a `channels_last` input twice before the
convolution: `_transpose_spatial_inputs` permutes NHWC to NCHW and copies the view to the
default layout (`.contiguous()`, added in 3.15.0), then `_maybe_convert_to_channels_last` (from
keras#22324, 3.14.0) copies that again to torch's channels_last memory format, which the
permuted view of a contiguous input had to begin with. Upstream gave `_transpose_spatial_inputs`
a `channels_last_memory_format` flag that asks for `.contiguous(memory_format=channels_last)`
instead, passed it from `conv` and dropped the second conversion of the inputs: one copy for a
non-contiguous input, none for a contiguous one.

Carried: the same saving for `conv` (and so `depthwise_conv` and `separable_conv`, which call
it), through a helper of ours that `conv` calls in place of `_transpose_spatial_inputs`, made
to hand on the tensor 3.15.1's two copies give, stride for stride:
 - upstream's form differs from 3.15.1 wherever a shape fits both layouts (one channel, or
   all spatial sizes 1, e.g. a channel sliced out of an image) or a size-1 axis has a
   non-canonical stride (`expand`, `as_strided`): torch then picks another memory format, and
   the output's strides, and on CPU its values and whether the backward pass raises, differ.
   The first kind takes 3.15.1's steps, unchanged; the second is copied once, into the
   canonical channels_last strides 3.15.1 ends with;
 - upstream hands conv a view of the caller's tensor, which autograd saves for the backward
   pass: modifying the input in place after the forward pass then makes `backward()` raise,
   where 3.15.1 (whose conv saved a copy) computed the gradients. While autograd records
   (`torch.is_grad_enabled()`), the helper makes one copy (instead of two) straight into the
   channels_last strides; without it (inference, `torch.no_grad()`, which Keras's `predict`
   uses), none.
Output values, dtype, shape and strides, gradients and errors are those of 3.15.1.
`_transpose_spatial_inputs` keeps its signature and body, and the conversion after it stays in
`conv` (it finds the tensor converted already: a check, no copy). So conv's input is copied
once at most (where 3.15.1's steps are kept, they copy once at most too), and not at all for a
densely laid out input without autograd.

Not carried: the pooling ops' use of the same flag (keras#23645, a follow-up) and nightly's
pointwise-kernel fast path of `conv` (a matmul in place of torch's convolution): separate
upstream changes, not part of keras#23199.

Not applicable before 3.15.0: 3.14.x has keras#22324's conversion but its
`_transpose_spatial_inputs` returns the permuted view itself, so its `conv` copies once already;
3.0-3.13 have no channels_last conversion. No switch: the patched code gives 3.15.1's results.
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.patchlib import Check, Headers, Outcome, Patch, Sources
from codemods.torch_conv_single_copy.single_copy import (
    NAME,
    NIGHTLY_NN_PY,
    NN_PY,
    Analysis,
    SingleCopyCommand,
    analyze,
    anchors,
)


def _analysis(sources: Sources, path: str) -> Analysis:
    return sources.analysed(NAME, path, analyze)


class TorchConvSingleCopy(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description="torch conv makes its channels_last input with at most one copy (none for a dense "
        "input without autograd) instead of two: the tensor 3.15.1 made, stride for stride.",
        origin="upstream, https://github.com/keras-team/keras/pull/23199",
        bug="https://github.com/keras-team/keras/issues/23279",
        forwarded="https://github.com/keras-team/keras/pull/23199",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    files = (NN_PY,)
    since = "3.15.0"
    codemods = (SingleCopyCommand,)

    def check(self, sources: Sources) -> Check:
        # keras-nightly has no torch/nn.py: its conv lives in torch/ops/nn.py.
        path = NN_PY if sources.exists(NN_PY) or not sources.exists(NIGHTLY_NN_PY) else NIGHTLY_NN_PY
        analysis = _analysis(sources, path)
        if analysis.upstream:
            return Check(Outcome.UPSTREAM, "conv asks _transpose_spatial_inputs for channels_last memory itself",
                         anchors(analysis))
        if analysis.present:
            return Check(Outcome.APPLIED, "conv calls forkgen's single-copy helper (forkgen)", anchors(analysis),
                         present=True)
        return Check(Outcome.APPLIED, "conv calls a single-copy helper instead of _transpose_spatial_inputs",
                     anchors(analysis))

    def apply(self, sources: Sources) -> None:
        module = sources.module(NN_PY)
        command = SingleCopyCommand(CodemodContext(filename=NN_PY), sources.ast(NN_PY), _analysis(sources, NN_PY))
        sources.replace(NN_PY, command.transform_module(module))


PATCH = TorchConvSingleCopy()
