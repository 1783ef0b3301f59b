"""Patch dtype-fast-paths on the installed fork: `standardize_dtype` answers as upstream's.

The patch adds a first statement returning an exact canonical `str`, and asks
`ALLOWED_DTYPES_SET` first in the final membership test. Compared here, on every backend,
against the release under test's own, unpatched `standardize_dtype` (compiled from its sources
into the installed module, `tests/equivalence/upstream.py`: the fork with this patch off), over
every dtype string, alias, Python and numpy type, numpy/jax/torch/TensorFlow dtype object that
is importable, odd objects and invalid inputs (with their error types and messages), and `None`
under changed floatx.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "dtype-fast-paths"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply dtype-fast-paths")

if APPLIED:
    #: The modules the patch rewrote (keras/src/backend/common/dtypes.py and variables.py).
    dtypes = upstream.patched_module(NAME, "common/dtypes.py")
    variables = upstream.patched_module(NAME, "common/variables.py")


def upstream_standardize_dtype(dtype: Any) -> Any:
    """Upstream's `standardize_dtype` of the release under test (its module's constants)."""
    return _upstream_standardize_dtype()(dtype)


@functools.cache
def _upstream_standardize_dtype() -> Any:
    return upstream.original(variables.standardize_dtype)


class Named:
    def __init__(self, name: Any) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Named({self.name!r})"


class DunderNamed:
    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __repr__(self) -> str:
        return f"DunderNamed({self.__name__!r})"


class Printed:
    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Printed({self.text!r})"


class EnumDtype(str, enum.Enum):  # noqa: UP042 - a (str, Enum) member, as the spec names it
    float32 = "int32"


class NamedStr(str):
    name = "int8"


class EqualsFloat32:
    def __eq__(self, other: object) -> bool:
        return other == "float32"

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "EqualsFloat32()"


def backend_dtype_objects() -> Iterator[Any]:
    """Every dtype object (and scalar type) of the importable array libraries."""
    for value in set(np.sctypeDict.values()):
        yield value
        yield np.dtype(value)
    yield np.dtype(">f4")
    yield np.dtype([("a", "f4")])
    try:
        import ml_dtypes

        yield np.dtype(ml_dtypes.bfloat16)
        yield ml_dtypes.bfloat16
    except ImportError:
        pass
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        yield from (v for v in vars(torch).values() if isinstance(v, torch.dtype))
    elif backend == "jax":
        import jax.numpy as jnp

        for name in ("bool_", "int8", "int16", "int32", "int64", "uint8", "uint32", "float16", "bfloat16", "float32",
                     "float64", "complex64", "float8_e4m3fn", "float8_e5m2"):
            if hasattr(jnp, name):
                yield getattr(jnp, name)
                yield jnp.dtype(getattr(jnp, name))
    elif backend == "tensorflow":
        import tensorflow as tf

        yield from (v for v in vars(tf.dtypes).values() if isinstance(v, tf.dtypes.DType))
    yield keras.ops.ones((1,), dtype="int8").dtype
    yield keras.ops.ones((1,)).dtype


def inputs() -> list[Any]:
    allowed = list(dtypes.ALLOWED_DTYPES)
    return [
        *allowed, *("".join(list(a)) for a in allowed),  # equal strings, other objects
        *(a.upper() for a in allowed), *(" " + a for a in allowed), *(a + "_" for a in allowed),
        "int", "float", "complex", "double", "half", "str", "", "torch.float32", "jax.numpy.int8", "mlx.core.float32",
        None, bool, int, float, str, complex, bytes, object, type,
        *backend_dtype_objects(),
        Named("float32"), Named("FLOAT32"), Named("nope"), Named(["unhashable"]), Named(None), DunderNamed("int8"),
        Printed("torch.float32"), Printed("jax.numpy.bfloat16"), Printed("mlx.core.float32"), Printed("float32"),
        EnumDtype.float32, NamedStr("float32"), NamedStr("bogus"), EqualsFloat32(),
        0, 1, 1.5, True, 1j, b"float32", ["float32"], {"float32": 1}, ("float32",), {"float32"}, object(),
    ]


def outcome(function: Any, value: Any) -> tuple[str, Any]:
    try:
        result = function(value)
    except Exception as error:  # noqa: BLE001 - the comparison is of any error
        return "raised", (type(error), str(error))
    return "returned", (type(result), result)


@pytest.fixture
def floatx() -> Iterator[None]:
    saved = keras.config.floatx()
    yield
    keras.config.set_floatx(saved)


def test_the_patch_is_live() -> None:
    assert keras.backend.standardize_dtype is variables.standardize_dtype
    # The oracle differs from the fork in exactly the function this patch rewrote.
    assert f"# forkgen: {NAME}" in inspect.getsource(variables.standardize_dtype)
    assert _upstream_standardize_dtype().__code__.co_code != variables.standardize_dtype.__code__.co_code
    assert dtypes.ALLOWED_DTYPES_SET == frozenset(dtypes.ALLOWED_DTYPES)
    assert len(dtypes.ALLOWED_DTYPES) == len(dtypes.ALLOWED_DTYPES_SET)


@pytest.mark.usefixtures("floatx")
def test_same_results_and_errors_for_every_input() -> None:
    values = inputs()
    assert len(values) > 150
    for setting in ("float32", "float16", "bfloat16", "float64", "float32"):
        keras.config.set_floatx(setting)
        for value in values:
            expected = outcome(upstream_standardize_dtype, value)
            assert outcome(keras.backend.standardize_dtype, value) == expected, value
            if type(value) is str and value in dtypes.ALLOWED_DTYPES:
                # The same object comes back, as upstream's path returns its argument.
                assert keras.backend.standardize_dtype(value) is upstream_standardize_dtype(value)


def test_the_pathological_inputs_keep_upstream_answers() -> None:
    # The inputs that a looser fast path (`isinstance` for `type(...) is str`) or a final test
    # asking the set of any value would answer otherwise: a (str, Enum) member and a str
    # subclass whose `name` upstream reads, an object equal to "float32" without hashing
    # equal, a `name` that is unhashable, an unhashable argument.
    odd = EqualsFloat32()
    values = [EnumDtype.float32, NamedStr("float32"), odd, Named(["unhashable"]), ["float32"]]
    for value in values:
        for _ in range(2):
            assert outcome(keras.backend.standardize_dtype, value) == outcome(upstream_standardize_dtype, value), value
    if outcome(upstream_standardize_dtype, odd)[0] == "returned":
        assert keras.backend.standardize_dtype(odd) is upstream_standardize_dtype(odd)  # the very object
    # The str subclasses are answered through their `.name` upstream, not as themselves: the
    # fast path must leave them alone for the comparison above to hold.
    for value in (EnumDtype.float32, NamedStr("float32")):
        if upstream_standardize_dtype(value) is not value:
            assert keras.backend.standardize_dtype(value) is not value


@given(st.text(max_size=16) | st.deferred(lambda: st.sampled_from(list(dtypes.ALLOWED_DTYPES))))
def test_same_answer_for_any_string(value: str) -> None:
    assert outcome(keras.backend.standardize_dtype, value) == outcome(upstream_standardize_dtype, value)


def test_layers_and_ops_see_the_same_dtypes() -> None:
    layer = keras.layers.Dense(2, dtype="float16")
    assert layer.dtype == "float16" and layer.compute_dtype == "float16"
    x = keras.ops.ones((2, 3), dtype="int8")
    assert keras.backend.standardize_dtype(x.dtype) == "int8"
    assert keras.backend.standardize_dtype(keras.ops.cast(x, "bfloat16").dtype) == "bfloat16"
