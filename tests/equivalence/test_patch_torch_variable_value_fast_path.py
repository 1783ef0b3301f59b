"""Patch torch-variable-value-fast-path on the installed fork (torch backend only).

The patch puts a fast path above the torch `Variable.value` getter's body. The getter must
return what the release under test's own, unpatched getter (`upstream.original`, compiled from
its sources into the installed core module, tests/equivalence/upstream.py; 3.x's
`backend/torch/core.py`, keras-nightly's `backend/torch/ops/core.py`), called on the same
variable in the same state, returns: the same object when that is a stored tensor, else a tensor
of the same kind, values, dtype, device and requires_grad; in eager code, inside stateless and
autocast scopes, under a meta device, for an uninitialised variable, for a subclass, with a
monkeypatched global and from another thread.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-variable-value-fast-path"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-variable-value-fast-path"),
    pytest.mark.skipif(not TORCH, reason="the patch changes the torch backend only"),
]

if APPLIED and TORCH:
    import torch
    from keras.src.backend.common import global_state
    from keras.src.backend.common import variables as common_variables
    from keras.src.backend.common.stateless_scope import StatelessScope

    #: The module the patch rewrote (the torch backend's core.py: 3.x's, or keras-nightly's
    #: ops/core.py).
    core = upstream.patched_module(NAME, "core.py")


@functools.cache
def _upstream_getter() -> Callable[[Any], Any]:
    return upstream.original(core.Variable.value)


def reference_value(variable: Any) -> Any:
    """The release under test's own `Variable.value` getter, called on `variable` (run in the
    installed core module: the same `in_stateless_scope`, `get_device` and `_maybe_autocast`)."""
    return _upstream_getter()(variable)


def same(got: Any, want: Any) -> None:
    """`got` is `want` when `want` is the variable's stored tensor (or a scope's); otherwise a
    fresh tensor of the same kind, dtype, device, shape, requires_grad and values."""
    assert type(got) is type(want)
    assert got.dtype == want.dtype and got.device == want.device and tuple(got.shape) == tuple(want.shape)
    assert got.requires_grad == want.requires_grad
    if got.device.type != "meta":
        np.testing.assert_array_equal(got.detach().float().cpu().numpy(), want.detach().float().cpu().numpy())


def check(variable: Any) -> Any:
    want = reference_value(variable)
    got = variable.value
    same(got, want)
    stored = [variable._value]
    scope = global_state.get_global_attribute("stateless_scope")
    if scope is not None:
        stored.append(scope.get_current_value(variable))
    if any(want is s for s in stored if s is not None):
        assert got is want
    else:
        assert all(got is not s for s in stored if s is not None)
    return got


def make(dtype: str = "float32", autocast: bool = True, trainable: bool = True) -> Any:
    return keras.Variable(np.arange(6, dtype="float32").reshape(2, 3), dtype=dtype, autocast=autocast,
                          trainable=trainable and dtype.startswith("float"))



def python_calls(read: Callable[[], Any]) -> set[Any]:
    """The code objects of the Python functions `read()` calls (a profiler sees them without
    replacing any of the globals the fast path checks)."""
    seen: set[Any] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.add(frame.f_code)

    sys.setprofile(profile)
    try:
        read()
    finally:
        sys.setprofile(None)
    return seen


def body_functions() -> dict[str, Any]:
    """What upstream's body calls on every read and the fast path never does."""
    return {
        "in_stateless_scope": core.in_stateless_scope.__code__,
        "get_device": core.get_device.__code__,
        "_maybe_autocast": core.Variable._maybe_autocast.__code__,  # KerasVariable's before 3.7
        "get_autocast_scope": common_variables.get_autocast_scope.__code__,
    }


def test_the_patch_is_in_and_the_oracle_is_upstreams_getter() -> None:
    assert f"# forkgen: {NAME}" in inspect.getsource(core.Variable.value.fget)
    assert f"# forkgen: {NAME}" not in upstream.upstream_source(core)
    getter = _upstream_getter()
    assert getter.__code__ is not core.Variable.value.fget.__code__
    assert not any(name.startswith("_forkgen") for name in getter.__code__.co_names)
    assert "in_stateless_scope" in getter.__code__.co_names


def test_the_fast_path_is_taken_for_keras_variables_and_layer_weights() -> None:
    """`keras.Variable` and layer weights are instances of `keras.src.backend.Variable`: on 3.x a
    subclass of the torch core's `Variable`, on keras-nightly that class itself. The fast path
    must fire for them and for a subclass that overrides nothing (a guard on the exact class
    once kept it from ever firing on 3.x)."""

    class Plain(core.Variable):  # type: ignore[misc,valid-type]
        pass

    layer = keras.layers.Dense(3)
    layer.build((None, 4))
    getter = core.Variable.value.fget.__code__
    plain = Plain(np.ones((2, 3), dtype="float32"))
    for variable in (keras.Variable(1.0), layer.kernel, layer.bias, plain):
        assert isinstance(variable, core.Variable)
        calls = python_calls(lambda v=variable: v.value)
        assert getter in calls
        assert not {name for name, code in body_functions().items() if code in calls}
        assert variable.value is variable._value
    # The detector sees the body when it runs (an autocast scope with an autocast variable).
    with common_variables.AutocastScope("float16"):
        calls = python_calls(lambda: layer.kernel.value)
    assert {"in_stateless_scope", "get_device", "_maybe_autocast"} <= {
        name for name, code in body_functions().items() if code in calls
    }


def test_eager_returns_the_stored_parameter() -> None:
    variable = make()
    got = check(variable)
    assert got is variable._value and isinstance(got, torch.nn.Parameter) and got.requires_grad


def test_non_trainable() -> None:
    variable = make(trainable=False)
    assert check(variable) is variable._value and not variable.value.requires_grad


def test_stateless_scope_with_and_without_a_value() -> None:
    variable, other = make(), make()
    replacement = torch.ones(2, 3)
    with StatelessScope(state_mapping=[(variable, replacement)]):
        assert check(variable) is replacement
        assert check(other) is other._value  # in the scope, no value for it: the stored one


@pytest.mark.parametrize("cast", ["float16", "bfloat16"])
def test_autocast_scope(cast: str) -> None:
    casted, plain, integer = make(), make(autocast=False), make(dtype="int32")
    with common_variables.AutocastScope(cast):
        assert check(casted).dtype == getattr(torch, cast)
        assert check(plain) is plain._value
        assert check(integer) is integer._value
    assert check(casted) is casted._value


def test_meta_device() -> None:
    variable = make()
    with keras.device("meta"):
        got = check(variable)
    assert got.device.type == "meta" and got is not variable._value


def test_uninitialised_variable() -> None:
    variable = make()
    saved = variable._value
    variable._value = None
    variable._initializer = keras.initializers.Constant(2.0)
    try:
        got = check(variable)
        assert got is not saved and tuple(got.shape) == (2, 3)
    finally:
        variable._value = saved


def test_deferred_variable_in_a_symbolic_build() -> None:
    layer = keras.layers.Dense(3)
    outputs = layer(keras.Input((4,)))
    assert tuple(outputs.shape) == (None, 3)
    assert check(layer.kernel) is layer.kernel._value


def test_subclass_runs_the_body() -> None:
    calls: list[int] = []

    class Counting(type(make())):  # type: ignore[misc]
        def _maybe_autocast(self, value: Any) -> Any:
            calls.append(1)
            return value * 2

    variable = Counting(np.ones((2, 3), dtype="float32"))
    got = variable.value
    assert calls and torch.equal(got, variable._value * 2)


def test_monkeypatched_globals_run_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    variable = make()
    replacement = torch.zeros(2, 3)
    scope = StatelessScope(state_mapping=[(variable, replacement)])
    monkeypatch.setattr(core, "in_stateless_scope", lambda: True)
    monkeypatch.setattr(core, "get_stateless_scope", lambda: scope)
    assert variable.value is replacement
    monkeypatch.undo()
    monkeypatch.setattr(common_variables, "get_autocast_scope", lambda: common_variables.AutocastScope("float16"))
    assert variable.value.dtype == torch.float16
    monkeypatch.undo()
    monkeypatch.setattr(core, "get_device", lambda: "meta")
    assert variable.value.device.type == "meta"
    monkeypatch.undo()
    monkeypatch.setattr(type(variable), "_maybe_autocast", lambda self, value: value + 1)
    assert torch.equal(variable.value, variable._value + 1)
    monkeypatch.undo()
    assert check(variable) is variable._value


def test_another_thread_has_its_own_state() -> None:
    variable = make()
    seen: dict[str, Any] = {}

    def worker() -> None:
        seen["plain"] = check(variable)
        with keras.device("meta"):
            seen["meta"] = check(variable)

    with common_variables.AutocastScope("float16"):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert check(variable).dtype == torch.float16
    assert seen["plain"] is variable._value and seen["meta"].device.type == "meta"


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["float32", "float16", "int32"]),
    autocast=st.booleans(),
    trainable=st.booleans(),
    stateless=st.sampled_from(["none", "empty", "value"]),
    cast=st.sampled_from([None, "float16", "bfloat16"]),
    device=st.sampled_from([None, "cpu", "meta"]),
    initialised=st.booleans(),
)
def test_combinations(dtype: str, autocast: bool, trainable: bool, stateless: str, cast: str | None,
                      device: str | None, initialised: bool) -> None:
    variable = make(dtype, autocast, trainable)
    saved = variable._value
    if not initialised:
        variable._value = None
        variable._initializer = keras.initializers.Constant(2.0)
    try:
        with ExitStack() as stack:
            if stateless != "none":
                mapping = [(variable, torch.full((2, 3), 3.0))] if stateless == "value" else []
                stack.enter_context(StatelessScope(state_mapping=mapping))
            if cast is not None:
                stack.enter_context(common_variables.AutocastScope(cast))
            if device is not None:
                stack.enter_context(keras.device(device))
            check(variable)
    finally:
        variable._value = saved


def test_a_compiled_read_is_not_recompiled_when_the_modules_globals_grow() -> None:
    """Dynamo installs its compiled and resume functions as globals of the modules whose frames
    it compiles, so those modules' dicts grow while a program compiles. A compiled `value` read
    stays valid when the autocast module's globals grow (version 1 subscripted that dict, which
    torch 2.5's dynamo guarded on its length: every growth recompiled)."""
    import torch
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    variable = keras.Variable(np.ones(3, dtype="float32"))
    counter = CompileCounter()
    torch._dynamo.reset()
    read = torch.compile(lambda x: variable.value * x, backend=counter)
    try:
        first = read(torch.ones(3))
        frames = counter.frame_count
        vars(common_variables)["_forkgen_test_new_global"] = 1
        second = read(torch.ones(3))
        assert counter.frame_count == frames, "a new global of the autocast module recompiled the read"
        assert torch.equal(first, second)
    finally:
        vars(common_variables).pop("_forkgen_test_new_global", None)
        torch._dynamo.reset()
