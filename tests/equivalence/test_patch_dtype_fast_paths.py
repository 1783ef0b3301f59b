"""Patch dtype-fast-paths on the installed fork: `standardize_dtype` answers as 3.15.1's.

The patch adds a first statement returning an exact canonical `str`, and asks
`ALLOWED_DTYPES_SET` first in the final membership test. Compared here, on every backend,
against a copy of 3.15.1's function written below, over every dtype string, alias, Python and
numpy type, numpy/jax/torch/TensorFlow dtype object that is importable, odd objects and
invalid inputs (with their error types and messages), and `None` under changed floatx.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence.helpers import patch_applied, reference_standardize_dtype

APPLIED = patch_applied("dtype-fast-paths")
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply dtype-fast-paths")

from keras.src.backend.common import dtypes, variables  # noqa: E402


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
    assert dtypes.ALLOWED_DTYPES_SET == frozenset(dtypes.ALLOWED_DTYPES)
    assert len(dtypes.ALLOWED_DTYPES) == len(dtypes.ALLOWED_DTYPES_SET)


@pytest.mark.usefixtures("floatx")
def test_same_results_and_errors_for_every_input() -> None:
    values = inputs()
    assert len(values) > 150
    for setting in ("float32", "float16", "bfloat16", "float64", "float32"):
        keras.config.set_floatx(setting)
        for value in values:
            expected = outcome(reference_standardize_dtype, value)
            assert outcome(keras.backend.standardize_dtype, value) == expected, value
            if type(value) is str and value in dtypes.ALLOWED_DTYPES:
                # The same object comes back, as upstream's path returns its argument.
                assert keras.backend.standardize_dtype(value) is reference_standardize_dtype(value)


def test_the_pathological_inputs_keep_upstream_answers() -> None:
    assert keras.backend.standardize_dtype(EnumDtype.float32) == "float32"  # its `.name`, not its value
    assert keras.backend.standardize_dtype(NamedStr("float32")) == "int8"
    odd = EqualsFloat32()
    assert keras.backend.standardize_dtype(odd) is odd  # tuple membership, as upstream
    with pytest.raises(ValueError, match=r"Invalid dtype: \['unhashable'\]"):
        keras.backend.standardize_dtype(Named(["unhashable"]))
    with pytest.raises(TypeError, match="unhashable"):
        keras.backend.standardize_dtype(["float32"])


@given(st.text(max_size=16) | st.sampled_from(list(dtypes.ALLOWED_DTYPES)))
def test_same_answer_for_any_string(value: str) -> None:
    assert outcome(keras.backend.standardize_dtype, value) == outcome(reference_standardize_dtype, value)


def test_layers_and_ops_see_the_same_dtypes() -> None:
    layer = keras.layers.Dense(2, dtype="float16")
    assert layer.dtype == "float16" and layer.compute_dtype == "float16"
    x = keras.ops.ones((2, 3), dtype="int8")
    assert keras.backend.standardize_dtype(x.dtype) == "int8"
    assert keras.backend.standardize_dtype(keras.ops.cast(x, "bfloat16").dtype) == "bfloat16"
