"""What `torch-train-step-traced-gradients` inserts into the torch backend's trainer.py.

Parsed by the engine, never imported. Each function's body is one piece: `UPSTREAM` stands for
upstream's statements (a run), kept node for node. `traced_gradients` wraps `train_step`'s
`loss.backward()` and the two statements that read the gradients back; `trace_gradients` goes
right after `make_train_function`'s `torch.compile`; `helpers` is appended to the module.
"""
# ruff: noqa


def traced_gradients(self, loss):
    # forkgen: torch-train-step-traced-gradients (while compiling: torch.autograd.grad, which dynamo traces)
    if getattr(getattr(torch, "compiler", None), "is_compiling", bool)():
        trainable_weights = self.trainable_weights[:]
        gradients = _forkgen_traced_gradients(loss, trainable_weights)
    else:
        UPSTREAM


def trace_gradients(self):
    # forkgen: torch-train-step-traced-gradients (the compiled step traces its gradients: one graph)
    if type(self).train_step is TorchTrainer.train_step:
        self.train_function = _forkgen_trace_autograd_ops(self.train_function)


def helpers():
    # forkgen: torch-train-step-traced-gradients
    # The gradients `loss.backward()` leaves in the `.grad` of `trainable_weights` (which
    # `zero_grad()` has just cleared), by `torch.autograd.grad`, set in their `.grad` as backward
    # sets them: None for a weight that does not require grad or that the loss does not reach
    # (its `.grad` left as it is).
    def _forkgen_traced_gradients(loss, trainable_weights):
        values = [v.value for v in trainable_weights]
        wanted = [t for t in values if t.requires_grad]
        found = iter(torch.autograd.grad(loss, wanted, allow_unused=True) if wanted else ())
        gradients = [next(found) if t.requires_grad else None for t in values]
        for value, gradient in zip(values, gradients):
            if gradient is not None:
                value.grad = gradient
        return gradients


    # `function` (the compiled train step) run with dynamo's `trace_autograd_ops` on, when this
    # torch has the option; else `function` as it is.
    def _forkgen_trace_autograd_ops(function):
        config = getattr(getattr(torch, "_dynamo", None), "config", None)
        if not hasattr(config, "trace_autograd_ops"):
            return function
        return config.patch(trace_autograd_ops=True)(function)
