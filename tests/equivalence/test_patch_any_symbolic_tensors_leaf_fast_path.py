"""Patch any-symbolic-tensors-leaf-fast-path on the installed fork: `any_symbolic_tensors`
answers as upstream's.

Compared, on every backend, against the release under test's own, unpatched
`any_symbolic_tensors` (compiled from its sources into the installed `keras_tensor` module,
`tests/equivalence/upstream.py`: the fork with this patch off), over hypothesis-generated args/kwargs mixing backend tensors, numpy arrays, Variables, `None`,
Python scalars (and subclasses of them), strings, KerasTensors, and lists, tuples, dicts and
namedtuples nesting them; each call made twice (the second with the classes learnt). Also:
exceptions from `tree.is_nested` surface in the same order, and a `torch.compile`d step
compiles as many frames as with upstream's function in place of the fork's everywhere.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "any-symbolic-tensors-leaf-fast-path"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply any-symbolic-tensors-leaf-fast-path")

from keras.src import backend, tree  # noqa: E402

if APPLIED:
    #: The module the patch rewrote (keras/src/backend/common/keras_tensor.py).
    keras_tensor = upstream.patched_module(NAME, "keras_tensor.py")


@functools.cache
def _upstream_any_symbolic_tensors() -> Callable[..., bool]:
    return upstream.original(keras_tensor.any_symbolic_tensors)


def reference_any_symbolic_tensors(args: Any = None, kwargs: Any = None) -> bool:
    """Upstream's `any_symbolic_tensors` of the release under test (run in the installed
    module: the same `tree` and `KerasTensor`)."""
    return _upstream_any_symbolic_tensors()(args, kwargs)


@contextlib.contextmanager
def any_symbolic_tensors_off() -> Iterator[None]:
    """The fork with this patch off: upstream's `any_symbolic_tensors` in place of the patched
    one in `keras_tensor` and in every loaded Keras module that imported it by name (ops,
    `keras.src.backend`, `Operation.__call__`'s module, ...)."""
    installed = keras_tensor.any_symbolic_tensors
    with contextlib.ExitStack() as stack:
        for module in [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "keras" and m is not None]:
            if getattr(module, "__dict__", {}).get("any_symbolic_tensors") is installed:
                stack.enter_context(mock.patch.object(module, "any_symbolic_tensors", _upstream_any_symbolic_tensors()))
        assert keras_tensor.any_symbolic_tensors is _upstream_any_symbolic_tensors()
        yield


def test_the_oracle_is_upstreams_function_everywhere() -> None:
    # The oracle differs from the fork in exactly the function this patch rewrote, and
    # `any_symbolic_tensors_off` reaches the names Keras calls it by.
    installed = keras_tensor.any_symbolic_tensors
    assert f"# forkgen: {NAME}" in inspect.getsource(installed)
    assert "_forkgen_any_symbolic_leaf_types" in installed.__code__.co_names
    assert "_forkgen_any_symbolic_leaf_types" not in _upstream_any_symbolic_tensors().__code__.co_names
    with any_symbolic_tensors_off():
        assert backend.any_symbolic_tensors is _upstream_any_symbolic_tensors()
    assert backend.any_symbolic_tensors is installed


Pair = collections.namedtuple("Pair", ["a", "b"])


class Small(enum.IntEnum):
    ONE = 1


class MyInt(int):
    pass


class MyStr(str):
    pass


def _leaves() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 5),
        st.floats(allow_nan=False, width=32),
        st.text(max_size=3),
        st.sampled_from([Small.ONE, MyInt(3), MyStr("s"), np.float32(1.0), b"b"]),
        st.builds(lambda n: keras.ops.ones((n,)), st.integers(1, 3)),
        st.builds(lambda n: np.ones((n,)), st.integers(1, 3)),
        st.just("VARIABLE"),
        st.just("KT"),
    )


def _values() -> st.SearchStrategy[Any]:
    return st.recursive(
        _leaves(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
            st.builds(Pair, inner, inner),
        ),
        max_leaves=6,
    )


_VARIABLE = None


def _materialise(value: Any) -> Any:
    global _VARIABLE
    if isinstance(value, str) and value == "KT":
        return keras.KerasTensor((2,))
    if isinstance(value, str) and value == "VARIABLE":
        if _VARIABLE is None:
            _VARIABLE = keras.Variable(np.ones((2,)))
        return _VARIABLE
    if isinstance(value, Pair):
        return Pair(_materialise(value.a), _materialise(value.b))
    if isinstance(value, list):
        return [_materialise(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_materialise(v) for v in value)
    if isinstance(value, dict):
        return {k: _materialise(v) for k, v in value.items()}
    return value


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.none(), st.lists(_values(), max_size=4).map(tuple), st.lists(_values(), max_size=4)),
    st.one_of(st.none(), st.dictionaries(st.sampled_from(["x", "y", "z"]), _values(), max_size=3)),
)
def test_same_answer_as_upstream(args: Any, kwargs: Any) -> None:
    args, kwargs = _materialise(args), _materialise(kwargs)
    expected = reference_any_symbolic_tensors(args, kwargs)
    for _ in range(2):
        assert keras_tensor.any_symbolic_tensors(args, kwargs) is expected
        assert backend.any_symbolic_tensors(args, kwargs) is expected


def test_backend_tensors_are_learnt_and_skip_is_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    t = keras.ops.ones((2,))
    assert keras_tensor.any_symbolic_tensors((t, None, 1, 2.0, "s", True, [t])) is False
    assert keras_tensor._forkgen_any_symbolic_leaf_types[type(t)] is True
    variable = keras.Variable(np.ones((2,)))
    assert keras_tensor.any_symbolic_tensors((np.ones((2,)), variable, Small.ONE)) is False
    # Leaves that are not backend tensors keep the full test.
    assert keras_tensor._forkgen_any_symbolic_leaf_types[np.ndarray] is (keras.backend.backend() == "numpy")
    # A Variable is a backend tensor on TensorFlow only (tf.is_tensor accepts it), a leaf everywhere.
    learnt = bool(keras.ops.is_tensor(variable)) and not tree.is_nested(variable)
    assert keras_tensor._forkgen_any_symbolic_leaf_types[type(variable)] is learnt
    assert keras_tensor._forkgen_any_symbolic_leaf_types[Small] is False
    calls: list[Any] = []
    real = tree.is_nested

    def counting(x: Any) -> bool:
        calls.append(x)
        return real(x)

    monkeypatch.setattr(keras_tensor.tree, "is_nested", counting)
    assert keras_tensor.any_symbolic_tensors((t, t, None, 3, "s"), {"k": t}) is False
    assert calls == []
    assert keras_tensor.any_symbolic_tensors(([t],)) is False
    assert len(calls) == 1


class Boom:
    pass


def _outcome(function: Callable[..., Any], *args: Any) -> Any:
    try:
        return ("returned", function(*args))
    except Exception as error:  # noqa: BLE001 - the comparison is of any error
        return ("raised", type(error), str(error))


def test_exceptions_from_is_nested_come_in_upstreams_order(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tree.is_nested

    def raising(x: Any) -> bool:
        if isinstance(x, Boom):
            raise RuntimeError("boom")
        return real(x)

    monkeypatch.setattr(keras_tensor.tree, "is_nested", raising)
    t = keras.ops.ones((2,))
    kt = keras.KerasTensor((2,))
    outcomes = []
    for args in [(kt, Boom()), (Boom(), kt), (t, Boom()), (None, 1, Boom()), ([t], Boom()), (t, 1, "s", None, kt)]:
        for kwargs in (None, {"k": Boom()}, {"k": kt}):
            expected = _outcome(reference_any_symbolic_tensors, args, kwargs)
            outcomes.append(expected[0])
            for _ in range(2):
                assert _outcome(keras_tensor.any_symbolic_tensors, args, kwargs) == expected, (args, kwargs)
    # Both answers and errors are compared.
    assert "returned" in outcomes and "raised" in outcomes
    assert Boom not in keras_tensor._forkgen_any_symbolic_leaf_types


def _paths_taken() -> list[Any]:
    x = keras.ops.ones((2,))
    kt = keras.KerasTensor((2,))
    found = []
    for _ in range(2):
        for out in (keras.ops.add(x, 1), keras.ops.add(kt, x), keras.ops.add(x, kt), keras.ops.concatenate([x, kt]),
                    keras.ops.concatenate([x, x]), keras.ops.stack((x, {"a": kt}["a"])), keras.ops.where(x > 0, x, 0)):
            found.append((type(out), tuple(out.shape), keras.backend.standardize_dtype(out.dtype)))
    return found


def test_ops_choose_the_same_path() -> None:
    x = keras.ops.ones((2,))
    assert keras.ops.convert_to_numpy(keras.ops.add(x, 1)).tolist() == [2.0, 2.0]
    symbolic = keras.ops.add(keras.KerasTensor((2,)), x)
    assert isinstance(symbolic, keras.KerasTensor)
    with any_symbolic_tensors_off():
        expected = _paths_taken()
    assert _paths_taken() == expected
    assert keras.KerasTensor in {kind for kind, _, _ in expected} and type(x) in {kind for kind, _, _ in expected}


def _compiled_frames(monkeypatch: pytest.MonkeyPatch, fast: str) -> int:
    """Frames Dynamo compiles for two calls of a small train-like step, with the patch off
    (upstream's `any_symbolic_tensors` everywhere), with an empty table (nothing is learnt
    while tracing) or with the classes learnt eagerly before."""
    import torch
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    if fast == "empty":
        keras_tensor._forkgen_any_symbolic_leaf_types.clear()
    elif fast == "learnt":
        keras_tensor.any_symbolic_tensors((torch.ones(1), torch.nn.Parameter(torch.ones(1))))
        assert keras_tensor._forkgen_any_symbolic_leaf_types[torch.Tensor] is True
    torch._dynamo.reset()
    counter = CompileCounter()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])

    def step(x: Any) -> Any:
        loss = keras.ops.mean(model(x))
        loss.backward()
        return keras.ops.add(loss, 1.0)

    compiled = torch.compile(step, backend=counter)
    x = torch.ones(5, 4)
    with any_symbolic_tensors_off() if fast == "off" else contextlib.nullcontext():
        compiled(x)
        compiled(x)
    torch._dynamo.reset()
    return int(counter.frame_count)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile")
def test_torch_compile_traces_as_many_frames_as_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patched:
        unpatched = _compiled_frames(patched, "off")
    for fast in ("empty", "learnt"):
        with monkeypatch.context() as patched:
            assert _compiled_frames(patched, fast) == unpatched, fast
