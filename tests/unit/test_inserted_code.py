"""The code the codemods insert, executed: the patched synthetic layer.py on a fake backend.

Offline evidence that `CallSpec._fast` builds exactly what `CallSpec.__init__`
builds for `layer(x)`, that `CallSpec._fast_bound` (the extension) builds it for
`layer(x1, ..., xn)` and `layer(..., training=<bool>)` and leaves the kwargs dict
as `__init__` does, in every CallSpec variant, that eligibility follows the slow
path's classification, and that the guard sends everything else down the
unchanged slow path.
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

from codemods.callspec_fast_path.codemods import patch_source
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
        self.received = (args, kwargs)
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


@contextmanager
def count_paths(module: types.ModuleType = MODULE) -> Iterator[list[str]]:
    """Record which constructor built each CallSpec: "slow", "fast" or "bound"."""
    paths: list[str] = []
    original_init = module.CallSpec.__init__
    originals = {name: module.CallSpec.__dict__[name].__func__ for name in ("_fast", "_fast_bound")}

    def init(self: Any, *args: Any) -> None:
        paths.append("slow")
        original_init(self, *args)

    def counted(name: str) -> classmethod[Any, ..., Any]:
        def constructor(cls: type, *args: Any) -> Any:
            paths.append({"_fast": "fast", "_fast_bound": "bound"}[name])
            return originals[name](cls, *args)

        return classmethod(constructor)

    with mock.patch.object(module.CallSpec, "__init__", init), \
            mock.patch.object(module.CallSpec, "_fast", counted("_fast")), \
            mock.patch.object(module.CallSpec, "_fast_bound", counted("_fast_bound")):
        yield paths


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

#: (signature, defaults, whether the extension still gives it bindings: a second
#: positional parameter makes `layer(x, y)` a fast call although `layer(x)` is not).
INELIGIBLE = [
    ("*args", {}, False),
    ("inputs, *args", {}, False),
    ("inputs, **kwargs", {}, False),
    ("inputs, other", {}, True),
    ("inputs, *, other", {}, False),
    ("inputs, state=TENSOR", {"TENSOR": TENSOR_DEFAULT}, True),
    ("inputs, state=SYMBOLIC", {"SYMBOLIC": KerasTensor()}, True),
    ("inputs, pair=(None, None)", {}, True),
    ("inputs, pair=(TENSOR, None)", {"TENSOR": TENSOR_DEFAULT}, True),
    ("inputs, mixed=(TENSOR, 3)", {"TENSOR": TENSOR_DEFAULT}, True),
    ("inputs, odd=REGISTERED", {"REGISTERED": Registered(1)}, True),
    ("inputs, empty_registered=EMPTY", {"EMPTY": Registered()}, True),
    ("inputs, training=None, /", {}, False),
    ("training, /", {}, False),
    ("", {}, False),
    ("*, inputs", {}, False),
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


@pytest.mark.parametrize(("spec", "defaults", "bindable"), INELIGIBLE, ids=[s or "(no parameters)" for s, _, _ in INELIGIBLE])
def test_ineligible_signature_keeps_the_slow_path(spec: str, defaults: dict[str, Any], bindable: bool, x: Any) -> None:
    layer = make_layer(MODULE, params(spec, defaults))
    assert layer._call_spec_fast_plan is None, f"call(self, {spec})"
    assert (layer._call_spec_fast_bindings is not None) is bindable, f"call(self, {spec})"
    # The flag is the per-layer kill switch: True when some call of the layer may be fast.
    assert layer._call_spec_fast_path is bindable, f"call(self, {spec})"
    with count_paths() as paths:
        try:
            layer(x)
        except (TypeError, ValueError):
            pass  # the slow path's own error, e.g. a missing required argument
    assert paths == ["slow"], f"call(self, {spec}) <- layer(x): {paths}"


def test_base_patch_alone_keeps_the_flag_to_layer_x() -> None:
    base = load_module(patch_source(LAYER_V4, extension=False).source, "base_only")
    assert not hasattr(base.CallSpec, "_fast_bound")
    two = make_layer(base, params("inputs, other"))
    assert two._call_spec_fast_path is False
    assert not hasattr(two, "_call_spec_fast_bindings")
    one = make_layer(base, params("inputs, training=None"))
    assert one._call_spec_fast_path is True
    with count_slow(base) as slow:
        one(Tensor(1.0), training=True)
        two(Tensor(1.0), Tensor(2.0))
    assert len(slow) == 2


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((Tensor(1.0),), {}, "fast"),
        ((Tensor(1.0),), {"training": True}, "bound"),
        ((Tensor(1.0), Tensor(2.0)), {}, "bound"),
        ((Tensor(1.0), KerasTensor()), {"training": False}, "bound"),
        ((Tensor(1.0),), {"mask": None}, "slow"),
        ((Tensor(1.0),), {"training": None}, "slow"),
        ((Tensor(1.0),), {"training": 1}, "slow"),
        ((Tensor(1.0),), {"training": True, "mask": None}, "slow"),
        ((Tensor(1.0), Tensor(2.0), Tensor(3.0)), {}, "slow"),  # the third would bind to training
        ((None,), {}, "slow"),
        ((Tensor(1.0), None), {}, "slow"),
        ((), {"inputs": Tensor(1.0)}, "slow"),
        (([Tensor(1.0), Tensor(2.0)],), {}, "slow"),
        ((Tensor(1.0), [Tensor(2.0)]), {"training": True}, "slow"),
    ],
    ids=["layer(x)", "training kwarg", "two positionals", "symbolic second, training", "other kwarg",
         "training=None", "training=1", "training and another kwarg", "three positionals", "None",
         "None second", "keyword only", "nested first arg", "nested second arg"],
)
def test_call_shapes_take_their_path(args: tuple[Any, ...], kwargs: dict[str, Any], expected: str) -> None:
    parameters = params("inputs, other=None, training=None, mask=None")
    layer = make_layer(MODULE, parameters)
    twin = make_layer(MODULE, parameters)
    twin._call_spec_fast_path = False
    with count_paths() as paths:
        outcome = outcome_of(layer, args, kwargs)
    with count_paths() as twin_paths:
        twin_outcome = outcome_of(twin, args, kwargs)
    assert paths == [expected], (args, kwargs, paths)
    assert twin_paths == ["slow"]
    assert outcome[0] == twin_outcome[0], (outcome, twin_outcome)
    if outcome[0] == "spec":
        assert differences(outcome[1], twin_outcome[1]) == [], (args, kwargs)
        assert layer.received == twin.received


def outcome_of(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        layer(*args, **dict(kwargs))
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return "error", (type(error), str(error))
    return "spec", layer.last_call_spec


def test_per_layer_switch_and_stale_signature() -> None:
    x, y = Tensor(1.0), Tensor(2.0)
    layer = make_layer(MODULE, params("inputs, other=None, training=None"))
    layer._call_spec_fast_path = False
    with count_paths() as paths:
        layer(x)
        layer(x, y)
        layer(x, training=True)
    assert paths == ["slow", "slow", "slow"]
    other = make_layer(MODULE, params("inputs, other=None, training=None"))
    other._call_signature = inspect.signature(lambda inputs, other=None, training=None, scale=2.0: None)
    with count_paths() as paths:
        other(x)
        other(x, y)
        other(x, training=False)
    assert paths == ["slow", "slow", "slow"]
    assert list(other.last_call_spec.arguments_dict) == ["inputs", "other", "training", "scale"]


@pytest.mark.parametrize("value", ["0", "false", " OFF ", "no"])
def test_kill_switch_at_import(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("KERAS_CALLSPEC_FAST_PATH", value)
    module = load_module(PATCHED, "killed")
    for spec, args, kwargs in (("inputs", 1, {}), ("inputs", 1, {"training": True}),
                               ("a, b, training=None", 2, {}), ("a, b, training=None", 2, {"training": False})):
        layer = make_layer(module, params(spec))
        assert layer._call_spec_fast_path is False, spec
        assert layer._call_spec_fast_plan is None and layer._call_spec_fast_bindings is None, spec
        with count_paths(module) as paths:
            layer(*[Tensor(float(i)) for i in range(args)], **kwargs)
        assert paths == ["slow"], (spec, args, kwargs)


def test_kill_switch_other_values_keep_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERAS_CALLSPEC_FAST_PATH", "1")
    module = load_module(PATCHED, "enabled")
    assert make_layer(module, params("inputs"))._call_spec_fast_path is True
    assert make_layer(module, params("a, b"))._call_spec_fast_bindings is not None


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
    # Mostly `layer(value)`, the shape the base fast path is about; then n tensors with or
    # without `training=<bool>`, the extension's; then anything.
    shape = draw(st.integers(0, 5))
    if shape >= 3:
        args: tuple[Any, ...] = (draw(VALUES),)
    elif shape >= 1:
        args = tuple(draw(st.lists(st.sampled_from([Tensor(1.0), Tensor(2.0), KerasTensor()]), min_size=1, max_size=4)))
    else:
        args = tuple(draw(st.lists(VALUES, max_size=3)))
    kwargs = {}
    if shape in (2, 4):
        kwargs = {"training": draw(st.booleans())}
    elif draw(st.booleans()):
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
    assert (layer._call_spec_fast_plan is not None) is (variant in eligible_in)
    # layer(x, option) binds without the default: the extension makes every such layer fast for it.
    assert layer._call_spec_fast_path is True
    assert layer._call_spec_fast_bindings.arities == ({1, 2} if variant in eligible_in else {2})
    if layer._call_spec_fast_plan is not None:
        fast = module.CallSpec._fast(layer._call_spec_fast_plan, x)
        assert differences(fast, slow_spec(layer, (x,), {}, module)) == []
    with count_slow(module) as slow:
        try:
            layer(x)
        except (TypeError, ValueError):
            pass
    assert len(slow) == (0 if variant in eligible_in else 1)


# -- the extension: _callspec_fast_bindings, _callspec_fast_bindable, CallSpec._fast_bound

#: signature -> (arities, training_arities, accepts_training, tails by n as (name, default) pairs),
#: or None when it has no bindings. The same in every variant (no default here that the
#: variants classify differently).
BINDINGS: list[tuple[str, dict[str, Any], Any]] = [
    ("inputs", {}, ({1}, {1}, False, {1: []})),
    ("inputs, training=None", {}, ({1}, {1}, True, {1: [("training", None)]})),
    ("inputs, training=False, mask=None", {}, ({1}, {1}, True, {1: [("training", False), ("mask", None)]})),
    ("a, b, training=None", {}, ({2}, {2}, True, {2: [("training", None)]})),
    ("a, b=None, *, training", {}, (set(), {1, 2}, True, {1: [("b", None), ("training", REQUIRED)], 2: [("training", REQUIRED)]})),
    ("inputs, training, mask=None", {}, (set(), {1}, True, {1: [("training", REQUIRED), ("mask", None)]})),
    ("a, b=(3, 3), /, c=None", {}, ({1, 2, 3}, {1, 2, 3}, False,
                                    {1: [("b", (3, 3)), ("c", None)], 2: [("c", None)], 3: []})),
    ("inputs, state=TENSOR", {"TENSOR": TENSOR_DEFAULT}, ({2}, {2}, False, {2: []})),
    ("inputs, state=TENSOR, training=None", {"TENSOR": TENSOR_DEFAULT}, ({2}, {2}, True, {2: [("training", None)]})),
    ("inputs, other", {}, ({2}, {2}, False, {2: []})),
    ("inputs, *, flag=False, training=None", {}, ({1}, {1}, True, {1: [("flag", False), ("training", None)]})),
    ("inputs, *, other", {}, None),
    ("inputs, *args", {}, None),
    ("inputs, training=None, **kwargs", {}, None),
    ("inputs, training=None, /", {}, None),
    ("training", {}, None),  # no positional tensor can bind before training
    ("training, /", {}, None),
    ("*, inputs", {}, None),
    ("", {}, None),
]


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(("spec", "defaults", "expected"), BINDINGS, ids=[s or "(no parameters)" for s, _, _ in BINDINGS])
def test_bindings_of_signatures(variant: str, spec: str, defaults: dict[str, Any], expected: Any) -> None:
    module = MODULES[variant]
    layer = make_layer(module, params(spec, defaults))
    bindings = module._callspec_fast_bindings(layer._call_signature)
    describe = f"{variant}: call(self, {spec})"
    if expected is None:
        assert bindings is None, describe
        assert layer._call_spec_fast_bindings is None, describe
        return
    arities, training_arities, accepts_training, tails = expected
    assert layer._call_spec_fast_bindings is not None, describe
    assert bindings.signature is layer._call_signature, describe
    assert bindings.argument_names == tuple(p.name for p in params(spec, defaults)), describe
    assert bindings.arities == arities, describe
    assert bindings.training_arities == training_arities, describe
    assert bindings.accepts_training is accepts_training, describe
    for n, tail in tails.items():
        assert list(bindings.tails[n].items()) == tail, (describe, n)
        for name, _ in tail:
            assert bindings.tails[n][name] is layer._call_signature.parameters[name].default, (describe, n, name)
    assert layer._call_spec_fast_path is True, describe


#: Defaults the variants classify differently, in `layer(x, y)`-able signatures: which
#: arities each variant's bindings get.
BINDINGS_BY_VARIANT: list[tuple[str, Any, dict[str, set[int]]]] = [
    ("[]", [], {"V1": {2}, "V2": {1, 2}, "V3": {1, 2}, "V4": {1, 2}}),
    ("(None, None)", (None, None), {"V1": {1, 2}, "V2": {1, 2}, "V3": {2}, "V4": {2}}),
    ("registered without __len__", Registered(1), {"V1": {1, 2}, "V2": {2}, "V3": {2}, "V4": {2}}),
]


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(("name", "default", "arities"), BINDINGS_BY_VARIANT, ids=[n for n, _, _ in BINDINGS_BY_VARIANT])
def test_bindings_follow_each_variant(variant: str, name: str, default: Any, arities: dict[str, set[int]]) -> None:
    module = MODULES[variant]
    layer = make_layer(module, [P("inputs", POS), P("option", POS, default=default), P("training", KW_ONLY, default=None)])
    assert layer._call_spec_fast_bindings.arities == arities[variant], (variant, name)
    assert layer._call_spec_fast_bindings.training_arities == arities[variant], (variant, name)
    with count_paths(module) as paths:
        result = outcome_of(layer, (Tensor(1.0),), {"training": True})
    assert paths == (["bound"] if 1 in arities[variant] else ["slow"]), (variant, name)
    # The slow path's own error for an unclassifiable default (no `__len__`), else a CallSpec.
    assert result[0] == ("spec" if 1 in arities[variant] or name != "registered without __len__" else "error"), result


#: (signature, positional arguments, kwargs, bindable in V1-V3, bindable in V4)
A, B, C, K = Tensor(1.0), Tensor(2.0), Tensor(3.0), KerasTensor()
BINDABLE: list[tuple[str, tuple[Any, ...], dict[str, Any], bool]] = [
    ("a, b=None, training=None", (A,), {}, True),
    ("a, b=None, training=None", (A, B), {}, True),
    ("a, b=None, training=None", (A, K), {}, True),
    ("a, b=None, training=None", (K, K), {"training": False}, True),
    ("a, b=None, training=None", (A,), {"training": True}, True),
    ("a, b=None, training=None", (A, B, C), {}, False),
    ("a, b=None, training=None", (), {}, False),
    ("a, b=None, training=None", (A,), {"training": None}, False),
    ("a, b=None, training=None", (A,), {"training": 1}, False),
    ("a, b=None, training=None", (A,), {"training": "yes"}, False),
    ("a, b=None, training=None", (A,), {"training": True, "b": B}, False),
    ("a, b=None, training=None", (A,), {"b": B}, False),
    ("a, b=None, training=None", (A, None), {}, False),
    ("a, b=None, training=None", ([A, B],), {}, False),
    ("a, b=None, training=None", (3.0,), {}, False),
    ("a, b, *, training", (A, B), {}, False),  # training is required
    ("a, b, *, training", (A, B), {"training": True}, True),
    ("a, b", (A, B), {"training": True}, True),
    ("a, b", (A,), {"training": True}, False),
]


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(("spec", "args", "kwargs", "bindable"), BINDABLE)
def test_bindable_calls(variant: str, spec: str, args: tuple[Any, ...], kwargs: dict[str, Any], bindable: bool) -> None:
    module = MODULES[variant]
    layer = make_layer(module, params(spec))
    given_kwargs = dict(kwargs)
    assert module._callspec_fast_bindable(layer, layer._call_spec_fast_bindings, args, given_kwargs) is bindable, (
        f"{variant}: call(self, {spec}) <- layer(*{args}, **{kwargs})"
    )
    assert given_kwargs == kwargs  # deciding leaves kwargs alone


@pytest.mark.parametrize("variant", sorted(MODULES))
def test_unaccepted_training_is_bindable_while_it_is_a_context_arg(variant: str) -> None:
    """V4 pops `training` only when it is one of the layer's call-context args (else
    binding raises); V1-V3 always pop it."""
    module = MODULES[variant]
    layer = make_layer(module, params("inputs"))
    layer._call_context_args = {"foo_mode"}
    assert module._callspec_fast_bindable(layer, layer._call_spec_fast_bindings, (A,), {"training": True}) is (variant != "V4")
    twin = make_layer(module, params("inputs"))
    twin._call_context_args = {"foo_mode"}
    twin._call_spec_fast_path = False
    with count_paths(module) as paths:
        result = outcome_of(layer, (A,), {"training": True})
    expected = outcome_of(twin, (A,), {"training": True})
    if variant == "V4":
        assert paths == ["slow"]
        assert result[0] == "error" and result == expected  # the slow path's TypeError, not masked
    else:
        assert paths == ["bound"]
        assert differences(result[1], expected[1]) == []
    # A call() that takes training: an ordinary argument whatever the context args.
    takes = make_layer(module, params("inputs, training=None"))
    takes._call_context_args = set()
    assert module._callspec_fast_bindable(takes, takes._call_spec_fast_bindings, (A,), {"training": True}) is True


#: (signature, positional arguments, training or None) -> (user_arguments_dict in V1-V3,
#: user_arguments_dict in V4, arguments_dict, kwargs left behind), every value spelled out.
FAST_BOUND: list[tuple[str, tuple[Any, ...], Any, list[tuple[str, Any]], list[tuple[str, Any]], list[tuple[str, Any]], dict[str, Any]]] = [
    ("a, b", (A, B), None, [("a", A), ("b", B)], [("a", A), ("b", B)], [("a", A), ("b", B)], {}),
    ("a, b", (A, K), True, [("a", A), ("b", K)], [("training", True), ("a", A), ("b", K)], [("a", A), ("b", K)], {}),
    ("inputs", (A,), False, [("inputs", A)], [("training", False), ("inputs", A)], [("inputs", A)], {}),
    ("inputs, mask=None", (A,), True, [("inputs", A)], [("training", True), ("inputs", A)],
     [("inputs", A), ("mask", None)], {}),
    ("inputs, training=None", (A,), True, [("inputs", A), ("training", True)], [("inputs", A), ("training", True)],
     [("inputs", A), ("training", True)], {"training": True}),
    ("a, b=None, c=None, training=False, mask=None", (A, B), True,
     [("a", A), ("b", B), ("training", True)], [("a", A), ("b", B), ("training", True)],
     [("a", A), ("b", B), ("c", None), ("training", True), ("mask", None)], {"training": True}),
    ("a, b=None, c=None, training=False, mask=None", (A, B, C), None,
     [("a", A), ("b", B), ("c", C)], [("a", A), ("b", B), ("c", C)],
     [("a", A), ("b", B), ("c", C), ("training", False), ("mask", None)], {}),
    ("a, b=None, *, flag=1, training", (A,), False, [("a", A), ("training", False)], [("a", A), ("training", False)],
     [("a", A), ("b", None), ("flag", 1), ("training", False)], {"training": False}),
]


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(("spec", "args", "training", "user_v1", "user_v4", "arguments", "left"), FAST_BOUND,
                         ids=[f"{c[0]} <- {len(c[1])}, training={c[2]}" for c in FAST_BOUND])
def test_fast_bound_builds_what_the_slow_constructor_builds(
    variant: str, spec: str, args: tuple[Any, ...], training: Any,
    user_v1: list[tuple[str, Any]], user_v4: list[tuple[str, Any]], arguments: list[tuple[str, Any]], left: dict[str, Any],
) -> None:
    module = MODULES[variant]
    layer = make_layer(module, params(spec))
    kwargs = {} if training is None else {"training": training}
    describe = f"{variant}: call(self, {spec}) <- layer(*{args}, **{kwargs})"
    assert module._callspec_fast_bindable(layer, layer._call_spec_fast_bindings, args, kwargs), describe
    fast_kwargs, slow_kwargs = dict(kwargs), dict(kwargs)
    fast = module.CallSpec._fast_bound(layer._call_spec_fast_bindings, args, fast_kwargs)
    if hasattr(module.CallSpec.__init__, "__code__") and "call_context_args" in module.CallSpec.__init__.__code__.co_varnames:
        slow = module.CallSpec(layer._call_signature, layer._call_context_args, args, slow_kwargs)
    else:
        slow = module.CallSpec(layer._call_signature, args, slow_kwargs)
    # Concrete values first: a wrong expectation shared by both constructors is caught here.
    user = user_v4 if variant == "V4" else user_v1
    for spec_ in (fast, slow):
        assert list(spec_.user_arguments_dict.items()) == user, describe
        assert list(spec_.arguments_dict.items()) == arguments, describe
        assert spec_.argument_names == [name for name, _ in arguments], describe
        assert list(spec_.tensor_arguments_dict.items()) == list(zip([n for n, _ in arguments], args, strict=False)), describe
        assert spec_.tensor_arguments_names == [n for n, _ in arguments][: len(args)], describe
        assert spec_.nested_tensor_argument_names == [], describe
        assert spec_.first_arg is args[0], describe
        assert spec_.eager is (K not in args), describe
    assert fast_kwargs == slow_kwargs == left, describe
    # ... then field by field, the slow constructor as the reference.
    assert differences(fast, slow) == [], describe


@pytest.mark.parametrize("variant", sorted(MODULES))
def test_fast_bound_in_call_pops_training_like_the_slow_path(variant: str) -> None:
    module = MODULES[variant]
    x, y = Tensor(1.0), Tensor(2.0)
    layer = make_layer(module, params("a, b"))
    twin = make_layer(module, params("a, b"))
    twin._call_spec_fast_path = False
    with count_paths(module) as paths:
        layer(x, y, training=True)
    twin(x, y, training=True)
    assert paths == ["bound"]
    assert layer.received == twin.received == ((x, y), {})  # call() does not get the popped training
    assert differences(layer.last_call_spec, twin.last_call_spec) == []
    assert ("training" in layer.last_call_spec.user_arguments_dict) is (variant == "V4")


def test_fast_bound_specs_share_no_container() -> None:
    default = [1, 2]
    layer = make_layer(MODULE, params("a, b=None, padding=PAD, training=None", {"PAD": default}))
    bindings = layer._call_spec_fast_bindings
    first = MODULE.CallSpec._fast_bound(bindings, (A, B), {"training": True})
    second = MODULE.CallSpec._fast_bound(bindings, (A, B), {"training": True})
    for name in ("user_arguments_dict", "arguments_dict", "argument_names", "tensor_arguments_dict",
                 "tensor_arguments_names", "nested_tensor_argument_names"):
        assert getattr(first, name) is not getattr(second, name), name
    first.arguments_dict["padding"] = None
    first.argument_names.append("junk")
    first.tensor_arguments_names.append("junk")
    third = MODULE.CallSpec._fast_bound(bindings, (A,), {})
    assert list(third.arguments_dict.items()) == [("a", A), ("b", None), ("padding", default), ("training", None)]
    assert third.arguments_dict["padding"] is default
    assert third.argument_names == ["a", "b", "padding", "training"]
    assert third.tensor_arguments_names == ["a"]


@pytest.mark.parametrize(("module_variant", "rule_variant"), [("V4", "V1"), ("V1", "V4")])
def test_comparison_catches_the_other_variants_rule(module_variant: str, rule_variant: str) -> None:
    """The checks above can fail: `_fast_bound` with the other variant's handling of a
    popped `training` differs from the slow constructor, and `differences` says where."""
    module, other = MODULES[module_variant], MODULES[rule_variant]
    layer = make_layer(module, params("a, b"))
    with mock.patch.object(module, "_callspec_fast_popped_training", other._callspec_fast_popped_training):
        fast = module.CallSpec._fast_bound(layer._call_spec_fast_bindings, (A, B), {"training": True})
    slow = slow_spec(layer, (A, B), {"training": True}, module)
    found = differences(fast, slow)
    assert found and all(d.startswith("user_arguments_dict") for d in found), found


def test_comparison_catches_training_left_in_kwargs() -> None:
    layer = make_layer(MODULE, params("a, b"))
    kwargs = {"training": True}
    with mock.patch.object(MODULE, "_callspec_fast_popped_training", lambda training, user: {"training": training, **user}):
        MODULE.CallSpec._fast_bound(layer._call_spec_fast_bindings, (A, B), kwargs)
    assert kwargs == {}  # the real constructor popped it ...
    kept = {"training": True}
    fast = MODULE.CallSpec._fast_bound(make_layer(MODULE, params("a, b, training=None"))._call_spec_fast_bindings, (A, B), kept)
    assert kept == {"training": True} and fast.user_arguments_dict["training"] is True  # ... and keeps an accepted one
