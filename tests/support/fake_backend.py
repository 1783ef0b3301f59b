"""A stand-in for the parts of Keras's backend and tree that layer.py uses.

Lets the synthetic `layer.py` modules of the unit tests run, so that the code
the codemods insert is exercised offline, without Keras or a real backend.
"""

from __future__ import annotations

import types
from typing import Any


class Tensor:
    """Stands for an eager backend tensor."""

    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Tensor({self.value})"


class KerasTensor:
    """Stands for a symbolic KerasTensor."""

    def __repr__(self) -> str:
        return "KerasTensor()"


class Registered:
    """A container type registered as nested with the tree, that has no `__len__`."""

    def __init__(self, *items: Any) -> None:
        self.items = items


def _is_tensor(x: Any) -> bool:
    return isinstance(x, Tensor)


def _is_nested(x: Any) -> bool:
    return isinstance(x, (list, tuple, dict, Registered))


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [leaf for key in sorted(x) for leaf in _flatten(x[key])]
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in _flatten(item)]
    if isinstance(x, Registered):
        return [leaf for item in x.items for leaf in _flatten(item)]
    return [x]


def _map_structure(func: Any, x: Any) -> Any:
    if isinstance(x, dict):
        return {key: _map_structure(func, value) for key, value in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_map_structure(func, item) for item in x)
    return func(x)


def _get_keras_mask(x: Any) -> Any:
    return getattr(x, "_keras_mask", None)


def _set_keras_mask(x: Any, mask: Any) -> None:
    x._keras_mask = mask


backend = types.SimpleNamespace(
    is_tensor=_is_tensor,
    KerasTensor=KerasTensor,
    backend=lambda: "numpy",
    get_keras_mask=_get_keras_mask,
    set_keras_mask=_set_keras_mask,
    get_autocast_scope=lambda: None,  # no autocast scope open: the layer's dtypes agree
    AutocastScope=None,
)
tree = types.SimpleNamespace(is_nested=_is_nested, flatten=_flatten, map_structure=_map_structure)
#: What layer.py reads of Keras's global state and distribution: nothing set, no distribution.
global_state = types.SimpleNamespace(get_global_attribute=lambda name, default=None, set_to_default=False: default)
distribution_lib = types.SimpleNamespace(distribution=lambda: None)


class TrackedList(list):
    """Keras's tracked list as far as `layer-clear-losses-skip-empty` sees it: a `clear` of its own."""

    def clear(self) -> None:
        super().clear()


class TrackedSet(set):
    """Keras's tracked set as far as `layer-clear-losses-skip-empty` sees it: a `clear` of its own."""

    def clear(self) -> None:
        super().clear()


tracking = types.SimpleNamespace(TrackedList=TrackedList, TrackedSet=TrackedSet)
