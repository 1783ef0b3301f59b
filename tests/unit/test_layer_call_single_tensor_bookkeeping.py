"""Patch layer-call-single-tensor-bookkeeping (ours, after keras-team/keras#23300) on synthetic
Layer modules: the codemod, its drift diagnostics, and the patched method run side by side with
the unpatched one on every kind of output."""

from __future__ import annotations

import textwrap
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.layer_call_single_tensor_bookkeeping import PATCH, MaskFastPathCommand
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support.synthetic import load_module

LAYER = "keras/src/layers/layer.py"
MARK = "# forkgen: layer-call-single-tensor-bookkeeping"

# A Layer shaped like Keras 3.9-3.15.1's around `_set_mask_metadata`.
BEFORE = textwrap.dedent(
    """\
    class Layer:
        def compute_mask(self, inputs, previous_mask):
            return previous_mask

        def _set_mask_metadata(self, inputs, outputs, previous_mask):
            flat_outputs = tree.flatten(outputs)

            mask_already_computed = all(
                backend.get_keras_mask(x) is not None for x in flat_outputs
            )
            if mask_already_computed:
                return

            output_masks = self.compute_mask(inputs, previous_mask)
            if output_masks is None:
                return

            flat_masks = tree.flatten(output_masks)
            for tensor, mask in zip(flat_outputs, flat_masks):
                if backend.get_keras_mask(tensor) is None and mask is not None:
                    backend.set_keras_mask(tensor, mask)
    """
)
TOP = """\
        flat_outputs = tree.flatten(outputs)

        mask_already_computed = all(
            backend.get_keras_mask(x) is not None for x in flat_outputs
        )
        if mask_already_computed:
            return
"""
AFTER = BEFORE.replace(
    TOP,
    f"        if not tree.is_nested(outputs):  {MARK}\n"
    "            if backend.get_keras_mask(outputs) is not None:\n"
    "                return\n"
    "            flat_outputs = [outputs]\n"
    "        else:\n" + textwrap.indent(TOP, "    ").replace("    \n", "\n"),
)
# Keras 3.0-3.3: the mask read with getattr.
OLD = BEFORE.replace("backend.get_keras_mask(x)", 'getattr(x, "_keras_mask", None)')
OLD_AFTER = AFTER.replace("backend.get_keras_mask(x)", 'getattr(x, "_keras_mask", None)').replace(
    "backend.get_keras_mask(outputs)", 'getattr(outputs, "_keras_mask", None)'
)
# keras-nightly: a bare get_keras_mask.
NIGHTLY = BEFORE.replace("backend.get_keras_mask(", "get_keras_mask(").replace("backend.set_keras_mask(", "set_keras_mask(")
NIGHTLY_AFTER = AFTER.replace("backend.get_keras_mask(", "get_keras_mask(").replace("backend.set_keras_mask(", "set_keras_mask(")


def check(source: str) -> Any:
    return PATCH.check(Sources(lambda path: source if path == LAYER else None))


class TestMaskFastPath(CodemodTest):
    TRANSFORM = MaskFastPathCommand

    def test_wraps_the_first_three_statements_and_nothing_else(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_the_3_0_getattr_read(self) -> None:
        self.assertCodemod(OLD, OLD_AFTER)

    def test_nightly_bare_getter(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY_AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)


def test_after_is_what_the_docstring_says() -> None:
    assert f"if not tree.is_nested(outputs):  {MARK}\n" in AFTER
    assert "            flat_outputs = tree.flatten(outputs)\n\n            mask_already_computed = all(\n" in AFTER


def test_outcomes() -> None:
    before = check(BEFORE)
    assert before.outcome is Outcome.APPLIED and not before.present
    assert [a.line for a in before.anchors] == [6]
    for source in (AFTER, OLD_AFTER, NIGHTLY_AFTER):
        present = check(source)
        assert present.outcome is Outcome.APPLIED and present.present


def test_apply_is_byte_identical_elsewhere_and_idempotent() -> None:
    sources = Sources(lambda path: BEFORE if path == LAYER else None)
    PATCH.apply(sources)
    assert sources.rendered() == {LAYER: AFTER}
    again = Sources(lambda path: AFTER if path == LAYER else None)
    assert PATCH.check(again).present and again.rendered() == {}


ANCHOR = "flat_outputs = tree.flatten(outputs); mask_already_computed = all(...); if mask_already_computed: return"


@pytest.mark.parametrize(
    ("source", "anchor", "found", "line"),
    [
        (BEFORE.replace("tree.flatten(outputs)", "tree.flatten(outputs, 1)"), ANCHOR, "statement 1", 6),
        (BEFORE.replace("for x in flat_outputs", "for x in flat_outputs if x"), ANCHOR, "statement 2", 7),
        (BEFORE.replace("all(\n", "any(\n"), ANCHOR, "statement 2", 7),
        (BEFORE.replace("is not None for x", "is None for x"), ANCHOR, "statement 2", 7),
        (BEFORE.replace("        if mask_already_computed:\n            return\n",
                        "        if mask_already_computed:\n            return None\n"), ANCHOR, "statement 3", 8),
        (BEFORE.replace("        flat_outputs = tree.flatten(outputs)\n", "        outputs = list(outputs)\n"
                        "        flat_outputs = tree.flatten(outputs)\n"), ANCHOR, "statement 1", 6),
        (BEFORE.replace("previous_mask):\n        flat", "previous_mask, extra=None):\n        flat"),
         "Layer._set_mask_metadata", "parameters self, inputs, outputs, previous_mask", 6),
        (BEFORE.replace("def _set_mask_metadata(", "def _set_masks("), "Layer._set_mask_metadata", "found 0", 1),
        (AFTER.replace(f"  {MARK}", ""), ANCHOR, "without forkgen's marker", 6),
    ],
    ids=["flatten reshaped", "filtered generator", "any instead of all", "test inverted", "return None",
         "statement before", "new parameter", "method renamed", "unmarked leaf test"],
)
def test_drift(source: str, anchor: str, found: str, line: int) -> None:
    with pytest.raises(AnchorDrift) as caught:
        check(source)
    assert caught.value.anchor == anchor and found in str(caught.value), str(caught.value)
    assert (caught.value.path, caught.value.line) == (LAYER, line)


# -- behaviour: the unpatched and patched methods side by side --------------------------------


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
