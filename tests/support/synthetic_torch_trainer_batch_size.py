"""The synthetic files `torch-trainer-batch-size` anchors on, and stand-ins to run them offline.

`FILES` holds a minimal `keras/src/backend/torch/trainer.py` shaped like Keras 3.12-3.15.1's
(`import torch`, `from keras.src import tree`, a `TorchTrainer` whose `train_step` and
`test_step` update the loss tracker with the batch size read through `tree.flatten`), and the
`keras/src/tree/__init__.py` export of `is_nested` (written for these tests; only the anchored
statements follow Keras). `loaded` executes a (patched or not) trainer text against the
`torch` and `tree` stand-ins below, which log what the batch size expression does.
"""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TRAINER_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/trainer.py (train_step and test_step)."""

    import warnings

    import torch

    from keras.src import tree


    class TorchTrainer:
        def __init__(self):
            self.train_function = None

        def train_step(self, data):
            x, y, sample_weight = data

            # Compute predictions
            y_pred = self(x, training=True)
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            self._loss_tracker.update_state(
                loss,
                sample_weight=next(
                    i for i in tree.flatten(x) if i is not None
                ).shape[0],
            )
            if self.optimizer is not None:
                loss = self.optimizer.scale_loss(loss)
            else:
                warnings.warn("no optimizer")
            return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

        def test_step(self, data):
            (
                x,
                y,
                sample_weight,
            ) = data
            y_pred = self(x, training=False)
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
            )
            self._loss_tracker.update_state(
                loss,
                sample_weight=next(
                    i for i in tree.flatten(x) if i is not None
                ).shape[0],
            )
            return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

        def predict_step(self, data):
            x, _, _ = data
            return self(x, training=False)
    '''
)

TREE_INIT_PY = textwrap.dedent(
    """\
    from keras.src.tree.tree_api import flatten
    from keras.src.tree.tree_api import is_nested
    from keras.src.tree.tree_api import map_structure
    """
)

TRAINER = "keras/src/backend/torch/trainer.py"
TREE_INIT = "keras/src/tree/__init__.py"

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the modules too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    TRAINER: TRAINER_PY,
    TREE_INIT: TREE_INIT_PY,
}

#: What the stand-ins saw, in order: `is_nested(<type>)`, `flatten(<type>)`, `shape(<type>)`.
log: list[str] = []


class Tensor:
    """torch.Tensor's part here: a `shape` (a tuple, as torch.Size is), read through a property."""

    def __init__(self, *shape: int) -> None:
        self._shape = tuple(shape)

    @property
    def shape(self) -> tuple[int, ...]:
        log.append(f"shape({type(self).__name__})")
        return self._shape

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._shape}"


class SubTensor(Tensor):
    """A tensor subclass (as torch.nn.Parameter or a user's subclass are)."""


class Proxy:
    """Not a tensor, but claims to be one through `__class__` (as mocks and lazy proxies do):
    `isinstance(proxy, Tensor)` is True, and reading `__class__` is logged."""

    def __init__(self, *shape: int) -> None:
        self._shape = tuple(shape)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: PLE0307 - the point of the stand-in
        log.append("__class__(Proxy)")
        return Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        log.append("shape(Proxy)")
        return self._shape


def _fake_torch() -> types.ModuleType:
    module = types.ModuleType("torch")
    module.Tensor = Tensor  # type: ignore[attr-defined]
    return module


class Tree:
    """Keras 3.15.1's `tree` semantics on the torch backend, small: lists, tuples, namedtuples
    and dicts (by sorted key) are structures, and so is any type in `nodes` (a type registered as
    a tree node, with its flatten function); `flatten` answers `[s]` at once for a non-nested
    `s`, as tree_api's does. Like torch's pytree, it looks at `type(s)` only, never at
    `s.__class__`."""

    def __init__(self) -> None:
        self.nodes: dict[type, Callable[[Any], list[Any]]] = {}

    def is_nested(self, structure: Any) -> bool:
        log.append(f"is_nested({type(structure).__name__})")
        return self._nested(structure)

    def _nested(self, s: Any) -> bool:
        kind = type(s)
        return kind in (list, tuple, dict) or kind in self.nodes or (issubclass(kind, tuple) and hasattr(kind, "_fields"))

    def flatten(self, structure: Any) -> list[Any]:
        log.append(f"flatten({type(structure).__name__})")
        if not self._nested(structure):
            return [structure]
        return self._flatten(structure)

    def _flatten(self, s: Any) -> list[Any]:
        if not self._nested(s):
            return [s]
        if type(s) in self.nodes:
            children = self.nodes[type(s)](s)
        elif type(s) is dict:
            children = [s[k] for k in sorted(s)]
        else:
            children = list(s)
        return [leaf for child in children for leaf in self._flatten(child)]


tree = Tree()


@contextmanager
def _stand_ins() -> Iterator[None]:
    """`import torch` and `from keras.src import tree` resolve to the stand-ins while a module
    is executed (sys.modules restored afterwards)."""
    keras = types.ModuleType("keras")
    src = types.ModuleType("keras.src")
    keras.src = src  # type: ignore[attr-defined]
    src.tree = tree  # type: ignore[attr-defined]
    names = ("torch", "keras", "keras.src", "keras.src.tree")
    saved = {name: sys.modules.get(name) for name in names}
    sys.modules.update({"torch": _fake_torch(), "keras": keras, "keras.src": src, "keras.src.tree": tree})  # type: ignore[dict-item]
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def loaded(source: str, name: str) -> types.ModuleType:
    """Execute a trainer text (patched or not) against the stand-ins."""
    module = types.ModuleType(name)
    with _stand_ins():
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


class Model:
    """The `self` that `train_step`/`test_step` run with: records what the loss tracker got."""

    def __init__(self) -> None:
        self.updates: list[tuple[Any, Any]] = []
        self.optimizer = None
        self._loss_tracker = self

    def __call__(self, x: Any, training: bool = False) -> str:
        return "y_pred"

    def _compute_loss(self, **kwargs: Any) -> float:
        return 0.5

    def update_state(self, loss: Any, sample_weight: Any = None) -> None:
        self.updates.append((loss, sample_weight))

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> dict[str, Any]:
        return {"updates": list(self.updates)}
