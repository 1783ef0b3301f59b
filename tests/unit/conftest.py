"""Fixtures of the unit tests: the stand-ins of frameworks that a patch's behaviours (`BEHAVIOURS`
in its cases.py, run by test_patch_cases.py) are handed by parameter name, so that a cases module
imports nothing from tests/ (the import rule, test_imports.py)."""

from __future__ import annotations

import importlib
import types

import pytest


def _stand_in(name: str) -> types.ModuleType:
    return importlib.import_module(f"tests.support.{name}")


@pytest.fixture
def fake_backend() -> types.ModuleType:
    """A Keras backend that runs without a framework (tests/support/fake_backend.py)."""
    return _stand_in("fake_backend")


@pytest.fixture
def keras_variable() -> types.ModuleType:
    """Keras's variable scopes and global state, alone (tests/support/keras_variable.py)."""
    return _stand_in("keras_variable")


@pytest.fixture
def torch_current_cuda() -> types.ModuleType:
    """A torch whose current cuda device the test sets (tests/support/torch_current_cuda.py)."""
    return _stand_in("torch_current_cuda")


@pytest.fixture
def torch_device_moves() -> types.ModuleType:
    """A torch that logs every move, copy and cast (tests/support/torch_device_moves.py)."""
    return _stand_in("torch_device_moves")


@pytest.fixture
def torch_pytree() -> types.ModuleType:
    """torch's pytree rules in pure Python, counting its flattens (tests/support/torch_pytree.py)."""
    return _stand_in("torch_pytree")


@pytest.fixture
def torch_strided() -> types.ModuleType:
    """Strided tensors and memory formats on numpy (tests/support/torch_strided.py)."""
    return _stand_in("torch_strided")
