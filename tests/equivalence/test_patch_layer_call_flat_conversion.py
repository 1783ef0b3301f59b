"""Patch layer-call-flat-conversion on the installed fork: flat args and kwargs are converted
without `tree.map_structure`, and the result is what upstream's two calls give.

The oracle is upstream's own code of the release under test. For the helper: the body of the
conversion gate of upstream's `Layer.__call__` (its two `tree.map_structure` lines), read from
the unpatched source and compiled into the installed layer module as a function of
`(maybe_convert, args, kwargs)` (`upstream_conversion()`). Compared on hypothesis-generated
flat and nested args/kwargs: the sequence of values `f` is called on (identity, order), the
returned objects (identity of each element), the type and key order of the containers, that
they are fresh, and the exception raised when `f` fails on some value. Then through
`Layer.__call__` of a small layer called with keyword tensors and masks: the fork's
`__call__` against upstream's, installed in its place (`upstream.upstream(Layer, "__call__")`).
"""

from __future__ import annotations

import ast
import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from keras.src.layers import layer as layer_module

from tests.equivalence import upstream
from tests.equivalence.helpers import get_mask, patch_applied, set_mask, to_numpy

APPLIED = patch_applied("layer-call-flat-conversion")
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply layer-call-flat-conversion")


def _converts(statement: ast.stmt) -> bool:
    """`name = tree.map_structure(maybe_convert, name)`, upstream's conversion of args or kwargs."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return False
    call = statement.value
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "map_structure"
        and bool(call.args)
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == "maybe_convert"
    )


@functools.cache
def upstream_conversion() -> Callable[[Any, tuple[Any, ...], dict[str, Any]], tuple[Any, Any]]:
    """The body of upstream's conversion gate in `Layer.__call__` (the release under test,
    unpatched), as `f(maybe_convert, args, kwargs) -> (args, kwargs)`, compiled into the
    installed layer module's globals (its `tree` is the installed one)."""
    module = ast.parse(upstream.upstream_source(layer_module))
    layer = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "Layer")
    call = next(n for n in layer.body if isinstance(n, ast.FunctionDef) and n.name == "__call__")
    gates = [n for n in ast.walk(call) if isinstance(n, ast.If) and n.body and all(_converts(s) for s in n.body)]
    assert len(gates) == 1, f"upstream's Layer.__call__ has {len(gates)} conversion gates"
    targets = [s.targets[0] for s in gates[0].body]  # type: ignore[attr-defined]
    assert [getattr(t, "id", None) for t in targets] == ["args", "kwargs"], ast.unparse(gates[0])
    function = ast.parse("def _forkgen_upstream_conversion(maybe_convert, args, kwargs):\n    return args, kwargs\n")
    definition = function.body[0]
    assert isinstance(definition, ast.FunctionDef)
    definition.body[:0] = gates[0].body
    ast.fix_missing_locations(function)
    namespace: dict[str, Any] = {}
    exec(compile(function, "<upstream keras/src/layers/layer.py>", "exec"), layer_module.__dict__, namespace)  # noqa: S102
    converted: Callable[[Any, tuple[Any, ...], dict[str, Any]], tuple[Any, Any]] = namespace[definition.name]
    return converted


def reference(f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """Upstream's step 1 body: its two `tree.map_structure` lines."""
    return upstream_conversion()(f, args, kwargs)


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
def test_flat_calls_match_upstream(case: Any, fail_on: int | None) -> None:
    args, kwargs = case
    assert layer_module._layer_call_convert_flat(lambda x: x, args, kwargs) is not None
    compare(args, kwargs, fail_on)


@settings(max_examples=200, deadline=None)
@given(case=cases(st.one_of(leaves, non_flat)), fail_on=st.one_of(st.none(), st.integers(1, 8)))
def test_any_calls_match_upstream(case: Any, fail_on: int | None) -> None:
    compare(*case, fail_on)


def test_nested_values_take_upstream_path() -> None:
    for args, kwargs in [((tensor(1.0), [tensor(2.0)]), {}), ((tensor(1.0),), {"cache": (tensor(1.0),)})]:
        assert layer_module._layer_call_convert_flat(lambda x: x, args, kwargs) is None


def test_the_probe_matches_the_backend() -> None:
    # What the helper found out about the installed tree (e.g. torch 2.13's pytree visits a
    # dict in insertion order, optree in sorted key order; both call the function on None) is
    # what upstream's own conversion lines do with a dict of leaves, seen here on other keys.
    visited: list[Any] = []

    def record(x: Any) -> Any:
        visited.append(x)
        return x

    _, converted = reference(record, (), {"m": 1, "z": None, "a": 2})
    assert list(converted) == ["m", "z", "a"]
    # (sorted_keys, none_visited) by the order of the calls.
    modes = {(2, 1, None): (True, True), (2, 1): (True, False), (1, None, 2): (False, True), (1, 2): (False, False)}
    assert tuple(visited) in modes, visited
    assert layer_module._layer_call_flat_tree() == modes[tuple(visited)]


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
    """Upstream's `Layer.__call__` in place of the patched one (the fork with its `__call__`
    patches off)."""
    with upstream.upstream(layer_module.Layer, "__call__"):
        yield


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


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile")
def test_a_compiled_call_remembers_nothing_and_compiles_once() -> None:
    """While torch.compile traces, the memos are read, not written: a traced store would be
    replayed after every compiled call, and the guard on the key missing at trace time would
    recompile the next call. The MLP's Sequential call reaches the conversion for the first
    time while tracing when the eager call before took the fast lanes."""
    import torch
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])
    x = torch.ones(5, 4)
    eager = to_numpy(model(x, training=False)).tolist()
    saved = (dict(layer_module._LAYER_CALL_FLAT_TREE), dict(layer_module._LAYER_CALL_FLAT_LEAVES))
    layer_module._LAYER_CALL_FLAT_TREE.clear()
    layer_module._LAYER_CALL_FLAT_LEAVES.clear()
    torch._dynamo.reset()
    counter = CompileCounter()
    try:
        compiled = torch.compile(lambda t: model(t, training=False), backend=counter)
        outputs = [to_numpy(compiled(x)).tolist() for _ in range(3)]
        remembered = (dict(layer_module._LAYER_CALL_FLAT_TREE), dict(layer_module._LAYER_CALL_FLAT_LEAVES))
    finally:
        torch._dynamo.reset()
        layer_module._LAYER_CALL_FLAT_TREE.update(saved[0])
        layer_module._LAYER_CALL_FLAT_LEAVES.update(saved[1])
    assert outputs == [eager] * 3
    assert remembered == ({}, {})
    assert counter.frame_count == 1
