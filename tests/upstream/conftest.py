"""Importable as `conftest` by Keras's own tests (`from conftest import skip_if_backend`).

Keras's repository conftest.py provides this helper; the wheel does not ship it.
"""

from __future__ import annotations

import pytest


def skip_if_backend(given_backend: str, reason: str) -> pytest.MarkDecorator:
    from keras.src.backend import backend

    return pytest.mark.skipif(backend() == given_backend, reason=reason)
