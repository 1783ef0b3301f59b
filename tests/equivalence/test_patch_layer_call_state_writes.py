"""Patch layer-call-state-writes on the installed fork: the flags behave as upstream's writes.

Upstream writes `self._called = True` and `self.built = True` on every `Layer.__call__`; the
patch writes each only while it is not yet True. What a user can observe must not change: the
oracle is upstream's own `Layer.__call__` of the release under test, installed in place of the
patched one (`upstream.upstream(Layer, "__call__")`). Which writes happen is a property of the
patch, counted on the fork and compared with upstream's count.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
from keras.src.layers import layer as layer_module

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied, to_numpy

APPLIED = patch_applied("layer-call-state-writes")
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply layer-call-state-writes")


class Watched(keras.layers.Layer):
    """Counts the writes of `_called` and `built` that reach `Layer.__setattr__`."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_called", "built"):
            self.__dict__.setdefault("writes", []).append(name)
        super().__setattr__(name, value)

    def call(self, x: Any) -> Any:
        return x * 2.0


def test_flags_are_set_by_the_first_call_and_written_once() -> None:
    layer = Watched()
    x = np.ones((2, 3), "float32")
    before = list(layer.writes)
    assert layer._called is False
    for _ in range(3):
        np.testing.assert_array_equal(to_numpy(layer(x)), x * 2.0)
    assert layer._called is True and layer.built is True
    # Upstream: 2 writes on every call. Patched: only the first call writes (built may be
    # written by the build step too, once).
    assert layer.writes[len(before):].count("_called") == 1
    assert 1 <= layer.writes[len(before):].count("built") <= 2


def test_a_flag_reset_between_calls_is_set_again() -> None:
    layer = Watched()
    x = np.ones((1, 3), "float32")
    layer(x)
    layer.built = False
    layer._called = False
    np.testing.assert_array_equal(to_numpy(layer(x)), x * 2.0)
    assert layer.built is True and layer._called is True


def scenario() -> tuple[list[Any], list[list[str]]]:
    """Three calls, both flags reset, two calls more: what a user sees after each call, and
    the writes of the flags that reached `__setattr__` during each call."""
    layer = Watched()
    x = np.ones((2, 3), "float32")
    seen: list[Any] = []
    writes: list[list[str]] = []
    for step in range(5):
        if step == 3:
            layer.built = False
            layer._called = False
        before = len(layer.writes)
        out = layer(x)
        writes.append(list(layer.writes[before:]))
        seen.append((to_numpy(out).tolist(), layer._called, layer.built))
    return seen, writes


def test_what_a_user_sees_is_upstream_s_and_fewer_writes_happen() -> None:
    patched, patched_writes = scenario()
    with upstream.upstream(layer_module.Layer, "__call__"):
        expected, upstream_writes = scenario()
    assert patched == expected
    # Upstream writes `_called` on every call (and `built` too from 3.10; 3.0-3.9 guard it
    # themselves); the patch writes each only on the first call after it was False (the build
    # step may write `built` too, as upstream's does).
    assert [w.count("_called") for w in upstream_writes] == [1, 1, 1, 1, 1]
    assert [w.count("_called") for w in patched_writes] == [1, 0, 0, 1, 0]
    assert [w.count("built") for w in patched_writes][1:3] == [0, 0]
    assert [w.count("built") for w in patched_writes][4] == 0
    for got, full in zip(patched_writes, upstream_writes, strict=True):
        assert got.count("built") in (full.count("built"), full.count("built") - 1)
