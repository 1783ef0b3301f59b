"""Patch functional-graph-run on the installed fork (every backend).

The oracle is the release under test: upstream's own `Function._run_through_graph` and
`Functional.call` (the two functions the patch changes), compiled from the unpatched sources
into the installed modules (`tests/equivalence/upstream.py`) and swapped in for a run.
Each model is run by the fork and by upstream on the same inputs and weights, the same seed:
the outputs must be equal bit for bit (same structure and types), every layer and raw operation
must be called in the same order with the same arguments (training, masks, other keyword
arguments, what a raw `Operation` receives as is), and the same exception must be raised after
the same calls. Covered: branches, a shared layer, a layer called with `training=` recorded in
its node, dict inputs, nested outputs, masks, a registered call-context argument, a nested model,
Sequential with and without `Input`, `keras.Function`, training None/True/False, symbolic calls
(a model built on another model), a node that cannot be computed (fewer inputs than the graph),
an error inside a layer; and each fallback: a class with its own `_get_operation_for_node`, a
model with an `_nnx_op_mapping`, `call_fn`, the default `operation_fn`, nested outputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "functional-graph-run"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply functional-graph-run")

from keras.src import backend, tree  # noqa: E402 - after the skip marker, as the others

if APPLIED:
    function_module = upstream.patched_module(NAME, "function.py")
    functional_module = upstream.patched_module(NAME, "functional.py")
    Function, Functional = function_module.Function, functional_module.Functional
else:  # only collected, to be skipped
    from keras.src.models.functional import Functional
    from keras.src.ops.function import Function

LOG: list[tuple[Any, ...]] = []


def described(value: Any) -> Any:
    """A loggable stand-in for a call argument: tensors by shape, the rest as they are."""
    if backend.is_tensor(value) or isinstance(value, np.ndarray):
        return ("tensor", tuple(value.shape))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [described(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, described(v)) for k, v in value.items()])
    return value


class Recorder(keras.layers.Layer):
    """Logs what its `call` receives (training, mask), then scales its input."""

    def __init__(self, factor: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.factor, self.fail = factor, False
        self.supports_masking = True

    def call(self, x: Any, training: Any = None, mask: Any = None) -> Any:
        LOG.append(("layer", self.name, training, mask is not None))
        if self.fail:
            raise RuntimeError(f"{self.name} fails")
        return x * self.factor


class TwoIn(keras.layers.Layer):
    def call(self, a: Any, b: Any, scale: Any = None, training: Any = None) -> Any:
        LOG.append(("two", self.name, training, scale))
        return a + b if scale is None else (a + b) * scale


class Moded(keras.layers.Layer):
    """A layer with a registered call-context argument `foo_mode`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._register_call_context_args("foo_mode")

    def call(self, x: Any, foo_mode: Any = None, training: Any = None) -> Any:
        LOG.append(("moded", self.name, foo_mode, training))
        return x + (0.0 if foo_mode is None else float(foo_mode))


class RawOp(keras.Operation):
    """A raw operation: what the graph passes reaches `call` untouched (no Layer resolution)."""

    def __init__(self, context: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if context is not None:
            self._call_context_args = context

    def call(self, x: Any, **kwargs: Any) -> Any:
        LOG.append(("raw", self.name, sorted((k, described(v)) for k, v in kwargs.items())))
        return x + 1.0

    def compute_output_spec(self, x: Any, **kwargs: Any) -> Any:
        return keras.KerasTensor(x.shape, x.dtype)


class OwnLookup(Functional):  # type: ignore[misc, valid-type]
    """A Functional whose class has its own `_get_operation_for_node` (a fallback)."""

    def _get_operation_for_node(self, node: Any) -> Any:
        LOG.append(("lookup", node.operation.name))
        return node.operation


class Leaf:
    """A computed value as compared: its type's name and its numpy copy (a leaf of every tree)."""

    def __init__(self, value: Any) -> None:
        self.kind, self.array = type(value).__name__, keras.ops.convert_to_numpy(value)


def values(x: Any) -> Any:
    return tree.map_structure(lambda v: None if v is None else Leaf(v), x)


def same(a: Any, b: Any) -> None:
    tree.assert_same_structure(a, b)
    assert type(a) is type(b)
    for x, y in zip(tree.flatten(a), tree.flatten(b), strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            assert x.kind == y.kind
            np.testing.assert_array_equal(x.array, y.array)
            assert x.array.dtype == y.array.dtype


@contextlib.contextmanager
def unpatched() -> Iterator[None]:
    with upstream.upstream(Function, "_run_through_graph"), upstream.upstream(Functional, "call"):
        yield


def outcome(make: Callable[[], Callable[[], Any]]) -> tuple[Any, ...]:
    keras.utils.set_random_seed(7)
    run = make()  # a new model each time: the same weights and dropout seed generators
    LOG.clear()
    try:
        result: tuple[Any, ...] = ("ok", values(run()))
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        result = ("raised", type(error), str(error))
    return (*result, list(LOG))


def check(make: Callable[[], Callable[[], Any]], fast: bool | None = True) -> tuple[Any, ...]:
    """Run what `make` returns (it builds its model) on the fork and on upstream: same result,
    same calls. `fast`: whether the fork must take (True) or skip (False) the fast node loop at
    least once (None: either)."""
    with mock.patch.object(function_module, "_forkgen_run_nodes", wraps=function_module._forkgen_run_nodes) as spy:
        ours = outcome(make)
    with unpatched():
        theirs = outcome(make)
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "ok":
        same(ours[1], theirs[1])
    else:
        assert ours[1:3] == theirs[1:3]
    assert ours[-1] == theirs[-1]
    if fast is not None:
        assert spy.called == fast
    return ours


def arr(*shape: int, offset: float = 0.0) -> Any:
    return keras.ops.convert_to_tensor(np.arange(np.prod(shape), dtype="float32").reshape(shape) / 10 + offset)


# -- models --------------------------------------------------------------------------------------

def branchy() -> Any:
    """Two inputs (a dict), a shared layer, a node recorded with training=True, a raw op with and
    one without call-context args, a two-input layer with a keyword argument, nested outputs."""
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    shared = Recorder(2.0, name="shared")
    x, y = shared(a), shared(b)
    z = TwoIn(name="two")(x, y, scale=3.0)
    t = Recorder(name="fixed")(z, training=True)
    r1 = RawOp(context={"training"}, name="raw_ctx")(t)
    r2 = RawOp(name="raw_plain")(y)
    w = keras.layers.Dropout(0.5, seed=1, name="drop")(r1)
    s = keras.layers.Add(name="add")([w, x])
    return keras.Model({"a": a, "b": b}, {"out": [s, (r2, z)], "d": keras.layers.Dense(3, name="dense")(s)})


def masked() -> Any:
    tokens = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(10, 4, mask_zero=True, name="embed")(tokens)
    x = Recorder(name="after_mask")(x)
    x = keras.layers.LSTM(3, name="lstm")(x)
    return keras.Model(tokens, keras.layers.Dense(2, name="dense")(x))


def moded() -> Any:
    a = keras.Input((4,))
    x = Moded(name="moded")(a)
    x = RawOp(context={"training", "foo_mode"}, name="raw_modes")(x)
    return keras.Model(a, Recorder(name="tail")(x))


def sequential(with_input: bool) -> Any:
    layers = [Recorder(name="s1"), keras.layers.Dense(5, name="s_dense"), keras.layers.Dropout(0.3, seed=2, name="s_drop"), Recorder(name="s2")]
    model = keras.Sequential([keras.Input((4,)), *layers] if with_input else layers)
    if not with_input:
        model.build((None, 4))
    return model


def nested() -> Any:
    """A model built on another model (its graph holds the inner model as one node)."""
    inner = sequential(True)
    a = keras.Input((4,))
    return keras.Model(a, Recorder(name="outer")(inner(a)))


# -- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("training", [None, True, False])
def test_branches_shared_layers_dict_inputs_nested_outputs(training: Any) -> None:
    inputs = {"a": arr(2, 4), "b": arr(2, 4, offset=1.0)}
    check(lambda: lambda: branchy()(inputs, training=training))
    check(lambda: lambda: branchy().call(inputs, training=training))


@pytest.mark.parametrize("training", [None, True, False])
def test_masks_and_sequential(training: Any) -> None:
    tokens = keras.ops.convert_to_tensor(np.array([[1, 2, 0, 0, 0], [3, 0, 0, 0, 0]], dtype="int32"))
    check(lambda: lambda: masked()(tokens, training=training))
    check(lambda: lambda: masked().call(tokens, training=training, mask=keras.ops.not_equal(tokens, 3)))
    for with_input in (True, False):
        check(lambda w=with_input: lambda: sequential(w)(arr(3, 4), training=training))
    check(lambda: lambda: nested()(arr(3, 4), training=training))


@pytest.mark.parametrize("mode", [None, 0, 2])
@pytest.mark.parametrize("training", [None, False])
def test_registered_context_argument(mode: Any, training: Any) -> None:
    check(lambda: lambda: moded().call(arr(2, 4), training=training, foo_mode=mode))
    check(lambda: lambda: moded().call(arr(2, 4), training=training, foo_mode=mode, other=None))


def failing() -> Any:
    bad = Recorder(name="bad")
    model = keras.Sequential([keras.Input((4,)), Recorder(name="ok1"), bad, Recorder(name="never")])
    bad.fail = True  # once built: the eager call fails
    return model


def test_a_node_that_cannot_be_computed_and_errors() -> None:
    context = function_module._ForkgenCallContext
    for training in (None, True):
        # one of two inputs: the nodes needing `b` are skipped, then an output is missing
        ours = check(lambda t=training: lambda: branchy()._run_through_graph(
            [arr(2, 4)], operation_fn=context(functional_module.operation_fn, {"training": t})))
        assert ours[0] == "raised"
        assert check(lambda t=training: lambda: failing()(arr(2, 4), training=t))[0] == "raised"
    check(lambda: lambda: sequential(True)(arr(2, 3)), fast=None)  # rejected before the graph runs


def own_lookup() -> Any:
    a = keras.Input((4,))
    return OwnLookup(a, RawOp(name="raw_own")(Recorder(name="r1")(a)))


def with_nnx_mapping() -> Any:
    model = branchy()
    target = next(op for op in model._operations if op.name == "raw_plain")
    object.__setattr__(model, "_nnx_op_mapping", {id(target): RawOp(context={"training"}, name="stand_in")})
    return model


def test_fallbacks_and_symbolic_runs() -> None:
    check(lambda: lambda: own_lookup()(arr(2, 4), training=True), fast=False)
    ours = check(lambda: lambda: with_nnx_mapping()({"a": arr(2, 4), "b": arr(2, 4)}, training=False), fast=False)
    assert ("raw", "stand_in", [("training", False)]) in ours[-1]  # upstream used the mapping

    def function(many: bool) -> Any:
        a = keras.Input((4,))
        x = Recorder(name="r1")(a)
        return keras.Function(a, [x, RawOp(name="raw_fn")(x)] if many else x)

    # keras.Function (the default operation_fn), symbolic calls, call_fn, a model in a model
    check(lambda: lambda: function(True)(arr(2, 4)), fast=False)
    check(lambda: lambda: function(False)(arr(2, 4)), fast=False)
    check(lambda: lambda: function(False)(keras.KerasTensor((None, 4))), fast=False)
    spec = {"a": keras.KerasTensor((None, 4)), "b": keras.KerasTensor((None, 4))}
    check(lambda: lambda: branchy()(spec), fast=None)
    check(lambda: lambda: branchy().compute_output_spec(spec), fast=False)

    def model_of_model() -> Any:
        a = keras.Input((4,))
        return keras.Model(a, nested()(a))

    check(lambda: lambda: model_of_model()(arr(2, 4), training=True))
    check(lambda: lambda: branchy()._run_through_graph(
        [arr(2, 4), arr(2, 4)], call_fn=lambda op, *args, **kwargs: [None] * len(tree.flatten(op.output))), fast=False)
