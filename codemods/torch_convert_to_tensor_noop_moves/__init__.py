"""Patch `torch-convert-to-tensor-noop-moves`: ours (forkgen issue 13, the train_step target);
no upstream change does this (keras-nightly 3.16.0.dev2026102704 calls both `.to()`s as 3.15.1).

The torch backend's `convert_to_tensor` ends its tensor branch (tensors and Variables' values)
with `x = x.to(device)` (`device = get_device()`, a str such as "cpu", which torch parses on
every call) and, when a dtype is given, `x = x.to(to_torch_dtype(dtype))`. Both return `x`
itself whenever nothing changes (aten's `to_will_alias`), yet cost about 0.3 and 0.6 us a call,
about 2% of a Transformer `train_on_batch` step. The patch skips each call exactly when torch
would return `x` itself, with a cheaper test, and otherwise makes the same call:

- only for an exact `torch.Tensor` or `torch.nn.Parameter` (Keras's Variables hold one): a
  subclass may override `.to`, `.device`, `.dtype` or `__torch_function__`, so it takes
  upstream's path untouched;
- only while no torch-function mode is active (a mode sees every `.to()` call; it is asked
  before `.device` / `.dtype` are read, which a mode would see too);
- only in eager code: while dynamo traces `convert_to_tensor` (`torch.compiler.is_dynamo_compiling()`,
  which dynamo answers True as it traces, bound once as `_forkgen_compiling`; `bool`, whose call
  is False, where torch has none) both moves are upstream's. Dynamo before torch 2.5 cannot
  trace the mode test (2.3 and 2.4 graph-break at it, "torch.* op returned non-Tensor bool"), and
  a traced graph gains nothing from a skipped no-op; so a compiled step records upstream's moves
  and splits where upstream's splits, on every torch (version 2; version 1 tested the mode while
  traced: 12 frames against upstream's 11 on torch 2.3.0, 21 against 4 on 2.4.0). The test costs
  about 0.02 us a call in eager code (a 4-layer Dense MLP: no change beyond the noise of
  interleaved runs);
- the device move: only for a str `device` whose `torch.device(device)` equals `x.device` when
  that names one device ("cpu" or a device with an index, "cuda:0"), or for exactly "cuda"
  when `x` is on the current cuda device. An index-less device means the *current* device of
  its kind (aten's `ensure_has_index`): for "cuda", `x.device.type == "cuda"` and
  `x.device.index == torch.cuda.current_device()`, asked at each such call, never remembered
  (`torch.cuda.set_device` and `torch.cuda.device(...)` change it), and only about a tensor on
  cuda (one exists only once CUDA is initialised; a torch without CUDA is never asked); every
  other index-less device ("mps", "xpu", ...) always calls `.to()`. "cpu:0" is not "cpu" for
  torch (`.to("cpu:0")` copies a cpu tensor): it always calls `.to()`, as does a string torch
  rejects (it raises as before). The parsed devices are kept in a module-level table of at
  most 64 entries; the "cpu" test is the same comparison as before (version 3 adds nothing
  where it holds). The `is_meta` branch (3.10+) is kept;
- the cast: only when `x.dtype is to_torch_dtype(dtype)` (torch dtypes are singletons), and
  `to_torch_dtype(dtype)` is still evaluated first, on every call (it raises for unsupported
  dtypes as before).

So values, dtype, device, requires_grad, grad_fn, memory format, identity and aliasing are
3.15.1's. Not guarded: code that replaces `torch.Tensor.to` itself (monkeypatching torch's
class) no longer sees the skipped calls, nor does code that replaces `torch.cuda.current_device`
with something torch itself does not follow. On a GPU with the index-less default "cuda"
(version 3; before, "cuda" always took the call, the test costing about 0.15 us on top), a
tensor already on the current device skips `.to("cuda")` (string parsing, CUDA's lazy-init
check, dispatch) for `torch.cuda.current_device()` (a Python call; not yet timed on a GPU);
one on another device pays that test on top of its copy.

Anchors: `x = x.to(device)` as the only statement of the `else` of `if x.is_meta:` (in both
shapes: under 3.15.1's `if x.device != device:` or without it, as `torch-convert-to-tensor-device`
and keras-nightly leave it; so no `requires`) and `x = x.to(to_torch_dtype(dtype))` as the only
statement of `if dtype is not None:`. The latter is 3.12.0's shape (3.0-3.11 return the cast from
two places): not applicable before. keras-nightly's `torch/ops/core.py` has the same anchors:
the patch applies there. No switch: the patched code gives 3.15.1's results.
"""

from __future__ import annotations

from codemods.engine import (
    TORCH_CORE_MOVED,
    TORCH_CORE_PY,
    Analysis,
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    Replace,
    Sources,
    Wrap,
    names_of,
)

FUNCTION = "convert_to_tensor"
DEVICE_MOVE = "x = x.to(device)"
DTYPE_MOVE = "x = x.to(to_torch_dtype(dtype))"
#: The builtins the inserted code calls: core.py must not bind these names at module level.
BUILTINS = ("type", "str", "len", "Exception", "getattr", "bool")


class TorchConvertToTensorNoopMoves(DeclaredPatch):
    name = "torch-convert-to-tensor-noop-moves"
    version = "3"
    headers = Headers(
        description="torch convert_to_tensor skips its `.to(device)` and `.to(dtype)` calls exactly where "
        "torch would return the tensor itself.",
        origin="ours",
        bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed",
        applied_upstream=None,
        last_update="2026-12-07",
    )
    files = (TORCH_CORE_PY,)
    moved = TORCH_CORE_MOVED
    since = "3.12.0"
    codemod = "SkipNoopMovesCommand"
    edits = (
        Wrap(Anchor(FUNCTION, DEVICE_MOVE, description=f"in {FUNCTION}: the `else` of `if x.is_meta:`"), "device_move"),
        Replace(Anchor(FUNCTION, DTYPE_MOVE, description=f"in {FUNCTION}: under `if dtype is not None:`"), "dtype_move"),
        Helper(Anchor("", f"def {FUNCTION}(___): ___", reported=False), "module_level", before=True),
    )
    #: Each move is the only statement of its block (upstream's, or forkgen's test holding it).
    relies_on = (
        Anchor(FUNCTION, f"if x.is_meta: ___\nelse: {DEVICE_MOVE}", name="if x.is_meta:", reported=False,
               alternatives=(f"if x.is_meta: ___\nelse:\n    if __: {DEVICE_MOVE}",)),
        Anchor(FUNCTION, f"if dtype is not None: {DTYPE_MOVE}", name="if dtype is not None:", reported=False,
               alternatives=("if dtype is not None:\n    _forkgen_dtype = to_torch_dtype(dtype)\n"
                             "    if __: x = x.to(_forkgen_dtype)",)),
    )
    details = Details(
        apply="test both `.to()` calls of convert_to_tensor for a no-op",
        present="convert_to_tensor skips no-op `.to()` calls (forkgen)",
        upstream="",
    )

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        # Semantic: the builtins the inserted code calls must still be the builtins.
        (found,) = analysis.files
        shadowed = sorted(set(BUILTINS) & names_of(found.module.body, into_defs=False)[1])
        if shadowed:
            raise AnchorDrift(found.path, 1, shadowed[0], "the builtin (the inserted code calls it)",
                              "a module-level binding")


PATCH = TorchConvertToTensorNoopMoves()
SkipNoopMovesCommand = PATCH.command
