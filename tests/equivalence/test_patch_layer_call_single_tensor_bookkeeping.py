"""Patch layer-call-single-tensor-bookkeeping on the installed fork: `Layer._set_mask_metadata`
sets the same masks, calls `compute_mask` the same way and returns or raises as 3.15.1's.

`reference_set_mask_metadata` below is 3.15.1's logic, written out here. Each example builds a
scenario twice, from the same description (fresh tensors and masks each time): the outputs (one
tensor, `None`, a number, or a list/tuple/dict of those, possibly empty), which of them carry a
mask already, and what the layer's `compute_mask` returns (None, one mask, a list or dict of
masks and Nones, or an error). The fork's method runs on one copy, the reference on the other;
then the masks on every output leaf (by label), the `compute_mask` calls and the outcome must
be equal. A real layer stack (Masking -> Dense, with and without a mask) is compared too.
"""

from __future__ import annotations

import inspect
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras.src import backend
from keras.src.backend.common import global_state
from keras.src.layers import layer as layer_module

from tests.equivalence.helpers import patch_applied

NAME = "layer-call-single-tensor-bookkeeping"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason=f"this fork does not apply {NAME}")

Layer = layer_module.Layer


def reference_set_mask_metadata(layer: Any, inputs: Any, outputs: Any, previous_mask: Any) -> None:
    """Keras 3.15.1's `Layer._set_mask_metadata`."""
    flat_outputs = keras.tree.flatten(outputs)
    if all(backend.get_keras_mask(x) is not None for x in flat_outputs):
        return
    output_masks = layer.compute_mask(inputs, previous_mask)
    if output_masks is None:
        return
    for tensor, mask in zip(flat_outputs, keras.tree.flatten(output_masks), strict=False):
        if backend.get_keras_mask(tensor) is None and mask is not None:
            backend.set_keras_mask(tensor, mask)


class Recorder(Layer):
    """A layer whose compute_mask records its calls and returns what the scenario says."""

    def __init__(self, answer: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answer = answer
        self.calls: list[tuple[Any, Any]] = []

    def compute_mask(self, inputs: Any, previous_mask: Any) -> Any:
        self.calls.append((inputs, previous_mask))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


# A leaf description: ("tensor", has_mask) | ("none",) | ("number",)
LEAF = st.one_of(
    st.tuples(st.just("tensor"), st.booleans()),
    st.just(("none",)),
    st.just(("number",)),
)
STRUCTURE = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    ),
    max_leaves=5,
)
MASK = st.one_of(st.just(("mask",)), st.just(("none",)))
ANSWER = st.one_of(
    st.just(("none",)),
    st.just(("mask",)),
    st.just(("error",)),
    st.lists(MASK, max_size=4),
    st.dictionaries(st.sampled_from("abc"), MASK, max_size=3),
)


class Labels:
    """Fresh objects for one copy of a scenario, each with a label."""

    def __init__(self) -> None:
        self.label: dict[int, str] = {}
        self.keep: list[Any] = []

    def new(self, prefix: str) -> Any:
        x = keras.ops.zeros((2,))
        self.label[id(x)] = f"{prefix}{len(self.keep)}"
        self.keep.append(x)
        return x

    def of(self, x: Any) -> Any:
        return None if x is None else self.label.get(id(x), repr(x))


def build(description: Any, labels: Labels) -> Any:
    if isinstance(description, list):
        return [build(d, labels) for d in description]
    if isinstance(description, dict):
        return {k: build(v, labels) for k, v in description.items()}
    if isinstance(description, tuple) and description and isinstance(description[0], str):
        kind = description[0]
        if kind == "tensor":
            x = labels.new("out")
            if description[1]:
                backend.set_keras_mask(x, labels.new("premask"))
            return x
        if kind == "mask":
            return labels.new("mask")
        if kind == "error":
            return ValueError("compute_mask failed")
        if kind == "number":
            return 3
        return None
    return tuple(build(d, labels) for d in description)


def run(method: Any, outputs_description: Any, answer_description: Any, previous: bool) -> Any:
    # Masks of objects that take no attributes (ints, None) live in a global dict keyed by id()
    # (and setting one on an int stores it, then raises): each run starts from an empty one.
    global_state.set_global_attribute("_keras_mask_dict", None)
    labels = Labels()
    outputs = build(outputs_description, labels)
    answer = build(answer_description, labels)
    inputs = labels.new("in")
    previous_mask = labels.new("prev") if previous else None
    layer = Recorder(answer)
    try:
        result: Any = ("returned", method(layer, inputs, outputs, previous_mask))
    except Exception as error:  # noqa: BLE001 - the outcome is compared
        result = ("raised", type(error), str(error))
    masks = [labels.of(backend.get_keras_mask(x)) for x in keras.tree.flatten(outputs)]
    calls = [(labels.of(i), labels.of(p)) for i, p in layer.calls]
    return result, masks, calls


def test_the_fork_carries_the_fast_path() -> None:
    source = inspect.getsource(Layer._set_mask_metadata)
    assert f"# forkgen: {NAME}" in source
    assert "tree.is_nested(outputs)" in source


@given(outputs=STRUCTURE, answer=ANSWER, previous=st.booleans())
def test_set_mask_metadata_equals_3_15_1(outputs: Any, answer: Any, previous: bool) -> None:
    fork = run(Layer._set_mask_metadata, outputs, answer, previous)
    reference = run(reference_set_mask_metadata, outputs, answer, previous)
    assert fork == reference


@pytest.mark.parametrize("has_mask", [False, True])
@pytest.mark.parametrize("answer", [None, "mask", "list"])
def test_single_tensor_cases(has_mask: bool, answer: Any) -> None:
    """The single-tensor cases the fast path takes, spelled out."""
    answer_description = {None: ("none",), "mask": ("mask",), "list": [("mask",), ("mask",)]}[answer]
    fork = run(Layer._set_mask_metadata, ("tensor", has_mask), answer_description, True)
    reference = run(reference_set_mask_metadata, ("tensor", has_mask), answer_description, True)
    assert fork == reference
    if not has_mask and answer is not None:
        assert fork[1] == [reference[1][0]] and fork[1][0] is not None and fork[1][0].startswith("mask")


@pytest.mark.parametrize("masked", [False, True])
def test_layer_stack_masks_and_outputs(monkeypatch: pytest.MonkeyPatch, masked: bool) -> None:
    """Masking -> Dense -> Dense on eager tensors: the same masks and values as 3.15.1's method."""
    data = np.array([[[0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [3.0, 4.0]]], dtype="float32")

    def forward() -> tuple[Any, Any]:
        keras.utils.set_random_seed(7)
        first = keras.layers.Masking(0.0) if masked else keras.layers.Identity()
        x = first(keras.ops.convert_to_tensor(data))
        y = keras.layers.Dense(3)(keras.layers.Dense(3)(x))
        mask = backend.get_keras_mask(y)
        return keras.ops.convert_to_numpy(y), None if mask is None else keras.ops.convert_to_numpy(mask)

    fork_values, fork_mask = forward()
    monkeypatch.setattr(Layer, "_set_mask_metadata", reference_set_mask_metadata)
    ref_values, ref_mask = forward()
    np.testing.assert_array_equal(fork_values, ref_values)
    assert (fork_mask is None) == (ref_mask is None) == (not masked)
    if masked:
        np.testing.assert_array_equal(fork_mask, ref_mask)
