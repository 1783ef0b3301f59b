"""Patch input-spec-single-fast-path on the installed fork: `assert_input_compatibility` passes
and raises exactly as upstream's does.

The oracle is upstream's own `assert_input_compatibility` of the release under test, compiled
from the unpatched source into the installed module and put in its place for a block
(`upstream_path()`, i.e. `upstream.upstream(input_spec_module, "assert_input_compatibility")`).
Compared on a large generated set of InputSpecs (ndim, min_ndim, max_ndim, shape with None,
axes, dtype, allow_last_axis_squeeze, name, optional) and inputs (backend tensors,
KerasTensors, numpy arrays, None, non-tensors, one-element lists, dicts): the same pass or
raise, the same exception type and message. On every backend. That the fast path is taken
(no `tree.flatten`) is a property of the patch, counted against upstream's flattens.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from keras.src.layers import input_spec as input_spec_module

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

APPLIED = patch_applied("input-spec-single-fast-path")
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply input-spec-single-fast-path")

InputSpec = keras.InputSpec


def check(input_spec: Any, inputs: Any, layer_name: str) -> None:
    """`assert_input_compatibility` as the module has it now (the fork's, or upstream's in a block)."""
    input_spec_module.assert_input_compatibility(input_spec, inputs, layer_name)


@contextlib.contextmanager
def upstream_path() -> Iterator[None]:
    """Upstream's `assert_input_compatibility`, unpatched, for every call."""
    with upstream.upstream(input_spec_module, "assert_input_compatibility"):
        yield


@contextlib.contextmanager
def counting_flattens() -> Iterator[list[int]]:
    count = [0]
    real = input_spec_module.tree

    def flatten(structure: Any) -> Any:
        count[0] += 1
        return real.flatten(structure)

    proxy = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    proxy.flatten = flatten
    input_spec_module.tree = proxy
    try:
        yield count
    finally:
        input_spec_module.tree = real


def result(input_spec: Any, inputs: Any) -> tuple[Any, ...]:
    try:
        check(input_spec, inputs, "layer_name")
    except Exception as error:
        return (type(error).__name__, str(error))
    return ("passed",)


def both(input_spec: Any, inputs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    patched = result(input_spec, inputs)
    with upstream_path():
        upstream = result(input_spec, inputs)
    return patched, upstream


# -- generated specs and inputs -----------------------------------------------------------------

DIMS = st.sampled_from([None, 1, 2, 3])
CONCRETE = st.sampled_from([1, 2, 3])
DTYPES = st.sampled_from(["float32", "int32", "bool", "float16"])
SPEC_KWARGS = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.sampled_from([None, "float32", "int32"]),
        "shape": st.none() | st.lists(DIMS, max_size=4).map(tuple),
        "ndim": st.none() | st.integers(0, 4),
        "max_ndim": st.none() | st.integers(0, 4),
        "min_ndim": st.none() | st.integers(0, 4),
        "axes": st.none() | st.dictionaries(st.integers(-4, 3), st.none() | st.integers(1, 3), max_size=2),
        "allow_last_axis_squeeze": st.booleans(),
        "name": st.sampled_from([None, "a", "b"]),
        "optional": st.booleans(),
    },
)


def make_input(kind: str, shape: tuple[int, ...], dtype: str, symbolic_dims: tuple[Any, ...]) -> Any:
    if kind == "tensor":
        return keras.ops.zeros(shape, dtype=dtype)
    if kind == "numpy":
        return np.zeros(shape, dtype=dtype)
    if kind == "keras_tensor":
        return keras.KerasTensor(symbolic_dims, dtype=dtype)
    if kind == "none":
        return None
    return "not a tensor"


LEAF = st.builds(
    make_input,
    st.sampled_from(["tensor", "numpy", "keras_tensor", "none", "text"]),
    st.lists(CONCRETE, max_size=4).map(tuple),
    DTYPES,
    st.lists(DIMS, max_size=4).map(tuple),
)
INPUTS = LEAF | st.lists(LEAF, min_size=1, max_size=2) | st.dictionaries(st.sampled_from(["a", "b"]), LEAF,
                                                                         min_size=1, max_size=2)


def spec_or_skip(kwargs: dict[str, Any]) -> Any:
    try:
        return InputSpec(**kwargs)
    except Exception:
        return None


@settings(max_examples=1500, deadline=None)
@given(kwargs=SPEC_KWARGS, inputs=INPUTS, form=st.sampled_from(["single", "single", "single", "list", "nested"]))
def test_same_pass_or_raise_as_upstream(kwargs: dict[str, Any], inputs: Any, form: str) -> None:
    spec = spec_or_skip(kwargs)
    if spec is None:
        return
    input_spec = {"single": spec, "list": [spec], "nested": [[spec]]}[form]
    patched, upstream = both(input_spec, inputs)
    assert patched == upstream


SPECS = [
    {}, {"ndim": 2}, {"min_ndim": 2}, {"max_ndim": 1}, {"dtype": "int32"}, {"shape": (None, 3)},
    {"shape": (None, 5), "allow_last_axis_squeeze": True}, {"shape": (None, 1), "allow_last_axis_squeeze": True},
    {"ndim": 3, "allow_last_axis_squeeze": True}, {"axes": {-1: 3}}, {"min_ndim": 2, "axes": {-1: 3}},
    {"axes": {3: 2}}, {"axes": {-3: 2}}, {"name": "a", "optional": True}, {"optional": True, "shape": (None, 3)},
    {"shape": (2, None, 1), "dtype": "float32", "allow_last_axis_squeeze": True},
]
SHAPES: list[tuple[int, ...]] = [(), (3,), (1,), (2, 3), (2, 1), (2, 5), (4, 3, 1), (2, 3, 3), (1, 1, 1, 1)]


@pytest.mark.parametrize("kind", ["tensor", "numpy", "keras_tensor"])
@pytest.mark.parametrize("spec_kwargs", SPECS, ids=[str(s) for s in SPECS])
def test_every_shape_and_dtype(spec_kwargs: dict[str, Any], kind: str) -> None:
    spec = InputSpec(**spec_kwargs)
    for shape in SHAPES:
        for dtype in ("float32", "int32", "bool"):
            x = make_input(kind, shape, dtype, shape if kind != "keras_tensor" else (None, *shape[1:]))
            for inputs in (x, [x], (x,), {"a": x}):
                patched, upstream = both(spec, inputs)
                assert patched == upstream, (spec_kwargs, shape, dtype, type(inputs))
    for odd in (None, "text", 3, [None]):
        assert both(spec, odd)[0] == both(spec, odd)[1]


def flattens(input_spec: Any, inputs: Any, reference: bool = False) -> tuple[int, tuple[Any, ...]]:
    """How many `tree.flatten` calls one check makes, and its result."""
    with contextlib.ExitStack() as stack:
        if reference:
            stack.enter_context(upstream_path())
        count = stack.enter_context(counting_flattens())
        outcome = result(input_spec, inputs)
    return count[0], outcome


def test_the_fast_path_skips_the_flattens_and_errors_still_come_from_upstream() -> None:
    spec = InputSpec(min_ndim=2, axes={-1: 3})
    cases = [
        (spec, keras.ops.zeros((2, 3)), True),  # passes: the fast path
        (spec, keras.KerasTensor((None, 3)), True),
        (spec, keras.ops.zeros((2, 4)), False),  # raises: upstream's checks
        ([spec], keras.ops.zeros((2, 3)), False),  # not a single InputSpec: upstream's way
    ]
    for input_spec, x, fast in cases:
        count, outcome = flattens(input_spec, x)
        upstream_count, upstream_outcome = flattens(input_spec, x, reference=True)
        assert outcome == upstream_outcome
        assert upstream_count > 0
        assert count == (0 if fast else upstream_count), (input_spec, x)
    assert flattens(spec, keras.ops.zeros((2, 4)))[1][0] == "ValueError"
    assert "expected axis -1" in flattens(spec, keras.ops.zeros((2, 4)))[1][1]


def test_squeeze_and_out_of_range_axes_as_upstream() -> None:
    # Where releases differ (3.15.1 passes (None, 1) against (None, 5) under
    # allow_last_axis_squeeze and raises IndexError for an out-of-range axis; nightly raises
    # ValueError for both): whatever the release under test does, the fork does.
    squeeze = InputSpec(shape=(None, 5), allow_last_axis_squeeze=True)
    patched, expected = both(squeeze, keras.KerasTensor((None, 1)))
    assert patched == expected
    spec = InputSpec(ndim=1)
    spec.axes = {4: 2}
    patched, expected = both(spec, keras.ops.zeros((2,)))
    assert patched == expected and expected[0] != "passed"


def test_real_layers_raise_the_same() -> None:
    cases: list[tuple[Any, Any]] = [
        (keras.layers.Dense(2), keras.ops.zeros((2,))),
        (keras.layers.Conv2D(2, 1), keras.ops.zeros((2, 3, 3))),
        (keras.layers.LSTM(2), keras.ops.zeros((2, 3))),
        (keras.layers.Embedding(3, 2), keras.ops.zeros((2, 3))),
    ]
    for layer, x in cases:
        def once(layer: Any = layer, x: Any = x) -> tuple[str, ...]:
            try:
                layer(x)
            except Exception as error:
                return type(error).__name__, str(error)
            return ("passed",)

        patched = once()
        with upstream_path():
            assert once() == patched
        assert patched[0] != "passed" or isinstance(layer, keras.layers.Embedding)
    inputs = keras.Input((3,), name="a")
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    for x in (np.zeros((2, 1), "float32"), np.zeros((2, 3), "float32"), np.zeros((2, 3, 1), "float32")):
        def run(x: Any = x) -> Any:
            try:
                return ("ok", keras.ops.convert_to_numpy(model(x)).shape)
            except Exception as error:
                return (type(error).__name__, str(error))

        patched_run = run()
        with upstream_path():
            assert run() == patched_run
