"""Patch `torch-trainer-batch-size`: backport of keras-team/keras#23187 (merged upstream, in
keras-nightly 3.16.0.dev2026102704).

The torch trainer's `train_step` and `test_step` weigh the loss tracker's update by the batch
size, `next(i for i in tree.flatten(x) if i is not None).shape[0]`: for a single input tensor,
the common case, a walk through the tree implementation and a generator only to reach `x`.
Upstream now reads `x.shape[0]` when `isinstance(x, torch.Tensor)`. The patch reads it when

    type(x) is torch.Tensor and not tree.is_nested(x)

and otherwise keeps upstream's expression, node for node. Why that is exactly 3.15.1's value:
3.15.1's `tree.flatten(s)` begins `if not tree_impl.is_nested(s): return [s]`, and
`tree.is_nested` is that same `tree_impl.is_nested`; so for such an `x` the flatten is `[x]`, its
first non-None leaf is `x` (a tensor is not None), and the result is `x.shape[0]`, with the same
calls made on `x` (the tree's leaf test, then `.shape`), the same value and the same error
(`IndexError` for a 0-d tensor). In 3.12.0-3.14.x, `tree.flatten` on the torch backend is
torchtree's, which returns `[s]` for any `s` whose type torch's pytree registry lacks, the same
test `is_nested` makes.

Carried: the speed part only. Left out, with why:
- nightly's bare `isinstance(x, torch.Tensor)`: it differs from 3.15.1 when a tensor type is
  registered as a tree node (a subclass through `keras.tree.register_tree_node_class` or torch's
  pytree registry, or `torch.Tensor` itself): 3.15.1 then takes the batch size from the first
  leaf the registration gives. The `not tree.is_nested(x)` test keeps that (about 0.17 us of the
  0.6 us saved per step).
- `isinstance` itself: it reads `x.__class__` for objects that are not tensors, which runs code
  (a proxy or mock that claims to be a tensor) that 3.15.1 never ran. `type(x) is torch.Tensor`
  runs none, and is cheaper; tensor subclasses (`torch.nn.Parameter`, ...) take upstream's way.
- nightly's other changes on the same lines (`loss.detach()` in the update, DDP's
  `model = self.ddp_model or self`): other PRs, not speed fixes of this one.
Inputs that are lists, tuples, dicts, namedtuples, None, numpy arrays, Variables or anything but
an exact `torch.Tensor` go through upstream's expression unchanged, so a None leaf, a first leaf
that is not the batch-carrying one or a non-tensor leaf gives what it gave.

No switch: the equivalence needs no run-time state.

Keras 3.0.0-3.1.x update the loss tracker without a batch size, and 3.2.0-3.11.3 read it as
`tree.flatten(x)[0].shape[0]` (no None skip): not this change's target (`since = "3.12.0"`).
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.patchlib import Check, Headers, Outcome, Patch, Sources
from codemods.torch_trainer_batch_size.read_batch_size import (
    ABSENT,
    NAME,
    OURS,
    TRAINER_PY,
    TREE_INIT_PY,
    Analysis,
    ReadBatchSizeCommand,
    analyze,
    anchors,
    check_is_nested_exported,
)


def _analysis(sources: Sources) -> Analysis:
    return sources.analysed(NAME, TRAINER_PY, analyze)


class TorchTrainerBatchSize(Patch):
    name = NAME
    version = "1"
    headers = Headers(
        description="torch train_step/test_step read the batch size of a plain tensor input as x.shape[0], "
        "without tree.flatten (exact torch.Tensor that the tree treats as a leaf only).",
        origin="upstream, https://github.com/keras-team/keras/pull/23187",
        bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="https://github.com/keras-team/keras/pull/23187",
        applied_upstream="keras-nightly 3.16.0.dev2026102704",
        last_update="2026-12-01",
    )
    # The check also reads keras/src/tree/__init__.py (TREE_INIT_PY), which nothing rewrites.
    files = (TRAINER_PY,)
    codemods = (ReadBatchSizeCommand,)
    since = "3.12.0"

    def check(self, sources: Sources) -> Check:
        analysis = _analysis(sources)
        found = anchors(analysis)
        if analysis.state == ABSENT:
            check_is_nested_exported(sources.ast(TREE_INIT_PY))
            return Check(Outcome.APPLIED, "read x.shape[0] for a plain tensor in train_step and test_step", found)
        if analysis.state == OURS:
            check_is_nested_exported(sources.ast(TREE_INIT_PY))
            return Check(Outcome.APPLIED, "train_step and test_step read x.shape[0] (forkgen)", found, present=True)
        return Check(Outcome.UPSTREAM, "train_step and test_step read x.shape[0] for a torch.Tensor", found)

    def apply(self, sources: Sources) -> None:
        module = sources.module(TRAINER_PY)
        command = ReadBatchSizeCommand(CodemodContext(filename=TRAINER_PY), sources.ast(TRAINER_PY), _analysis(sources))
        sources.replace(TRAINER_PY, command.transform_module(module))


PATCH = TorchTrainerBatchSize()
__all__ = ["PATCH", "ReadBatchSizeCommand"]
