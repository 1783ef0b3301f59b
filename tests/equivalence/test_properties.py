"""Property-based equivalence on the installed Keras: generated signatures and calls,
fast path on vs off, compared on CallSpecs, outputs, exceptions, and the training and
mask values that reach a nested layer."""

from __future__ import annotations

import inspect
from typing import Any

import keras
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence.helpers import (
    P,
    Recorder,
    catch,
    flatten,
    layer_with_signature,
    recording,
    set_mask,
    symbolic,
    tensor,
    to_numpy,
)
from tests.support.equivalence import differences

NAMES = ["inputs", "x", "training", "mask", "x_mask", "scale", "other", "flag"]
KINDS = st.sampled_from([P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.VAR_POSITIONAL, P.KEYWORD_ONLY, P.VAR_KEYWORD])
# Defaults are built once, per backend, when the module is imported.
DEFAULTS = [P.empty, None, True, False, 0, 1.5, "same", (), [], {}, (3, 3), (None, None), (None, 3),
            [1, "a"], {"k": 1}, ("a", None), tensor(7.0), (tensor(8.0), None), (tensor(8.0), 3)]
VALUES = [tensor(1.0), tensor(2.0), None, 3, "s", True, (tensor(4.0), None), [tensor(5.0)], (1, 2)]
FIRST = [tensor(9.0), tensor(9.5), symbolic(), None, 3, [tensor(1.0), tensor(2.0)]]


@st.composite
def signatures(draw: st.DrawFn) -> list[P]:
    names = draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True))
    kinds = sorted(draw(st.lists(KINDS, min_size=len(names), max_size=len(names))))
    parameters: list[P] = []
    seen_default = False
    for name, kind in zip(names, kinds, strict=True):
        if kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
            if all(p.kind != kind for p in parameters):
                parameters.append(P(name, kind))
            continue
        default = draw(st.sampled_from(DEFAULTS))
        positional = kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
        if positional and seen_default and default is P.empty:
            default = None  # a required positional parameter may not follow a defaulted one
        seen_default |= positional and default is not P.empty
        parameters.append(P(name, kind, default=default))
    return parameters


@st.composite
def calls(draw: st.DrawFn) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if draw(st.integers(0, 3)):  # mostly `layer(value)`, the shape the fast path is about
        args: tuple[Any, ...] = (draw(st.sampled_from(FIRST)),)
    else:
        args = tuple(draw(st.lists(st.sampled_from(VALUES + FIRST), max_size=3)))
    kwargs: dict[str, Any] = {}
    if draw(st.booleans()):
        kwargs = draw(st.dictionaries(st.sampled_from(NAMES + ["extra"]), st.sampled_from(VALUES), max_size=2))
    return args, kwargs


def comparable(value: Any, values: bool = True) -> Any:
    """Outputs and received arguments, as values (tensors become lists).

    With `values=False` (a symbolic call, where `call` runs on placeholder
    tensors whose contents are arbitrary) tensors compare by shape and dtype.
    """
    if isinstance(value, keras.KerasTensor):
        return ("KerasTensor", tuple(value.shape), value.dtype)
    if keras.ops.is_tensor(value) and not values:
        return ("tensor", tuple(value.shape), str(value.dtype))
    if keras.ops.is_tensor(value):
        try:
            return ("tensor", to_numpy(value).tolist())
        except Exception:  # noqa: BLE001 - a tensor with no data (torch "meta", a tracer)
            return ("tensor without data", tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [comparable(v, values) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, comparable(v, values)) for k, v in value.items()])
    return value


def symbolic_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return any(isinstance(v, keras.KerasTensor) for v in flatten((args, kwargs)))


def run(parameters: list[P], args: tuple[Any, ...], kwargs: dict[str, Any], fast: bool) -> tuple[Any, Recorder]:
    box: list[Recorder | None] = [None]
    layer = layer_with_signature(parameters, box)
    if not fast:
        layer._call_spec_fast_path = False
    with recording() as recorder:
        box[0] = recorder
        result = catch(lambda: layer(*args, **dict(kwargs)))
    return result, recorder


@given(parameters=signatures(), call=calls())
def test_generated_signatures_and_calls(parameters: list[P], call: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
    args, kwargs = call
    (status_on, value_on), on = run(parameters, args, kwargs, fast=True)
    (status_off, value_off), off = run(parameters, args, kwargs, fast=False)
    assert off.fast == []
    assert status_on == status_off, (value_on, value_off)
    if status_on == "error":
        assert value_on == value_off
        return
    values = not symbolic_call(args, kwargs)
    assert comparable(value_on, values) == comparable(value_off, values)
    assert len(on.specs) == len(off.specs) >= 1
    assert differences(on.specs[0], off.specs[0]) == []
    assert [comparable(r, values) for r in on.received] == [comparable(r, values) for r in off.received]


class Outer(keras.layers.Layer):
    """Calls an inner layer as `inner(x)`; its own call takes training and mask."""

    def __init__(self, inner: Any) -> None:
        super().__init__(name="outer")
        self.inner = inner

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        return self.inner(inputs)


TRAINING = st.sampled_from(["absent", None, True, False])


@given(parameters=signatures(), training=TRAINING, masked=st.booleans())
def test_training_and_mask_reach_nested_layers_alike(parameters: list[P], training: Any, masked: bool) -> None:
    def run_nested(fast: bool) -> tuple[Any, list[Any]]:
        box: list[Recorder | None] = [None]
        inner = layer_with_signature(parameters, box)
        outer = Outer(inner)
        if not fast:
            inner._call_spec_fast_path = False
            outer._call_spec_fast_path = False
        x = tensor(1.0)
        if masked:
            set_mask(x, keras.ops.convert_to_tensor(np.array([True, False])))
        kwargs = {} if training == "absent" else {"training": training}
        with recording() as recorder:
            box[0] = recorder
            result = catch(lambda: outer(x, **kwargs))
        return result[0], [comparable(r) for r in recorder.received]

    assert run_nested(True) == run_nested(False)


def test_signature_strategy_reaches_both_paths() -> None:
    # Guards the properties above against a generator that never makes an eligible layer.
    eligible = layer_with_signature([P("inputs", P.POSITIONAL_OR_KEYWORD), P("training", P.POSITIONAL_OR_KEYWORD, default=None)])
    ineligible = layer_with_signature([P("inputs", P.VAR_POSITIONAL)])
    assert eligible._call_spec_fast_path and not ineligible._call_spec_fast_path
    assert inspect.signature(eligible.call).parameters.keys() == {"inputs", "training"}
