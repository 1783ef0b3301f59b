"""Patch layer-call-single-tensor-bookkeeping (ours, after keras-team/keras#23300): the patched
`_set_mask_metadata` (codemods/layer_call_single_tensor_bookkeeping/cases.py) run side by side
with the unpatched one on every kind of output. The codemod's cases and drift are in that cases.py."""

from __future__ import annotations

import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.layer_call_single_tensor_bookkeeping.cases import AFTER, BEFORE
from tests.support.synthetic import load_module


class Tensor:
    def __init__(self, label: str) -> None:
        self.label = label


class Registered:
    """A container the tree flattens (like a tracked list)."""

    def __init__(self, *items: Any) -> None:
        self.items = items


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


def _set(x: Any, mask: Any) -> None:
    x._keras_mask = mask


NAMESPACE = {
    "tree": types.SimpleNamespace(is_nested=_is_nested, flatten=_flatten),
    "backend": types.SimpleNamespace(get_keras_mask=lambda x: getattr(x, "_keras_mask", None), set_keras_mask=_set),
}

LEAF = st.one_of(st.tuples(st.just("tensor"), st.booleans()), st.just(("none",)))
STRUCTURE = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(lambda items: ("registered", *items)),
        st.dictionaries(st.sampled_from("ab"), inner, max_size=2),
    ),
    max_leaves=5,
)
ANSWER = st.one_of(
    st.just(None), st.just("mask"), st.just("error"), st.lists(st.sampled_from(["mask", None]), max_size=3)
)


def _build(description: Any, made: list[Any]) -> Any:
    if isinstance(description, list):
        return [_build(d, made) for d in description]
    if isinstance(description, dict):
        return {k: _build(v, made) for k, v in description.items()}
    if description[0] == "registered":
        return Registered(*(_build(d, made) for d in description[1:]))
    if description[0] == "none":
        return None
    tensor = Tensor(f"out{len(made)}")
    made.append(tensor)
    if description[1]:
        tensor._keras_mask = f"pre{len(made)}"
    return tensor


def _run(source: str, outputs_description: Any, answer: Any) -> Any:
    module = load_module(source)
    vars(module).update(NAMESPACE)
    calls: list[Any] = []
    masks = iter(Tensor(f"mask{i}") for i in range(10))

    class Probe(module.Layer):  # type: ignore[misc,name-defined]
        def compute_mask(self, inputs: Any, previous_mask: Any) -> Any:
            calls.append((inputs, previous_mask))
            if answer == "error":
                raise ValueError("no mask")
            if answer == "mask":
                return next(masks)
            if isinstance(answer, list):
                return [next(masks) if a else None for a in answer]
            return answer

    made: list[Any] = []
    outputs = _build(outputs_description, made)
    try:
        result: Any = Probe()._set_mask_metadata("inputs", outputs, "previous")
    except (ValueError, AttributeError) as error:  # compute_mask's error; a mask set on None
        result = ("raised", type(error).__name__, str(error))
    seen = [None if x is None else (x.label, getattr(getattr(x, "_keras_mask", None), "label", x.__dict__.get("_keras_mask")))
            for x in _flatten(outputs)]
    return result, seen, calls


@settings(deadline=None)
@given(outputs=STRUCTURE, answer=ANSWER)
def test_patched_method_equals_upstream(outputs: Any, answer: Any) -> None:
    assert _run(AFTER, outputs, answer) == _run(BEFORE, outputs, answer)


@pytest.mark.parametrize(("outputs", "answer", "mask"), [
    (("tensor", False), "mask", "mask0"),
    (("tensor", True), "mask", "pre1"),
    (("tensor", False), None, None),
    (("tensor", False), ["mask", "mask"], "mask0"),
])
def test_single_tensor_takes_the_fast_path_with_upstream_results(outputs: Any, answer: Any, mask: Any) -> None:
    result, seen, calls = _run(AFTER, outputs, answer)
    assert result is None and seen == [("out0", mask)]
    assert calls == ([] if outputs[1] else [("inputs", "previous")])
