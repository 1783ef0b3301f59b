"""Patch functional-graph-fast-paths on the installed fork (every backend).

The oracle is the release under test: upstream's own `SymbolicArguments.fill_in` and
`Functional._standardize_inputs` (the two functions the patch changes), compiled from the
unpatched sources into the installed modules (`tests/equivalence/upstream.py`) and run on the
same objects.
(a) `SymbolicArguments.fill_in`: for hypothesis-generated arguments (tuples, lists, dicts, nested,
KerasTensors, a KerasTensor subclass, None, ints; keyword arguments empty or not; a `tensor_dict`
that knows some of the tensors), the installed `fill_in` must return what upstream's returns: the
same values by identity, the same container types, fresh containers where upstream's are fresh,
the same error where it raises.
(b) `Functional._standardize_inputs`: Functional models with one, list and dict inputs (and an
optional input) called with tensors, numpy arrays, Python lists and scalars, dicts, None, values
of a rank to expand or squeeze, and wrong structures: the installed method must return the same
tensors and emit the same warnings (messages compared) or raise the same error as upstream's on
the same model.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "functional-graph-fast-paths"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply functional-graph-fast-paths")

from keras.src import ops  # noqa: E402 - after the skip marker, as the others
from keras.src.backend import KerasTensor  # noqa: E402

if APPLIED:
    #: The two modules the patch rewrote (keras/src/ops/symbolic_arguments.py and
    #: keras/src/models/functional.py).
    SymbolicArguments = upstream.patched_module(NAME, "symbolic_arguments.py").SymbolicArguments
    Functional = upstream.patched_module(NAME, "functional.py").Functional


@functools.cache
def upstream_fill_in() -> Callable[..., Any]:
    """Upstream's `SymbolicArguments.fill_in` of the release under test."""
    return upstream.original(SymbolicArguments.fill_in)


@functools.cache
def upstream_standardize_inputs() -> Callable[..., Any]:
    """Upstream's `Functional._standardize_inputs` of the release under test (it calls the
    model's own helper methods, overrides included)."""
    return upstream.original(Functional._standardize_inputs)


class SubTensor(KerasTensor):
    """A KerasTensor subclass (keeps upstream's convert)."""


class Leafish(list):
    """A list subclass (a leaf for the torch and optree trees; lists_to_tuples makes it a tuple)."""


# -- (a) fill_in ------------------------------------------------------------------------------

def reference_fill_in(sa: Any, tensor_dict: dict[int, Any]) -> tuple[Any, Any]:
    """Upstream's `sa.fill_in(tensor_dict)`."""
    return upstream_fill_in()(sa, tensor_dict)  # type: ignore[no-any-return]


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as error:  # noqa: BLE001 - the error itself is compared
        return "raise", (type(error), str(error))


def same(a: Any, b: Any) -> bool:
    """Equal structure with exact container types and identical leaves."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a is b


POOL = [KerasTensor((2, 3)), KerasTensor((None, 4)), KerasTensor((1,)), SubTensor((2,))]
VALUES = [object() for _ in POOL]
leaves = st.sampled_from(POOL) | st.none() | st.integers(-3, 3)
structures = st.recursive(
    leaves,
    lambda inner: st.tuples(inner, inner) | st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from("abc"), inner, max_size=2),
    max_leaves=6,
)
positional = st.lists(st.sampled_from(POOL[:3]), max_size=4) | st.lists(structures, max_size=4)
keywords = st.just({}) | st.dictionaries(st.sampled_from(["k", "mask", "training"]), structures, max_size=2)


@settings(max_examples=300, deadline=None)
@given(args=positional, kwargs=keywords, known=st.sets(st.integers(0, len(POOL) - 1)))
def test_fill_in_matches_upstream(args: list[Any], kwargs: dict[str, Any], known: set[int]) -> None:
    tensor_dict = {id(POOL[i]): VALUES[i] for i in known}
    sa = SymbolicArguments(*args, **kwargs)
    got = outcome(lambda: sa.fill_in(tensor_dict))
    want = outcome(lambda: reference_fill_in(sa, tensor_dict))
    assert got[0] == want[0]
    if got[0] == "raise":
        assert got[1] == want[1]
        return
    assert same(got[1], want[1]), (got, want)
    (new_args, new_kwargs), (ref_args, ref_kwargs) = got[1], want[1]
    assert (new_args is sa.args) == (ref_args is sa.args)
    assert (new_kwargs is sa.kwargs) == (ref_kwargs is sa.kwargs)


def test_the_patch_is_in() -> None:
    for method in (SymbolicArguments.fill_in, Functional._standardize_inputs):
        assert f"# forkgen: {NAME}" in inspect.getsource(method)
        assert f"# forkgen: {NAME}" not in upstream.upstream_source(inspect.getmodule(method))


def test_fill_in_several_tensors_fresh_containers() -> None:
    """The case the fast path takes: plain tuple of exact KerasTensors, no kwargs."""
    a, b = POOL[0], POOL[1]
    sa = SymbolicArguments(a, b, a)
    got = sa.fill_in({id(a): "A"})
    assert got == (("A", None, "A"), {}) and type(got[0]) is tuple and got[0] is not sa.args
    assert got[1] is not sa.kwargs and same(got, reference_fill_in(sa, {id(a): "A"}))


# -- (b) _standardize_inputs ------------------------------------------------------------------

def reference_standardize(model: Any, inputs: Any) -> Any:
    """Upstream's `model._standardize_inputs(inputs)`."""
    return upstream_standardize_inputs()(model, inputs)


def observe(call: Callable[[], Any]) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = outcome(call)
    # torch's own C++ warnings are emitted once per process: not a difference between the two.
    messages = [f"{w.category.__name__}: {w.message}" for w in caught if "Triggered internally" not in str(w.message)]
    if result[0] == "ok":
        flat = [
            None if x is None else (type(x), tuple(x.shape), str(x.dtype), ops.convert_to_numpy(x).tolist())
            for x in result[1]
        ]
        return ("ok", type(result[1]), flat), messages
    return result, messages


def models() -> dict[str, Functional]:
    single = keras.Input((3,), name="x")
    column = keras.Input((3, 1), name="c")
    a, b = keras.Input((2,), name="a"), keras.Input((2,), name="b")
    opt = keras.Input((2,), name="o", optional=True)
    return {
        "single": keras.Model(single, keras.layers.Dense(2)(single)),
        "column": keras.Model(column, keras.layers.Flatten()(column)),
        "list1": keras.Model([single], keras.layers.Dense(2)(single)),
        "list2": keras.Model([a, b], keras.layers.Add()([a, b])),
        "dict": keras.Model({"b": b, "a": a}, keras.layers.Add()([a, b])),
        "optional": keras.Model(opt, keras.layers.Lambda(lambda t: t)(opt)),
    }


MODELS = models()


def values() -> list[Any]:
    x3 = np.arange(12, dtype="float32").reshape(4, 3)
    x2 = np.ones((4, 2), "float32")
    return [
        x3, ops.convert_to_tensor(x3), x3[:, :, None], x3[0], np.float32(2.0), 1.5, None, "text",
        x3.tolist(), [x3], (x3,), [x3, x3], (x2, x2), {"x": x3}, {"c": x3}, {"a": x2, "b": x2}, {"z": x3},
        Leafish([x3]), Leafish(), {"x": x3, "y": x2}, x2, ops.convert_to_tensor(x2), [x2, x2],
    ]


VALUES_B = values()


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(MODELS)), index=st.integers(0, len(VALUES_B) - 1))
def test_standardize_inputs_matches_upstream(name: str, index: int) -> None:
    model, inputs = MODELS[name], VALUES_B[index]
    got = observe(lambda: model._standardize_inputs(inputs))
    want = observe(lambda: reference_standardize(model, inputs))
    assert got == want


@pytest.mark.parametrize("inputs", [np.ones((4, 3), "float32"), Leafish([np.ones((4, 3), "float32")]), (1.0, 2.0)])
def test_warning_and_model_call_identical(inputs: Any) -> None:
    model = MODELS["single"]
    got, want = observe(lambda: model._standardize_inputs(inputs)), observe(lambda: reference_standardize(model, inputs))
    assert got == want
    if isinstance(inputs, Leafish):
        assert want[1] or want[0][0] == "raise", "upstream warns (or fails) on a list subclass"


def test_overridden_helpers_still_run() -> None:
    """Overrides of the two helper methods run on the fast path; an override of the warning
    method keeps upstream's path (and is called once, as upstream calls it)."""
    calls: list[str] = []

    class Converting(Functional):
        def _convert_inputs_to_tensors(self, flat_inputs: Any) -> Any:
            calls.append("convert")
            return super()._convert_inputs_to_tensors(flat_inputs)

        def _adjust_input_rank(self, flat_inputs: Any) -> Any:
            calls.append("adjust")
            return super()._adjust_input_rank(flat_inputs)

    class Warns(Converting):
        def _maybe_warn_inputs_struct_mismatch(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("warn")  # passed on as called: its parameters are the release's
            return super()._maybe_warn_inputs_struct_mismatch(*args, **kwargs)

    x = np.ones((2, 3), "float32")
    for cls, expected in ((Converting, ["convert", "adjust"]), (Warns, ["warn", "convert", "adjust"])):
        inp = keras.Input((3,))
        model = cls(inp, keras.layers.Dense(2)(inp))
        calls.clear()
        got = observe(lambda: model._standardize_inputs(x))  # noqa: B023 - called at once
        patched_calls = list(calls)
        calls.clear()
        want = observe(lambda: reference_standardize(model, x))  # noqa: B023 - called at once
        assert got == want and patched_calls == calls == expected


def test_model_call_values_unchanged() -> None:
    model = MODELS["single"]
    x = np.arange(6, dtype="float32").reshape(2, 3)
    expected = ops.convert_to_numpy(model(x))
    kernel, bias = (ops.convert_to_numpy(w) for w in model.layers[-1].weights)
    assert np.allclose(expected, x @ kernel + bias, atol=1e-5)
