"""GuardCallSpecConstructionCommand on synthetic Keras-shaped modules."""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext, CodemodTest

from codemods.callspec_fast_path.anchors import AnchorDrift
from codemods.callspec_fast_path.codemods import patch_source
from codemods.callspec_fast_path.guard_callspec_construction import GuardCallSpecConstructionCommand
from tests.support.synthetic import LAYER_V4, replace_once

UPSTREAM = """\
        # Caches info about `call()` signature, args, kwargs.
        call_spec = CallSpec(
            self._call_signature, self._call_context_args, args, kwargs
        )
        self.last_call_spec = call_spec
"""

GUARDED = """\
        # Caches info about `call()` signature, args, kwargs.
        # forkgen CallSpec fast path: `layer(x)` with one tensor and no kwargs.
        if (
            self._call_spec_fast_path
            and not kwargs
            and len(args) == 1
            and self._call_spec_fast_plan is not None
            and self._call_spec_fast_plan.signature is self._call_signature
            and is_backend_tensor_or_symbolic(args[0])
        ):
            call_spec = CallSpec._fast(self._call_spec_fast_plan, args[0])
        else:
            call_spec = CallSpec(
                self._call_signature, self._call_context_args, args, kwargs
            )
        self.last_call_spec = call_spec
"""


class TestGuardCallSpecConstruction(CodemodTest):
    TRANSFORM = GuardCallSpecConstructionCommand

    def test_wraps_the_construction_in_call(self) -> None:
        self.assertCodemod(LAYER_V4, replace_once(LAYER_V4, UPSTREAM, GUARDED))

    def test_leaves_compute_output_spec_alone(self) -> None:
        after = self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(LAYER_V4)).code
        spec = after[after.index("def compute_output_spec") :]
        spec = spec[: spec.index("def is_backend_tensor_or_symbolic")]
        self.assertNotIn("_fast", spec)
        self.assertEqual(after.count("CallSpec(\n"), LAYER_V4.count("CallSpec(\n"))

    def test_keeps_the_upstream_expression_node_for_node(self) -> None:
        # Odd upstream formatting survives, only re-indented into the else.
        before = replace_once(
            LAYER_V4,
            "call_spec = CallSpec(\n            self._call_signature, self._call_context_args, args, kwargs\n"
            "        )\n        self.last",
            "call_spec = CallSpec(self._call_signature,   # odd\n"
            "                     self._call_context_args, args, kwargs)\n        self.last",
        )
        after = self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(before)).code
        self.assertIn(
            "        else:\n"
            "            call_spec = CallSpec(self._call_signature,   # odd\n"
            "                         self._call_context_args, args, kwargs)\n",
            after,
        )

    def test_noop_when_already_guarded(self) -> None:
        patched = patch_source(LAYER_V4).source
        self.assertCodemod(patched, patched, expected_skip=True)

    def test_refuses_a_second_construction_in_call(self) -> None:
        before = replace_once(
            LAYER_V4,
            "        self.last_call_spec = call_spec\n",
            "        self.last_call_spec = CallSpec(self._call_signature, self._call_context_args, args, kwargs)\n",
        )
        with self.assertRaises(AnchorDrift) as caught:
            self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(before))
        self.assertEqual(caught.exception.anchor, "callspec_construction")
        self.assertIn("found 2", str(caught.exception))

    def test_refuses_keyword_arguments(self) -> None:
        before = replace_once(
            LAYER_V4,
            "self._call_signature, self._call_context_args, args, kwargs\n        )\n        self.last",
            "self._call_signature, self._call_context_args, args=args, kwargs=kwargs\n        )\n        self.last",
        )
        with self.assertRaises(AnchorDrift) as caught:
            self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(before))
        self.assertEqual(caught.exception.line, 34)

