"""What `torch-train-step-traced-gradients` makes of torch trainer modules shaped like Keras's (run
by tests/unit/test_patch_cases.py), the breaks of its inserted code the equivalence suite must
catch, and the synthetic trainer.py of the series' synthetic tree (a copy of the one of
`torch-trainer-batch-size`'s cases, which this patch does not require, with the gradient
statements and a `make_train_function` shaped like Keras 3.0-3.15's: written for these tests, only
the anchored statements follow Keras)."""

import textwrap

from codemods.engine import Case, Mutant, piece_text

TRAINER_PY = "keras/src/backend/torch/trainer.py"
HEAD = '''\
import torch


class TorchTrainer(base_trainer.Trainer):
    def train_step(self, data):
        x, y = data
        loss = self._compute_loss(x=x, y=y, y_pred=self(x, training=True))
        if self.trainable_weights:
'''
GRADIENTS = '''\
            loss.backward()

            trainable_weights = self.trainable_weights[:]
            gradients = [v.value.grad for v in trainable_weights]
'''
STEP_END = '''\

            with torch.no_grad():
                self.optimizer.apply(gradients, trainable_weights)
        return self.compute_metrics(x, y)

    def make_train_function(self, force=False):
        def one_step_on_data(data):
            return self.train_step(data[0])

        if self._should_torch_compile():
            self.train_function = torch.compile(one_step_on_data)
'''
TAIL = '''\
        else:
            self.train_function = one_step_on_data
'''
BEFORE = HEAD + GRADIENTS + STEP_END + TAIL
AFTER = (HEAD + piece_text(__file__, "traced_gradients", " " * 12, upstream=GRADIENTS) + STEP_END
         + piece_text(__file__, "trace_gradients", " " * 12) + TAIL + "\n\n" + piece_text(__file__, "helpers"))
#: keras-nightly 3.16.0.dev2026102704's words: class `Trainer`, autograd.grad while jit_compile is on.
NIGHTLY = BEFORE.replace("class TorchTrainer(base_trainer.Trainer):", "class Trainer(base_trainer.Trainer):").replace(
    GRADIENTS, '''\
            trainable_weights = self.trainable_weights[:]
            if self.jit_compile:
                trainable_tensors = [v.value for v in trainable_weights]
                gradients = torch.autograd.grad(loss, trainable_tensors, allow_unused=True)
            else:
                loss.backward()
                gradients = [v.value.grad for v in trainable_weights]
''')

CASES = (
    Case("the gradients traced while compiling, the compiled step with the option", BEFORE, AFTER,
         detail="a compiled train step traces its gradients (torch.autograd.grad)",
         anchors=(("loss.backward() and the .grad read", 9), ("self.train_function = torch.compile(one_step_on_data)", 23))),
    Case("keras-nightly's autograd.grad", NIGHTLY, upstream=True),
    Case("a release that reads the gradients otherwise",
         BEFORE.replace("[v.value.grad for v in trainable_weights]", "[v.grad for v in trainable_weights]"),
         drift="loss.backward() and the .grad read"),
    Case("a release that compiles another function",
         BEFORE.replace("torch.compile(one_step_on_data)", "torch.compile(self.train_step)"),
         drift="self.train_function = torch.compile(one_step_on_data)"),
    Case("a module that binds a helper's name", BEFORE + "\n\ndef _forkgen_traced_gradients():\n    pass\n",
         drift="_forkgen_traced_gradients"),
)

MUTANTS = (
    Mutant("the gradients not set in .grad", "                value.grad = gradient", "                pass"),
    Mutant("the option on for an overridden train_step too",
           "    if type(self).train_step is TorchTrainer.train_step:", "    if True:"),
    Mutant("no gradient for weights the loss does not reach",
           "torch.autograd.grad(loss, wanted, allow_unused=True)", "torch.autograd.grad(loss, wanted)"),
    Mutant("every weight asked for, requiring grad or not",
           "        wanted = [t for t in values if t.requires_grad]", "        wanted = values"),
)

#: The series' synthetic trainer.py: both patches' anchors (the package markers and the tree's
#: is_nested export come with torch-trainer-batch-size's `FILES`).
FILES = {
    TRAINER_PY: textwrap.dedent(
        '''\
        """Synthetic stand-in for keras/src/backend/torch/trainer.py (train_step and test_step)."""

        import warnings

        import torch

        from keras.src import tree


        class TorchTrainer:
            def __init__(self):
                self.train_function = None

            def train_step(self, data):
                x, y, sample_weight = data

                # Compute predictions
                y_pred = self(x, training=True)
                loss = self._compute_loss(
                    x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
                )
                self._loss_tracker.update_state(
                    loss,
                    sample_weight=next(
                        i for i in tree.flatten(x) if i is not None
                    ).shape[0],
                )
                if self.optimizer is not None:
                    loss = self.optimizer.scale_loss(loss)
                    loss.backward()

                    trainable_weights = self.trainable_weights[:]
                    gradients = [v.value.grad for v in trainable_weights]
                    with torch.no_grad():
                        self.optimizer.apply(gradients, trainable_weights)
                else:
                    warnings.warn("no optimizer")
                return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

            def test_step(self, data):
                (
                    x,
                    y,
                    sample_weight,
                ) = data
                y_pred = self(x, training=False)
                loss = self._compute_loss(
                    x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
                )
                self._loss_tracker.update_state(
                    loss,
                    sample_weight=next(
                        i for i in tree.flatten(x) if i is not None
                    ).shape[0],
                )
                return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

            def predict_step(self, data):
                x, _, _ = data
                return self(x, training=False)

            def make_train_function(self, force=False):
                def one_step_on_data(data):
                    return self.train_step(data[0])

                if self._should_torch_compile():
                    self.train_function = torch.compile(one_step_on_data)
                else:
                    self.train_function = one_step_on_data
        '''
    ),
}
#: Not a mutant: the eager step through `torch.autograd.grad` too (no `is_compiling()` test). Eagerly,
#: autograd.grad and backward() run the same autograd graph into the same leaves, and the tests
#: cannot tell the two (the patch keeps eager steps on upstream's statements so that they stay
#: upstream's code, not because the values would differ).
