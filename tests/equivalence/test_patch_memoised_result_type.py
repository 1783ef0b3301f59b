"""Patch memoised-result-type on the installed fork: `result_type` answers as upstream's.

The patch answers repeated calls from a memo keyed on floatx and the class and value of each
argument (only for arguments whose dtype is a function of those). Compared here, on every
backend, against the release under test's own, unpatched `result_type` (compiled from its
sources into the installed `dtypes` module, `tests/equivalence/upstream.py`: it calls the
module's own `_lattice_result_type` and `standardize_dtype`, which this patch leaves alone),
over combinations of dtype strings, `None`, Python scalar types, numpy and backend dtype
objects, objects whose `name` changes, unhashable and invalid inputs, each call made twice (the
second from the memo), with floatx changed between rounds and restored at the end; and ops and
a `torch.compile`d step with upstream's `result_type` in place of the fork's everywhere.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import sys
from collections.abc import Iterator
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "memoised-result-type"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply memoised-result-type")

if APPLIED:
    #: The module the patch rewrote (keras/src/backend/common/dtypes.py).
    dtypes = upstream.patched_module(NAME, "common/dtypes.py")

FLOATX = ("float32", "float16", "float64", "bfloat16", "float32")


@functools.cache
def _upstream_result_type() -> Any:
    return upstream.original(dtypes.result_type)


def upstream_result_type(*args: Any) -> Any:
    """Upstream's `result_type` of the release under test."""
    return _upstream_result_type()(*args)


@contextlib.contextmanager
def result_type_off() -> Iterator[None]:
    """The fork with this patch off: upstream's `result_type` in place of the patched one in
    `dtypes` and in every loaded Keras module that imported it by name (`keras.backend`, ops)."""
    installed = dtypes.result_type
    with contextlib.ExitStack() as stack:
        for module in [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "keras" and m is not None]:
            if getattr(module, "__dict__", {}).get("result_type") is installed:
                stack.enter_context(mock.patch.object(module, "result_type", _upstream_result_type()))
        assert dtypes.result_type is _upstream_result_type()
        yield


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
        expected = outcome(*args, function=upstream_result_type)
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
@given(st.lists(st.deferred(lambda: st.sampled_from(pool())), min_size=1, max_size=5),
       st.lists(st.sampled_from(FLOATX), min_size=1))
def test_same_results_for_longer_argument_lists(args: list[Any], settings: list[str]) -> None:
    for setting in settings:
        keras.config.set_floatx(setting)
        compare([tuple(args), tuple(reversed(args))])


@pytest.mark.usefixtures("floatx")
def test_no_stale_answer_after_set_floatx() -> None:
    for setting in FLOATX:
        keras.config.set_floatx(setting)
        assert keras.backend.result_type("int8", float) == upstream_result_type("int8", float)
        assert keras.backend.result_type(None) == upstream_result_type(None)
        assert keras.backend.result_type(None, "int8") == upstream_result_type(None, "int8")


def test_objects_whose_dtype_changes_are_recomputed() -> None:
    named = Named("int8")
    before = upstream_result_type(named, "int8")
    assert keras.backend.result_type(named, "int8") == before
    named.name = "float16"
    after = upstream_result_type(named, "int8")
    assert after != before  # the object's dtype did change: a memoised answer would be stale
    assert keras.backend.result_type(named, "int8") == after
    NamedClass.name = "bool"
    try:
        before = upstream_result_type(NamedClass)
        assert keras.backend.result_type(NamedClass) == before
        NamedClass.name = "float64"
        after = upstream_result_type(NamedClass)
        assert after != before
        assert keras.backend.result_type(NamedClass) == after
    finally:
        NamedClass.name = "int8"


def test_errors_every_time_with_upstream_messages() -> None:
    for args in [("float8_e4m3fn", "float32"), ("nope", "float32"), (["int8"],)]:
        expected = outcome(*args, function=upstream_result_type)
        assert expected[0] == "raised", args
        context = _context(upstream_result_type, args)
        for _ in range(2):
            assert outcome(*args, function=keras.backend.result_type) == expected, args
            # No chained error (e.g. a TypeError from hashing, caught, then upstream's path).
            assert _context(keras.backend.result_type, args) == context, args


def _context(function: Any, args: tuple[Any, ...]) -> Any:
    """The type and text of the `__context__` of the error `function(*args)` raises."""
    try:
        function(*args)
    except Exception as error:  # noqa: BLE001 - the comparison is of any error
        context = error.__context__
        return None if context is None else (type(context), str(context))
    raise AssertionError(f"{args} raised nothing")


def _op_dtypes() -> list[str]:
    x = keras.ops.ones((2,), dtype="int8")
    y = keras.ops.ones((2,), dtype="float16")
    z = keras.ops.ones((2,), dtype="int32")
    found = []
    for _ in range(2):
        for out in (keras.ops.add(x, y), keras.ops.multiply(x, 2.5), keras.ops.subtract(z, 1),
                    keras.ops.divide(x, z), keras.ops.multiply(keras.ops.cast(x, "bool"), 1.5), keras.ops.mean(x)):
            found.append(keras.backend.standardize_dtype(out.dtype))
    return found


@pytest.mark.usefixtures("floatx")
def test_ops_promote_as_upstream() -> None:
    for setting in FLOATX:
        keras.config.set_floatx(setting)
        with result_type_off():
            expected = _op_dtypes()
        assert _op_dtypes() == expected
        assert keras.backend.standardize_dtype(keras.ops.add(keras.ops.ones((2,), dtype="int8"),
                                                             keras.ops.ones((2,), dtype="float16")).dtype) \
            == upstream_result_type("int8", "float16")


def test_the_oracle_is_upstreams_function_everywhere() -> None:
    # The oracle differs from the fork in exactly the function this patch rewrote, and
    # `result_type_off` reaches the names Keras calls it by.
    installed = dtypes.result_type
    assert f"# forkgen: {NAME}" in inspect.getsource(installed)
    assert "_forkgen_result_type_key" in installed.__code__.co_names
    assert "_forkgen_result_type_key" not in _upstream_result_type().__code__.co_names
    with result_type_off():
        assert keras.backend.result_type is _upstream_result_type()
    assert keras.backend.result_type is installed


def _compiled_frames(monkeypatch: pytest.MonkeyPatch, memo: str) -> int:
    """Frames Dynamo compiles for two calls of a small train-like step (forward, backward,
    an op after the graph break that backward causes), with the memo as it is (`fork`), never
    used (`upstream`: upstream's `result_type` everywhere), or used while tracing too
    (`traced`: version 1)."""
    import torch
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    if memo == "traced":
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
    with result_type_off() if memo == "upstream" else contextlib.nullcontext():
        compiled(x)
        compiled(x)
    torch._dynamo.reset()
    return int(counter.frame_count)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile")
def test_torch_compile_traces_upstreams_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """While Dynamo traces, the memo is not used: the step splits into as many graphs as with
    upstream's `result_type` (version 1 memoised there, and its id() look-ups split it further)."""
    import torch

    with monkeypatch.context() as patched:
        patched.setattr(torch.compiler, "is_compiling", lambda: True)
        assert dtypes._forkgen_result_type_key(("float32", "int32")) is None
        assert dtypes.result_type("float32", "int32") == upstream_result_type("float32", "int32")
    with monkeypatch.context() as patched:
        unpatched = _compiled_frames(patched, "upstream")
    with monkeypatch.context() as patched:
        fork = _compiled_frames(patched, "fork")
    assert fork == unpatched
