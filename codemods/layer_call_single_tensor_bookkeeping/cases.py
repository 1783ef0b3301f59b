"""What `layer-call-single-tensor-bookkeeping` (ours, after keras-team/keras#23300) makes of Layer
modules shaped like Keras's, how the patched `_set_mask_metadata` behaves beside the unpatched one
on every kind of output (BEFORE and AFTER run side by side by `run_module`; both run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Case, Mutant, piece_text, run_module

MARK = "# forkgen: layer-call-single-tensor-bookkeeping"
TOP_NAME = "flat_outputs = tree.flatten(outputs); mask_already_computed = all(...); if mask_already_computed: return"

#: A Layer shaped like Keras 3.9-3.15.1's around `_set_mask_metadata`.
BEFORE = '''\
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
'''
TOP = """\
        flat_outputs = tree.flatten(outputs)

        mask_already_computed = all(
            backend.get_keras_mask(x) is not None for x in flat_outputs
        )
        if mask_already_computed:
            return
"""
#: Upstream's three statements in the `else` of the leaf test, their blank line kept (`__outputs_mask`:
#: upstream's own read of a mask, here `backend.get_keras_mask(...)`, on `outputs`).
AFTER = BEFORE.replace(TOP, piece_text(__file__, "leaf_outputs", "        ", upstream=TOP).replace(
    "__outputs_mask", "backend.get_keras_mask(outputs)", 1))
#: Keras 3.0-3.3: the mask read with getattr.
OLD, OLD_AFTER = (text.replace("backend.get_keras_mask(x)", 'getattr(x, "_keras_mask", None)').replace(
    "backend.get_keras_mask(outputs)", 'getattr(outputs, "_keras_mask", None)') for text in (BEFORE, AFTER))
#: keras-nightly: a bare get_keras_mask.
NIGHTLY, NIGHTLY_AFTER = (text.replace("backend.get_keras_mask(", "get_keras_mask(").replace(
    "backend.set_keras_mask(", "set_keras_mask(") for text in (BEFORE, AFTER))
RESHAPED = f":5: anchor '{TOP_NAME}': expected exactly one `{TOP_NAME}` in Layer._set_mask_metadata; found 0 unguarded and 0 guarded"

CASES = (
    Case("wraps the first three statements and nothing else", BEFORE, AFTER,
         detail="test a non-nested output's mask before flattening", anchors=((TOP_NAME, 6),)),
    Case("the 3.0 getattr read", OLD, OLD_AFTER),
    Case("nightly's bare getter", NIGHTLY, NIGHTLY_AFTER),
    # Where the three statements stand, and the method's other parameters, do not matter to the fast path.
    Case("a statement before", BEFORE.replace("    def _set_mask_metadata(self, inputs, outputs, previous_mask):\n",
                                              "    def _set_mask_metadata(self, inputs, outputs, previous_mask, extra=None):\n"
                                              "        outputs = list(outputs)\n"),
         AFTER.replace("    def _set_mask_metadata(self, inputs, outputs, previous_mask):\n",
                       "    def _set_mask_metadata(self, inputs, outputs, previous_mask, extra=None):\n"
                       "        outputs = list(outputs)\n")),
    Case("flatten reshaped", BEFORE.replace("tree.flatten(outputs)", "tree.flatten(outputs, 1)"), drift=RESHAPED),
    Case("a filtered generator", BEFORE.replace("for x in flat_outputs", "for x in flat_outputs if x"), drift=RESHAPED),
    Case("any instead of all", BEFORE.replace("all(\n", "any(\n"), drift=RESHAPED),
    Case("the test inverted", BEFORE.replace("is not None for x", "is None for x"), drift=RESHAPED),
    Case("return None", BEFORE.replace("        if mask_already_computed:\n            return\n",
                                       "        if mask_already_computed:\n            return None\n"), drift=RESHAPED),
    Case("a read the fast path cannot write for outputs", BEFORE.replace("backend.get_keras_mask(x)", "x._keras_mask"),
         drift=":5: anchor 'mask_already_computed = all(backend.get_keras_mask(x) is not None for x in flat_outputs)': "
         "expected exactly one `mask_already_computed = all(backend.get_keras_mask(x) is not None for x in flat_outputs)` "
         "in Layer._set_mask_metadata; found 0"),
    Case("the method renamed", BEFORE.replace("def _set_mask_metadata(", "def _set_masks("),
         drift=":1: anchor 'Layer._set_mask_metadata': expected exactly one def _set_mask_metadata; found 0"),
    Case("an unmarked leaf test", AFTER.replace(f"  {MARK}", ""),
         drift=f":6: anchor '{TOP_NAME}': expected unguarded, or guarded by forkgen; found a guard without forkgen's marker"),
)

MUTANTS = (
    Mutant("a single output is never given its computed mask", "        flat_outputs = [outputs]\n",
           "        flat_outputs = []\n"),
    Mutant("a single output without a mask returns early", "        if __outputs_mask is not None:\n",
           "        if __outputs_mask is None:\n"),
)


# -- behaviours: the patched _set_mask_metadata leaves what upstream's leaves, single tensors fast


class Tensor:
    def __init__(self, label: str) -> None:
        self.label = label


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


def _build(description: Any, made: list[Any], fake_backend: Any) -> Any:
    """The outputs `description` says; a "registered" container is the fake backend's, which its
    tree flattens (like a tracked list)."""
    if isinstance(description, list):
        return [_build(d, made, fake_backend) for d in description]
    if isinstance(description, dict):
        return {k: _build(v, made, fake_backend) for k, v in description.items()}
    if description[0] == "registered":
        return fake_backend.Registered(*(_build(d, made, fake_backend) for d in description[1:]))
    if description[0] == "none":
        return None
    tensor = Tensor(f"out{len(made)}")
    made.append(tensor)
    if description[1]:
        tensor._keras_mask = f"pre{len(made)}"
    return tensor


def _run(source: str, outputs_description: Any, answer: Any, fake_backend: Any) -> Any:
    """`_set_mask_metadata` of `source`'s Layer on those outputs, its tree and backend the fake
    backend's (tests/support/fake_backend.py: a tree that flattens its `Registered` too)."""
    module = run_module(source, "synthetic_layer")
    vars(module).update(tree=fake_backend.tree, backend=fake_backend.backend)
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
    outputs = _build(outputs_description, made, fake_backend)
    try:
        result: Any = Probe()._set_mask_metadata("inputs", outputs, "previous")
    except (ValueError, AttributeError) as error:  # compute_mask's error; a mask set on None
        result = ("raised", type(error).__name__, str(error))
    seen = [None if x is None else (x.label, getattr(getattr(x, "_keras_mask", None), "label", x.__dict__.get("_keras_mask")))
            for x in fake_backend.tree.flatten(outputs)]
    return result, seen, calls


@settings(deadline=None)
@given(outputs=STRUCTURE, answer=ANSWER)
def patched_method_equals_upstream(outputs: Any, answer: Any, fake_backend: Any) -> None:
    assert _run(AFTER, outputs, answer, fake_backend) == _run(BEFORE, outputs, answer, fake_backend)


def single_tensor_takes_the_fast_path_with_upstream_results(fake_backend: Any) -> None:
    for outputs, answer, mask in [
        (("tensor", False), "mask", "mask0"),
        (("tensor", True), "mask", "pre1"),
        (("tensor", False), None, None),
        (("tensor", False), ["mask", "mask"], "mask0"),
    ]:
        result, seen, calls = _run(AFTER, outputs, answer, fake_backend)
        assert result is None and seen == [("out0", mask)], (outputs, answer)
        assert calls == ([] if outputs[1] else [("inputs", "previous")]), (outputs, answer)


BEHAVIOURS = (patched_method_equals_upstream, single_tensor_takes_the_fast_path_with_upstream_results)
