"""The code the codemods insert, executed: the patched synthetic layer.py on a fake backend.

Offline evidence that `CallSpec._fast` builds exactly what `CallSpec.__init__`
builds for `layer(x)`, that eligibility follows the slow path's classification,
and that the guard sends everything else down the unchanged slow path.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.patch import patch_source
from tests.support.equivalence import differences
from tests.support.fake_backend import KerasTensor, Registered, Tensor
from tests.support.synthetic import LAYER_V4, LAYERS, load_module

PATCHED = patch_source(LAYER_V4).source
MODULE = load_module(PATCHED)
#: The patched synthetic layer.py of every CallSpec variant.
MODULES = {variant: load_module(patch_source(source).source, f"layer_{variant}") for variant, source in LAYERS.items()}

P = inspect.Parameter
POS_ONLY, POS, VAR_POS, KW_ONLY, VAR_KW = (
    P.POSITIONAL_ONLY,
    P.POSITIONAL_OR_KEYWORD,
    P.VAR_POSITIONAL,
    P.KEYWORD_ONLY,
    P.VAR_KEYWORD,
)
REQUIRED = P.empty
TENSOR_DEFAULT = Tensor(7.0)


def make_layer(module: types.ModuleType, parameters: list[P]) -> Any:
    """An instance of a Layer subclass whose `call` has exactly `parameters`."""

    def call(self: Any, *args: Any, **kwargs: Any) -> str:
        return "called"

    call.__signature__ = inspect.Signature([P("self", POS_ONLY), *parameters])  # type: ignore[attr-defined]
    return type("Generated", (module.Layer,), {"call": call})()


def params(spec: str, defaults: dict[str, Any] | None = None) -> list[P]:
    """Parameters from source text, e.g. "inputs, /, training=None"."""
    namespace: dict[str, Any] = dict(defaults or {})
    exec(f"def f({spec}):\n    pass\n", namespace)
    return list(inspect.signature(namespace["f"]).parameters.values())


def slow_spec(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], module: types.ModuleType = MODULE) -> Any:
    if hasattr(module.CallSpec.__init__, "__code__") and "call_context_args" not in module.CallSpec.__init__.__code__.co_varnames:
        return module.CallSpec(layer._call_signature, args, dict(kwargs))  # V1-V3
    return module.CallSpec(layer._call_signature, layer._call_context_args, args, dict(kwargs))


@contextmanager
def count_slow(module: types.ModuleType = MODULE) -> Iterator[list[tuple[Any, ...]]]:
    """Record every construction through the slow `CallSpec.__init__`."""
    calls: list[tuple[Any, ...]] = []
    original = module.CallSpec.__init__

    def counting(self: Any, *args: Any) -> None:
        calls.append(args)
        original(self, *args)

    with mock.patch.object(module.CallSpec, "__init__", counting):
        yield calls


ELIGIBLE = [
    ("inputs", {}),
    ("inputs, training=None", {}),
    ("inputs, training=None, mask=None", {}),
    ("inputs, scale=1.0", {}),
    ("inputs, pool=(3, 3)", {}),
    ("inputs, /, training=None", {}),
    ("inputs, *, flag=False", {}),
    ("inputs, other_mask=None", {}),
    ("inputs, padding=[]", {}),
    ("inputs, options={}", {}),
    ("inputs, names=('a', None)", {}),
    ("inputs, nested={'a': [1, 2]}", {}),
    ("inputs, empty=()", {}),
    ("inputs, half=(None, 3)", {}),
]

INELIGIBLE = [
    ("*args", {}),
    ("inputs, *args", {}),
    ("inputs, **kwargs", {}),
    ("inputs, other", {}),
    ("inputs, *, other", {}),
    ("inputs, state=TENSOR", {"TENSOR": TENSOR_DEFAULT}),
    ("inputs, state=SYMBOLIC", {"SYMBOLIC": KerasTensor()}),
    ("inputs, pair=(None, None)", {}),
    ("inputs, pair=(TENSOR, None)", {"TENSOR": TENSOR_DEFAULT}),
    ("inputs, mixed=(TENSOR, 3)", {"TENSOR": TENSOR_DEFAULT}),
    ("inputs, odd=REGISTERED", {"REGISTERED": Registered(1)}),
    ("inputs, empty_registered=EMPTY", {"EMPTY": Registered()}),
    ("inputs, training=None, /", {}),
    ("training, /", {}),
    ("", {}),
    ("*, inputs", {}),
]


@pytest.fixture(params=[Tensor(1.5), KerasTensor()], ids=["eager", "symbolic"])
def x(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.parametrize(("spec", "defaults"), ELIGIBLE, ids=[s for s, _ in ELIGIBLE])
def test_eligible_signature_takes_the_fast_path(spec: str, defaults: dict[str, Any], x: Any) -> None:
    layer = make_layer(MODULE, params(spec, defaults))
    assert layer._call_spec_fast_path is True
    fast = MODULE.CallSpec._fast(layer._call_spec_fast_plan, x)
    assert differences(fast, slow_spec(layer, (x,), {})) == []
    with count_slow() as slow:
        assert layer(x) == "called"
    assert slow == []
    assert differences(layer.last_call_spec, slow_spec(layer, (x,), {})) == []


@pytest.mark.parametrize(("spec", "defaults"), INELIGIBLE, ids=[s or "(no parameters)" for s, _ in INELIGIBLE])
def test_ineligible_signature_keeps_the_slow_path(spec: str, defaults: dict[str, Any], x: Any) -> None:
    layer = make_layer(MODULE, params(spec, defaults))
    assert layer._call_spec_fast_path is False
    assert layer._call_spec_fast_plan is None
    with count_slow() as slow:
        try:
            layer(x)
        except (TypeError, ValueError):
            pass  # the slow path's own error, e.g. a missing required argument
    assert len(slow) == 1


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((Tensor(1.0),), {"training": True}),
        ((Tensor(1.0),), {"mask": None}),
        ((Tensor(1.0), Tensor(2.0)), {}),
        ((None,), {}),
        ((), {"inputs": Tensor(1.0)}),
        (([Tensor(1.0), Tensor(2.0)],), {}),
    ],
    ids=["training kwarg", "other kwarg", "two positionals", "None", "keyword only", "nested first arg"],
)
def test_other_call_shapes_take_the_slow_path(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    layer = make_layer(MODULE, params("inputs, other=None, training=None, mask=None"))
    with count_slow() as slow:
        try:
            layer(*args, **kwargs)
        except TypeError:
            pass
    assert len(slow) == 1


def test_per_layer_switch_and_stale_signature() -> None:
    x = Tensor(1.0)
    layer = make_layer(MODULE, params("inputs, training=None"))
    layer._call_spec_fast_path = False
    with count_slow() as slow:
        layer(x)
    assert len(slow) == 1
    other = make_layer(MODULE, params("inputs, training=None"))
    other._call_signature = inspect.signature(lambda inputs, scale=2.0: None)
    with count_slow() as slow:
        other(x)
    assert len(slow) == 1
    assert list(other.last_call_spec.arguments_dict) == ["inputs", "scale"]


@pytest.mark.parametrize("value", ["0", "false", " OFF ", "no"])
def test_kill_switch_at_import(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("KERAS_CALLSPEC_FAST_PATH", value)
    module = load_module(PATCHED, "killed")
    layer = make_layer(module, params("inputs"))
    assert layer._call_spec_fast_path is False
    with count_slow(module) as slow:
        layer(Tensor(1.0))
    assert len(slow) == 1


def test_kill_switch_other_values_keep_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERAS_CALLSPEC_FAST_PATH", "1")
    module = load_module(PATCHED, "enabled")
    assert make_layer(module, params("inputs"))._call_spec_fast_path is True


def test_fast_specs_share_no_container() -> None:
    default = [1, 2]
    layer = make_layer(MODULE, params("inputs, padding=PAD, training=None", {"PAD": default}))
    first = MODULE.CallSpec._fast(layer._call_spec_fast_plan, Tensor(1.0))
    second = MODULE.CallSpec._fast(layer._call_spec_fast_plan, Tensor(2.0))
    for name in ("user_arguments_dict", "arguments_dict", "argument_names", "tensor_arguments_dict",
                 "tensor_arguments_names", "nested_tensor_argument_names"):
        assert getattr(first, name) is not getattr(second, name), name
    first.argument_names.append("junk")
    first.arguments_dict["training"] = True
    third = MODULE.CallSpec._fast(layer._call_spec_fast_plan, Tensor(3.0))
    assert third.argument_names == ["inputs", "padding", "training"]
    assert third.arguments_dict["training"] is None
    assert third.arguments_dict["padding"] is default  # the default itself, as bind gives it


# -- property-based: generated signatures and calls, fast path on vs off --------

NAMES = ["inputs", "x", "training", "mask", "x_mask", "scale", "other", "flag"]
DEFAULTS = st.sampled_from(
    [REQUIRED, None, True, False, 0, 1.5, "same", (), [], {}, (3, 3), (None, None), (None, 3),
     [1, "a"], {"k": 1}, TENSOR_DEFAULT, KerasTensor(), (TENSOR_DEFAULT, None), (TENSOR_DEFAULT, 3),
     Registered(1), Registered()]
)
KINDS = st.sampled_from([POS_ONLY, POS, VAR_POS, KW_ONLY, VAR_KW])
VALUES = st.sampled_from([Tensor(1.0), Tensor(2.0), KerasTensor(), None, 3, "s", (Tensor(4.0), None), [Tensor(5.0)]])


@st.composite
def signatures(draw: st.DrawFn) -> list[P]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=0, max_size=5, unique=True))
    kinds = sorted(draw(st.lists(KINDS, min_size=len(names), max_size=len(names))))
    parameters: list[P] = []
    seen_default = False
    for name, kind in zip(names, kinds, strict=True):
        if kind in (VAR_POS, VAR_KW):
            if any(p.kind == kind for p in parameters):
                continue
            parameters.append(P(name, kind))
            continue
        default = draw(DEFAULTS)
        if kind in (POS_ONLY, POS) and seen_default and default is REQUIRED:
            default = None  # a required positional may not follow a defaulted one
        seen_default |= kind in (POS_ONLY, POS) and default is not REQUIRED
        parameters.append(P(name, kind, default=default))
    return parameters


@st.composite
def calls(draw: st.DrawFn) -> tuple[tuple[Any, ...], dict[str, Any]]:
    # Mostly `layer(value)`, the shape the fast path is about; then anything.
    if draw(st.integers(0, 3)):
        args: tuple[Any, ...] = (draw(VALUES),)
    else:
        args = tuple(draw(st.lists(VALUES, max_size=3)))
    kwargs = {}
    if draw(st.booleans()):
        kwargs = draw(st.dictionaries(st.sampled_from(NAMES + ["extra"]), VALUES | st.booleans(), max_size=2))
    return args, kwargs


def outcome(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        layer(*args, **dict(kwargs))
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return "error", (type(error), str(error))
    return "spec", layer.last_call_spec


@settings(max_examples=400, deadline=None)
@given(variant=st.sampled_from(sorted(MODULES)), parameters=signatures(), call=calls())
def test_generated_signatures_and_calls(
    variant: str, parameters: list[P], call: tuple[tuple[Any, ...], dict[str, Any]]
) -> None:
    args, kwargs = call
    fast_layer = make_layer(MODULES[variant], parameters)
    slow_layer = make_layer(MODULES[variant], parameters)
    slow_layer._call_spec_fast_path = False
    fast = outcome(fast_layer, args, kwargs)
    slow = outcome(slow_layer, args, kwargs)
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "error":
        assert fast[1] == slow[1]
    else:
        assert differences(fast[1], slow[1]) == []


# -- what differs between the variants ------------------------------------------

#: default -> the variants in which a layer with it is eligible (KERAS_FACTS.md):
#: V1 classifies an empty nested default as a tensor argument and needs no
#: `__len__`; V1-V2 count None as a non-tensor inside nested defaults.
BY_VARIANT: list[tuple[str, Any, set[str]]] = [
    ("()", (), {"V2", "V3", "V4"}),
    ("[]", [], {"V2", "V3", "V4"}),
    ("{}", {}, {"V2", "V3", "V4"}),
    ("(None, None)", (None, None), {"V1", "V2"}),
    ("(None, 3)", (None, 3), {"V1", "V2", "V3", "V4"}),
    ("(3, 3)", (3, 3), {"V1", "V2", "V3", "V4"}),
    ("(tensor, None)", (TENSOR_DEFAULT, None), set()),
    ("registered without __len__", Registered(1), {"V1"}),
    ("empty registered", Registered(), set()),
]


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(("name", "default", "eligible_in"), BY_VARIANT, ids=[n for n, _, _ in BY_VARIANT])
def test_eligibility_follows_each_variant(variant: str, name: str, default: Any, eligible_in: set[str], x: Any) -> None:
    module = MODULES[variant]
    layer = make_layer(module, [P("inputs", POS), P("option", POS, default=default)])
    assert layer._call_spec_fast_path is (variant in eligible_in)
    if layer._call_spec_fast_path:
        fast = module.CallSpec._fast(layer._call_spec_fast_plan, x)
        assert differences(fast, slow_spec(layer, (x,), {}, module)) == []
    with count_slow(module) as slow:
        try:
            layer(x)
        except (TypeError, ValueError):
            pass
    assert len(slow) == (0 if variant in eligible_in else 1)
