"""Patch memoised-result-type on the installed fork: `result_type` answers as 3.15.1's.

The patch answers repeated calls from a memo keyed on floatx and the class and value of each
argument (only for arguments whose dtype is a function of those). Compared here, on every
backend, against a copy of 3.15.1's `result_type` written below (it reuses upstream's pure,
`lru_cache`d lattice helpers, which the patch leaves alone), over combinations of dtype
strings, `None`, Python scalar types, numpy and backend dtype objects, objects whose `name`
changes, unhashable and invalid inputs, each call made twice (the second from the memo), with
floatx changed between rounds and restored at the end.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence.helpers import patch_applied, reference_standardize_dtype

APPLIED = patch_applied("memoised-result-type")
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply memoised-result-type")

from keras.src.backend import config  # noqa: E402
from keras.src.backend.common import dtypes  # noqa: E402

FLOATX = ("float32", "float16", "float64", "bfloat16", "float32")


def reference_lattice_result_type(*args: Any) -> Any:
    """Keras 3.15.1's `_lattice_result_type`."""
    found = [(reference_standardize_dtype(a), a is int or a is float) for a in args]
    dtypes_, weak_types = zip(*found, strict=True)
    if len(dtypes_) == 1:
        out_dtype, out_weak_type = dtypes_[0], weak_types[0]
    elif len(set(dtypes_)) == 1 and not all(weak_types):
        out_dtype, out_weak_type = dtypes_[0], False
    elif all(weak_types):
        out_dtype = dtypes._least_upper_bound(*{dtypes._respect_weak_type(d, False) for d in dtypes_})
        out_weak_type = True
    else:
        out_dtype = dtypes._least_upper_bound(
            *{dtypes._respect_weak_type(d, w) for d, w in zip(dtypes_, weak_types, strict=True)}
        )
        out_weak_type = any(out_dtype is t for t in dtypes.WEAK_TYPES)
    out_weak_type = (out_dtype != "bool") and out_weak_type
    precision = config.floatx()[-2:]
    if out_weak_type:
        out_dtype = dtypes._resolve_weak_type(out_dtype, precision=precision)
    return dtypes.BIT64_TO_BIT32_DTYPE.get(out_dtype, out_dtype)


def reference_result_type(*args: Any) -> Any:
    """Keras 3.15.1's `result_type`."""
    if len(args) == 0:
        return config.floatx()
    for dtype in args:
        if dtype in dtypes.FLOAT8_TYPES:
            raise ValueError(
                "There is no implicit conversions from float8 dtypes to others."
                f" You must cast it internally. Received: {args}"
            )
    return reference_lattice_result_type(*(config.floatx() if arg is None else arg for arg in args))


class Named:
    """A dtype-like object whose `name` can change: never to be answered from the memo."""

    def __init__(self, name: Any) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Named({self.name!r})"


class NamedClass:
    name = "int8"


class NamedStr(str):
    name = "int8"


def backend_dtype_objects() -> list[Any]:
    """Dtype objects of numpy and of the current backend, and its tensors' dtypes."""
    found: list[Any] = [np.dtype(n) for n in ("bool", "int8", "uint8", "int16", "int32", "int64", "uint32",
                                              "float16", "float32", "float64", "complex64", "complex128")]
    found += [np.float32, np.int8, np.bool_, np.float64, np.complex64, np.dtype(">f4")]
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        found += [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int32, torch.int64,
                  torch.uint8, torch.bool, torch.complex64, torch.float8_e4m3fn]
    elif backend == "jax":
        import jax.numpy as jnp

        found += [jnp.float32, jnp.bfloat16, jnp.int8, jnp.dtype("bfloat16"), jnp.dtype("float8_e5m2")]
    elif backend == "tensorflow":
        import tensorflow as tf

        found += [tf.float32, tf.bfloat16, tf.float16, tf.int8, tf.int32, tf.int64, tf.uint8, tf.bool, tf.string,
                  tf.complex64, tf.dtypes.DType(tf.float32.as_datatype_enum), tf.resource]
    found += [keras.ops.ones((1,), dtype="int8").dtype, keras.ops.ones((1,)).dtype]
    return found


def pool() -> list[Any]:
    return [
        *dtypes.ALLOWED_DTYPES, "".join(["float", "32"]), None, int, float, bool, complex, str,
        *backend_dtype_objects(),
        "int", "nope", "FLOAT32", 1, 1.5, True, Named("int16"), NamedClass, NamedStr("float32"), ["int8"], {"a": 1},
    ]


def outcome(*args: Any, function: Any) -> tuple[str, Any]:
    try:
        result = function(*args)
    except Exception as error:  # noqa: BLE001 - the comparison is of any error
        return "raised", (type(error), str(error))
    return "returned", (type(result), result)


def compare(calls: list[tuple[Any, ...]]) -> None:
    for args in calls:
        expected = outcome(*args, function=reference_result_type)
        assert outcome(*args, function=keras.backend.result_type) == expected, args
        assert outcome(*args, function=keras.backend.result_type) == expected, args  # from the memo, if keyed


@pytest.fixture
def floatx() -> Iterator[None]:
    saved = keras.config.floatx()
    yield
    keras.config.set_floatx(saved)


def test_the_patch_is_live() -> None:
    assert keras.backend.result_type is dtypes.result_type
    keras.backend.result_type("int8", "float16")
    assert dtypes._FORKGEN_RESULT_TYPES
    # The backend's own dtype objects key the memo (else the patch would do nothing for ops).
    for dtype in (keras.ops.ones((1,)).dtype, "float32", None, float, np.dtype("int8")):
        assert dtypes._forkgen_result_type_key((dtype,)) is not None, dtype
    for dtype in (Named("int8"), NamedClass, NamedStr("int8"), ["int8"], 1):
        assert dtypes._forkgen_result_type_key((dtype,)) is None, dtype


@pytest.mark.usefixtures("floatx")
def test_same_results_for_singles_and_pairs_under_every_floatx() -> None:
    values = pool()
    calls = [(), *((a,) for a in values), *itertools.product(values, repeat=2)]
    assert len(calls) > 3000
    for setting in FLOATX:
        keras.config.set_floatx(setting)
        compare(calls)


@pytest.mark.usefixtures("floatx")
@given(st.lists(st.sampled_from(pool()), min_size=1, max_size=5), st.lists(st.sampled_from(FLOATX), min_size=1))
def test_same_results_for_longer_argument_lists(args: list[Any], settings: list[str]) -> None:
    for setting in settings:
        keras.config.set_floatx(setting)
        compare([tuple(args), tuple(reversed(args))])


@pytest.mark.usefixtures("floatx")
def test_no_stale_answer_after_set_floatx() -> None:
    for setting in FLOATX:
        keras.config.set_floatx(setting)
        assert keras.backend.result_type("int8", float) == reference_result_type("int8", float)
        assert keras.backend.result_type(None) == reference_result_type(None)
        assert keras.backend.result_type(None, "int8") == reference_result_type(None, "int8")


def test_objects_whose_dtype_changes_are_recomputed() -> None:
    named = Named("int8")
    assert keras.backend.result_type(named, "int8") == "int8"
    named.name = "float16"
    assert keras.backend.result_type(named, "int8") == "float16"
    NamedClass.name = "bool"
    try:
        assert keras.backend.result_type(NamedClass) == "bool"
        NamedClass.name = "float64"
        assert keras.backend.result_type(NamedClass) == reference_result_type(NamedClass)
    finally:
        NamedClass.name = "int8"


def test_errors_every_time_with_upstream_messages() -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match="no implicit conversions from float8"):
            keras.backend.result_type("float8_e4m3fn", "float32")
        with pytest.raises(ValueError, match="Invalid dtype: nope"):
            keras.backend.result_type("nope", "float32")
        with pytest.raises(TypeError, match="unhashable") as caught:
            keras.backend.result_type(["int8"])
        assert caught.value.__context__ is None


def test_ops_promote_as_upstream() -> None:
    x = keras.ops.ones((2,), dtype="int8")
    y = keras.ops.ones((2,), dtype="float16")
    for _ in range(2):
        assert keras.backend.standardize_dtype(keras.ops.add(x, y).dtype) == reference_result_type("int8", "float16")
        assert keras.backend.standardize_dtype(keras.ops.multiply(x, 2.5).dtype) == "float32"


def _compiled_frames(monkeypatch: pytest.MonkeyPatch, memo: str) -> int:
    """Frames Dynamo compiles for two calls of a small train-like step (forward, backward,
    an op after the graph break that backward causes), with the memo as it is (`fork`), never
    used (`upstream`: 3.15.1's path), or used while tracing too (`traced`: version 1)."""
    import torch
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    if memo == "upstream":
        monkeypatch.setattr(dtypes, "_forkgen_result_type_key", lambda dtypes_: None)
    elif memo == "traced":
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    torch._dynamo.reset()
    counter = CompileCounter()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])

    def step(x: Any) -> Any:
        loss = keras.ops.mean(model(x))
        loss.backward()
        return keras.ops.add(loss, 1.0)

    compiled = torch.compile(step, backend=counter)
    x = torch.ones(5, 4)
    compiled(x)
    compiled(x)
    torch._dynamo.reset()
    return int(counter.frame_count)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile")
def test_torch_compile_traces_upstreams_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """While Dynamo traces, the memo is not used: the step splits into as many graphs as with
    3.15.1's path (version 1 memoised there, and its id() look-ups split it further)."""
    import torch

    with monkeypatch.context() as patched:
        patched.setattr(torch.compiler, "is_compiling", lambda: True)
        assert dtypes._forkgen_result_type_key(("float32", "int32")) is None
        assert dtypes.result_type("float32", "int32") == reference_result_type("float32", "int32")
    with monkeypatch.context() as patched:
        upstream = _compiled_frames(patched, "upstream")
    with monkeypatch.context() as patched:
        fork = _compiled_frames(patched, "fork")
    assert fork == upstream
