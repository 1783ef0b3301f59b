"""callspec-training-fast-path's command on synthetic Keras-shaped modules."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from codemods.callspec_fast_path.source import PatchRefused, analyze_source, patch_source
from codemods.callspec_training_fast_path import CallSpecTrainingFastPathCommand
from codemods.callspec_training_fast_path.cases import BINDINGS, GUARD_END
from codemods.callspec_training_fast_path.cases import EXTENDED_GUARD_END as EXTENDED
from codemods.callspec_training_fast_path.cases import FLAG as BASE_FLAG
from codemods.engine import AnchorDrift
from tests.support.synthetic import LAYER_V4, LAYERS, replace_once

BASE = patch_source(LAYER_V4, extension=False).source

CONSTRUCTION = "            call_spec = CallSpec(\n"
BASE_GUARD_END = GUARD_END + CONSTRUCTION
EXTENDED_GUARD_END = EXTENDED + CONSTRUCTION


def without_fast_bound(source: str) -> str:
    start = source.index("\n\n    @classmethod\n    def _fast_bound")
    return source[:start] + source[source.index("\n\n\n", start) :]


def transform(source: str) -> str:
    return (
        CallSpecTrainingFastPathCommand(CodemodContext())
        .transform_module(cst.parse_module(source))
        .code
    )


class TestExtendCallSpecFastPath(CodemodTest):
    TRANSFORM = CallSpecTrainingFastPathCommand

    def test_adds_the_elif_between_the_fast_branch_and_upstreams_else(self) -> None:
        after = transform(BASE)
        self.assertIn(EXTENDED_GUARD_END, after)
        self.assertNotIn(BASE_GUARD_END, after)

    def test_adds_the_bindings_right_after_the_base_flag(self) -> None:
        self.assertIn(BASE_FLAG + BINDINGS, transform(BASE))

    def test_helpers_go_after_the_base_helpers_and_before_callspec(self) -> None:
        after = transform(BASE)
        plan = after.index("\ndef _callspec_fast_plan(")
        helpers = [
            after.index(f"\n{name}")
            for name in (
                "_CALLSPEC_FAST_DEFAULT = 0",
                "_CALLSPEC_FAST_PLAIN_TYPES = ",
                "_CALLSPEC_FAST_TENSOR_TYPES = {}",
                "class _CallSpecFastBindings",
                "def _callspec_fast_popped_names(",
                "def _callspec_fast_kept_arguments(",
                "def _callspec_fast_nested_kind(",
                "def _callspec_fast_bindings(",
            )
        ]
        self.assertEqual(helpers, sorted(helpers))
        self.assertLess(plan, helpers[0])
        self.assertLess(helpers[-1], after.index("\nclass CallSpec:"))
        self.assertIn("\n\n\n_CALLSPEC_FAST_DEFAULT = 0", after)
        self.assertIn("\n\n\nclass _CallSpecFastBindings:", after)
        # The variant's rules are spliced right before `_callspec_fast_bindings`, each once.
        for name in (
            "_callspec_fast_popped_names",
            "_callspec_fast_kept_arguments",
            "_callspec_fast_nested_kind",
        ):
            self.assertEqual(after.count(f"\ndef {name}("), 1, name)

    def test_fast_bound_follows_fast_in_callspec(self) -> None:
        after = transform(BASE)
        callspec = after[after.index("\nclass CallSpec:") :]
        self.assertLess(
            callspec.index("def _fast(cls, plan, first_arg)"),
            callspec.index("def _fast_bound(cls, bindings, layer, args, kwargs)"),
        )

    def test_everything_else_is_untouched(self) -> None:
        after = replace_once(transform(BASE), BINDINGS, "")
        after = replace_once(after, EXTENDED_GUARD_END, BASE_GUARD_END)
        # Without the module piece and `_fast_bound`, what remains is the base, byte for byte.
        start = after.index("\n\n\n_CALLSPEC_FAST_DEFAULT = 0")
        after = after[:start] + after[after.index("\n\n\nclass CallSpec:") :]
        self.assertEqual(without_fast_bound(after), BASE)

    def test_noop_when_already_applied(self) -> None:
        patched = patch_source(LAYER_V4).source
        self.assertCodemod(patched, patched, expected_skip=True)

    def test_needs_the_base_patch(self) -> None:
        with self.assertRaises(AnchorDrift) as caught:
            transform(LAYER_V4)
        self.assertIn("self._call_spec_fast_path = self._call_spec_fast_plan is not None", str(caught.exception))


def _function(source: str, name: str) -> str:
    start = source.index(f"\ndef {name}(")
    return source[start : source.index("\ndef ", start + 1)]


#: A line of each variant's rules that tells it apart: (popped names, kept arguments, nested kind).
RULE_LINES = {
    "V1": (
        'if "training" in kwargs and "training" not in bindings.parameter_names:',
        "    return user_arguments\n",
        "        if not tree.is_nested(value):\n",
    ),
    "V2": (
        'if "training" in kwargs and "training" not in bindings.parameter_names:',
        "    return user_arguments\n",
        "if all(is_backend_tensor_or_symbolic(x) for x in flat_values):",
    ),
    "V3": (
        'if "training" in kwargs and "training" not in bindings.parameter_names:',
        "    return user_arguments\n",
        "is_backend_tensor_or_symbolic(x, allow_none=True) for x in flat_values",
    ),
    "V4": (
        "for name in layer._call_context_args",
        "    return {**popped, **user_arguments}\n",
        "is_backend_tensor_or_symbolic(x, allow_none=True) for x in flat_values",
    ),
}


@pytest.mark.parametrize("variant", ["V1", "V2", "V3", "V4"])
def test_each_variant_gets_its_rules(variant: str) -> None:
    after = patch_source(LAYERS[variant]).source
    functions = (
        "_callspec_fast_popped_names",
        "_callspec_fast_kept_arguments",
        "_callspec_fast_nested_kind",
    )
    for name, line in zip(functions, RULE_LINES[variant], strict=True):
        assert line in _function(after, name), (variant, name)
    popped = _function(after, "_callspec_fast_popped_names")
    assert ("_call_context_args" in popped) is (variant == "V4")
    nested = _function(after, "_callspec_fast_nested_kind")
    assert ("len(value) > 0" in nested) is (variant != "V1")
    assert ("allow_none=True" in nested) is (variant in ("V3", "V4"))
    assert analyze_source(after).fully_applied


def test_upgrading_a_base_only_tree_equals_patching_upstream_with_everything() -> None:
    assert patch_source(BASE).source == patch_source(LAYER_V4).source
    assert patch_source(BASE).applied == ("CallSpecTrainingFastPathCommand",)


def test_without_the_extension_the_base_is_all_there_is() -> None:
    analysis = analyze_source(BASE)
    assert analysis.applied == {"eligibility": True, "fast_constructor": True, "guard": True, "extension": False}
    assert "_fast_bound" not in BASE and "_callspec_fast_bindings" not in BASE


def test_leaving_the_extension_out_of_a_tree_that_has_it_is_refused() -> None:
    with pytest.raises(PatchRefused, match="already carries the fast-path extension"):
        patch_source(patch_source(LAYER_V4).source, extension=False)


PATCHED = patch_source(LAYER_V4).source


@pytest.mark.parametrize(
    ("mutation", "found"),
    [
        (
            lambda s: replace_once(s, BINDINGS, ""),
            "self._call_spec_fast_path = self._call_spec_fast_plan is not None missing",
        ),
        (
            without_fast_bound,
            "def _fast(___): ___ missing",
        ),
        (
            lambda s: replace_once(s, EXTENDED_GUARD_END, BASE_GUARD_END),
            "the base's guard missing",
        ),
    ],
    ids=["no bindings", "no _fast_bound", "no branch"],
)
def test_a_partial_extension_is_drift(mutation: object, found: str) -> None:
    assert callable(mutation)
    with pytest.raises(AnchorDrift) as caught:
        analyze_source(mutation(PATCHED))
    assert caught.value.anchor == "callspec-training-fast-path"  # the engine: all pieces present or none
    assert found in str(caught.value)


def test_a_different_fast_bound_is_drift() -> None:
    mutated = replace_once(
        PATCHED,
        "        self.first_arg = arguments[bindings.first_name]\n",
        "        self.first_arg = arguments[bindings.argument_names[-1]]\n",
    )
    with pytest.raises(AnchorDrift, match="forkgen's, def _fast.___.: ___ missing"):
        analyze_source(mutated)


def test_the_extension_without_the_base_is_drift() -> None:
    start = PATCHED.index("    @classmethod\n    def _fast(cls, plan, first_arg)")
    end = PATCHED.index("    @classmethod\n    def _fast_bound")
    with pytest.raises(AnchorDrift, match="callspec-fast-path': expected all pieces present or none"):
        analyze_source(PATCHED[:start] + PATCHED[end:])
