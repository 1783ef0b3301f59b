"""What `torch-trainer-batch-size` makes of the batch size the torch trainer hands its loss tracker.

Parsed by the engine, never imported. The piece is the value of the `sample_weight=` argument
below (the patch's anchor is that keyword argument): `UPSTREAM` stands for upstream's own
expression (the first non-None leaf of `tree.flatten(x)`, its `.shape[0]`), which the engine keeps
node for node as the `else` branch. The call around it is only there so that the piece is
indented as it will be in `train_step`/`test_step`; the comment is the marker forkgen recognises.

The guard takes `x.shape[0]` only where 3.15.1's `tree.flatten(x)` is `[x]` with `x` not None:
an object of exact type `torch.Tensor` (`type()` runs no code of `x`, unlike `isinstance`, which
may read a `__class__` property) that the tree does not treat as a structure (`tree.flatten`
returns `[x]` when `tree.is_nested(x)` is False; a registered tensor type is nested). Everything
else takes upstream's expression.
"""
# ruff: noqa


def loss_tracker_update(self, x, loss):
    self._loss_tracker.update_state(
        loss,
        sample_weight=(
            # forkgen: torch-trainer-batch-size (keras#23187: a leaf tensor is its batch)
            x.shape[0]
            if type(x) is torch.Tensor and not tree.is_nested(x)
            else UPSTREAM
        ),
    )
