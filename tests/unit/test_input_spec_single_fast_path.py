"""Patch input-spec-single-fast-path (the fast path of keras-team/keras#23184) on the synthetic
input_spec.py: codemod cases, outcomes, drift, and upstream's and the patched
`assert_input_compatibility` executed side by side on many specs and inputs."""

from __future__ import annotations

import sys
import textwrap
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.input_spec_single_fast_path import PATCH, InputSpecSingleFastPathCommand
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support.synthetic import load_module, replace_once
from tests.support.synthetic_input_spec_single_fast_path import FILES, INPUT_SPEC_PY

BEFORE = INPUT_SPEC_PY
AFTER = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/layers/input_spec.py."""

    from tests.support.fake_backend import backend
    from tests.support.fake_backend import tree


    class InputSpec:
        def __init__(
            self,
            dtype=None,
            shape=None,
            ndim=None,
            max_ndim=None,
            min_ndim=None,
            axes=None,
            allow_last_axis_squeeze=False,
            name=None,
            optional=False,
        ):
            self.dtype = dtype
            self.shape = shape
            self.ndim = len(shape) if shape is not None else ndim
            self.max_ndim = max_ndim
            self.min_ndim = min_ndim
            self.axes = axes or {}
            self.allow_last_axis_squeeze = allow_last_axis_squeeze
            self.name = name
            self.optional = optional


    def assert_input_compatibility(input_spec, inputs, layer_name):
        """Raises ValueError when `inputs` do not match `input_spec`."""
        if not input_spec:
            return

        # forkgen: input-spec-single-fast-path (keras-team/keras#23184)
        # One InputSpec and one input that is not nested: return at once when
        # the checks below would pass. Otherwise they run as they are, and raise.
        if (
            type(input_spec) is InputSpec
            and not isinstance(inputs, dict)
            and not tree.is_nested(inputs)
            and _single_input_spec_passes(input_spec, inputs)
        ):
            return

        input_spec = tree.flatten(input_spec)
        if isinstance(inputs, dict):
            # Named specs take the dict's entries in their order.
            names = [spec.name for spec in input_spec]
            if all(names):
                list_inputs = []
                for name in names:
                    if name not in inputs:
                        raise ValueError(f"{layer_name}: no input {name!r}")
                    list_inputs.append(inputs[name])
                inputs = list_inputs

        inputs = tree.flatten(inputs)
        if len(inputs) != len(input_spec):
            spec_names = [spec.name for spec in input_spec if spec is not None]
            if len(spec_names) == len(input_spec) and all(spec_names):
                raise ValueError(f"{layer_name}: expected inputs {spec_names}")
            raise ValueError(f"{layer_name}: expected {len(input_spec)} inputs")
        for input_index, (x, spec) in enumerate(zip(inputs, input_spec)):
            if spec is None:
                continue
            if x is None and spec.optional:
                continue

            if not hasattr(x, "shape"):
                raise ValueError(f"{layer_name}: input {x!r} has no shape")

            shape = backend.standardize_shape(x.shape)
            ndim = len(shape)
            if spec.ndim is not None and not spec.allow_last_axis_squeeze:
                if ndim != spec.ndim:
                    raise ValueError(f"{layer_name}[{input_index}]: ndim {ndim}")
            if spec.max_ndim is not None:
                if ndim is not None and ndim > spec.max_ndim:
                    raise ValueError(f"{layer_name}[{input_index}]: max_ndim")
            if spec.min_ndim is not None:
                if ndim is not None and ndim < spec.min_ndim:
                    raise ValueError(f"{layer_name}[{input_index}]: min_ndim")
            if spec.dtype is not None:
                dtype = backend.standardize_dtype(x.dtype)
                if dtype != spec.dtype:
                    raise ValueError(f"{layer_name}[{input_index}]: dtype {dtype}")

            if spec.axes:
                for axis, value in spec.axes.items():
                    if value is not None and shape[axis] not in {
                        value,
                        None,
                    }:
                        raise ValueError(f"{layer_name}[{input_index}]: axis {axis}")
            if spec.shape is not None:
                spec_shape = spec.shape
                if spec.allow_last_axis_squeeze:
                    if shape and shape[-1] == 1:
                        shape = shape[:-1]
                    if spec_shape and spec_shape[-1] == 1:
                        spec_shape = spec_shape[:-1]
                for spec_dim, dim in zip(spec_shape, shape):
                    if spec_dim is not None and dim is not None:
                        if spec_dim != dim:
                            raise ValueError(f"{layer_name}[{input_index}]: shape {shape}")


    # forkgen: input-spec-single-fast-path (keras-team/keras#23184)
    def _single_input_spec_passes(spec, x):
        """Whether `assert_input_compatibility(spec, x, ...)` passes, for one
        `InputSpec` and one input `x` that is not nested.

        Answers without flattening anything: the same checks in the same order,
        each one ending in `return False` where `assert_input_compatibility`
        raises, so that the caller then runs those checks and raises exactly
        as they do. An exception from a check itself (`standardize_shape`, an
        out-of-range axis) is the one those checks would raise first.
        """
        if x is None and spec.optional:
            return True
        if not hasattr(x, "shape"):
            return False
        shape = backend.standardize_shape(x.shape)
        ndim = len(shape)
        if spec.ndim is not None and not spec.allow_last_axis_squeeze:
            if ndim != spec.ndim:
                return False
        if spec.max_ndim is not None and ndim > spec.max_ndim:
            return False
        if spec.min_ndim is not None and ndim < spec.min_ndim:
            return False
        if spec.dtype is not None:
            if backend.standardize_dtype(x.dtype) != spec.dtype:
                return False
        if spec.axes:
            for axis, value in spec.axes.items():
                if value is not None and shape[axis] not in {value, None}:
                    return False
        if spec.shape is not None:
            spec_shape = spec.shape
            if spec.allow_last_axis_squeeze:
                # A trailing 1 is dropped from each side on its own (3.15.1).
                if shape and shape[-1] == 1:
                    shape = shape[:-1]
                if spec_shape and spec_shape[-1] == 1:
                    spec_shape = spec_shape[:-1]
            for spec_dim, dim in zip(spec_shape, shape):
                if spec_dim is not None and dim is not None:
                    if spec_dim != dim:
                        return False
        return True
'''
)
MARK = "# forkgen: input-spec-single-fast-path"
PATH = "keras/src/layers/input_spec.py"
#: keras-nightly's shape, reduced: a shared per-spec checker, without the squeeze.
NIGHTLY = BEFORE + textwrap.dedent(
    """

    def _check_input_spec(spec, x, input_index, layer_name):
        shape = backend.standardize_shape(x.shape)
        for spec_dim, dim in zip(spec.shape, shape):
            pass
    """
)


def check(source: str) -> Any:
    return PATCH.check(Sources(lambda path: source if path == PATH else None))


class TestInputSpecSingleFastPath(CodemodTest):
    TRANSFORM = InputSpecSingleFastPathCommand

    def test_fixes(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)

    def test_noop_on_the_nightly_shape(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY, expected_skip=True)


def test_outcomes() -> None:
    fresh = check(BEFORE)
    assert fresh.outcome is Outcome.APPLIED and not fresh.present
    assert [(a.name, a.line) for a in fresh.anchors] == [
        ("if not input_spec: return", 33), ("assert_input_compatibility checks", 31),
    ]
    present = check(AFTER)
    assert present.outcome is Outcome.APPLIED and present.present
    nightly = check(NIGHTLY)
    assert nightly.outcome is Outcome.UPSTREAM and "squeeze" in nightly.detail


def test_the_synthetic_tree_file_gets_the_patch() -> None:
    sources = Sources(lambda path: FILES.get(path))
    assert PATCH.check(sources).outcome is Outcome.APPLIED
    PATCH.apply(sources)
    patched = sources.rendered()[PATH]
    assert patched == AFTER and patched.count(MARK) == 2
    assert check(patched).present


SQUEEZE = """\
            if spec.allow_last_axis_squeeze:
                if shape and shape[-1] == 1:
                    shape = shape[:-1]
                if spec_shape and spec_shape[-1] == 1:
                    spec_shape = spec_shape[:-1]
"""


@pytest.mark.parametrize(
    ("source", "anchor", "line", "found"),
    [
        (BEFORE.replace("def assert_input_compatibility(", "def check_inputs("), "assert_input_compatibility", 1,
         "0"),
        (replace_once(BEFORE, "    if not input_spec:\n        return\n", ""), "if not input_spec: return", 31,
         "0"),
        (replace_once(BEFORE, "    if not input_spec:\n        return\n",
                      "    if not input_spec:\n        return\n    if not input_spec:\n        return\n"),
         "if not input_spec: return", 33, "2"),
        # Nightly's squeeze change without its helper: other checks than the fast path mirrors.
        (replace_once(BEFORE, SQUEEZE, ""), "assert_input_compatibility checks", 31, "other checks"),
        (BEFORE.replace("shape[-1] == 1", "shape[-1] == 2"), "assert_input_compatibility checks", 31,
         "other checks"),
        # An out-of-range axis raising ValueError (nightly): a new check.
        (replace_once(BEFORE, "            for axis, value in spec.axes.items():\n",
                      "            for axis, value in spec.axes.items():\n"
                      "                if axis >= ndim:\n                    raise ValueError(axis)\n"),
         "assert_input_compatibility checks", 31, "other checks"),
        # Half a patch: the helper without the fast path.
        (BEFORE + AFTER[AFTER.index("\n\n# forkgen"):], "fast path", 33, "0 fast path(s)"),
        (replace_once(BEFORE, "from tests.support.fake_backend import tree\n", ""), "tree", 1, "none"),
    ],
    ids=["function-gone", "return-gone", "return-twice", "squeeze-removed", "squeeze-changed", "axis-check",
         "partial", "no-tree"],
)
def test_drift(source: str, anchor: str, line: int, found: str) -> None:
    with pytest.raises(AnchorDrift) as caught:
        check(source)
    error = caught.value
    assert str(error).startswith(f"{PATH}:")
    assert error.anchor == anchor and found in error.found and error.line == line


def test_messages_and_comments_do_not_matter() -> None:
    reworded = BEFORE.replace("has no shape", "is not a tensor").replace(
        "    if not input_spec:\n", "    # Nothing to check.\n    if not input_spec:\n"
    )
    assert check(reworded).outcome is Outcome.APPLIED


# -- behaviour: upstream and patched side by side ---------------------------------------------


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


UPSTREAM = _load(BEFORE, "input_spec_before")
PATCHED = _load(AFTER, "input_spec_after")

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
