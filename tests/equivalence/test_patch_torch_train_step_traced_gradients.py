"""Patch torch-train-step-traced-gradients on the installed fork (torch backend only).

While dynamo traces, the patched `TorchTrainer.train_step` takes its gradients from
`torch.autograd.grad` and sets them in each trainable weight's `.grad`, as `loss.backward()` does;
`make_train_function` runs the compiled step of a model that keeps the trainer's own
`train_step` with dynamo's `trace_autograd_ops` on. The oracle is the release under test: its own
`train_step` and `make_train_function` (`upstream.upstream`, tests/equivalence/upstream.py).

- Eager steps are upstream's, bit for bit: weights, optimizer state, `.grad`, logs.
- A compiled step (`jit_compile=True`, dynamo with AOTAutograd, "aot_eager": the graphs torch
  builds, without inductor's code generation, which would cost minutes here) has no graph break
  (upstream's breaks at `loss.backward()`; a model with a weight the loss does not reach breaks
  at the optimizer's warning about it, upstream's code), and gives what upstream's compiled step gives, within
  torch's float32 tolerances: weights, optimizer state, the `.grad` of every trainable weight,
  logs; also with weights that the loss does not reach or that do not require grad.
- After compiled steps Keras's call context is clear (a traced `backward()` leaves a gradient
  there on torch 2.13), and a model that overrides `train_step` with its own `backward()` keeps
  upstream's compiled step (the option off).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-train-step-traced-gradients"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-train-step-traced-gradients"),
    pytest.mark.skipif(not TORCH, reason="the patch changes the torch trainer only"),
]

if APPLIED and TORCH:
    import torch
    import torch._dynamo
    from keras.src.backend.common import global_state
    from torch._dynamo.utils import counters

    #: The module the patch rewrote (the torch backend's trainer.py).
    trainer = upstream.patched_module(NAME, "trainer.py")
    TRACES_BACKWARD = hasattr(torch._dynamo.config, "trace_autograd_ops")

STEPS = 3


class Extra(keras.layers.Layer):
    """A Dense-like layer with a weight its call never reads, and one whose value a test may
    make not require grad."""

    def build(self, input_shape: Any) -> None:
        self.kernel = self.add_weight(shape=(input_shape[-1], 4), initializer="glorot_uniform")
        self.scale = self.add_weight(shape=(4,), initializer="ones")
        self.unused = self.add_weight(shape=(3,), initializer="ones")

    def call(self, x: Any) -> Any:
        return keras.ops.matmul(x, self.kernel) * self.scale


class OwnStep(keras.Sequential):
    """A model whose `train_step` is its own: upstream's statements, `backward()` included."""

    def train_step(self, data: Any) -> Any:
        x, y, _ = data
        y_pred = self(x, training=True)
        self.zero_grad()
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        self._loss_tracker.update_state(loss, sample_weight=x.shape[0])
        loss.backward()
        trainable_weights = self.trainable_weights[:]
        gradients = [v.value.grad for v in trainable_weights]
        with torch.no_grad():
            self.optimizer.apply(gradients, trainable_weights)
        return self.compute_metrics(x, y, y_pred)


def model(kind: str = "dense", jit_compile: bool = False) -> Any:
    keras.utils.set_random_seed(7)
    cls = OwnStep if kind == "own step" else keras.Sequential
    last = Extra() if kind == "extra" else keras.layers.Dense(4)
    built = cls([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), last])
    built.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"], jit_compile=jit_compile)
    return built


def batches() -> list[tuple[Any, Any]]:
    rng = np.random.default_rng(3)
    return [(torch.tensor(rng.standard_normal((5, 6)).astype("float32")),
             torch.tensor(rng.standard_normal((5, 4)).astype("float32"))) for _ in range(STEPS)]


@contextmanager
def upstream_trainer() -> Iterator[None]:
    with upstream.upstream(trainer.TorchTrainer, "train_step"), \
            upstream.upstream(trainer.TorchTrainer, "make_train_function"):
        yield


@contextmanager
def aot_eager() -> Iterator[None]:
    """`torch.compile` with AOTAutograd and no inductor, fresh dynamo caches and counters."""
    torch._dynamo.reset()
    counters.clear()
    with mock.patch.object(torch, "compile", functools.partial(torch.compile, backend="aot_eager")):
        yield
    torch._dynamo.reset()


def train(built: Any, prepare: Any = None) -> dict[str, Any]:
    """Runs the steps; what they leave: logs, weights, optimizer variables, each trainable
    weight's `.grad`."""
    if prepare is not None:
        prepare(built)
    logs = [built.train_on_batch(x, y, return_dict=True) for x, y in batches()]
    return {
        "logs": logs,
        "weights": [v.value.detach().clone() for v in built.weights],
        "optimizer": [v.value.detach().clone() for v in built.optimizer.variables],
        "grads": [None if v.value.grad is None else v.value.grad.clone() for v in built.trainable_weights],
    }


def assert_same(got: dict[str, Any], expected: dict[str, Any], exact: bool) -> None:
    assert [sorted(d) for d in got["logs"]] == [sorted(d) for d in expected["logs"]]
    for a, b in zip(got["logs"], expected["logs"], strict=True):
        for key in a:
            assert (a[key] == b[key]) if exact else a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
    for part in ("weights", "optimizer", "grads"):
        assert len(got[part]) == len(expected[part]), part
        for a, b in zip(got[part], expected[part], strict=True):
            assert (a is None) == (b is None), part
            if a is None:
                continue
            if exact:
                assert torch.equal(a, b), part
            else:
                torch.testing.assert_close(a, b)


def freeze_scale(built: Any) -> None:
    built.layers[-1].scale.value.requires_grad_(False)


@pytest.mark.parametrize("kind", ["dense", "extra"])
def test_eager_steps_are_upstream_s(kind: str) -> None:
    got = train(model(kind))
    with upstream_trainer():
        expected = train(model(kind))
    assert_same(got, expected, exact=True)
    assert all(g is not None for g in got["grads"][:2])


@pytest.mark.parametrize(("kind", "prepare"), [("dense", None), ("extra", None), ("extra", freeze_scale)],
                         ids=["dense", "an unread weight", "a weight not requiring grad"])
def test_a_compiled_step_is_one_graph_and_gives_upstream_s(kind: str, prepare: Any) -> None:
    with aot_eager():
        got = train(model(kind, jit_compile=True), prepare)
        breaks = sum(counters["graph_break"].values())
    with aot_eager(), upstream_trainer():
        expected = train(model(kind, jit_compile=True), prepare)
        upstream_breaks = sum(counters["graph_break"].values())
    assert_same(got, expected, exact=False)
    assert upstream_breaks >= 1, "upstream's compiled step breaks at loss.backward()"
    if TRACES_BACKWARD and kind == "dense":  # (a gradient None: the optimizer's warning breaks the graph)
        assert breaks == 0, [reason.splitlines()[0] for reason in counters["graph_break"]]
    if kind == "extra":
        assert got["grads"][-1] is None, "a weight the loss does not reach keeps no gradient"
        assert (got["grads"][-2] is None) == (prepare is freeze_scale)


def test_the_call_context_is_clear_after_compiled_steps() -> None:
    with aot_eager():
        train(model(jit_compile=True))
        assert global_state.get_global_attribute("current_call_ctx") is None
        other = keras.layers.Dense(2)
        assert tuple(other(torch.ones((1, 3))).shape) == (1, 2)


def test_an_overridden_train_step_keeps_upstream_s_compiled_step() -> None:
    with aot_eager():
        got = train(model("own step", jit_compile=True))
        breaks = sum(counters["graph_break"].values())
        context = global_state.get_global_attribute("current_call_ctx")
    with aot_eager(), upstream_trainer():
        expected = train(model("own step", jit_compile=True))
    assert context is None, f"the call context holds {type(context).__name__} after the steps"
    assert breaks >= 1, "without the option dynamo breaks at the override's backward()"
    assert_same(got, expected, exact=False)


def test_the_option_is_on_for_the_compiled_step_only() -> None:
    seen = []
    built = model(jit_compile=True)
    with mock.patch.object(torch, "compile", lambda function: function):
        built.make_train_function(force=True)
    real_step = trainer.TorchTrainer.train_step

    def spy(self: Any, data: Any) -> Any:
        seen.append(getattr(torch._dynamo.config, "trace_autograd_ops", None))
        return real_step(self, data)

    x, y = batches()[0]
    with mock.patch.object(type(built), "train_step", spy):
        built.train_function([(x, y)])
    assert seen == [True if TRACES_BACKWARD else None]
    assert getattr(torch._dynamo.config, "trace_autograd_ops", False) is False
