"""Patch trainer-symbolic-build-skip on the installed fork (every backend).

Upstream's `Trainer._symbolic_build` always ends with `self._post_build()`; the fork returns
before it when the four `*_unbuilt` flags are False and `_forkgen_post_build_is_noop(self)` says
that call would change nothing. The oracle is the release under test: upstream's own
`_symbolic_build`, compiled from the unpatched sources into the installed module
(`tests/equivalence/upstream.py`). Twin models run the same steps, one with the installed
`_symbolic_build`, the other with upstream's: after every step their observable state must
match. On torch that is the model's `named_parameters()` and `_torch_params` (names, order, and
which variable's current value each parameter *is*), through plain train/test/predict steps,
variables whose `_value` was replaced, weights added after building, `_post_build`/
`_track_variables` overrides (call counts) and stateless scopes, in hypothesis-chosen sequences.
On jax/tensorflow/numpy `_post_build` is `Operation`'s `pass`: the helper says so, and overrides
are still called on every step.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "trainer-symbolic-build-skip"
APPLIED = patch_applied(NAME)
BACKEND = keras.backend.backend()
TORCH = BACKEND == "torch"
#: The numpy backend cannot train: its "train" steps evaluate (test_on_batch) instead.
TRAINS = BACKEND != "numpy"
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply trainer-symbolic-build-skip")

if APPLIED:
    from keras.src.backend.common.stateless_scope import StatelessScope

    #: The module the patch rewrote (keras/src/trainers/trainer.py).
    trainer_module = upstream.patched_module(NAME, "trainers/trainer.py")

#: Model-building examples are slow: a tenth of the profile's examples, at least 20.
EXAMPLES = max(20, settings.default.max_examples // 10)


@functools.cache
def upstream_symbolic_build() -> Any:
    """Upstream's `Trainer._symbolic_build` of the release under test: the four flags, the build
    of what is unbuilt, then `self._post_build()` whatever was built."""
    return upstream.original(trainer_module.Trainer._symbolic_build)


class Growing(keras.layers.Layer):
    """A layer that can add a (non-trainable: the optimizer knows its variables) weight after it was built."""

    def build(self, input_shape: Any) -> None:
        self.kernel = self.add_weight(shape=(input_shape[-1], 2), name="kernel")
        self.grown = 0

    def grow(self) -> None:
        self.grown += 1
        self._tracker.unlock()
        try:
            setattr(self, f"extra{self.grown}", self.add_weight(shape=(1,), name=f"extra{self.grown}", trainable=False))
        finally:
            self._lock_state()

    def call(self, x: Any) -> Any:
        return keras.ops.matmul(x, self.kernel)


class Counting(keras.Model):
    """Counts the calls of `_post_build` (in its `__dict__`, past the trackers)."""

    def _post_build(self) -> None:
        counts = self.__dict__.setdefault("counts", {"post_build": 0})
        counts["post_build"] += 1
        super()._post_build()


class CountingTrack(keras.Model):
    """Counts the calls of `_track_variables` (torch's; other backends have none to call)."""

    def _track_variables(self) -> None:
        self.__dict__.setdefault("tracks", [0])[0] += 1
        super()._track_variables()  # type: ignore[misc]  # torch's TorchLayer method


def make(kind: str = "plain", reference: bool = False) -> Any:
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, name="dense")(inputs)
    outputs = Growing(name="growing")(hidden)
    model_class = {"plain": keras.Model, "post_build": Counting, "track": CountingTrack}[kind]
    model = model_class(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    # The numpy trainer has its own `_symbolic_build` (which the patch leaves alone): there both
    # twins run it.
    if reference and type(model)._symbolic_build is trainer_module.Trainer._symbolic_build:
        model.__dict__["_symbolic_build"] = types.MethodType(upstream_symbolic_build(), model)
    return model


X = np.linspace(-1, 1, 32, dtype="float32").reshape(8, 4)
Y = np.linspace(0, 1, 16, dtype="float32").reshape(8, 2)


def step(model: Any, kind: str) -> None:
    if kind == "train" and TRAINS:
        model.train_on_batch(X, Y)
    elif kind in ("train", "test"):
        model.test_on_batch(X, Y)
    else:
        model.predict_on_batch(X)


def state(model: Any) -> Any:
    """What the model shows: on torch, names and order of `named_parameters()` and of
    `_torch_params`, each value named by the variable whose current value it is (or "other")."""
    owner = {id(v.value): v.path for v in model.variables}
    counts = dict(model.__dict__.get("counts", {})), list(model.__dict__.get("tracks", []))
    if not TORCH:
        return [v.path for v in model.variables], counts
    params = model.__dict__["_modules"].get("_torch_params")
    held = None if params is None else [(k, owner.get(id(p), "other")) for k, p in params.items()]
    named = [(name, owner.get(id(p), "other")) for name, p in model.named_parameters()]
    return held, named, counts


def replace_value(model: Any) -> None:
    """Replace a variable's `_value` (as a user or a library may) with an equal new tensor."""
    variable = model.get_layer("dense").kernel
    if TORCH:
        import torch

        variable._value = torch.nn.Parameter(variable.value.detach().clone(), requires_grad=variable.trainable)
    else:
        variable.assign(variable.value)


def act(model: Any, action: str) -> None:
    if action in ("train", "test", "predict"):
        step(model, action)
    elif action == "replace":
        replace_value(model)
    elif action == "grow":
        model.get_layer("growing").grow()
    elif action == "stateless":
        with StatelessScope():
            model._symbolic_build(data_batch=(X, Y))


def twins(kind: str, actions: list[str]) -> None:
    fork, reference = make(kind), make(kind, reference=True)
    for index, action in enumerate(actions):
        act(fork, action)
        act(reference, action)
        assert state(fork) == state(reference), (index, action)


ACTIONS = st.lists(st.sampled_from(["train", "test", "predict", "replace", "grow", "stateless"]), min_size=1, max_size=8)


@settings(max_examples=EXAMPLES)
@given(actions=ACTIONS, kind=st.sampled_from(["plain", "post_build", "track"]))
def test_twins_show_the_same_state_after_every_action(actions: list[str], kind: str) -> None:
    twins(kind, ["train", *actions, "train"])


@pytest.mark.parametrize(
    "actions",
    [
        ["train", "train", "test", "predict", "train"],
        ["train", "replace", "train", "train"],
        ["train", "grow", "train", "grow", "test"],
        ["predict", "stateless", "replace", "stateless", "predict"],
    ],
)
@pytest.mark.parametrize("kind", ["plain", "post_build", "track"])
def test_scenarios(kind: str, actions: list[str]) -> None:
    twins(kind, actions)


def test_the_patch_is_in() -> None:
    assert f"# forkgen: {NAME}" in inspect.getsource(trainer_module.Trainer._symbolic_build)
    assert f"# forkgen: {NAME}" not in upstream.upstream_source(trainer_module)


def test_the_twin_runs_upstreams_build() -> None:
    # The reference twin's `_symbolic_build` is upstream's (where the backend's trainer uses
    # `Trainer`'s at all), so the comparisons below are fork against upstream.
    fork, reference = make(), make(reference=True)
    if type(fork)._symbolic_build is trainer_module.Trainer._symbolic_build:
        assert reference._symbolic_build.__func__ is upstream_symbolic_build()
    assert "_symbolic_build" not in fork.__dict__


def test_post_build_overrides_are_still_called_every_step() -> None:
    model = make("post_build")
    before = model.__dict__["counts"]["post_build"]
    for action in ("train", "train", "test", "predict", "predict"):
        step(model, action)
    if BACKEND != "tensorflow":
        # At least one call per train_on_batch/test_on_batch (predict_on_batch has no
        # _symbolic_build). TensorFlow's *_on_batch build only under a distribution strategy
        # (`_maybe_symbolic_build`): there the count must only equal upstream's, below.
        assert model.__dict__["counts"]["post_build"] - before >= 3
    reference = make("post_build", reference=True)
    before_reference = reference.__dict__["counts"]["post_build"]
    for action in ("train", "train", "test", "predict", "predict"):
        step(reference, action)
    assert reference.__dict__["counts"]["post_build"] - before_reference == model.__dict__["counts"]["post_build"] - before
    assert trainer_module._forkgen_post_build_is_noop(model) is False


def test_the_helper_answers() -> None:
    model = make()
    step(model, "train")
    step(model, "train")
    if not TORCH:
        # Operation._post_build is `pass`.
        assert trainer_module._forkgen_post_build_is_noop(model) is True
        return
    held = model.__dict__["_modules"]["_torch_params"]
    if type(held.__dict__.get("_parameters")) is not dict:
        # This torch's ParameterDict keeps its parameters in another mapping (an OrderedDict,
        # before torch's modules held plain dicts): the helper reads only a plain dict, so it
        # declines, and upstream's `_post_build` runs every step (replacing the ParameterDict).
        assert trainer_module._forkgen_post_build_is_noop(model) is False
        step(model, "train")
        assert model.__dict__["_modules"]["_torch_params"] is not held
        assert trainer_module._forkgen_post_build_is_noop(make("track")) is False
        return
    # A built model whose ParameterDict is current: the skip is taken, and the ParameterDict
    # object is kept (upstream would have replaced it by an equal fresh one: the one difference).
    assert trainer_module._forkgen_post_build_is_noop(model) is True
    step(model, "train")
    assert model.__dict__["_modules"]["_torch_params"] is held
    replace_value(model)
    assert trainer_module._forkgen_post_build_is_noop(model) is False
    step(model, "train")
    assert model.__dict__["_modules"]["_torch_params"] is not held
    assert trainer_module._forkgen_post_build_is_noop(model) is True
    fresh = make()
    # A functional model tracks its variables when built at construction.
    assert trainer_module._forkgen_post_build_is_noop(fresh) is True
    del fresh.__dict__["_modules"]["_torch_params"]
    assert trainer_module._forkgen_post_build_is_noop(fresh) is False  # upstream would build one
    with StatelessScope():
        assert trainer_module._forkgen_post_build_is_noop(fresh) is True
    assert trainer_module._forkgen_post_build_is_noop(make("track")) is False
