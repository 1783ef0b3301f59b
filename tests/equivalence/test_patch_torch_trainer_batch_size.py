"""Patch torch-trainer-batch-size on the installed fork (torch backend only).

Upstream's `TorchTrainer.train_step` and `test_step` give the loss tracker
`next(i for i in tree.flatten(x) if i is not None).shape[0]`; the patch reads `x.shape[0]` for an
exact `torch.Tensor` that the tree treats as a leaf. The oracle is the release under test:
upstream's own `train_step`/`test_step`, compiled from the unpatched sources into the installed
module (`tests/equivalence/upstream.py`). The patched methods and upstream's, each run on a
stand-in model that records what the loss tracker gets, must give the same, or raise the same,
and touch the inputs the same way, for inputs of every shape: tensors of any rank, subclasses,
Parameters, numpy arrays, None, plain Python values, objects claiming to be tensors, nested in
lists, tuples, dicts and namedtuples, with tensor types registered as tree nodes or not. Real
models then train and evaluate with the same weighted loss as a by-hand computation (and as with
upstream's methods in place), eagerly and under `jit_compile=True`.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-trainer-batch-size"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-trainer-batch-size"),
    pytest.mark.skipif(not TORCH, reason="the patch changes the torch trainer only"),
]
#: The methods the patch changes.
METHODS = ("train_step", "test_step")

if APPLIED and TORCH:
    import torch
    from torch.utils import _pytree as torch_pytree

    #: The torch trainer the patch rewrote (keras/src/backend/torch/trainer.py).
    TorchTrainer = upstream.patched_module(NAME, "trainer.py").TorchTrainer

    class SubTensor(torch.Tensor):
        """A tensor subclass of the user's."""


@functools.cache
def upstream_method(method: str) -> Callable[..., Any]:
    """Upstream's `TorchTrainer.<method>` of the release under test."""
    return upstream.original(getattr(TorchTrainer, method))


@contextmanager
def patch_off() -> Iterator[None]:
    """TorchTrainer with upstream's `train_step` and `test_step` (the patch off)."""
    with contextlib.ExitStack() as stack:
        for method in METHODS:
            stack.enter_context(upstream.upstream(TorchTrainer, method))
        yield


#: What was done to the inputs themselves (`Probe`'s attribute reads), in order.
EVENTS: list[str] = []


class Probe:
    """Not a tensor, but claims to be one through `__class__` (as mocks and lazy proxies do);
    records every read of `__class__` and `shape`."""

    def __init__(self, *shape: int) -> None:
        self._shape = tuple(shape)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: PLE0307 - the point of the probe
        EVENTS.append("__class__")
        return torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        EVENTS.append("shape")
        return self._shape

    def __repr__(self) -> str:
        return f"Probe{self._shape}"


Pair = collections.namedtuple("Pair", ["second", "first"])


class Recorder:
    """The `self` of `train_step`/`test_step`: what they call on it, recording the loss tracker."""

    _call_has_training_arg = True
    optimizer = None
    trainable_weights: list[Any] = []

    def __init__(self) -> None:
        self.updates: list[tuple[Any, ...]] = []
        self._loss_tracker = self
        self.loss = torch.tensor(0.25)

    def __call__(self, x: Any, training: bool = False) -> Any:
        return self.loss

    def zero_grad(self) -> None:
        pass

    def _compute_loss(self, **kwargs: Any) -> Any:
        return self.loss

    def update_state(self, loss: Any, sample_weight: Any = None) -> None:
        self.updates.append((loss is self.loss, sample_weight, type(sample_weight)))

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        return list(self.updates)


def outcome(run: Callable[[], Any]) -> tuple[object, ...]:
    EVENTS.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result: tuple[object, ...] = ("ok", run())
    except Exception as error:  # the same error, with the same message
        result = ("raised", type(error), str(error))
    return (*result, list(EVENTS))


def patched(method: str, x: Any) -> tuple[object, ...]:
    return outcome(lambda: getattr(TorchTrainer, method)(Recorder(), (x, None, None)))


def reference(method: str, x: Any) -> tuple[object, ...]:
    """What upstream's `method` does with `x` on the same stand-in."""
    return outcome(lambda: upstream_method(method)(Recorder(), (x, None, None)))


@contextmanager
def registered(kind: type, children: Callable[[Any], list[Any]]) -> Iterator[None]:
    """`kind` as a tree node of torch's pytree (what keras.tree uses on torch) for a while.

    Registered in the Python pytree only, under a name of its own, and removed from exactly
    the tables the registration filled (torch's `_deregister_pytree_node` also drops the
    serialized name that types registered without one share)."""
    name = f"forkgen-test.{kind.__qualname__}"
    torch_pytree._private_register_pytree_node(
        kind, lambda t: (children(t), None), lambda leaves, _: leaves[0], serialized_type_name=name
    )
    try:
        yield
    finally:
        torch_pytree.SUPPORTED_NODES.pop(kind)
        torch_pytree.SUPPORTED_SERIALIZED_TYPES.pop(kind)
        torch_pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.pop(name)
        getattr(torch_pytree, "CONSTANT_NODES", set()).discard(kind)  # a torch before 2.4 has none


def test_the_patch_is_in() -> None:
    for method in METHODS:
        # The marker (the guard itself is judged by behaviour below, not by its text), which
        # the oracle, compiled from the release's own source, lacks.
        assert inspect.getsource(getattr(TorchTrainer, method)).count(f"# forkgen: {NAME}") == 1
    assert f"# forkgen: {NAME}" not in upstream.upstream_source(inspect.getmodule(TorchTrainer))


def tensors() -> st.SearchStrategy[Any]:
    shapes = st.lists(st.integers(0, 4), max_size=3)
    return st.one_of(
        shapes.map(lambda s: torch.zeros(s)),
        shapes.map(lambda s: torch.zeros(s, dtype=torch.int64)),
        shapes.map(lambda s: torch.nn.Parameter(torch.zeros(s))),
        shapes.map(lambda s: torch.zeros(s).as_subclass(SubTensor)),
        shapes.map(lambda s: np.zeros(s, dtype="float32")),
        shapes.map(lambda s: Probe(*s)),
    )


def structures() -> st.SearchStrategy[Any]:
    leaves = st.one_of(tensors(), st.none(), st.integers(-2, 2), st.text(max_size=2))
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
            st.tuples(inner, inner).map(lambda t: Pair(*t)),
        ),
        max_leaves=6,
    )


@given(x=structures() if APPLIED and TORCH else st.none(), method=st.sampled_from(["train_step", "test_step"]))
def test_like_upstream_on_any_input(x: Any, method: str) -> None:
    assert patched(method, x) == reference(method, x)


@given(
    x=structures() if APPLIED and TORCH else st.none(),
    method=st.sampled_from(["train_step", "test_step"]),
    kind=st.sampled_from(["plain", "subclass"]),
)
def test_like_upstream_when_a_tensor_type_is_a_tree_node(x: Any, method: str, kind: str) -> None:
    # Upstream flattens a registered tensor type: its batch size is then its first child's.
    with registered(torch.Tensor if kind == "plain" else SubTensor, lambda t: [np.zeros((7, 2))]):
        assert patched(method, x) == reference(method, x)


def cases() -> list[tuple[str, Any]]:
    t = torch.zeros
    return [
        ("tensor", t(5, 3)),
        ("0-d tensor", t(())),
        ("empty batch", t(0, 2)),
        ("parameter", torch.nn.Parameter(t(4))),
        ("subclass", t(6, 1).as_subclass(SubTensor)),
        ("numpy", np.zeros((3, 2))),
        ("None", None),
        ("probe", Probe(4, 2)),
        ("list led by None", [None, t(3)]),
        ("dict, batch under the second key", {"a": t(1), "b": t(6)}),
        ("tuple of one tensor", (t(2, 9),)),
        ("namedtuple", Pair(t(8), t(1))),
        ("int", 3),
    ]


CASES = cases() if APPLIED and TORCH else []


@pytest.mark.parametrize("method", ["train_step", "test_step"])
@pytest.mark.parametrize(("kind", "x"), CASES, ids=[kind for kind, _ in CASES])
def test_like_upstream_on_each_kind(kind: str, x: Any, method: str) -> None:
    expected = reference(method, x)
    assert patched(method, x) == expected
    if kind == "tensor":
        assert expected[1] == [(True, 5, int)]
    if kind == "probe":
        # Upstream never asks the probe for its __class__, only for its shape.
        assert expected == ("ok", [(True, 4, int)], ["shape"])


def test_a_registered_tensor_type_is_flattened_as_upstream_does() -> None:
    x = torch.zeros(5, 3)
    with registered(torch.Tensor, lambda t: [np.zeros((7,))]):
        assert reference("train_step", x) == reference("test_step", x) == ("ok", [(True, 7, int)], [])
        assert patched("train_step", x) == patched("test_step", x) == reference("train_step", x)
    sub = torch.zeros(5, 3).as_subclass(SubTensor)
    with registered(SubTensor, lambda t: [np.zeros((2,))]):
        assert patched("train_step", sub) == reference("train_step", sub) == ("ok", [(True, 2, int)], [])
        assert patched("test_step", sub) == reference("test_step", sub)


# -- real models: the tracked loss is the batch-size-weighted mean ----------------------------


def two_input_model() -> Any:
    a = keras.Input((3,), name="a")
    b = keras.Input((2,), name="b")
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))
    return keras.Model({"a": a, "b": b}, out)


def dense_model() -> Any:
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])


def by_hand(model: Any, xs: list[Any], ys: list[Any]) -> float:
    """Σ loss_b · n_b / Σ n_b over the batches (the loss tracker's weighted mean)."""
    total = count = 0.0
    for x, y in zip(xs, ys, strict=True):
        pred = model.predict_on_batch(x)
        n = len(y)
        total += float(np.mean((pred - y) ** 2)) * n
        count += n
    return total / count


def data(inputs: str) -> tuple[Any, Any, list[Any], list[Any]]:
    """10 samples in batches of 4, 4 and 2, with 3 features (a wrong axis would weigh 3, 3, 3)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 3)).astype("float32")
    extra = rng.normal(size=(10, 2)).astype("float32")
    y = rng.normal(size=(10, 1)).astype("float32")
    slices = [slice(0, 4), slice(4, 8), slice(8, 10)]
    if inputs == "tensor":
        return x, y, [x[s] for s in slices], [y[s] for s in slices]
    return {"a": x, "b": extra}, y, [{"a": x[s], "b": extra[s]} for s in slices], [y[s] for s in slices]


@pytest.mark.parametrize("inputs", ["tensor", "dict"])
def test_evaluate_and_train_weigh_each_batch_by_its_size(inputs: str) -> None:
    keras.utils.set_random_seed(1)
    model = dense_model() if inputs == "tensor" else two_input_model()
    model.compile(optimizer="sgd", loss="mse")
    x, y, batches, targets = data(inputs)
    expected = by_hand(model, batches, targets)
    logs = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    assert logs["loss"] == pytest.approx(expected, rel=1e-5)
    # The batch-size weights matter here: the plain mean of the three batch losses differs.
    plain = float(np.mean([by_hand(model, [b], [t]) for b, t in zip(batches, targets, strict=True)]))
    assert plain != pytest.approx(expected, rel=1e-5)
    # Training: train_step reads the same batch size; an SGD step with lr=0 leaves the weights,
    # so the epoch's tracked loss is the same weighted mean.
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0), loss="mse")
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    assert history.history["loss"][0] == pytest.approx(expected, rel=1e-5)
    # The same model and data with upstream's train_step/test_step in place (the steps look
    # them up on every call): the very same tracked losses (lr=0: the weights never move),
    # `test_on_batch` and `train_on_batch` included (what they report for one batch is the
    # release's own: 3.12's loss tracker keeps the evaluate before it, 3.15's does not).
    fork = tracked_losses(model, x, y, batches, targets)
    with patch_off():
        assert tracked_losses(model, x, y, batches, targets) == fork


def tracked_losses(model: Any, x: Any, y: Any, batches: list[Any], targets: list[Any]) -> list[float]:
    return [
        model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)["loss"],
        model.test_on_batch(batches[2], targets[2], return_dict=True)["loss"],
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False).history["loss"][0],
        model.train_on_batch(batches[2], targets[2], return_dict=True)["loss"],
    ]


def test_under_torch_compile() -> None:
    # jit_compile=True: Dynamo traces test_step, the guard included (evaluate only: compiling
    # the train step too would cost about a minute more on a small CPU box).
    keras.utils.set_random_seed(1)
    model = dense_model()
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    x, y, batches, targets = data("tensor")
    logs = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    assert logs["loss"] == pytest.approx(by_hand(model, batches, targets), rel=1e-5)
