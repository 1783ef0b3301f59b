"""Patch `torch-trainer-batch-size`: backport of keras-team/keras#23187 (merged upstream, in
keras-nightly 3.16.0.dev2026102704).

The torch trainer's `train_step` and `test_step` weigh the loss tracker's update by the batch
size, `next(i for i in tree.flatten(x) if i is not None).shape[0]`: for a single input tensor, a
walk through the tree implementation and a generator only to reach `x`.
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
- nightly's other changes there (`loss.detach()`, DDP's `self.ddp_model`): other PRs.
Anything but an exact `torch.Tensor` leaf goes through upstream's expression unchanged. No
switch: the equivalence needs no run-time state. Keras 3.0.0-3.1.x update the loss tracker without
a batch size, 3.2.0-3.11.3 read `tree.flatten(x)[0].shape[0]` (no None skip): `since = "3.12.0"`.
"""

from __future__ import annotations

import libcst as cst

from codemods import engine
from codemods.engine import TORCH_TRAINER_PY as TRAINER_PY
from codemods.engine import (
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    ReplaceExpression,
    Sources,
    lines,
    names_of,
)

#: Read only (nothing rewrites it): the guard calls `tree.is_nested`, which `tree` must export.
TREE_INIT_PY = "keras/src/tree/__init__.py"
METHODS = ("train_step", "test_step")
FLATTEN = "next(i for i in tree.flatten(x) if i is not None).shape[0]"
#: The names the guard reads besides `x`, and how the module must bind each (`type`: never).
GUARD_NAMES = {"torch": "import torch", "tree": "from keras.src import tree", "type": None}


class TorchTrainerBatchSize(DeclaredPatch):
    name = "torch-trainer-batch-size"
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
    files = (TRAINER_PY,)
    codemod = "ReadBatchSizeCommand"
    since = "3.12.0"
    #: Each method's `sample_weight=` value goes where inserted.py's guard says `UPSTREAM`.
    edits = tuple(
        ReplaceExpression(Anchor(f"TorchTrainer.{method}", f"sample_weight={FLATTEN}", expression=True,
                                 description=f"in TorchTrainer.{method}'s loss tracker update"), "loss_tracker_update")
        for method in METHODS
    )
    #: keras-nightly since #23187 (its class is `Trainer` there): `isinstance(x, torch.Tensor)`.
    upstream_patterns = tuple(
        Anchor(f"Trainer.{method}", f"sample_weight=x.shape[0] if isinstance(x, torch.Tensor) else {FLATTEN}",
               expression=True, name=f"sample_weight={FLATTEN}", description=f"in Trainer.{method}'s loss tracker update")
        for method in METHODS
    )
    #: The loss tracker's argument; one trainer class; the guard's imports; tree_api's `is_nested`.
    relies_on = (
        *(Anchor(f"TorchTrainer.{method}", "self._loss_tracker.update_state(___, sample_weight=__)", expression=True,
                 reported=False) for method in METHODS),
        Anchor("", "class Trainer: ___", count=0, reported=False),
        *(Anchor("", how, reported=False) for how in GUARD_NAMES.values() if how),
        Anchor("", "from keras.src.tree.tree_api import is_nested", path=TREE_INIT_PY, reported=False),
    )
    details = Details("read x.shape[0] for a plain tensor in train_step and test_step",
                      "train_step and test_step read x.shape[0] (forkgen)",
                      "train_step and test_step read x.shape[0] for a torch.Tensor")

    def verify(self, sources: Sources, analysis: engine.Analysis) -> None:
        """Semantic (the engine only asks that a name be bound): the guard's `torch`, `tree`, `type`
        are the module, `keras.src.tree`, the builtin in both methods, `tree.is_nested` tree_api's."""
        module = sources.module(TRAINER_PY)
        for name, how in GUARD_NAMES.items():
            _bound_once(module, TRAINER_PY, name, 1 if how else 0, f"module-level {name}", how or "the builtin")
        for o in analysis.files[0].occurrences:
            scope = cst.ensure_type(o.scope, cst.FunctionDef)
            local = sorted(set(GUARD_NAMES) & names_of([scope.params, scope.body])[1])
            if local:
                raise AnchorDrift(TRAINER_PY, lines(module, [scope])[id(scope)], o.edit.anchor.scope,
                                  f"no local binding of {', '.join(GUARD_NAMES)}", f"`{local[0]}` bound")
        if sources.exists(TREE_INIT_PY):  # not when the command runs alone on the trainer
            _bound_once(sources.module(TREE_INIT_PY), TREE_INIT_PY, "is_nested", 1,
                        "from keras.src.tree.tree_api import is_nested", "that import")


def _bound_once(module: cst.Module, path: str, name: str, count: int, anchor: str, how: str) -> None:
    """Drift unless `count` module-level statements bind `name`."""
    found = [s for s in module.body if name in names_of([s], into_defs=False)[1]]
    if len(found) != count:
        at = lines(module, found)
        raise AnchorDrift(path, at[id(found[0])] if found else 1, anchor,
                          f"{'no' if not count else 'exactly one'} module-level binding of {name}, {how}",
                          ", ".join(f"line {at[id(s)]}" for s in found) or "none")


PATCH = TorchTrainerBatchSize()
ReadBatchSizeCommand = PATCH.command
