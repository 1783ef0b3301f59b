"""Paths of the Keras modules that several patches read, in one place: a patch imports them from
the engine's face, never from another patch (a release that moves one is told here once)."""

from __future__ import annotations

#: The module of `Layer` (its `__call__`, the CallSpec and the call-time bookkeeping).
LAYER_PY = "keras/src/layers/layer.py"
#: Dtype inference and standardisation, and the `Variable` base.
DTYPES_PY = "keras/src/backend/common/dtypes.py"
VARIABLES_PY = "keras/src/backend/common/variables.py"
#: The torch backend's core module in 3.x releases, and where keras-nightly keeps it.
TORCH_CORE_PY = "keras/src/backend/torch/core.py"
NIGHTLY_TORCH_CORE_PY = "keras/src/backend/torch/ops/core.py"
#: The torch core module's move in keras-nightly, as a `DeclaredPatch.moved` entry.
TORCH_CORE_MOVED = {TORCH_CORE_PY: NIGHTLY_TORCH_CORE_PY}
#: The torch backend's nn module in 3.x releases, and where keras-nightly keeps it.
TORCH_NN_PY = "keras/src/backend/torch/nn.py"
NIGHTLY_TORCH_NN_PY = "keras/src/backend/torch/ops/nn.py"
#: The torch backend's trainer (`TorchTrainer`).
TORCH_TRAINER_PY = "keras/src/backend/torch/trainer.py"
#: The tree utilities' torch implementation (optree-free, since 3.6).
TORCHTREE_PY = "keras/src/tree/torchtree_impl.py"
#: The loss base (`reduce_values`) and the reduction metrics (`Mean`, `Sum`).
LOSS_PY = "keras/src/losses/loss.py"
REDUCTION_METRICS_PY = "keras/src/metrics/reduction_metrics.py"
