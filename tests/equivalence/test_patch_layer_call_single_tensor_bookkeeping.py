"""Patch layer-call-single-tensor-bookkeeping on the installed fork: `Layer._set_mask_metadata`
sets the same masks, calls `compute_mask` the same way and returns or raises as upstream's.

The oracle is upstream's own `Layer._set_mask_metadata` of the release under test
(`upstream.original`, compiled from the unpatched source into the installed module). Each
example builds a scenario twice, from the same description (fresh tensors and masks each time):
the outputs (one tensor, `None`, a number, or a list/tuple/dict of those, possibly empty), which
of them carry a mask already, and what the layer's `compute_mask` returns (None, one mask, a
list or dict of masks and Nones, or an error). The fork's method runs on one copy, upstream's on
the other; then the masks on every output leaf (by label), the `compute_mask` calls and the
outcome must be equal. A real layer stack (Masking -> Dense, with and without a mask) is
compared too, with upstream's method installed in place of the patched one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras.src.backend.common import global_state
from keras.src.layers import layer as layer_module

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "layer-call-single-tensor-bookkeeping"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason=f"this fork does not apply {NAME}")

Layer = layer_module.Layer
tree = layer_module.tree  # the tree the layer module flattens with (dm-tree itself in 3.0)


def _mask_functions() -> tuple[Callable[[Any], Any], Callable[[Any, Any], None]]:
    """How the layer module reads and sets a Keras mask: a bare `get_keras_mask` (nightly),
    `backend.get_keras_mask` (3.6-3.15) or the `_keras_mask` attribute (3.0-3.5)."""
    for owner in (layer_module, layer_module.backend):
        getter = getattr(owner, "get_keras_mask", None)
        setter = getattr(owner, "set_keras_mask", None)
        if getter is not None and setter is not None:
            return getter, setter

    def get_attribute(x: Any) -> Any:
        return getattr(x, "_keras_mask", None)

    def set_attribute(x: Any, mask: Any) -> None:
        x._keras_mask = mask

    return get_attribute, set_attribute


get_keras_mask, set_keras_mask = _mask_functions()


def upstream_set_mask_metadata() -> Callable[..., Any]:
    """Upstream's `Layer._set_mask_metadata`, unpatched (called as `f(layer, inputs, outputs, mask)`)."""
    return upstream.original(Layer._set_mask_metadata)


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
                set_keras_mask(x, labels.new("premask"))
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
    masks = [labels.of(get_keras_mask(x)) for x in tree.flatten(outputs)]
    calls = [(labels.of(i), labels.of(p)) for i, p in layer.calls]
    return result, masks, calls


def test_the_fork_carries_the_fast_path() -> None:
    source = inspect.getsource(Layer._set_mask_metadata)
    assert f"# forkgen: {NAME}" in source
    assert "tree.is_nested(outputs)" in source


@given(outputs=STRUCTURE, answer=ANSWER, previous=st.booleans())
def test_set_mask_metadata_equals_upstream(outputs: Any, answer: Any, previous: bool) -> None:
    fork = run(Layer._set_mask_metadata, outputs, answer, previous)
    reference = run(upstream_set_mask_metadata(), outputs, answer, previous)
    assert fork == reference


@pytest.mark.parametrize("has_mask", [False, True])
@pytest.mark.parametrize("answer", [None, "mask", "list"])
def test_single_tensor_cases(has_mask: bool, answer: Any) -> None:
    """The single-tensor cases the fast path takes, spelled out."""
    answer_description = {None: ("none",), "mask": ("mask",), "list": [("mask",), ("mask",)]}[answer]
    fork = run(Layer._set_mask_metadata, ("tensor", has_mask), answer_description, True)
    reference = run(upstream_set_mask_metadata(), ("tensor", has_mask), answer_description, True)
    assert fork == reference
    if not has_mask and answer is not None:
        assert fork[1] == [reference[1][0]] and fork[1][0] is not None and fork[1][0].startswith("mask")


@pytest.mark.parametrize("masked", [False, True])
def test_layer_stack_masks_and_outputs(masked: bool) -> None:
    """Masking -> Dense -> Dense on eager tensors: the same masks and values as upstream's method."""
    data = np.array([[[0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [3.0, 4.0]]], dtype="float32")

    def forward() -> tuple[Any, Any]:
        keras.utils.set_random_seed(7)
        first = keras.layers.Masking(0.0) if masked else keras.layers.Identity()
        x = first(keras.ops.convert_to_tensor(data))
        y = keras.layers.Dense(3)(keras.layers.Dense(3)(x))
        mask = get_keras_mask(y)
        return keras.ops.convert_to_numpy(y), None if mask is None else keras.ops.convert_to_numpy(mask)

    fork_values, fork_mask = forward()
    with upstream.upstream(Layer, "_set_mask_metadata"):
        ref_values, ref_mask = forward()
    np.testing.assert_array_equal(fork_values, ref_values)
    assert (fork_mask is None) == (ref_mask is None) == (not masked)
    if masked:
        np.testing.assert_array_equal(fork_mask, ref_mask)
