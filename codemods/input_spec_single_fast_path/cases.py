"""What `input-spec-single-fast-path` makes of input_spec.py modules shaped like Keras
3.4.0-3.15.1's, how the patched `assert_input_compatibility` behaves beside upstream's (both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch. BEFORE and AFTER run side by side in the behaviours at the end, on a `backend` and `tree` of
their own (`run_module`); `FILES` is BEFORE, for the synthetic trees."""

import functools
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Case, Mutant, Outcome, Sources, piece_text, run_module
from codemods.input_spec_single_fast_path import PATCH

#: The same statements and checks as Keras 3.4.0-3.15.1's `assert_input_compatibility` (the
#: patch pins their normalised shape), with messages of our own, which the patch ignores.
BEFORE = '''\
"""Synthetic stand-in for keras/src/layers/input_spec.py."""

from keras.src import backend
from keras.src import tree


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
'''
EMPTY_RETURN = "    if not input_spec:\n        return\n"
#: The fast path right after the leading `if not input_spec: return`, the helper after the function.
AFTER = BEFORE.replace(EMPTY_RETURN, EMPTY_RETURN + "\n" + piece_text(__file__, "fast_path", "    ")) + "\n\n" + \
    piece_text(__file__, "helper")
#: keras-nightly's shape, reduced: a shared per-spec checker, without the squeeze.
NIGHTLY = BEFORE + '''

def _check_input_spec(spec, x, input_index, layer_name):
    shape = backend.standardize_shape(x.shape)
    for spec_dim, dim in zip(spec.shape, shape):
        pass
'''
SQUEEZE = """\
            if spec.allow_last_axis_squeeze:
                if shape and shape[-1] == 1:
                    shape = shape[:-1]
                if spec_shape and spec_shape[-1] == 1:
                    spec_shape = spec_shape[:-1]
"""
AXES = "            for axis, value in spec.axes.items():\n"
CHECKS = ":31: anchor 'assert_input_compatibility checks': expected the checks of Keras 3.4.0-3.15.1, which " \
    "_single_input_spec_passes mirrors (shape 5708a30f888e6faf); found other checks (shape "
RETURN = "anchor 'if not input_spec: return': expected exactly one `if not input_spec: return` in assert_input_compatibility"


def _reworded(text: str) -> str:
    return text.replace("has no shape", "is not a tensor").replace("    if not input_spec:\n", "    # Nothing to check.\n    if not input_spec:\n")


CASES = (
    Case("the fast path after the empty-spec return, the helper after the function", BEFORE, AFTER,
         detail="single InputSpec, unnested input: return early when the checks pass",
         anchors=(("if not input_spec: return", 33), ("assert_input_compatibility checks", 31))),
    Case("messages and comments do not matter", _reworded(BEFORE), _reworded(AFTER)),
    Case("keras-nightly's shared checker, without the squeeze", NIGHTLY, upstream=True,
         detail="upstream has the fast path (_check_input_spec); with nightly's squeeze semantics "
         "(allow_last_axis_squeeze no longer strips 1s)"),
    Case("the function gone", BEFORE.replace("def assert_input_compatibility(", "def check_inputs("),
         drift=":1: anchor 'assert_input_compatibility': expected exactly one def assert_input_compatibility; found 0"),
    Case("the empty-spec return gone", BEFORE.replace(EMPTY_RETURN, ""), drift=f":31: {RETURN}; found 0"),
    Case("the empty-spec return twice", BEFORE.replace(EMPTY_RETURN, EMPTY_RETURN * 2), drift=f":33: {RETURN}; found 2"),
    # Nightly's squeeze change without its helper: other checks than the fast path mirrors.
    Case("the squeeze removed", BEFORE.replace(SQUEEZE, ""), drift=CHECKS + "0bc0cbd84fc3b757)"),
    Case("the squeeze changed", BEFORE.replace("shape[-1] == 1", "shape[-1] == 2"), drift=CHECKS + "b8dc4dc293df98de)"),
    # An out-of-range axis raising ValueError (nightly): a new check.
    Case("an axis check", BEFORE.replace(AXES, AXES + "                if axis >= ndim:\n                    raise ValueError(axis)\n"),
         drift=CHECKS + "6118fd3afc6cac16)"),
    Case("half a patch: the helper without the fast path", BEFORE + AFTER[AFTER.index("\n\n# forkgen"):],
         drift=":33: anchor 'input-spec-single-fast-path': expected all pieces present or none; found "
         "def assert_input_compatibility(___): ___ forkgen's, if not input_spec: return missing"),
    Case("tree not imported", BEFORE.replace("from keras.src import tree\n", ""),
         drift=":32: anchor 'tree': expected bound where fast_path goes (in assert_input_compatibility or at module "
         "level); found not bound"),
)

MUTANTS = (
    Mutant("min_ndim is off by one", "        if spec.min_ndim is not None and ndim < spec.min_ndim:\n",
           "        if spec.min_ndim is not None and ndim < spec.min_ndim - 1:\n"),
    Mutant("a None input passes a spec that is not optional", "        if x is None and spec.optional:\n",
           "        if x is None:\n"),
)


#: Relative path -> text, merged into the synthetic source trees (tests/support/synthetic.py).
FILES: dict[str, str] = {"keras/src/layers/input_spec.py": BEFORE}


# -- behaviours: upstream's and the patched assert_input_compatibility side by side -----------------


def the_synthetic_tree_file_gets_the_patch() -> None:
    sources = Sources(lambda path: FILES.get(path))
    assert PATCH.check(sources).outcome is Outcome.APPLIED
    PATCH.apply(sources)
    assert sources.rendered() == {"keras/src/layers/input_spec.py": AFTER}


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


#: `keras.src` for the synthetic modules: its `backend` and `tree`, as input_spec.py imports them.
FAKES = types.SimpleNamespace(
    backend=types.SimpleNamespace(standardize_shape=standardize_shape, standardize_dtype=standardize_dtype),
    tree=types.SimpleNamespace(is_nested=is_nested, flatten=flatten),
)


@functools.cache
def loaded() -> tuple[types.ModuleType, types.ModuleType]:
    """Upstream's and the patched input_spec.py, run on `FAKES` (once)."""
    return (run_module(BEFORE, "input_spec_before", {"keras.src": FAKES}),
            run_module(AFTER, "input_spec_after", {"keras.src": FAKES}))


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
    except Exception as error:  # noqa: BLE001 - the comparison is of any error
        return (type(error).__name__, str(error))
    return ("passed",)


@settings(max_examples=1500, deadline=None)
@given(
    spec_form=st.sampled_from(["single", "single", "single", "subclass", "list", "tuple", "none"]),
    fields=SPEC_FIELDS,
    inputs=INPUTS,
)
def patched_function_behaves_as_upstream(spec_form: str, fields: dict[str, Any], inputs: Any) -> None:
    upstream, patched = loaded()
    assert outcome(patched, spec_form, fields, inputs) == outcome(upstream, spec_form, fields, inputs)


def the_fast_path_returns_without_flattening() -> None:
    _, patched = loaded()
    calls: list[Any] = []
    real = FAKES.tree.flatten
    FAKES.tree.flatten = lambda x: calls.append(x) or real(x)
    try:
        spec = patched.InputSpec(min_ndim=2, axes={-1: 3})
        patched.assert_input_compatibility(spec, Tensor((4, 3), "float32"), "layer")
        assert calls == []
        with pytest.raises(ValueError, match="axis -1"):
            patched.assert_input_compatibility(spec, Tensor((4, 2), "float32"), "layer")
        assert len(calls) == 2  # the failing case ran upstream's checks
    finally:
        FAKES.tree.flatten = real


def squeeze_semantics_stay_3_15_1s() -> None:
    _, patched = loaded()
    # Spec section 10: (None, 1) against (None, 5) with the squeeze flag passes in 3.15.1.
    spec = patched.InputSpec(shape=(None, 5), allow_last_axis_squeeze=True)
    patched.assert_input_compatibility(spec, Tensor((None, 1), "float32"), "layer")
    # An out-of-range axis is still an IndexError.
    with pytest.raises(IndexError):
        patched.assert_input_compatibility(patched.InputSpec(axes={5: 2}), Tensor((2,), "float32"), "layer")


BEHAVIOURS = (the_synthetic_tree_file_gets_the_patch, patched_function_behaves_as_upstream,
              the_fast_path_returns_without_flattening, squeeze_semantics_stay_3_15_1s)
