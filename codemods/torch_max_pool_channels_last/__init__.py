"""Patch `torch-max-pool-channels-last`: after keras-team/keras#23645 ("perf(torch): pool
channels_last inputs in channels_last memory", issue #23649; open, in keras-nightly
3.16.0.dev2026102704's torch pooling), narrowed to what gives 3.15.1's result stride for stride.

In 3.15.x the torch backend's `max_pool` turns a `channels_last` input into channels-first axes
with `_transpose_spatial_inputs`, which permutes NHWC to NCHW and copies the view (`.contiguous()`,
3.15.0): a full copy of the input on every call. The permuted view of a densely laid out NHWC
tensor has torch's channels_last strides already, which torch's CPU max_pool2d reads directly (and
faster). Upstream asks for `.contiguous(memory_format=torch.channels_last)` from the pooling ops;
not carried as written: torch gives the output the input's memory format, so upstream returns a
contiguous NHWC tensor where 3.15.1 returns a permuted view of an NCHW one (other strides).

Carried: for `max_pool` only, on the conditions of the helper (inserted.py: 2-D, valid padding, a
dense strided CPU `torch.Tensor` of float16/32/64 whose view is not contiguous already, no
autograd, no `torch.compile` tracing or `torch.func` transform, not the "meta" device), `max_pool`
pools the view itself, then clones the output into the default layout right after
`tnn.max_pool2d`: the tensor 3.15.1 returns, stride for stride (a clone: `.contiguous()` keeps a
1x1 channels_last output's strides); both kernels take one input element per window in the same
order, so the values, ±0.0 and NaN positions included, are 3.15.1's. Other calls: 3.15.1's code.

Not carried: bfloat16 (its channels_last CPU kernel writes a NaN of its own, sign bit set); the
average and adaptive pools (sums may be accumulated in another order); 1-D and 3-D pooling; "same"
padding; other devices; autograd. Not applicable before 3.15.0 (3.14's copies nothing). No switch.
Measured (torch 2.13.0, CPU): `conv_predict` 3.06 -> 2.22 ms; `max_pool` of (8, 32, 32, 16) 0.61 -> 0.082 ms.
"""

from __future__ import annotations

from itertools import pairwise

import libcst as cst

from codemods import engine
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
    InsertAfter,
    Replace,
    Sources,
    block,
    statements,
)

POOL = "outputs = tnn.max_pool2d(inputs, ...)"
#: The steps of 3.15.x's `max_pool` the inserted code relies on, in this order in its body.
SPATIAL, PADDING, DEVICE, META, TO_DEVICE, BACK = (Anchor("max_pool", p, reported=False, name=n) for p, n in (
    ("num_spatial_dims = inputs.ndim - 2", None), ('if padding == "same": ___\nelse: padding = 0', 'if padding == "same": ... else: padding = 0'),
    ("device = get_device()", None), ('if device == "meta": ___', 'if device == "meta":'), ("outputs = outputs.to(device)", None),
    ('if data_format == "channels_last": outputs = _transpose_spatial_outputs(outputs)', "outputs = _transpose_spatial_outputs(outputs)")))
CHANNELS_LAST = Anchor("", 'if data_format == "channels_last": ___').compiled
TWO_D = Anchor("", "num_spatial_dims == 2", expression=True).compiled

TRANSPOSE = "inputs = _transpose_spatial_inputs(inputs)"


def upstream_call(scope: str, path: str) -> Anchor:
    """keras#23645's pools: they ask `_transpose_spatial_inputs` for channels_last memory."""
    return Anchor(scope, "inputs = _transpose_spatial_inputs(inputs, channels_last_memory_format=True)", path=path,
                  name="_transpose_spatial_inputs(inputs, channels_last_memory_format=True)")

class TorchMaxPoolChannelsLast(DeclaredPatch):
    name = "torch-max-pool-channels-last"
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
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    since = "3.15.0"
    codemod = "ChannelsLastViewCommand"
    edits = (
        Replace(Anchor("max_pool", TRANSPOSE, description="in max_pool: _forkgen_max_pool_view's view or this copy takes its place"),
                "pool_inputs", rebinds=("inputs",)),
        InsertAfter(Anchor("max_pool", "outputs = tnn.max_pool2d(inputs, ___)", name=POOL,
                           description="its output is copied to the default layout after pooling the view"),
                    "pool_outputs", rebinds=("outputs",)),
        Helper(Anchor("", "def max_pool(___): ___", reported=False, name="def max_pool"), "helper", before=True),
    )
    relies_on = (
        Anchor("", "def _transpose_spatial_inputs(inputs): ___", name="def _transpose_spatial_inputs",
               description="permutes, then copies with .contiguous()"),
        Anchor("_transpose_spatial_inputs", "return torch.permute(inputs, (0, 3, 1, 2)).contiguous()", reported=False),
        SPATIAL, PADDING, DEVICE, META, TO_DEVICE, BACK,
    )
    upstream_patterns = (upstream_call("max_pool", NN_PY),)
    upstream_shapes = (("max_pool asks _transpose_spatial_inputs for channels_last memory itself", (upstream_call("max_pool", NIGHTLY_NN_PY),)),)
    names = {"forkgen_view": "bound by pool_inputs, above pool_outputs in max_pool"}
    unshadowed_builtins = True
    details = Details(
        apply="max_pool pools a dense input's channels-first view instead of a copy",
        present="max_pool pools forkgen's channels-first view (forkgen)",
        upstream="max_pool asks _transpose_spatial_inputs for channels_last memory itself",
    )

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        """Semantic: the helper is handed `inputs`, `num_spatial_dims` and `padding` as max_pool got
        them, and the output copy relies on 3.15.1's steps after the pooling, in order."""
        copy, pool = analysis.files[0].occurrences[:2]
        body = list(cst.ensure_type(cst.ensure_type(copy.scope, cst.FunctionDef).body, cst.IndentedBlock).body)
        where = next(i for i, s in enumerate(body) if any(n is copy.node for n in statements(s)))
        if CHANNELS_LAST.match(body[where]) is None or block(body[where])[:1] != [copy.node] or len(
                block(body[where])) != 1 + analysis.check.present:
            raise AnchorDrift(NN_PY, copy.line, TRANSPOSE, 'alone under an `if data_format == "channels_last":` of max_pool',
                              "another shape")
        pooled = next((i for i, s in enumerate(body) for n in statements(s) if isinstance(n, cst.If)
                       and TWO_D.match(n.test) is not None and pool.node in block(n)), -1)
        spatial, padding, device, meta, to_device, back = (
            next(i for i, s in enumerate(body) if any(a.compiled.match(n) is not None for n in statements(s)))
            for a in (SPATIAL, PADDING, DEVICE, META, TO_DEVICE, BACK))
        steps = ((SPATIAL.title, spatial), (TRANSPOSE, where), (PADDING.title, padding), (DEVICE.title, device),
                 (META.title, meta), (POOL, pooled), (TO_DEVICE.title, to_device), (BACK.title, back))
        for (before, i), (anchor, j) in pairwise(steps):
            if j <= i:
                raise AnchorDrift(NN_PY, copy.line, anchor, f"after `{before}` in max_pool" + (
                    " (under `... num_spatial_dims == 2:`)" if anchor == POOL else ""), "another shape")
        since = "since `num_spatial_dims = inputs.ndim - 2`"
        for name, span, expected in (
                ("inputs", body[spatial + 1:where], since), ("num_spatial_dims", body[spatial + 1:where], since),
                ("padding", body[:where], "before it"), ("data_format", body[where:], "after it"),
                ("inputs", [s for k, s in enumerate(body) if where < k < pooled and k not in (padding, meta)],
                 f"between it and `{POOL}` (but where 3.15.1 pads it or replaces it on 'meta')")):
            if name in engine.names_of(span, into_defs=False)[1]:
                raise AnchorDrift(NN_PY, copy.line, TRANSPOSE, f"`{name}` unchanged {expected}", f"{name} reassigned")


PATCH = TorchMaxPoolChannelsLast()
ChannelsLastViewCommand = PATCH.command
