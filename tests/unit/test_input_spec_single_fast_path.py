"""Patch input-spec-single-fast-path (the fast path of keras-team/keras#23184): upstream's and the
patched `assert_input_compatibility` (codemods/input_spec_single_fast_path/cases.py) executed side
by side on many specs and inputs, and the synthetic tree's file patched. The codemod's cases,
outcomes and drift are in that cases.py."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Outcome, Sources
from codemods.input_spec_single_fast_path import PATCH
from codemods.input_spec_single_fast_path.cases import AFTER, BEFORE, FILES, runnable
from tests.support.synthetic import load_module


def test_the_synthetic_tree_file_gets_the_patch() -> None:
    sources = Sources(lambda path: FILES.get(path))
    assert PATCH.check(sources).outcome is Outcome.APPLIED
    PATCH.apply(sources)
    assert sources.rendered() == {"keras/src/layers/input_spec.py": runnable(AFTER)}


class Tensor:
    def __init__(self, shape: Any, dtype: str) -> None:
        self.shape = shape
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Tensor({self.shape}, {self.dtype})"


def standardize_shape(shape: Any) -> tuple[Any, ...]:
    if not isinstance(shape, (tuple, list)):
        raise ValueError(f"Cannot convert '{shape}' to a shape.")
    for dim in shape:
        if dim is not None and (not isinstance(dim, int) or dim < 0):
            raise ValueError(f"Negative dimensions are not allowed: {shape}")
    return tuple(shape)


def standardize_dtype(dtype: Any) -> str:
    if dtype not in ("float32", "int32", "bool"):
        raise ValueError(f"Invalid dtype: {dtype}")
    return str(dtype)


def is_nested(x: Any) -> bool:
    return isinstance(x, (list, tuple, dict))


def flatten(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in flatten(x[k])]
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in flatten(item)]
    return [x]


FAKES = types.ModuleType("tests.support.fake_backend")
FAKES.backend = types.SimpleNamespace(  # type: ignore[attr-defined]
    standardize_shape=standardize_shape, standardize_dtype=standardize_dtype
)
FAKES.tree = types.SimpleNamespace(is_nested=is_nested, flatten=flatten)  # type: ignore[attr-defined]


def _load(source: str, name: str) -> Any:
    saved = sys.modules.get("tests.support.fake_backend")
    sys.modules["tests.support.fake_backend"] = FAKES
    try:
        return load_module(source, name)
    finally:
        if saved is not None:
            sys.modules["tests.support.fake_backend"] = saved
        else:
            del sys.modules["tests.support.fake_backend"]


UPSTREAM = _load(runnable(BEFORE), "input_spec_before")
PATCHED = _load(runnable(AFTER), "input_spec_after")

DIMS = st.sampled_from([None, 0, 1, 2, 3])
SHAPES = st.lists(DIMS, max_size=4).map(tuple)
SPEC_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.sampled_from([None, "float32", "int32"]),
        "shape": st.none() | SHAPES,
        "ndim": st.none() | st.integers(0, 4),
        "max_ndim": st.none() | st.integers(0, 4),
        "min_ndim": st.none() | st.integers(0, 4),
        "axes": st.none() | st.dictionaries(st.integers(-5, 4), st.none() | st.integers(0, 3), max_size=2),
        "allow_last_axis_squeeze": st.booleans(),
        "name": st.sampled_from([None, "a", "b"]),
        "optional": st.booleans(),
    },
)
LEAVES = (
    st.builds(Tensor, SHAPES, st.sampled_from(["float32", "int32", "bool"]))
    | st.builds(Tensor, st.sampled_from([(-1, 2), "bad", (2, "x")]), st.just("float32"))
    | st.builds(Tensor, SHAPES, st.just("complex7"))
    | st.sampled_from([None, "text", 3])
)
INPUTS = LEAVES | st.lists(LEAVES, max_size=2) | st.dictionaries(st.sampled_from(["a", "b"]), LEAVES, max_size=2)


def outcome(module: Any, spec_form: str, fields: dict[str, Any], inputs: Any) -> tuple[Any, ...]:
    spec = module.InputSpec(**fields)
    if spec_form == "subclass":
        spec = type("Sub", (module.InputSpec,), {})(**fields)
    input_spec = {"single": spec, "subclass": spec, "list": [spec], "tuple": (spec,), "none": None}[spec_form]
    try:
        module.assert_input_compatibility(input_spec, inputs, "layer")
    except Exception as error:
        return (type(error).__name__, str(error))
    return ("passed",)


@settings(max_examples=1500, deadline=None)
@given(
    spec_form=st.sampled_from(["single", "single", "single", "subclass", "list", "tuple", "none"]),
    fields=SPEC_FIELDS,
    inputs=INPUTS,
)
def test_patched_function_behaves_as_upstream(spec_form: str, fields: dict[str, Any], inputs: Any) -> None:
    assert outcome(PATCHED, spec_form, fields, inputs) == outcome(UPSTREAM, spec_form, fields, inputs)


def test_the_fast_path_returns_without_flattening() -> None:
    calls: list[Any] = []
    real = FAKES.tree.flatten  # type: ignore[attr-defined]
    FAKES.tree.flatten = lambda x: calls.append(x) or real(x)  # type: ignore[attr-defined]
    try:
        spec = PATCHED.InputSpec(min_ndim=2, axes={-1: 3})
        PATCHED.assert_input_compatibility(spec, Tensor((4, 3), "float32"), "layer")
        assert calls == []
        with pytest.raises(ValueError, match="axis -1"):
            PATCHED.assert_input_compatibility(spec, Tensor((4, 2), "float32"), "layer")
        assert len(calls) == 2  # the failing case ran upstream's checks
    finally:
        FAKES.tree.flatten = real  # type: ignore[attr-defined]


def test_squeeze_semantics_stay_3_15_1s() -> None:
    # Spec section 10: (None, 1) against (None, 5) with the squeeze flag passes in 3.15.1.
    spec = PATCHED.InputSpec(shape=(None, 5), allow_last_axis_squeeze=True)
    PATCHED.assert_input_compatibility(spec, Tensor((None, 1), "float32"), "layer")
    # An out-of-range axis is still an IndexError.
    with pytest.raises(IndexError):
        PATCHED.assert_input_compatibility(PATCHED.InputSpec(axes={5: 2}), Tensor((2,), "float32"), "layer")
