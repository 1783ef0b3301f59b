"""Patch `torch-conv-single-copy`: backport of keras-team/keras#23199 ("perf(torch): drop
redundant channels_last contiguous copy in conv input path", issue #23279; in keras-nightly
3.16.0.dev2026102704).

In 3.15.x the torch backend's `conv` copies a `channels_last` input twice: `_transpose_spatial_inputs`
permutes NHWC to NCHW and copies the view to the default layout (`.contiguous()`, 3.15.0), then
`_maybe_convert_to_channels_last` (keras#22324, 3.14.0) copies that again to torch's channels_last
format, which the permuted view of a contiguous input had to begin with. Upstream gave
`_transpose_spatial_inputs` a `channels_last_memory_format` flag, passed it from `conv` and dropped
the second conversion: one copy for a non-contiguous input, none for a contiguous one.

Carried: the same saving for `conv` (and `depthwise_conv`, `separable_conv`), through a helper of
ours that `conv` calls in place of `_transpose_spatial_inputs`, made to hand on the tensor
3.15.1's two copies give, stride for stride:
 - upstream's form differs from 3.15.1 wherever a shape fits both layouts (one channel, or all
   spatial sizes 1) or a size-1 axis has a non-canonical stride (`expand`, `as_strided`): torch
   then picks another memory format, and the output's strides, and on CPU its values and whether
   the backward pass raises, differ. The first kind takes 3.15.1's steps; the second is copied
   once, into the canonical channels_last strides 3.15.1 ends with;
 - upstream hands conv a view of the caller's tensor, which autograd saves: modifying the input
   in place after the forward pass then makes `backward()` raise, where 3.15.1 computed the
   gradients. While autograd records, the helper makes one copy straight into the channels_last
   strides; without it (inference, `torch.no_grad()`, Keras's `predict`), none.
Values, dtype, shape, strides, gradients and errors are 3.15.1's. The conversion after the call
stays in `conv` (it finds the tensor converted already: a check, no copy).

Not carried: the pooling ops' use of the flag (keras#23645) and nightly's pointwise-kernel fast
path of `conv`: separate changes. Not applicable before 3.15.0: 3.14.x's `_transpose_spatial_inputs`
returns the view itself (one copy already). No switch: the patched code gives 3.15.1's results.
"""

from __future__ import annotations

import libcst as cst

from codemods.engine import NIGHTLY_TORCH_NN_PY as NIGHTLY_NN_PY
from codemods.engine import TORCH_NN_PY as NN_PY
from codemods.engine import (
    Analysis,
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    Replace,
    Sources,
    block,
    names_of,
    statements,
)

TRANSPOSE = "inputs = _transpose_spatial_inputs(inputs)"
CONVERT = "inputs = _maybe_convert_to_channels_last(inputs)"
CHANNELS_LAST = Anchor("conv", 'if data_format == "channels_last": ___').compiled


def upstream_call(scope: str, path: str) -> Anchor:
    """keras#23199's `conv` (keras#23645's pools): it asks `_transpose_spatial_inputs` for channels_last memory."""
    return Anchor(scope, "inputs = _transpose_spatial_inputs(inputs, channels_last_memory_format=True)", path=path,
                  name="_transpose_spatial_inputs(inputs, channels_last_memory_format=True)")


class TorchConvSingleCopy(DeclaredPatch):
    name = "torch-conv-single-copy"
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
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    since = "3.15.0"
    codemod = "SingleCopyCommand"
    edits = (
        Replace(Anchor("conv", TRANSPOSE, description="in conv: the call to _forkgen_transpose_conv_inputs takes its place"),
                "conv_inputs", rebinds=("inputs",)),
        Helper(Anchor("", "def _maybe_convert_to_channels_last(___): ___", name="def _maybe_convert_to_channels_last",
                      description="_forkgen_transpose_conv_inputs goes after it"), "helper"),
    )
    #: What the helper repeats or relies on: `_transpose_spatial_inputs` permutes and copies (3.15.0+),
    #: and keras#22324's conversion (3.14.0+) follows in `conv`, asking for torch's channels_last formats.
    relies_on = (
        Anchor("", "def _transpose_spatial_inputs(inputs): ___", name="def _transpose_spatial_inputs",
               description="permutes, then copies with .contiguous()"),
        *(Anchor("_transpose_spatial_inputs", f"return torch.permute(inputs, {p}).contiguous()", reported=False)
          for p in ("(0, 3, 1, 2)", "(0, 4, 1, 2, 3)")),
        Anchor("conv", CONVERT, reported=False),
        *(Anchor("_get_channels_last_memory_format", f"torch.{f}", expression=True, reported=False)
          for f in ("channels_last", "channels_last_3d")),
        *(Anchor("_maybe_convert_to_channels_last", p, expression=True, reported=False)
          for p in ("_get_channels_last_memory_format(tensor.ndim)", "tensor.contiguous(memory_format=__)")),
    )
    upstream_patterns = (upstream_call("conv", NN_PY),)
    upstream_shapes = (("conv asks _transpose_spatial_inputs for channels_last memory itself", (upstream_call("conv", NIGHTLY_NN_PY),)),)
    unshadowed_builtins = True
    details = Details(
        apply="conv calls a single-copy helper instead of _transpose_spatial_inputs",
        present="conv calls forkgen's single-copy helper (forkgen)",
        upstream="conv asks _transpose_spatial_inputs for channels_last memory itself",
    )

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        """Semantic: the helper hands on the tensor 3.15.1's *two* copies give, so the conversion
        must still run on its result, `inputs` unchanged, under a later `if data_format == "channels_last":`."""
        call = analysis.files[0].occurrences[0]
        conv = cst.ensure_type(call.scope, cst.FunctionDef)
        body = cst.ensure_type(conv.body, cst.IndentedBlock).body
        convert = next(s for s in statements(conv) if Anchor("conv", CONVERT).compiled.match(s) is not None)  # one: relied on
        at = [next((i for i, s in enumerate(body) if CHANNELS_LAST.match(s) is not None and node in block(s)), -1)
              for node in (call.node, convert)]
        if -1 in at:
            raise AnchorDrift(NN_PY, call.line, CONVERT, f'it and `{TRANSPOSE}` each under an `if data_format == "channels_last":`'
                              " of conv", "another shape")
        if at[0] >= at[1]:
            raise AnchorDrift(NN_PY, call.line, CONVERT, f"in an `if` after the one of `{TRANSPOSE}`", "it in the same or an earlier one")
        first, second = block(body[at[0]]), block(body[at[1]])
        between = [*first[first.index(call.node) + 1:], *body[at[0] + 1:at[1]], *second[:second.index(convert)]]
        if "inputs" in names_of(between, into_defs=False)[1]:
            raise AnchorDrift(NN_PY, call.line, CONVERT, f"`inputs` unchanged between `{TRANSPOSE}` and it", "inputs reassigned")


PATCH = TorchConvSingleCopy()
SingleCopyCommand = PATCH.command
