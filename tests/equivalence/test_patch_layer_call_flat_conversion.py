"""Patch layer-call-flat-conversion on the installed fork: flat args and kwargs are converted
without `tree.map_structure`, and the result is what 3.15.1's two calls give.

The reference is 3.15.1's step 1 restated here: `(tree.map_structure(f, args),
tree.map_structure(f, kwargs))` with the installed backend's tree. Compared on
hypothesis-generated flat and nested args/kwargs: the sequence of values `f` is called on
(identity, order), the returned objects (identity of each element), the type and key order of
the containers, that they are fresh, and the exception raised when `f` fails on some value.
Then through `Layer.__call__` of a small layer called with keyword tensors and masks: the
patched path against the same layer with the helper disabled (upstream's two lines).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from keras.src.layers import layer as layer_module

from tests.equivalence.helpers import get_mask, patch_applied, set_mask, to_numpy

APPLIED = patch_applied("layer-call-flat-conversion")
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply layer-call-flat-conversion")


def reference(f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """3.15.1's step 1 body."""
    tree = layer_module.tree
    return tree.map_structure(f, args), tree.map_structure(f, kwargs)


class Boom(Exception):
    pass


def recorder(fail_on: int | None) -> tuple[list[Any], Any]:
    calls: list[Any] = []

    def maybe_convert(x: Any) -> Any:
        calls.append(x)
        if fail_on is not None and len(calls) == fail_on:
            raise Boom(len(calls), id(x))
        return ("converted", len(calls))

    return calls, maybe_convert


def tensor(value: float) -> Any:
    return keras.ops.convert_to_tensor(np.full((2,), value, dtype="float32"))


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, width=32), st.text(max_size=3)
)
leaves = st.one_of(scalars, st.floats(-2, 2).map(tensor))
non_flat = st.one_of(
    st.lists(leaves, max_size=2),
    st.tuples(leaves),
    st.dictionaries(st.sampled_from("zyx"), leaves, max_size=2),
    st.just(np.ones((2,), "float32")) if keras.backend.backend() != "numpy" else st.lists(leaves, min_size=1, max_size=1),
)
keys = st.sampled_from(["mask", "cache", "cache_update_index", "training", "b", "a", "z", "attention_mask"])


def cases(values: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[tuple[Any, ...], dict[str, Any]]]:
    return st.tuples(st.lists(values, max_size=3).map(tuple), st.dictionaries(keys, values, max_size=5))


def compare(args: tuple[Any, ...], kwargs: dict[str, Any], fail_on: int | None) -> None:
    ref_calls, ref_f = recorder(fail_on)
    calls, f = recorder(fail_on)
    try:
        expected = reference(ref_f, args, kwargs)
        ref_error = None
    except Boom as error:
        expected, ref_error = None, error.args
    try:
        flat = layer_module._layer_call_convert_flat(f, args, kwargs)
        got = reference(f, args, kwargs) if flat is None else flat
        error = None
    except Boom as raised:
        got, error = None, raised.args
    assert [id(c) for c in calls] == [id(c) for c in ref_calls]
    assert error == ref_error
    if expected is None:
        return
    assert got is not None
    new_args, new_kwargs = got
    ref_args, ref_kwargs = expected
    assert type(new_args) is type(ref_args) is tuple
    assert type(new_kwargs) is type(ref_kwargs) is dict
    assert new_kwargs is not kwargs
    assert list(new_kwargs) == list(ref_kwargs) == list(kwargs)
    assert [id(a) for a in new_args] == [id(a) for a in ref_args] or new_args == ref_args
    assert new_args == ref_args
    assert new_kwargs == ref_kwargs
    for key in kwargs:
        if ref_kwargs[key] is kwargs[key]:
            assert new_kwargs[key] is kwargs[key]


@settings(max_examples=300, deadline=None)
@given(case=cases(leaves), fail_on=st.one_of(st.none(), st.integers(1, 8)))
def test_flat_calls_match_3_15_1(case: Any, fail_on: int | None) -> None:
    args, kwargs = case
    assert layer_module._layer_call_convert_flat(lambda x: x, args, kwargs) is not None
    compare(args, kwargs, fail_on)


@settings(max_examples=200, deadline=None)
@given(case=cases(st.one_of(leaves, non_flat)), fail_on=st.one_of(st.none(), st.integers(1, 8)))
def test_any_calls_match_3_15_1(case: Any, fail_on: int | None) -> None:
    compare(*case, fail_on)


def test_nested_values_take_upstream_path() -> None:
    for args, kwargs in [((tensor(1.0), [tensor(2.0)]), {}), ((tensor(1.0),), {"cache": (tensor(1.0),)})]:
        assert layer_module._layer_call_convert_flat(lambda x: x, args, kwargs) is None


def test_the_probe_matches_the_backend() -> None:
    # Measured: torch 2.13's pytree visits dicts in insertion order, optree in sorted key
    # order; both call the function on None.
    sorted_keys, none_visited = layer_module._layer_call_flat_tree()
    assert sorted_keys is (keras.backend.backend() != "torch")
    assert none_visited is True


class Block(keras.layers.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.received: list[Any] = []

    def call(self, x: Any, mask: Any = None, cache: Any = None, cache_update_index: Any = None, scale: Any = 1.0) -> Any:
        self.received.append((mask, cache, cache_update_index, scale))
        out = x * scale
        if cache is not None:
            out = out + cache
        return out


@contextlib.contextmanager
def upstream_path() -> Iterator[None]:
    original = layer_module._layer_call_convert_flat
    layer_module._layer_call_convert_flat = lambda maybe_convert, args, kwargs: None
    try:
        yield
    finally:
        layer_module._layer_call_convert_flat = original


def run(x: Any, kwargs: dict[str, Any]) -> tuple[Any, ...]:
    block = Block()
    out = block(x, **kwargs)
    (mask, cache, index, scale) = block.received[-1]
    return (
        to_numpy(out),
        None if get_mask(out) is None else to_numpy(get_mask(out)),
        None if cache is None else (to_numpy(cache), str(cache.dtype), type(cache).__name__),
        None if mask is None else (to_numpy(mask), str(mask.dtype)),
        index, type(index).__name__, scale, type(scale).__name__,
    )


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.floats(-3, 3, width=32), min_size=4, max_size=4),
    with_mask=st.booleans(),
    cache_as=st.sampled_from(["numpy64", "tensor", "none"]),
    index=st.one_of(st.none(), st.integers(0, 5)),
    scale=st.one_of(st.integers(1, 3), st.floats(0.5, 2.0)),
    order=st.permutations(["cache", "mask", "cache_update_index", "scale"]),
)
def test_layer_call_matches_upstream_path(data, with_mask, cache_as, index, scale, order) -> None:  # type: ignore[no-untyped-def]
    x = keras.ops.convert_to_tensor(np.array(data, "float32").reshape(2, 2))
    mask = keras.ops.convert_to_tensor(np.array([[True, False], [True, True]]))
    if with_mask:
        set_mask(x, mask)
    cache = {"numpy64": np.ones((2, 2)), "tensor": keras.ops.ones((2, 2)), "none": None}[cache_as]
    values = {"cache": cache, "mask": mask if with_mask else None, "cache_update_index": index, "scale": scale}
    kwargs = {k: values[k] for k in order}
    patched = run(x, kwargs)
    with upstream_path():
        upstream = run(x, kwargs)
    assert repr(patched) == repr(upstream)
