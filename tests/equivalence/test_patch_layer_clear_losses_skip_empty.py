"""Patch layer-clear-losses-skip-empty on the installed fork (every backend).

`Layer._clear_losses` clears a layer's `_losses` and `_loss_ids` only when they are not empty,
or when their `clear()` might do something on an empty container (a class other than list, set,
TrackedList and TrackedSet; a class whose `clear` was replaced; an instance with a `clear` of its
own). The losses a model collects, and what each clear call does, must be what the release
under test's own, unpatched `_clear_losses` gives (`upstream.upstream`).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied, to_numpy

NAME = "layer-clear-losses-skip-empty"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply layer-clear-losses-skip-empty")

if APPLIED:
    from keras.src.utils import tracking

    layer_module = upstream.patched_module(NAME, "layers/layer.py")
    Layer = layer_module.Layer


def regularized_model() -> Any:
    keras.utils.set_random_seed(3)
    return keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(3, activity_regularizer="l2"),
        keras.layers.Dense(2),
    ])


def x() -> Any:
    return keras.ops.convert_to_tensor(np.arange(8, dtype="float32").reshape(2, 4) / 8)


def losses_after(clear: bool) -> list[Any]:
    model = regularized_model()
    model(x())
    collected = [to_numpy(v).tolist() for v in model.losses]
    if clear:
        model._clear_losses()
    return [collected, [to_numpy(v).tolist() for v in model.losses],
            [len(layer._losses) + len(layer._loss_ids) for layer in model._flatten_layers()]]


@pytest.mark.parametrize("clear", [False, True])
def test_collected_and_cleared_losses_are_upstream_s(clear: bool) -> None:
    got = losses_after(clear)
    with upstream.upstream(Layer, "_clear_losses"):
        expected = losses_after(clear)
    assert got == expected
    assert got[0], "the regularizer collected a loss"
    if clear:
        assert got[1] == [] and not any(got[2])


class Recording(list):
    """A list whose `clear` says it ran."""

    calls: list[str] = []

    def clear(self) -> None:
        Recording.calls.append("list")
        super().clear()


class RecordingSet(set):
    def clear(self) -> None:
        Recording.calls.append("set")
        super().clear()


def clears(prepare: Any) -> list[str]:
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    prepare(layer)
    Recording.calls = []
    layer._clear_losses()
    return list(Recording.calls)


# Set through the instance dict: the layer's `__setattr__` would wrap a list in a TrackedList.
def own_list(layer: Any) -> None:
    vars(layer)["_losses"] = Recording()


def own_set(layer: Any) -> None:
    vars(layer)["_loss_ids"] = RecordingSet()


def instance_clear(layer: Any) -> None:
    losses = tracking.TrackedList()
    losses.clear = lambda: Recording.calls.append("instance")
    vars(layer)["_losses"] = losses


@pytest.mark.parametrize("prepare", [own_list, own_set, instance_clear], ids=lambda f: f.__name__)
def test_an_empty_container_with_its_own_clear_is_still_cleared(prepare: Any) -> None:
    got = clears(prepare)
    with upstream.upstream(Layer, "_clear_losses"):
        expected = clears(prepare)
    assert got == expected and got


def test_a_replaced_tracked_clear_still_runs_on_an_empty_container(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tracking.TrackedList.clear

    def recording_clear(self: Any) -> None:
        Recording.calls.append("replaced")
        real(self)

    monkeypatch.setattr(tracking.TrackedList, "clear", recording_clear)

    def tracked(layer: Any) -> None:
        vars(layer)["_losses"] = tracking.TrackedList()

    assert clears(tracked) == ["replaced"]


def sequential() -> Any:
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])


def functional() -> Any:
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Add()([keras.layers.Dense(3)(hidden), hidden]))


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile")
@pytest.mark.parametrize("make", [sequential, functional], ids=lambda f: f.__name__)
def test_a_compiled_call_computes_as_eager_in_one_frame_compiled_once(make: Any) -> None:
    """The check traces without a graph break (a Functional model clears a plain set), and the
    compiled call is compiled once for three calls."""
    import torch
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    model = make()
    eager = to_numpy(model(x())).tolist()
    torch._dynamo.reset()
    counter = CompileCounter()
    try:
        compiled = torch.compile(lambda t: model(t, training=False), backend=counter)
        outputs = [to_numpy(compiled(x())).tolist() for _ in range(3)]
    finally:
        torch._dynamo.reset()
    assert outputs == [eager] * 3
    assert counter.frame_count == 1
