"""Patch layer-call-training-only-conversion (nightly's training-only gate, without keras-team/keras#23296's
copy): the synthetic upstream and patched `__call__` of its cases (codemods/layer_call_training_only_conversion/
cases.py) executed side by side, and the patch on the synthetic tree's layer.py with the CallSpec patches."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.callspec_fast_path import PATCH as CALLSPEC
from codemods.callspec_training_fast_path import PATCH as CALLSPEC_TRAINING
from codemods.engine import Outcome, Sources
from codemods.layer_call_training_only_conversion import PATCH
from codemods.layer_call_training_only_conversion.cases import AFTER, BEFORE
from tests.support.synthetic import LAYER_V4, load_module

MARK = "# forkgen: layer-call-training-only-conversion"


def check(source: str) -> Any:
    return PATCH.check(Sources(lambda path: source))


def test_the_patched_module_has_three_marked_pieces() -> None:
    # Its codemod cases (the change, the upstream shapes, drift) are in the package's cases.py.
    assert AFTER.count(MARK) == 3


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
