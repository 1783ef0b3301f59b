"""AddCallSpecFastCommand on synthetic Keras-shaped modules."""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext, CodemodTest

from codemods.callspec_fast_path.add_callspec_fast import AddCallSpecFastCommand
from codemods.callspec_fast_path.anchors import AnchorDrift
from codemods.callspec_fast_path.codemods import patch_source
from tests.support.synthetic import LAYER_V4, replace_once

EAGER = """\
        self.eager = all(
            backend.is_tensor(x) for x in self.tensor_arguments_dict.values()
        )
"""
EAGER_AND_FAST = EAGER + '''
    @classmethod
    def _fast(cls, plan, first_arg):
        """The CallSpec of `layer(first_arg)`, equal to the one `__init__`
        builds for `args=(first_arg,)` and no kwargs, without binding.

        The caller has checked that `first_arg` is a backend tensor or a
        KerasTensor, so it is the only tensor argument and the call is eager
        exactly when it is not a KerasTensor. Every container is new.
        """
        self = cls.__new__(cls)
        name = plan.first_name
        self.user_arguments_dict = {name: first_arg}
        arguments_dict = {name: first_arg}
        arguments_dict.update(plan.defaults)
        self.arguments_dict = arguments_dict
        self.argument_names = list(plan.argument_names)
        self.tensor_arguments_dict = {name: first_arg}
        self.tensor_arguments_names = [name]
        self.nested_tensor_argument_names = []
        self.first_arg = first_arg
        self.eager = not isinstance(first_arg, KerasTensor)
        return self
'''


class TestAddCallSpecFast(CodemodTest):
    TRANSFORM = AddCallSpecFastCommand

    def test_appends_fast_to_callspec(self) -> None:
        self.assertCodemod(LAYER_V4, replace_once(LAYER_V4, EAGER, EAGER_AND_FAST))

    def test_noop_when_already_applied(self) -> None:
        patched = patch_source(LAYER_V4).source
        self.assertCodemod(patched, patched, expected_skip=True)

    def test_refuses_a_ninth_attribute(self) -> None:
        before = replace_once(LAYER_V4, EAGER, EAGER + "        self.extra = None\n")
        with self.assertRaises(AnchorDrift) as caught:
            self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(before))
        self.assertIn("extra `extra`", caught.exception.found)

    def test_refuses_an_unknown_member(self) -> None:
        before = replace_once(
            LAYER_V4, EAGER, EAGER + "\n    def as_dict(self):\n        return vars(self)\n"
        )
        with self.assertRaises(AnchorDrift) as caught:
            self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(before))
        self.assertEqual(caught.exception.anchor, "class CallSpec")

    def test_refuses_a_foreign_fast(self) -> None:
        before = replace_once(
            LAYER_V4, EAGER,
            EAGER + "\n    @classmethod\n    def _fast(cls, plan, x):\n        return None\n",
        )
        with self.assertRaises(AnchorDrift) as caught:
            self.TRANSFORM(CodemodContext()).transform_module(cst.parse_module(before))
        self.assertEqual(caught.exception.anchor, "fast_constructor")
