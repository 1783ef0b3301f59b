"""Patch `torch-train-step-traced-gradients` (ours, forkgen issue 27; keras-nightly carries the
same idea in other words, see below): a train step compiled with `jit_compile=True` on torch is
one graph, its gradients and the optimizer step included.

Upstream's `TorchTrainer.train_step` computes the gradients with `loss.backward()`, then reads
them back from each trainable weight's `.grad`. Dynamo does not trace `Tensor.backward()` (with
its default options), so `model.compile(jit_compile=True)` compiles every train step as two
graphs with a break between them ("Unsupported Tensor.backward() call"), and runs the backward
and the reading of `.grad` eagerly.

The patch changes two places of the torch trainer:
- `train_step`, while `torch.compiler.is_compiling()`: the gradients come from
  `torch.autograd.grad(loss, <the trainable weights that require grad>, allow_unused=True)`, and
  each one that is not None is set as its weight's `.grad`, which is what `loss.backward()`
  leaves there after `self.zero_grad()` (a weight that does not require grad, or that the loss
  does not reach: None, and its `.grad` left as it is). Eager calls run upstream's statements,
  node for node.
- `make_train_function`, right after `torch.compile(one_step_on_data)`: when the model keeps the
  trainer's own `train_step` (not an override) and this torch has dynamo's `trace_autograd_ops`
  option, the compiled function runs with that option on
  (`torch._dynamo.config.patch(trace_autograd_ops=True)`, for its calls only), so dynamo traces the
  `torch.autograd.grad` into the graph.

Why `torch.autograd.grad` and not `loss.backward()` with the option on: torch 2.13's traced
`backward()` reads the `.grad` that `zero_grad()` left None, and dynamo then gives its shared
None constant that `.grad` as its source; every None that the step stores afterwards (Keras's
call context, reset to None at the end of each layer call) is replayed as that weight's new
gradient, and the next layer call fails (`'Tensor' object has no attribute 'get_value'`).
`autograd.grad` reads no `.grad`. An overridden `train_step` may call `backward()`, hence no
option for it (its step keeps upstream's break); keras-nightly makes the same two choices.

Why it changes nothing else: eager `train_step` calls are upstream's code. Compiled, the
gradients are the same derivatives of the same loss with respect to the same tensors (computed in
the graph instead of by the eager autograd engine, within torch's compile tolerances), the
optimizer gets them in the same order, and each trainable weight's `.grad` holds them afterwards,
as after `backward()`. What differs from `backward()` under compile: tensors that require grad
but are not trainable weights of the model (an input built with `requires_grad=True`, a tensor a
layer closes over) get no `.grad` from the compiled step; a trainable weight that `zero_grad()`
does not clear (one that is not among the model's parameters) gets the step's gradient in its
`.grad` instead of the sum with the one it had.

keras-nightly 3.16.0.dev2026102704 (its trainer class is `Trainer` there) computes the gradients
with `torch.autograd.grad` whenever `jit_compile` is on, and sets no `.grad` (a behaviour change
the patch does not bring: 3.15.1's compiled step leaves the gradients in `.grad`).
`since = "3.0.0"`: every release's torch trainer has these statements.
"""

from __future__ import annotations

from codemods.engine import TORCH_TRAINER_PY as TRAINER_PY
from codemods.engine import Anchor, Append, DeclaredPatch, Details, Headers, InsertAfter, Wrap

#: Upstream's gradients: backward, then each weight's `.grad` read back.
GRADIENTS = (
    "loss.backward()\n"
    "trainable_weights = self.trainable_weights[:]\n"
    "gradients = [v.value.grad for v in trainable_weights]"
)
COMPILE = "self.train_function = torch.compile(one_step_on_data)"


class TorchTrainStepTracedGradients(DeclaredPatch):
    name = "torch-train-step-traced-gradients"
    version = "1"
    headers = Headers(
        description="a jit_compile'd torch train step computes its gradients with torch.autograd.grad "
        "(traced by dynamo, set in .grad as backward sets them): one graph instead of two.",
        origin="ours", bug="forkgen issue 27", forwarded="not-needed",
        applied_upstream=None, last_update="2026-12-05",
    )
    files = (TRAINER_PY,)
    since = "3.0.0"
    edits = (
        Wrap(Anchor("TorchTrainer.train_step", GRADIENTS, name="loss.backward() and the .grad read",
                    description="in TorchTrainer.train_step: backward, then .grad"),
             "traced_gradients", label="train_step's gradients", rebinds=("trainable_weights", "gradients")),
        InsertAfter(Anchor("TorchTrainer.make_train_function", COMPILE,
                           description="in TorchTrainer.make_train_function"),
                    "trace_gradients", label="make_train_function's torch.compile"),
        Append("helpers", label="the helpers"),
    )
    #: keras-nightly (its class is `Trainer`): autograd.grad while jit_compile is on.
    upstream_patterns = (
        Anchor("Trainer.train_step", "trainable_tensors = [v.value for v in trainable_weights]",
               name="loss.backward() and the .grad read", description="in Trainer.train_step: torch.autograd.grad"),
    )
    details = Details(
        apply="a compiled train step traces its gradients (torch.autograd.grad)",
        present="a compiled train step traces its gradients (forkgen)",
        upstream="a compiled train step takes torch.autograd.grad",
    )


PATCH = TorchTrainStepTracedGradients()
TorchTrainStepTracedGradientsCommand = PATCH.command
