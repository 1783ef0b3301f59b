"""Patch layer-call-training-only-conversion (nightly's training-only gate, without keras-team/keras#23296's
copy) on synthetic Keras-shaped modules: codemod cases, outcomes, drift, and the synthetic upstream and
patched `__call__` executed side by side."""

from __future__ import annotations

import sys
import textwrap
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.callspec_fast_path import PATCH as CALLSPEC
from codemods.callspec_training_fast_path import PATCH as CALLSPEC_TRAINING
from codemods.layer_call_training_only_conversion import PATCH, SkipTrainingOnlyConversionCommand
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support.synthetic import LAYER_V4, load_module, replace_once

BEFORE = textwrap.dedent(
    '''\
    """A Keras-shaped layer module for the unit tests of layer-call-training-only-conversion."""

    from _tl_fakes import backend
    from _tl_fakes import dtype_policies
    from _tl_fakes import tree


    class Layer:
        def __init__(self, accepts_training=True, convert_input_args=True):
            self._convert_input_args = convert_input_args
            self.accepts_training = accepts_training
            self.dtype_policy = dtype_policies.DTypePolicy()
            self.input_dtype = "float32"
            self.autocast = True

        def call(self, x, **kwargs):
            return x, kwargs

        def __call__(self, *args, **kwargs):
            original_args = args
            original_kwargs = kwargs

            # 1. Convert any array arguments to tensors of correct dtype.
            def maybe_convert(x):
                return self.dtype_policy.convert_input(
                    x, self.autocast, self.input_dtype
                )

            # Used to avoid expensive `tree` operations in the most common case.
            if (
                kwargs
                or len(args) != 1
                or not is_backend_tensor_or_symbolic(args[0], allow_none=False)
                or backend.standardize_dtype(args[0].dtype) != self.input_dtype
            ) and self._convert_input_args:
                args = tree.map_structure(maybe_convert, args)
                kwargs = tree.map_structure(maybe_convert, kwargs)

            # Like CallSpec and steps 5-6: pop what call() does not take, inject.
            if not self.accepts_training:
                kwargs.pop("training", None)
            kwargs["mask"] = None
            outputs = self.call(*args, **kwargs)
            self.recorded = (original_args, original_kwargs)
            return outputs


    def is_backend_tensor_or_symbolic(x, allow_none=False):
        if allow_none and x is None:
            return True
        return backend.is_tensor(x)
'''
)
AFTER = textwrap.dedent(
    '''\
    """A Keras-shaped layer module for the unit tests of layer-call-training-only-conversion."""

    from _tl_fakes import backend
    from _tl_fakes import dtype_policies
    from _tl_fakes import tree


    class Layer:
        def __init__(self, accepts_training=True, convert_input_args=True):
            self._convert_input_args = convert_input_args
            self.accepts_training = accepts_training
            self.dtype_policy = dtype_policies.DTypePolicy()
            self.input_dtype = "float32"
            self.autocast = True

        def call(self, x, **kwargs):
            return x, kwargs

        def __call__(self, *args, **kwargs):
            original_args = args
            original_kwargs = kwargs

            # 1. Convert any array arguments to tensors of correct dtype.
            def maybe_convert(x):
                return self.dtype_policy.convert_input(
                    x, self.autocast, self.input_dtype
                )

            # forkgen: layer-call-training-only-conversion
            # `training=None|True|False` alone gives `maybe_convert` nothing to do:
            # such a call takes the same skip as a call without kwargs.
            kwargs_may_need_convert = bool(kwargs) and (
                _layer_call_kwargs_may_need_convert(self, kwargs)
            )

            # Used to avoid expensive `tree` operations in the most common case.
            if (
                kwargs_may_need_convert
                or len(args) != 1
                or not is_backend_tensor_or_symbolic(args[0], allow_none=False)
                or backend.standardize_dtype(args[0].dtype) != self.input_dtype
            ) and self._convert_input_args:
                args = tree.map_structure(maybe_convert, args)
                kwargs = tree.map_structure(maybe_convert, kwargs)
            elif kwargs and self._convert_input_args:  # forkgen: layer-call-training-only-conversion
                # Only a training-only call that skipped the conversion gets here:
                # 3.15.1 converted it, giving steps below a fresh dict to write into
                # (context args, masks) instead of the `original_kwargs` its Node
                # records. The copy keeps that; layers that do not convert their
                # inputs write into `original_kwargs`, as in 3.15.1.
                kwargs = dict(kwargs)

            # Like CallSpec and steps 5-6: pop what call() does not take, inject.
            if not self.accepts_training:
                kwargs.pop("training", None)
            kwargs["mask"] = None
            outputs = self.call(*args, **kwargs)
            self.recorded = (original_args, original_kwargs)
            return outputs


    def is_backend_tensor_or_symbolic(x, allow_none=False):
        if allow_none and x is None:
            return True
        return backend.is_tensor(x)


    # forkgen: layer-call-training-only-conversion
    def _layer_call_kwargs_may_need_convert(layer, kwargs):
        """Whether `layer.__call__` must keep upstream's conversion gate for
        these (non-empty) kwargs. False only for `training=None|True|False`
        alone on a layer that converts its inputs with the stock
        `DTypePolicy.convert_input`: `maybe_convert` returns such a value
        unchanged, so the call may take the skip that a call without kwargs
        takes (one tensor of the layer's input dtype: the rest of the gate).
        """
        if len(kwargs) != 1 or "training" not in kwargs:
            return True
        training = kwargs["training"]
        if not (training is None or training is True or training is False):
            return True
        if not layer._convert_input_args:
            # Upstream's gate does not convert then; leave it as it was.
            return True
        policy_convert = layer.dtype_policy.convert_input
        stock_convert = dtype_policies.DTypePolicy.convert_input
        return getattr(policy_convert, "__func__", None) is not stock_convert
'''
)
MARK = "# forkgen: layer-call-training-only-conversion"
# keras-nightly's shape: the flag inline, without our marker, and an unconditional copy.
NIGHTLY = replace_once(
    BEFORE,
    """\
        # Used to avoid expensive `tree` operations in the most common case.
        if (
            kwargs
""",
    """\
        kwargs_may_need_convert = bool(kwargs) and not (
            len(kwargs) == 1 and "training" in kwargs
        )

        # Used to avoid expensive `tree` operations in the most common case.
        if (
            kwargs_may_need_convert
""",
)
NIGHTLY = replace_once(
    NIGHTLY,
    """\
            kwargs = tree.map_structure(maybe_convert, kwargs)
""",
    """\
            kwargs = tree.map_structure(maybe_convert, kwargs)
        else:
            # `kwargs` get mutated later, so create a copy.
            kwargs = dict(kwargs)
""",
)
GATE_LINE = BEFORE.splitlines().index("        if (") + 1


def check(source: str) -> Any:
    return PATCH.check(Sources(lambda path: source))


class TestSkipTrainingOnlyConversion(CodemodTest):
    TRANSFORM = SkipTrainingOnlyConversionCommand

    def test_fixes(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)

    def test_noop_on_the_nightly_shape(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY, expected_skip=True)


def test_outcomes() -> None:
    fresh = check(BEFORE)
    assert fresh.outcome is Outcome.APPLIED and not fresh.present
    assert [(a.name, a.line) for a in fresh.anchors] == [
        ("original_kwargs = kwargs", 21), ("maybe_convert", 24), ("conversion gate", GATE_LINE), ("dtype_policies", 4),
    ]
    present = check(AFTER)
    assert present.outcome is Outcome.APPLIED and present.present
    nightly = check(NIGHTLY)
    assert nightly.outcome is Outcome.UPSTREAM and "unconditional" in nightly.detail
    # #23296's reviewed form (an `elif` copy, no marker) is upstream too.
    reviewed = NIGHTLY.replace("        else:\n", "        elif kwargs:\n")
    assert check(reviewed).outcome is Outcome.UPSTREAM and "#23296" in check(reviewed).detail
    # Our copy's shape without our markers: upstream as well (a flag nobody of ours wrote).
    unmarked = NIGHTLY.replace("        else:\n", "        elif kwargs and self._convert_input_args:\n")
    assert check(unmarked).outcome is Outcome.UPSTREAM and "`elif` copy" in check(unmarked).detail


def test_apply_is_idempotent_and_inserts_three_marked_pieces() -> None:
    sources = Sources(lambda path: BEFORE)
    PATCH.apply(sources)
    patched = sources.rendered()["keras/src/layers/layer.py"]
    assert patched == AFTER and patched.count(MARK) == 3
    assert check(patched).present


def _drift(source: str) -> AnchorDrift:
    with pytest.raises(AnchorDrift) as caught:
        check(source)
    assert str(caught.value).startswith("keras/src/layers/layer.py:")
    return caught.value


GATE_END = """\
        ) and self._convert_input_args:
            args = tree.map_structure(maybe_convert, args)
            kwargs = tree.map_structure(maybe_convert, kwargs)
"""


@pytest.mark.parametrize(
    ("source", "anchor", "line", "found"),
    [
        (BEFORE.replace("        ) and self._convert_input_args:", "        ) and self._convert_inputs:"),
         "conversion gate", 0, "0"),
        (replace_once(BEFORE, GATE_END, GATE_END + "        if (\n            kwargs\n            or args\n"
                      "        ) and self._convert_input_args:\n            pass\n"),
         "conversion gate", GATE_LINE, "2"),
        (replace_once(BEFORE, "            args = tree.map_structure(maybe_convert, args)\n", ""),
         "conversion gate body", GATE_LINE, "another body"),
        (replace_once(BEFORE, "        original_kwargs = kwargs\n", ""), "original_kwargs = kwargs", 0, "0"),
        (BEFORE.replace("self.dtype_policy.convert_input(", "self.dtype_policy.cast_input("), "maybe_convert", 24,
         "0 convert_input calls"),
        (replace_once(BEFORE, "from _tl_fakes import dtype_policies\n", ""), "dtype_policies", 1, "none"),
        # Half a patch: the flag and the gate, without the copy and the helper.
        (AFTER.split("        elif kwargs and")[0] + "\n        return args\n", "conversion gate", GATE_LINE + 7,
         "no else branch"),
        # The gate already has an else branch of its own.
        (replace_once(BEFORE, GATE_END, GATE_END + "        else:\n            pass\n"), "conversion gate",
         GATE_LINE, "an else branch"),
        # Version 1 of this patch (#23296's `elif kwargs:` copy, marked as ours): not what it writes now.
        (replace_once(AFTER, "        elif kwargs and self._convert_input_args:  #", "        elif kwargs:  #"),
         "conversion gate", GATE_LINE + 7, "1 forkgen's; an else branch"),
    ],
    ids=["gate-gone", "gate-twice", "gate-body", "original-kwargs-gone", "convert-input-gone", "no-import",
         "partial", "own-else", "version-1-copy"],
)
def test_drift(source: str, anchor: str, line: int, found: str) -> None:
    error = _drift(source)
    assert error.anchor == anchor and found in error.found
    if line:
        assert error.line == line


def test_anchors_found_in_layer_v4_with_and_without_the_callspec_patches() -> None:
    # The synthetic tree's layer.py has the lines the patch anchors on.
    layer = LAYER_V4
    assert check(layer).outcome is Outcome.APPLIED
    sources = Sources(lambda path: layer)
    for patch in (CALLSPEC, CALLSPEC_TRAINING):
        assert patch.check(sources).outcome is Outcome.APPLIED
        patch.apply(sources)
    assert not PATCH.check(sources).present
    PATCH.apply(sources)
    patched = sources.rendered()["keras/src/layers/layer.py"]
    assert check(patched).present and patched.count(MARK) == 3
    module = load_module(patched, "layer_v4_training_only")
    layer_class = module.Layer

    class Dense(layer_class):  # type: ignore[misc,valid-type]
        def call(self, x: Any, training: Any = None) -> Any:
            return (x, training)

    from tests.support.fake_backend import Tensor

    x = Tensor(1.0)
    assert Dense()(x, training=True) == (x, True)
    assert Dense()(x) == (x, None)


# -- behaviour: the synthetic upstream and patched modules side by side --------------------------


class Tensor:
    def __init__(self, value: float, dtype: str) -> None:
        self.value = value
        self.dtype = dtype

    def __eq__(self, other: object) -> bool:
        return type(other) is Tensor and (self.value, self.dtype) == (other.value, other.dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.value}, {self.dtype})"


class DTypePolicy:
    conversions: list[str] = []

    def convert_input(self, x: Any, autocast: bool, dtype: str) -> Any:
        DTypePolicy.conversions.append(type(x).__name__)
        if isinstance(x, Tensor):
            return Tensor(x.value, dtype) if autocast and x.dtype.startswith("float") and x.dtype != dtype else x
        if hasattr(x, "__array__"):
            return Tensor(float(np.asarray(x)), dtype)
        return x


class LoudPolicy(DTypePolicy):
    def convert_input(self, x: Any, autocast: bool, dtype: str) -> Any:
        return ("loud", super().convert_input(x, autocast, dtype))


def map_structure(func: Any, structure: Any) -> Any:
    if isinstance(structure, dict):
        return {k: map_structure(func, v) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)):
        return type(structure)(map_structure(func, v) for v in structure)
    return func(structure)


FAKES = types.ModuleType("_tl_fakes")
FAKES.backend = types.SimpleNamespace(  # type: ignore[attr-defined]
    is_tensor=lambda x: isinstance(x, Tensor), standardize_dtype=lambda d: d
)
FAKES.tree = types.SimpleNamespace(map_structure=map_structure)  # type: ignore[attr-defined]
FAKES.dtype_policies = types.SimpleNamespace(DTypePolicy=DTypePolicy)  # type: ignore[attr-defined]


def modules() -> tuple[Any, Any]:
    sys.modules["_tl_fakes"] = FAKES
    try:
        return load_module(BEFORE, "training_only_before"), load_module(AFTER, "training_only_after")
    finally:
        del sys.modules["_tl_fakes"]


UPSTREAM, PATCHED = modules()
VALUES = st.sampled_from(
    [None, True, False, 0, 1, np.bool_(True), np.float32(2.0), "x", Tensor(3.0, "float32"), Tensor(3.0, "float16")]
)
ARGS = st.sampled_from(
    [(Tensor(1.0, "float32"),), (Tensor(1.0, "float16"),), (Tensor(1.0, "int32"),), (np.float32(1.0),),
     (Tensor(1.0, "float32"), Tensor(2.0, "float32")), ([Tensor(1.0, "float32")],), (None,), ()]
)


def run(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], accepts: bool, converts: bool,
        policy: type[DTypePolicy], override: bool) -> tuple[Any, ...]:
    layer = module.Layer(accepts_training=accepts, convert_input_args=converts)
    layer.dtype_policy = policy()
    if override:
        layer.dtype_policy.convert_input = lambda x, autocast, dtype: ("instance", x)
    DTypePolicy.conversions = []
    passed = dict(kwargs)
    try:
        outputs = layer(*args, **passed)
    except Exception as error:
        return ("raised", type(error).__name__, str(error))
    recorded_args, recorded_kwargs = layer.recorded
    return outputs, recorded_args, dict(recorded_kwargs), passed, list(DTypePolicy.conversions)


@settings(max_examples=400, deadline=None)
@given(
    args=ARGS,
    kwargs=st.dictionaries(st.sampled_from(["training", "mask", "other"]), VALUES, max_size=2),
    accepts=st.booleans(),
    converts=st.booleans(),
    policy=st.sampled_from([DTypePolicy, LoudPolicy]),
    override=st.booleans(),
)
def test_patched_call_behaves_as_upstream(args: tuple[Any, ...], kwargs: dict[str, Any], accepts: bool,
                                          converts: bool, policy: type[DTypePolicy], override: bool) -> None:
    upstream = run(UPSTREAM, args, kwargs, accepts, converts, policy, override)
    patched = run(PATCHED, args, kwargs, accepts, converts, policy, override)
    if upstream[0] == "raised":
        assert patched == upstream
        return
    # What call() receives: the same.
    assert patched[0] == upstream[0] and patched[1] == upstream[1]
    skipped = (
        converts and set(kwargs) == {"training"} and any(kwargs["training"] is v for v in (None, True, False))
        and policy is DTypePolicy and not override
        and len(args) == 1 and isinstance(args[0], Tensor) and args[0].dtype == "float32"
    )
    # Conversions: all of upstream's, except the ones of a training-only call, which change nothing.
    assert patched[4] == ([] if skipped else upstream[4])
    # The recorded kwargs: upstream's, including what steps 5-6 wrote into them on a layer that
    # does not convert (not #23296's kwargs as passed).
    assert patched[2] == upstream[2]
    if not converts:
        assert "mask" in patched[2] and patched[2]["mask"] is None
    # The caller's dict is never written into (`**kwargs` is a new dict either way).
    assert patched[3] == kwargs == upstream[3]


def test_training_only_calls_skip_the_conversion() -> None:
    x = Tensor(1.0, "float32")
    for training in (True, False, None):
        assert run(PATCHED, (x,), {"training": training}, True, True, DTypePolicy, False)[4] == []
        assert run(UPSTREAM, (x,), {"training": training}, True, True, DTypePolicy, False)[4] == [
            "Tensor", type(training).__name__
        ]


def test_the_synthetic_tree_files_are_this_shape() -> None:
    fresh = check(LAYER_V4)
    assert fresh.outcome is Outcome.APPLIED and not fresh.present
    assert [a.name for a in fresh.anchors] == ["original_kwargs = kwargs", "maybe_convert", "conversion gate",
                                              "dtype_policies"]
