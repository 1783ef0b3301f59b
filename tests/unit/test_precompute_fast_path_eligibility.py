"""PrecomputeFastPathEligibilityCommand on synthetic Keras-shaped modules."""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext, CodemodTest

from codemods.callspec_fast_path import templates
from codemods.callspec_fast_path.anchors import AnchorDrift
from codemods.callspec_fast_path.codemods import patch_source
from codemods.callspec_fast_path.precompute_fast_path_eligibility import (
    PrecomputeFastPathEligibilityCommand,
)
from tests.support.synthetic import LAYER_V4, replace_once

INIT_BEFORE = """\
        self._call_signature = inspect.signature(self.call)
        self.call_signature_parameters = [
"""
INIT_AFTER = """\
        self._call_signature = inspect.signature(self.call)
        # forkgen CallSpec fast path: can `layer(x)` skip `signature.bind`?
        self._call_spec_fast_plan = _callspec_fast_plan(self._call_signature)
        self._call_spec_fast_path = self._call_spec_fast_plan is not None
        self.call_signature_parameters = [
"""
CALLSPEC = "\n\nclass CallSpec:\n"


def module_piece() -> str:
    """The template's module-level block as the codemod renders it."""
    return cst.Module(body=list(templates.load("V4").module_piece)).code


class TestPrecomputeFastPathEligibility(CodemodTest):
    TRANSFORM = PrecomputeFastPathEligibilityCommand

    def test_inserts_after_the_call_signature_and_before_callspec(self) -> None:
        after = replace_once(LAYER_V4, INIT_BEFORE, INIT_AFTER)
        after = replace_once(after, CALLSPEC, module_piece() + CALLSPEC)
        self.assertCodemod(LAYER_V4, after)

    def test_module_piece_starts_after_two_blank_lines(self) -> None:
        piece = module_piece()
        self.assertTrue(piece.startswith("\n\nimport os as _callspec_fast_path_os\n"), piece[:60])

    def test_noop_when_already_applied(self) -> None:
        patched = patch_source(LAYER_V4).source
        self.assertCodemod(patched, patched, expected_skip=True)

    def test_refuses_a_conditional_call_signature(self) -> None:
        before = replace_once(
            LAYER_V4,
            "        self._call_signature = inspect.signature(self.call)\n",
            "        if name:\n            self._call_signature = inspect.signature(self.call)\n",
        )
        with self.assertRaises(AnchorDrift) as caught:
            self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(before))
        self.assertEqual(caught.exception.anchor, "call_signature")
        self.assertIn("nested in `if`", caught.exception.found)

    def test_refuses_a_name_collision(self) -> None:
        before = replace_once(LAYER_V4, "import inspect\n", "import inspect\n_callspec_fast_plan = None\n")
        with self.assertRaises(AnchorDrift) as caught:
            self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(before))
        self.assertEqual(caught.exception.anchor, "eligibility")
