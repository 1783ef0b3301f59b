"""Building layers with given call signatures, and watching the CallSpecs they build."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import keras
import numpy as np
from keras.src.layers import layer as layer_module

CallSpec = layer_module.CallSpec
P = inspect.Parameter

#: CallSpec takes the layer's call-context arguments from Keras 3.10 (variant V4) on.
_TAKES_CONTEXT_ARGS = "call_context_args" in inspect.signature(CallSpec.__init__).parameters


def variant() -> str:
    """The CallSpec variant (V1-V4) forkgen found in the installed fork."""
    from keras.src import forkgen_provenance

    return str(forkgen_provenance.PROVENANCE["callspec_variant"])


def get_mask(x: Any) -> Any:
    """The Keras mask attached to `x` (`backend.get_keras_mask` from 3.6, `_keras_mask` before)."""
    getter = getattr(keras.src.backend, "get_keras_mask", None)
    return getter(x) if getter is not None else getattr(x, "_keras_mask", None)


def set_mask(x: Any, mask: Any) -> None:
    setter = getattr(keras.src.backend, "set_keras_mask", None)
    if setter is not None:
        setter(x, mask)
    else:
        x._keras_mask = mask


def flatten(structure: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts (`keras.tree` is public only from 3.3)."""
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in flatten(item)]
    if isinstance(structure, dict):
        return [leaf for item in structure.values() for leaf in flatten(item)]
    return [structure]


def slow_spec(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The CallSpec the unpatched `__call__` builds for `layer(*args, **kwargs)`."""
    if _TAKES_CONTEXT_ARGS:
        return CallSpec(layer._call_signature, layer._call_context_args, args, kwargs)
    return CallSpec(layer._call_signature, args, kwargs)


def tensor(value: float = 1.0, shape: tuple[int, ...] = (2, 3)) -> Any:
    """An eager backend tensor."""
    return keras.ops.convert_to_tensor(np.full(shape, value, dtype="float32"))


def symbolic(shape: tuple[int, ...] = (2, 3)) -> Any:
    return keras.KerasTensor(shape, dtype="float32")


def to_numpy(x: Any) -> Any:
    return keras.ops.convert_to_numpy(x)


@dataclass
class Recorder:
    """Every CallSpec built, by which path, and what `call` received."""

    slow: list[Any] = field(default_factory=list)
    fast: list[Any] = field(default_factory=list)
    received: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    @property
    def specs(self) -> list[Any]:
        return self.slow + self.fast


@contextmanager
def recording() -> Iterator[Recorder]:
    recorder = Recorder()
    original_init = CallSpec.__init__
    original_fast = CallSpec._fast.__func__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        recorder.slow.append(self)  # recorded even when binding then raises
        original_init(self, *args, **kwargs)

    def fast(cls: type, *args: Any) -> Any:
        spec = original_fast(cls, *args)
        recorder.fast.append(spec)
        return spec

    with mock.patch.object(CallSpec, "__init__", init), mock.patch.object(CallSpec, "_fast", classmethod(fast)):
        yield recorder


def layer_with_signature(parameters: list[P], recorder_box: list[Recorder | None] | None = None) -> Any:
    """A Layer whose `call` has exactly `parameters` (after self).

    `call` returns its first tensor-like positional argument (or a constant)
    and, when `recorder_box[0]` is set, records what it received.
    """
    box = recorder_box if recorder_box is not None else [None]

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if box[0] is not None:
            box[0].received.append((args, kwargs))
        for value in (*args, *kwargs.values()):
            if keras.ops.is_tensor(value) or isinstance(value, keras.KerasTensor):
                return value
        return keras.ops.zeros((1,))

    call.__signature__ = inspect.Signature([P("self", P.POSITIONAL_ONLY), *parameters])  # type: ignore[attr-defined]
    # One name for every generated layer, so that error messages compare equal.
    return type("Generated", (keras.layers.Layer,), {"call": call})(name="generated")


def layer_from_source(spec: str, defaults: dict[str, Any] | None = None) -> Any:
    """A Layer whose `call` is `def call(self, <spec>)`, e.g. "inputs, /, training=None"."""
    namespace: dict[str, Any] = dict(defaults or {})
    exec(f"def f({spec}):\n    pass\n", namespace)
    return layer_with_signature(list(inspect.signature(namespace["f"]).parameters.values()))


def disable_fast_path(model: Any) -> None:
    """Send every layer of `model` (itself included) down the slow path."""
    for layer in model._flatten_layers(include_self=True, recursive=True):
        layer._call_spec_fast_path = False


def catch(fn: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", result) or ("error", (type, message)); object addresses in the
    message (`at 0x7f...`, which differ between any two runs) are blanked."""
    try:
        return "ok", fn()
    except Exception as error:  # noqa: BLE001 - the exception is what gets compared
        return "error", (type(error), re.sub(r"0x[0-9a-fA-F]+", "0x…", str(error)))
