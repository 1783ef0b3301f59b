"""Synthetic modules shaped like Keras's trainers/trainer.py, torch/layer.py and ops/operation.py
around what `trainer-symbolic-build-skip` anchors on (written for these tests, not copied)."""

from __future__ import annotations

import textwrap

from tests.support import synthetic_operation_call_error_info as _operation

TRAINER_PY = "keras/src/trainers/trainer.py"
TORCH_LAYER_PY = "keras/src/backend/torch/layer.py"
OPERATION_PY = _operation.OPERATION_PY

TRAINER = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/trainers/trainer.py."""

    from keras.src import backend


    class Trainer:
        def __init__(self):
            self._compile_metrics = None
            self._compile_loss = None
            self.optimizer = None

        def _symbolic_build(self, iterator=None, data_batch=None):
            model_unbuilt = not all(layer.built for layer in self._flatten_layers())
            compile_metrics_unbuilt = (
                self._compile_metrics is not None and not self._compile_metrics.built
            )
            compile_loss_unbuilt = (
                self._compile_loss is not None and not self._compile_loss.built
            )
            optimizer_unbuilt = (
                self.optimizer is not None and not self.optimizer.built
            )
            if model_unbuilt or compile_metrics_unbuilt or compile_loss_unbuilt:
                backend.compute_output_spec(self, data_batch)
            if optimizer_unbuilt:
                # Build the optimizer.
                self.optimizer.build(self.trainable_variables)
            self._post_build()


    def model_supports_jit(model):
        return True
    '''
)

TORCH_LAYER = textwrap.dedent(
    '''\
    import torch

    from keras.src.backend.common.stateless_scope import in_stateless_scope


    class TorchLayer(torch.nn.Module):
        def _post_build(self):
            # Nothing to track without initialized variables.
            if in_stateless_scope():
                return
            self._track_variables()

        def _track_variables(self):
            self._torch_params = torch.nn.ParameterDict(
                {variable.path: variable.value for variable in self.variables}
            )
    '''
)

#: The synthetic operation.py of operation-call-error-info (whose class Operation runs to the end
#: of the file), with the `_post_build` hook appended to the class: one tree holds both.
OPERATION = _operation.OPERATION + textwrap.indent(
    textwrap.dedent(
        '''
        def _post_build(self):
            """A hook for the backends' layers."""
            pass
        '''
    ),
    "    ",
)

FILES = {TRAINER_PY: TRAINER, TORCH_LAYER_PY: TORCH_LAYER, OPERATION_PY: OPERATION}
