"""Patch layer-call-state-writes on the installed fork: the flags behave as upstream's writes.

Upstream writes `self._called = True` and `self.built = True` on every `Layer.__call__`; the
patch writes each only while it is not yet True. What a user can observe must not change.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest

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
