"""Patch layer-call-training-only-conversion on the installed fork: calls whose only kwarg is
`training` skip the input conversion, and nothing observable changes.

The oracle is upstream's own `Layer.__call__` of the release under test, installed in place of
the patched one for a block (`upstream_path()`, i.e. `upstream.upstream(Layer, "__call__")`:
the fork with its `__call__` patches off): its conversion gate converts every call with
kwargs, and it makes no copy of the kwargs. That the patch's copy
(`elif kwargs and self._convert_input_args:`) runs only for the calls that took the skip, i.e.
that #23296's copy is not carried, shows in the Nodes recorded for layers that do not convert
their inputs (`test_node_records_the_kwargs_upstream_records`), compared with upstream's.

Compared per case, patched vs upstream: outputs, output masks, what `call()` received,
weights updated by the call, the recorded Nodes' arguments (kwargs included), `model.operations`
and `model.get_config()`; on every backend.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras.src.layers import layer as layer_module

from tests.equivalence import upstream
from tests.equivalence.helpers import get_mask, patch_applied, set_mask, to_numpy

APPLIED = patch_applied("layer-call-training-only-conversion")
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply layer-call-training-only-conversion")

BACKEND = keras.backend.backend()


@contextlib.contextmanager
def upstream_path() -> Iterator[None]:
    """Upstream's `Layer.__call__`: every call with kwargs converts, no kwargs copy."""
    with upstream.upstream(layer_module.Layer, "__call__"):
        yield


@contextlib.contextmanager
def counting_conversions() -> Iterator[list[int]]:
    """Counts the `tree.map_structure(maybe_convert, ...)` of `Layer.__call__`."""
    count = [0]
    real_tree = layer_module.tree

    def map_structure(func: Callable[..., Any], *structures: Any) -> Any:
        if getattr(func, "__name__", "") == "maybe_convert":
            count[0] += 1
        return real_tree.map_structure(func, *structures)

    proxy = types.SimpleNamespace(**{k: getattr(real_tree, k) for k in dir(real_tree) if not k.startswith("__")})
    proxy.map_structure = map_structure
    layer_module.tree = proxy
    # With `layer-call-flat-conversion`, a flat call is converted without the two walks: it
    # counts as the two conversions it stands for.
    real_flat = getattr(layer_module, "_layer_call_convert_flat", None)

    def convert_flat(maybe_convert: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        assert real_flat is not None
        converted = real_flat(maybe_convert, args, kwargs)
        if converted is not None:
            count[0] += 2
        return converted

    if real_flat is not None:
        layer_module._layer_call_convert_flat = convert_flat
    try:
        yield count
    finally:
        layer_module.tree = real_tree
        if real_flat is not None:
            layer_module._layer_call_convert_flat = real_flat


def described(value: Any) -> Any:
    """`value` with tensors replaced by comparable descriptions (KerasTensors by their history)."""
    if isinstance(value, keras.KerasTensor):
        history = getattr(value, "_keras_history", None)
        where = (history.operation.name, history.node_index, history.tensor_index) if history else None
        mask = get_mask(value)
        return ("KerasTensor", tuple(value.shape), value.dtype, where, described(mask) if mask is not None else None)
    if isinstance(value, dict):
        return {k: described(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(described(v) for v in value)
    if keras.ops.is_tensor(value):
        array = np.asarray(to_numpy(value))
        return ("tensor", array.dtype.str, array.shape, array.tobytes())  # bytes: NaN == NaN
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("numpy", type(value).__name__, value.item())
    return value


def seen(value: Any) -> Any:
    """`described(value)` for what `call()` receives: while a model is traced (jax, tensorflow),
    the backend's symbolic tensors, which have no value, are described by their type."""
    try:
        return described(value)
    except Exception:
        return ("traced", type(value).__name__)


# -- layers called eagerly ----------------------------------------------------------------------


class Recorder(keras.layers.Layer):
    """Records what its `call()` receives: the types and values of x and training."""

    def __init__(self, dtype: Any = None, **kwargs: Any) -> None:
        super().__init__(dtype=dtype, **kwargs)
        self.seen: list[Any] = []

    def call(self, x: Any, training: Any = None) -> Any:
        self.seen.append((type(x).__name__, seen(x), type(training).__name__, seen(training)))
        return x * 2


class NoTraining(keras.layers.Layer):
    """A call() without `training`: the CallSpec pops it from the kwargs it is handed."""

    def call(self, x: Any) -> Any:
        return x + 1


class Masked(keras.layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.supports_masking = True
        self.seen: list[Any] = []

    def call(self, x: Any, training: Any = None, mask: Any = None) -> Any:
        self.seen.append((seen(training), seen(mask)))
        return x - 1


def factories() -> dict[str, Callable[[], Any]]:
    return {
        "dense": lambda: keras.layers.Dense(3, kernel_initializer="ones", bias_initializer="ones"),
        "dropout": lambda: keras.layers.Dropout(0.5, seed=7),
        "batchnorm": lambda: keras.layers.BatchNormalization(),
        "recorder": Recorder,
        "recorder_f16": lambda: Recorder(dtype="float16"),
        "no_training": NoTraining,
        "masked": Masked,
    }


def inputs() -> dict[str, Callable[[], Any]]:
    base = np.arange(12, dtype="float32").reshape(4, 3) / 7.0
    return {
        "tensor_f32": lambda: keras.ops.convert_to_tensor(base),
        "tensor_f16": lambda: keras.ops.convert_to_tensor(base.astype("float16")),
        "tensor_int": lambda: keras.ops.convert_to_tensor(np.arange(12, dtype="int32").reshape(4, 3)),
        "numpy_f32": lambda: base.copy(),
        "numpy_f64": lambda: base.astype("float64"),
        "masked_tensor": lambda: _masked(keras.ops.convert_to_tensor(base)),
    }


def _masked(x: Any) -> Any:
    set_mask(x, keras.ops.convert_to_tensor(np.array([True, False, True, True])))
    return x


KWARGS: dict[str, dict[str, Any]] = {
    "none": {},
    "training_true": {"training": True},
    "training_false": {"training": False},
    "training_none": {"training": None},
    "training_np_bool": {"training": np.bool_(True)},
    "training_int": {"training": 1},
    # Other kwargs beside training: converted, as upstream does (a numpy mask becomes a tensor).
    "training_and_mask": {"training": True, "mask": np.array([True, False, True, True])},
    "mask_only": {"mask": np.array([True, True, False, True])},
}


def run(layer_name: str, input_name: str, kwargs_name: str) -> tuple[Any, ...]:
    """What a fresh layer does on two calls: outputs, masks, what call() saw, its weights."""
    keras.backend.clear_session()  # the same auto-generated names (in error messages) both times
    keras.utils.set_random_seed(1)
    layer = factories()[layer_name]()
    results: list[Any] = []
    for _ in range(2):
        x = inputs()[input_name]()
        try:
            y = layer(x, **dict(KWARGS[kwargs_name]))
        except Exception as error:  # the same error either way
            results.append(("raised", type(error).__name__, str(error)))
            continue
        mask = get_mask(y)
        results.append((described(y), described(mask) if mask is not None else None))
    seen = getattr(layer, "seen", None)
    weights = [described(w) for w in layer.get_weights()]
    return tuple(results), seen, weights


@pytest.mark.parametrize("kwargs_name", list(KWARGS))
@pytest.mark.parametrize("input_name", list(inputs()))
@pytest.mark.parametrize("layer_name", list(factories()))
def test_eager_calls_match_upstream(layer_name: str, input_name: str, kwargs_name: str) -> None:
    patched = run(layer_name, input_name, kwargs_name)
    with upstream_path():
        upstream = run(layer_name, input_name, kwargs_name)
    assert patched == upstream


@given(
    training=st.sampled_from([True, False, None, 0, 1, np.bool_(False), "yes"]),
    dtype=st.sampled_from(["float32", "float16", "int32", "bool"]),
    layer_dtype=st.sampled_from([None, "float16", "mixed_float16"]),
    shape=st.sampled_from([(2,), (3, 1), (1, 2, 2)]),
    as_numpy=st.booleans(),
)
def test_recorder_matches_upstream(training: Any, dtype: str, layer_dtype: Any, shape: tuple[int, ...],
                                   as_numpy: bool) -> None:
    def once() -> Any:
        layer = Recorder(dtype=layer_dtype)
        x = np.ones(shape, dtype)
        try:
            y = layer(x if as_numpy else keras.ops.convert_to_tensor(x), training=training)
        except Exception as error:
            return ("raised", type(error).__name__, str(error), layer.seen)
        return described(y), layer.seen

    patched = once()
    with upstream_path():
        assert patched == once()


def test_the_skip_is_taken_only_for_training_alone() -> None:
    x = keras.ops.ones((2, 3))
    dense = Masked()  # call(x, training=None, mask=None)
    dense(x)
    cases = [
        ({"training": True}, 0), ({"training": False}, 0), ({"training": None}, 0), ({}, 0),
        ({"training": np.bool_(True)}, 2), ({"training": 1}, 2), ({"training": True, "mask": None}, 2),
    ]
    for kwargs, expected in cases:
        with counting_conversions() as count:
            dense(x, **kwargs)
        assert count[0] == expected, kwargs
        with upstream_path(), counting_conversions() as count:
            dense(x, **kwargs)
        assert count[0] == (2 if kwargs else 0), kwargs
    with counting_conversions() as count:
        dense(np.ones((2, 3), "float32"), training=True)  # numpy input: still converted
    assert count[0] == (0 if BACKEND == "numpy" else 2)  # numpy arrays are the numpy backend's tensors


def test_a_policy_with_its_own_convert_input_is_still_called() -> None:
    calls: list[Any] = []

    class Policy(keras.dtype_policies.DTypePolicy):
        def convert_input(self, x: Any, autocast: Any, dtype: Any) -> Any:
            calls.append(type(x).__name__)
            return super().convert_input(x, autocast, dtype)

    layer = Recorder()
    layer.dtype_policy = Policy("float32")
    x = keras.ops.ones((2, 3))
    with counting_conversions() as count:
        layer(x, training=True)
    assert count[0] == 2 and len(calls) == 2
    instance = Recorder()
    instance.dtype_policy.convert_input = lambda x, autocast, dtype: calls.append("instance") or x
    with counting_conversions() as count:
        instance(x, training=True)
    assert count[0] == 2 and calls[-2:] == ["instance", "instance"]


def test_errors_match_upstream() -> None:
    def once() -> tuple[str, str]:
        layer = keras.layers.Dense(2, name="errors")
        layer(keras.ops.ones((2, 3)))
        with pytest.raises(Exception) as caught:
            layer(keras.ops.ones((2, 5)), training=True)
        return type(caught.value).__name__, str(caught.value)

    patched = once()
    with upstream_path():
        assert once() == patched


# -- functional construction: Nodes, operations, config -----------------------------------------


def node_arguments(model: Any) -> list[Any]:
    """Every layer's recorded Nodes: call args and kwargs, described."""
    recorded = []
    for layer in model._flatten_layers(include_self=False) if hasattr(model, "_flatten_layers") else model.layers:
        for node in layer._inbound_nodes:
            recorded.append((layer.name, described(node.arguments.args), described(node.arguments.kwargs)))
    return recorded


def functional(training: Any) -> Any:
    ints = keras.Input((5,), dtype="int32", name="ints")
    floats = keras.Input((5, 3), name="floats")
    pair = {"a": keras.Input((3,), name="a"), "b": keras.Input((3,), name="b")}
    kw = {} if training == "absent" else {"training": training}
    embedded = keras.layers.Embedding(10, 3, mask_zero=True, name="embedding")(ints, **kw)
    seq = keras.layers.LSTM(4, return_sequences=True, name="lstm", seed=1)(embedded, **kw)
    pooled = keras.layers.GlobalAveragePooling1D(name="gap")(seq, **kw)
    dropped = keras.layers.Dropout(0.3, name="dropout", seed=2)(pooled, **kw)
    normed = keras.layers.BatchNormalization(name="bn")(keras.layers.Flatten(name="flat")(floats), **kw)
    both = keras.layers.Concatenate(name="concat")([dropped, normed, pair["a"] + pair["b"]], **kw)
    attention = keras.layers.MultiHeadAttention(2, 2, name="mha", seed=3)
    attended = attention(floats, floats, **kw)
    noisy = keras.layers.GaussianNoise(0.1, name="noise", seed=4)(attended, **kw)
    recorder = Recorder(name="recorder")(both, **kw)
    masked = Masked()(embedded, **kw)
    plain = keras.layers.Dense(2, name="plain")(recorder)
    return keras.Model(
        {"ints": ints, "floats": floats, **pair}, [plain, noisy, masked], name="model"
    )


def sequential(training: Any) -> Any:
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, name="d1"), keras.layers.Dropout(0.5, seed=1, name="dr"),
         keras.layers.Dense(2, name="d2")],
        name="seq",
    )
    inputs = keras.Input((4,), name="outer_in")
    kw = {} if training == "absent" else {"training": training}
    outputs = keras.layers.Dense(2, name="after")(model(inputs, **kw), **kw)
    return keras.Model(inputs, outputs, name="outer")


def data() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "ints": rng.integers(0, 10, (4, 5)).astype("int32") * (np.arange(5) < 3),
        "floats": rng.normal(size=(4, 5, 3)).astype("float32"),
        "a": rng.normal(size=(4, 3)).astype("float32"),
        "b": rng.normal(size=(4, 3)).astype("float32"),
    }


def graph(builder: Callable[[Any], Any], training: Any) -> tuple[Any, ...]:
    keras.backend.clear_session()
    keras.utils.set_random_seed(5)
    model = builder(training)
    operations = [(type(op).__name__, op.name) for op in model.operations]
    outputs = model.outputs if isinstance(model.outputs, list) else [model.outputs]
    symbolic_masks = [described(get_mask(o)) for o in outputs]
    x = data() if builder is functional else np.ones((3, 4), "float32")
    ran = []
    for call_training in (True, False, None):
        keras.utils.set_random_seed(9)
        ys = model(x, training=call_training) if call_training is not None else model(x)
        ys = ys if isinstance(ys, list) else [ys]
        ran.append([(described(y), described(get_mask(y)) if get_mask(y) is not None else None) for y in ys])
    return model.get_config(), operations, node_arguments(model), symbolic_masks, ran


@pytest.mark.parametrize("training", [True, False, None, "absent"])
@pytest.mark.parametrize("builder", [functional, sequential], ids=["functional", "sequential"])
def test_graphs_match_upstream(builder: Callable[[Any], Any], training: Any) -> None:
    patched = graph(builder, training)
    with upstream_path():
        upstream = graph(builder, training)
    assert patched[0] == upstream[0]  # get_config()
    assert patched[1] == upstream[1]  # model.operations
    assert patched[2] == upstream[2]  # recorded Nodes
    assert patched[3] == upstream[3]  # symbolic output masks
    assert patched[4] == upstream[4]  # outputs and masks when run


def test_calls_without_kwargs_record_what_upstream_records() -> None:
    # Not nightly's unconditional copy: the mask and training that `__call__` writes into the
    # kwargs of a call without kwargs stay in its Node, as upstream's.
    patched = graph(functional, "absent")
    with upstream_path():
        expected = graph(functional, "absent")
    by_layer = {name: kwargs for name, _, kwargs in expected[2]}
    # The scenario holds what a copy would change: Nodes recording what was written into them.
    assert "mask" in by_layer["lstm"] and "training" in by_layer["lstm"], by_layer
    assert "mask" in by_layer["gap"] and "training" in by_layer["dropout"], by_layer
    assert any(kind == "NotEqual" for kind, _ in expected[1])
    assert patched[2] == expected[2]  # recorded Nodes
    assert patched[1] == expected[1]  # model.operations
    assert patched[0] == expected[0]  # get_config()


@pytest.mark.parametrize("training", [True, False, None])
def test_node_records_the_kwargs_upstream_records(training: Any) -> None:
    # Not #23296's copy: layers that do not convert their inputs, called with kwargs, record
    # what upstream records (keras-team/keras#23294, not fixed here: the dict `Layer.__call__`
    # wrote into). A nested Functional model does not convert its inputs, so the `training` it
    # resolved and the `mask` it injected land in its Node; a `_convert_input_args = False`
    # layer whose call() has no `training` records what the CallSpec popped it from; a layer
    # that converts records the kwargs as passed (its conversion made the dict that was written
    # into, and on the patched path the copy does).
    class Wrapper(NoTraining):
        def __init__(self) -> None:
            super().__init__(name="wrapper")
            self._convert_input_args = False

    def recorded() -> list[dict[str, Any]]:
        keras.backend.clear_session()
        inner_in = keras.Input((3,))
        inner = keras.Model(inner_in, keras.layers.Dropout(0.5)(inner_in), name="inner")
        assert not inner._convert_input_args
        x = keras.Input((3,))
        y = inner(x, training=training)
        z = Wrapper()(y, training=training)
        dense = keras.layers.Dense(2)
        dense(x, training=training)
        return [
            dict(inner._inbound_nodes[-1].arguments.kwargs),
            dict(z._keras_history.operation._inbound_nodes[-1].arguments.kwargs),
            dict(dense._inbound_nodes[-1].arguments.kwargs),
        ]

    with upstream_path():
        expected = recorded()
    # The scenario holds what a copy would change: the nested model's Node records the dict
    # its call wrote the mask into, the wrapper's the one `training` was popped from.
    assert "mask" in expected[0] and "training" not in expected[1], expected
    assert recorded() == expected


@pytest.mark.skipif(BACKEND != "torch", reason="torch tensors on the skip path")
def test_torch_tensor_identity_on_the_skip_path() -> None:
    import torch

    seen: list[Any] = []

    class Same(keras.layers.Layer):
        def call(self, x: Any, training: Any = None) -> Any:
            seen.append(x)
            return x

    x = torch.ones((2, 3))
    Same()(x, training=True)
    with upstream_path():
        Same()(x, training=True)
    assert seen[0] is x and seen[1] is x
