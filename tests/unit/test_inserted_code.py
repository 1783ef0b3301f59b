"""The code the codemods insert, executed: the patched synthetic layer.py on a fake backend.

Offline evidence that `CallSpec._fast` builds exactly what `CallSpec.__init__`
builds for `layer(x)`, and that `CallSpec._fast_bound` (the extension) builds it
for every other call that binds (keywords, nested values, `*args`, `**kwargs`,
keyword-only and positional-only parameters) and leaves the kwargs dict as
`__init__` does, in every CallSpec variant; that it returns None, kwargs
untouched, for every call `__init__` rejects, which the unchanged slow path then
rejects with its own error; and that the guard sends everything else down it.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.callspec_fast_path.source import patch_source
from tests.support.equivalence import differences
from tests.support.fake_backend import KerasTensor, Registered, Tensor
from tests.support.synthetic import LAYER_V4, LAYERS, load_layer

PATCHED = patch_source(LAYER_V4).source
MODULE = load_layer(PATCHED)
#: The patched synthetic layer.py of every CallSpec variant.
MODULES = {
    variant: load_layer(patch_source(source).source, f"layer_{variant}")
    for variant, source in LAYERS.items()
}

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


def slow_spec(
    layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], module: types.ModuleType = MODULE
) -> Any:
    if (
        hasattr(module.CallSpec.__init__, "__code__")
        and "call_context_args" not in module.CallSpec.__init__.__code__.co_varnames
    ):
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
    """Record which constructor built each CallSpec: "slow", "fast" or "bound"; "declined"
    when `_fast_bound` returned None (the slow path follows)."""
    paths: list[str] = []
    original_init = module.CallSpec.__init__
    originals = {name: module.CallSpec.__dict__[name].__func__ for name in ("_fast", "_fast_bound")}

    def init(self: Any, *args: Any) -> None:
        paths.append("slow")
        original_init(self, *args)

    def counted(name: str) -> classmethod[Any, ..., Any]:
        def constructor(cls: type, *args: Any) -> Any:
            built = originals[name](cls, *args)
            if name == "_fast":
                paths.append("fast")
            else:
                paths.append("declined" if built is None else "bound")
            return built

        return classmethod(constructor)

    with (
        mock.patch.object(module.CallSpec, "__init__", init),
        mock.patch.object(module.CallSpec, "_fast", counted("_fast")),
        mock.patch.object(module.CallSpec, "_fast_bound", counted("_fast_bound")),
    ):
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
#: Signatures without a `layer(x)` plan -> the paths `layer(x)` takes: "bound" when the
#: call binds, "declined" then "slow" when `_fast_bound` refuses it (the slow path then
#: raises), "slow" alone when the layer has no bindings at all.
INELIGIBLE = [
    ("*args", {}, ["bound"]),
    ("inputs, *args", {}, ["bound"]),
    ("inputs, **kwargs", {}, ["bound"]),
    ("inputs, other", {}, ["declined", "slow"]),  # other is missing
    ("inputs, *, other", {}, ["declined", "slow"]),
    ("inputs, state=TENSOR", {"TENSOR": TENSOR_DEFAULT}, ["bound"]),
    ("inputs, state=SYMBOLIC", {"SYMBOLIC": KerasTensor()}, ["bound"]),
    ("inputs, pair=(None, None)", {}, ["bound"]),
    ("inputs, pair=(TENSOR, None)", {"TENSOR": TENSOR_DEFAULT}, ["bound"]),
    ("inputs, mixed=(TENSOR, 3)", {"TENSOR": TENSOR_DEFAULT}, ["declined", "slow"]),  # ValueError
    ("inputs, odd=REGISTERED", {"REGISTERED": Registered(1)}, ["declined", "slow"]),  # no __len__
    ("inputs, empty_registered=EMPTY", {"EMPTY": Registered()}, ["declined", "slow"]),
    ("inputs, training=None, /", {}, ["slow"]),
    ("training, /", {}, ["slow"]),
    ("", {}, ["slow"]),
    ("*, inputs", {}, ["declined", "slow"]),  # a positional for a keyword-only parameter
]


@pytest.fixture(params=[Tensor(1.5), KerasTensor()], ids=["eager", "symbolic"])
def x(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.parametrize(("spec", "defaults"), ELIGIBLE, ids=[s for s, _ in ELIGIBLE])
def test_eligible_signature_takes_the_fast_path(
    spec: str, defaults: dict[str, Any], x: Any
) -> None:
    layer = make_layer(MODULE, params(spec, defaults))
    assert layer._call_spec_fast_path is True
    fast = MODULE.CallSpec._fast(layer._call_spec_fast_plan, x)
    assert differences(fast, slow_spec(layer, (x,), {})) == []
    with count_slow() as slow:
        assert layer(x) == "called"
    assert slow == []
    assert differences(layer.last_call_spec, slow_spec(layer, (x,), {})) == []


@pytest.mark.parametrize(
    ("spec", "defaults", "expected"),
    INELIGIBLE,
    ids=[s or "(no parameters)" for s, _, _ in INELIGIBLE],
)
def test_signature_without_a_plan_binds_or_keeps_the_slow_path(
    spec: str, defaults: dict[str, Any], expected: list[str], x: Any
) -> None:
    layer = make_layer(MODULE, params(spec, defaults))
    twin = make_layer(MODULE, params(spec, defaults))
    twin._call_spec_fast_path = False
    assert layer._call_spec_fast_plan is None, f"call(self, {spec})"
    has_bindings = expected != ["slow"]
    assert (layer._call_spec_fast_bindings is not None) is has_bindings, f"call(self, {spec})"
    # The flag is the per-layer kill switch: True when some call of the layer may be fast.
    assert layer._call_spec_fast_path is has_bindings, f"call(self, {spec})"
    with count_paths() as paths:
        result = outcome_of(layer, (x,), {})
    assert paths == expected, f"call(self, {spec}) <- layer(x): {paths}"
    reference = outcome_of(twin, (x,), {})
    assert (
        result[0] == reference[0] == ("error" if expected[0] == "declined" or not spec else "spec")
    ), (result, reference)
    if result[0] == "spec":
        assert differences(result[1], reference[1]) == []
    else:
        assert result[1] == reference[1]  # the slow path's own error, e.g. a missing argument


def test_base_patch_alone_keeps_the_flag_to_layer_x() -> None:
    base = load_layer(patch_source(LAYER_V4, extension=False).source, "base_only")
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
        ((Tensor(1.0),), {}, ["fast"]),
        ((Tensor(1.0),), {"training": True}, ["bound"]),
        ((Tensor(1.0), Tensor(2.0)), {}, ["bound"]),
        ((Tensor(1.0), KerasTensor()), {"training": False}, ["bound"]),
        ((Tensor(1.0),), {"mask": None}, ["bound"]),
        ((Tensor(1.0),), {"training": None}, ["bound"]),
        ((Tensor(1.0),), {"training": 1}, ["bound"]),
        ((Tensor(1.0),), {"training": True, "mask": None}, ["bound"]),
        ((Tensor(1.0), Tensor(2.0), Tensor(3.0)), {}, ["bound"]),  # the third binds to training
        ((None,), {}, ["bound"]),
        ((KerasTensor(),), {}, ["fast"]),
        ((Tensor(1.0), None), {}, ["bound"]),
        ((), {"inputs": Tensor(1.0)}, ["bound"]),
        (([Tensor(1.0), Tensor(2.0)],), {}, ["bound"]),
        ((Tensor(1.0), [Tensor(2.0)]), {"training": True}, ["bound"]),
        ((Tensor(1.0),), {"mask": {"a": (Tensor(2.0), None)}}, ["bound"]),
        ((Tensor(1.0),), {"mask": []}, ["bound"]),
        ((), {}, ["declined", "slow"]),  # inputs is missing
        ((Tensor(1.0),) * 5, {}, ["declined", "slow"]),
        ((Tensor(1.0),), {"extra": 1}, ["declined", "slow"]),
        ((Tensor(1.0),), {"inputs": Tensor(2.0)}, ["declined", "slow"]),
        ((Tensor(1.0),), {"mask": [Tensor(2.0), 3]}, ["declined", "slow"]),
        (([Tensor(1.0), 3],), {}, []),  # refused before any CallSpec: not an input tensor
    ],
    ids=[
        "layer(x)",
        "training kwarg",
        "two positionals",
        "symbolic second, training",
        "other kwarg",
        "training=None",
        "training=1",
        "training and another kwarg",
        "three positionals",
        "None",
        "layer(symbolic)",
        "None second",
        "keyword only",
        "nested first arg",
        "nested second arg",
        "nested dict kwarg",
        "empty list kwarg",
        "nothing",
        "five positionals",
        "unexpected kwarg",
        "inputs twice",
        "mixed nested kwarg",
        "mixed nested positional",
    ],
)
def test_call_shapes_take_their_path(
    args: tuple[Any, ...], kwargs: dict[str, Any], expected: list[str]
) -> None:
    parameters = params("inputs, other=None, training=None, mask=None")
    layer = make_layer(MODULE, parameters)
    twin = make_layer(MODULE, parameters)
    twin._call_spec_fast_path = False
    with count_paths() as paths:
        outcome = outcome_of(layer, args, kwargs)
    with count_paths() as twin_paths:
        twin_outcome = outcome_of(twin, args, kwargs)
    assert paths == expected, (args, kwargs, paths)
    assert twin_paths == (["slow"] if expected else [])
    assert (
        outcome[0] == twin_outcome[0] == ("error" if expected[-1:] in (["slow"], []) else "spec")
    ), (outcome, twin_outcome)
    if outcome[0] == "spec":
        assert differences(outcome[1], twin_outcome[1]) == [], (args, kwargs)
        assert layer.received == twin.received
    else:
        assert outcome[1] == twin_outcome[1]


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
    other._call_signature = inspect.signature(
        lambda inputs, other=None, training=None, scale=2.0: None
    )
    with count_paths() as paths:
        other(x)
        other(x, y)
        other(x, training=False)
    assert paths == ["slow", "slow", "slow"]
    assert list(other.last_call_spec.arguments_dict) == ["inputs", "other", "training", "scale"]


@pytest.mark.parametrize("value", ["0", "false", " OFF ", "no"])
def test_kill_switch_at_import(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("KERAS_CALLSPEC_FAST_PATH", value)
    module = load_layer(PATCHED, "killed")
    for spec, args, kwargs in (
        ("inputs", 1, {}),
        ("inputs", 1, {"training": True}),
        ("a, b, training=None", 2, {}),
        ("a, b, training=None", 2, {"training": False}),
        ("inputs, **kwargs", 1, {"foo": 1}),
        ("*args", 3, {}),
        ("a, *, b", 1, {"b": 2}),
    ):
        layer = make_layer(module, params(spec))
        assert layer._call_spec_fast_path is False, spec
        assert layer._call_spec_fast_plan is None and layer._call_spec_fast_bindings is None, spec
        with count_paths(module) as paths:
            layer(*[Tensor(float(i)) for i in range(args)], **kwargs)
        assert paths == ["slow"], (spec, args, kwargs)


def test_kill_switch_other_values_keep_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERAS_CALLSPEC_FAST_PATH", "1")
    module = load_layer(PATCHED, "enabled")
    assert make_layer(module, params("inputs"))._call_spec_fast_path is True
    assert make_layer(module, params("a, b"))._call_spec_fast_bindings is not None
    assert make_layer(module, params("*args, **kwargs"))._call_spec_fast_path is True


def test_fast_specs_share_no_container() -> None:
    default = [1, 2]
    layer = make_layer(MODULE, params("inputs, padding=PAD, training=None", {"PAD": default}))
    first = MODULE.CallSpec._fast(layer._call_spec_fast_plan, Tensor(1.0))
    second = MODULE.CallSpec._fast(layer._call_spec_fast_plan, Tensor(2.0))
    for name in (
        "user_arguments_dict",
        "arguments_dict",
        "argument_names",
        "tensor_arguments_dict",
        "tensor_arguments_names",
        "nested_tensor_argument_names",
    ):
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
    [
        REQUIRED,
        None,
        True,
        False,
        0,
        1.5,
        "same",
        (),
        [],
        {},
        (3, 3),
        (None, None),
        (None, 3),
        [1, "a"],
        {"k": 1},
        TENSOR_DEFAULT,
        KerasTensor(),
        (TENSOR_DEFAULT, None),
        (TENSOR_DEFAULT, 3),
        Registered(1),
        Registered(),
    ]
)
KINDS = st.sampled_from([POS_ONLY, POS, VAR_POS, KW_ONLY, VAR_KW])
#: What `Layer.__call__` accepts as a positional argument: tensors, None, and nested ones.
INPUTS = st.sampled_from(
    [
        Tensor(1.0),
        Tensor(2.0),
        KerasTensor(),
        None,
        (Tensor(4.0), None),
        [Tensor(5.0)],
        [],
        (),
        {},
        {"a": Tensor(6.0), "b": [KerasTensor()]},
        [None],
        (None, None),
        Registered(Tensor(8.0)),
        Registered(),
    ]
)
#: Keyword values: inputs, plain values, plain and mixed nested ones.
VALUES = INPUTS | st.sampled_from(
    [
        3,
        "s",
        1.5,
        True,
        False,
        [1, "a"],
        {"k": 1},
        (Tensor(9.0), 3),
        [KerasTensor(), "s"],
        Registered(1),
    ]
)


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
    # `layer(x)`, the base's shape; n tensors with `training=<bool>`; then anything:
    # keywords (known, unknown, `args`/`kwargs`), nested values, *args-sized calls.
    shape = draw(st.integers(0, 5))
    if shape == 5:
        args: tuple[Any, ...] = (draw(INPUTS),)
    elif shape == 4:
        args = tuple(
            draw(
                st.lists(
                    st.sampled_from([Tensor(1.0), Tensor(2.0), KerasTensor()]),
                    min_size=1,
                    max_size=4,
                )
            )
        )
    else:
        args = tuple(draw(st.lists(INPUTS, max_size=6)))
    kwargs: dict[str, Any] = {}
    if shape == 4:
        kwargs = {"training": draw(st.booleans())}
    elif shape != 5 or draw(st.booleans()):
        kwargs = draw(
            st.dictionaries(
                st.sampled_from([*NAMES, "extra", "args", "kwargs"]), VALUES, max_size=3
            )
        )
    return args, kwargs


def outcome(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        layer(*args, **dict(kwargs))
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return "error", (type(error), str(error))
    return "spec", layer.last_call_spec


@settings(max_examples=600, deadline=None)
@given(
    variant=st.sampled_from(sorted(MODULES)),
    parameters=signatures(),
    call=calls(),
    context=st.sampled_from([None, {"training", "mask"}]),
)
def test_generated_signatures_and_calls(
    variant: str,
    parameters: list[P],
    call: tuple[tuple[Any, ...], dict[str, Any]],
    context: set[str] | None,
) -> None:
    args, kwargs = call
    module = MODULES[variant]
    fast_layer = make_layer(module, parameters)
    slow_layer = make_layer(module, parameters)
    if context is not None:
        fast_layer._call_context_args = slow_layer._call_context_args = context
    slow_layer._call_spec_fast_path = False
    with count_paths(module) as paths:
        fast = outcome(fast_layer, args, kwargs)
    slow = outcome(slow_layer, args, kwargs)
    assert fast[0] == slow[0], (fast, slow, paths)
    if fast[0] == "error":
        assert fast[1] == slow[1]
        assert paths in ([], ["slow"], ["declined", "slow"]), paths  # never a spec before the error
        return
    assert differences(fast[1], slow[1]) == []
    assert fast_layer.received == slow_layer.received  # call() got the same (popped) kwargs
    # Every call that binds skips `signature.bind`, but for the conservative refusal of a
    # positional-only name passed as a keyword (which a `**kwargs` may take).
    positional_only = {p.name for p in parameters if p.kind is POS_ONLY}
    if fast_layer._call_spec_fast_bindings is not None and not positional_only & set(kwargs):
        assert paths in (["fast"], ["bound"]), paths


@settings(max_examples=400, deadline=None)
@given(
    variant=st.sampled_from(sorted(MODULES)),
    parameters=signatures(),
    args=st.lists(VALUES, max_size=5),
    kwargs=st.dictionaries(
        st.sampled_from([*NAMES, "extra", "args", "kwargs"]), VALUES, max_size=3
    ),
)
def test_generated_direct_fast_bound(
    variant: str, parameters: list[P], args: list[Any], kwargs: dict[str, Any]
) -> None:
    """`_fast_bound` on its own, with any positional values (plain ones too, which
    `Layer.__call__` refuses before): the slow constructor's CallSpec and kwargs, or None
    and kwargs untouched where the slow constructor raises."""
    module = MODULES[variant]
    layer = make_layer(module, parameters)
    bindings = layer._call_spec_fast_bindings
    if bindings is None:
        return
    fast_kwargs, slow_kwargs = dict(kwargs), dict(kwargs)
    fast = module.CallSpec._fast_bound(bindings, layer, tuple(args), fast_kwargs)
    try:
        slow = slow_constructor(layer, tuple(args), slow_kwargs, module)
    except (TypeError, ValueError):
        assert fast is None
        assert fast_kwargs == kwargs and list(fast_kwargs) == list(kwargs)
        return
    positional_only = {p.name for p in parameters if p.kind is POS_ONLY}
    if fast is None:
        assert positional_only & set(kwargs), "a call that binds was refused"
        assert fast_kwargs == kwargs
        return
    assert differences(fast, slow) == []
    assert fast_kwargs == slow_kwargs


# -- what differs between the variants ------------------------------------------

#: default -> the variants in which a layer with it is eligible (docs/keras-releases.md):
#: V1 classifies an empty nested default as a tensor argument and needs no
#: `__len__`; V1-V2 count None as a non-tensor inside nested defaults.
BY_VARIANT: list[tuple[str, Any, set[str]]] = [
    ("[]", [], {"V2", "V3", "V4"}),
    ("{}", {}, {"V2", "V3", "V4"}),
    ("(None, None)", (None, None), {"V1", "V2"}),
    ("(None, 3)", (None, 3), {"V1", "V2", "V3", "V4"}),
    ("(3, 3)", (3, 3), {"V1", "V2", "V3", "V4"}),
    ("(tensor, None)", (TENSOR_DEFAULT, None), set()),
    ("registered without __len__", Registered(1), {"V1"}),
    ("empty registered", Registered(), set()),
]
#: default -> the variants whose slow constructor raises for `layer(x)` with it.
RAISES_IN = {
    "(tensor, None)": {"V1", "V2"},
    "registered without __len__": {"V2", "V3", "V4"},
    "empty registered": {"V2", "V3", "V4"},
}


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(
    ("name", "default", "eligible_in"), BY_VARIANT, ids=[n for n, _, _ in BY_VARIANT]
)
def test_eligibility_follows_each_variant(
    variant: str, name: str, default: Any, eligible_in: set[str], x: Any
) -> None:
    module = MODULES[variant]
    layer = make_layer(module, [P("inputs", POS), P("option", POS, default=default)])
    twin = make_layer(module, [P("inputs", POS), P("option", POS, default=default)])
    twin._call_spec_fast_path = False
    assert (layer._call_spec_fast_plan is not None) is (variant in eligible_in)
    # Every such layer has bindings: the flag is on whatever the plan.
    assert layer._call_spec_fast_bindings is not None
    assert layer._call_spec_fast_path is True
    if layer._call_spec_fast_plan is not None:
        fast = module.CallSpec._fast(layer._call_spec_fast_plan, x)
        assert differences(fast, slow_spec(layer, (x,), {}, module)) == []
    raises = variant in RAISES_IN.get(name, set())
    with count_paths(module) as paths:
        result = outcome_of(layer, (x,), {})
    expected = outcome_of(twin, (x,), {})
    if variant in eligible_in:
        assert paths == ["fast"]
    else:
        assert paths == (["declined", "slow"] if raises else ["bound"])
    assert result[0] == expected[0] == ("error" if raises else "spec")
    if raises:
        assert result[1] == expected[1]
    else:
        assert differences(result[1], expected[1]) == []


# -- the extension: _callspec_fast_bindings and CallSpec._fast_bound ---------------

A, B, C, K = Tensor(1.0), Tensor(2.0), Tensor(3.0), KerasTensor()
DEFAULT, REQ, VARPOS, VARKW = 0, 1, 2, 3  # the `_CALLSPEC_FAST_*` fill codes
NOPOS = 1 << 62  # `_CALLSPEC_FAST_NO_POSITION`: a parameter that takes no positional argument

#: signature -> (parameters as (name, position, fill, default), positional_count,
#: var_positional, var_keyword, keyword_names, positional_only_names), or None when it
#: has no bindings. The same in every variant.
BINDINGS: list[tuple[str, Any]] = [
    ("inputs", ((("inputs", 0, REQ, REQUIRED),), 1, None, None, {"inputs"}, set())),
    (
        "inputs, training=None",
        (
            (("inputs", 0, REQ, REQUIRED), ("training", 1, DEFAULT, None)),
            2,
            None,
            None,
            {"inputs", "training"},
            set(),
        ),
    ),
    (
        "a, /, b=1, *args, c, d=None, **kw",
        (
            (
                ("a", 0, REQ, REQUIRED),
                ("b", 1, DEFAULT, 1),
                ("args", NOPOS, VARPOS, REQUIRED),
                ("c", NOPOS, REQ, REQUIRED),
                ("d", NOPOS, DEFAULT, None),
                ("kw", NOPOS, VARKW, REQUIRED),
            ),
            2,
            "args",
            "kw",
            {"b", "c", "d"},
            {"a"},
        ),
    ),
    ("*args", ((("args", NOPOS, VARPOS, REQUIRED),), 0, "args", None, set(), set())),
    ("**kwargs", ((("kwargs", NOPOS, VARKW, REQUIRED),), 0, None, "kwargs", set(), set())),
    ("*, inputs", ((("inputs", NOPOS, REQ, REQUIRED),), 0, None, None, {"inputs"}, set())),
    ("training", ((("training", 0, REQ, REQUIRED),), 1, None, None, {"training"}, set())),
    (
        "a, b=(3, 3), /, c=None",
        (
            (("a", 0, REQ, REQUIRED), ("b", 1, DEFAULT, (3, 3)), ("c", 2, DEFAULT, None)),
            3,
            None,
            None,
            {"c"},
            {"a", "b"},
        ),
    ),
    (
        "inputs, *, training",
        (
            (("inputs", 0, REQ, REQUIRED), ("training", NOPOS, REQ, REQUIRED)),
            1,
            None,
            None,
            {"inputs", "training"},
            set(),
        ),
    ),
    ("", None),
    ("training, /", None),
    ("inputs, training=None, /", None),
    ("x, training, /, y=None, **kwargs", None),
]


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(
    ("spec", "expected"), BINDINGS, ids=[s or "(no parameters)" for s, _ in BINDINGS]
)
def test_bindings_of_signatures(variant: str, spec: str, expected: Any) -> None:
    module = MODULES[variant]
    assert (
        module._CALLSPEC_FAST_DEFAULT,
        module._CALLSPEC_FAST_REQUIRED,
        module._CALLSPEC_FAST_VAR_POSITIONAL,
        module._CALLSPEC_FAST_VAR_KEYWORD,
    ) == (DEFAULT, REQ, VARPOS, VARKW)
    assert module._CALLSPEC_FAST_NO_POSITION == NOPOS
    layer = make_layer(module, params(spec))
    bindings = module._callspec_fast_bindings(layer._call_signature)
    describe = f"{variant}: call(self, {spec})"
    if expected is None:
        assert bindings is None, describe
        assert layer._call_spec_fast_bindings is None, describe
        assert layer._call_spec_fast_path is (layer._call_spec_fast_plan is not None), describe
        return
    parameters, positional_count, var_positional, var_keyword, keyword_names, positional_only = (
        expected
    )
    assert layer._call_spec_fast_bindings is not None, describe
    assert layer._call_spec_fast_path is True, describe
    assert bindings.signature is layer._call_signature, describe
    names = tuple(p[0] for p in parameters)
    assert bindings.argument_names == names == tuple(layer._call_signature.parameters), describe
    assert bindings.parameter_names == frozenset(names), describe
    assert bindings.first_name == names[0], describe
    assert bindings.parameters == parameters, describe
    for name, _, _, default in bindings.parameters:
        assert default is layer._call_signature.parameters[name].default, (
            describe,
            name,
        )  # the object itself
    assert bindings.positional_count == positional_count, describe
    assert bindings.var_positional == var_positional and bindings.var_keyword == var_keyword, (
        describe
    )
    assert bindings.keyword_names == frozenset(keyword_names), describe
    # Positional-only names, each mapped to the position it takes.
    assert bindings.positional_only_names == {
        name: position for name, position, _, _ in parameters if name in positional_only
    }, describe


def slow_constructor(
    layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], module: types.ModuleType
) -> Any:
    """The slow constructor on `kwargs` itself (it may pop from it)."""
    if "call_context_args" in module.CallSpec.__init__.__code__.co_varnames:
        return module.CallSpec(layer._call_signature, layer._call_context_args, args, kwargs)
    return module.CallSpec(layer._call_signature, args, kwargs)


ALL = {"V1", "V2", "V3", "V4"}
#: (signature, defaults, positional arguments, keywords, variants whose slow constructor raises).
#: `_fast_bound` is called directly: positional values need not be tensors here.
CALLS: list[tuple[str, dict[str, Any], tuple[Any, ...], dict[str, Any], set[str]]] = [
    ("a, b", {}, (A, B), {}, set()),
    ("a, b", {}, (A, K), {"training": True}, set()),  # popped: dropped (V1-V3) or kept first (V4)
    ("a, b", {}, (A,), {"b": K}, set()),
    ("a, b", {}, (), {"b": B, "a": A}, set()),  # keyword order is not binding order
    ("inputs", {}, (A,), {"training": False}, set()),
    ("inputs, training=None", {}, (A,), {"training": None}, set()),
    ("inputs, training=None", {}, (A,), {"training": True}, set()),
    ("inputs, training=None", {}, (), {"inputs": K, "training": False}, set()),
    ("inputs, mask=None", {}, (A,), {"mask": [A, None]}, {"V1", "V2"}),  # None inside nested
    ("inputs, mask=None", {}, (A,), {"mask": [None]}, set()),
    ("inputs, mask=None", {}, (A,), {"mask": (None, None)}, set()),
    ("inputs, mask=None", {}, (A,), {"mask": []}, set()),  # nested empty: V1 a tensor argument
    ("inputs, mask=None", {}, (A,), {"mask": {}}, set()),
    ("inputs, mask=None", {}, (A,), {"mask": {"k": (A, B), "j": [K]}}, set()),
    ("inputs, mask=None", {}, ([A, B],), {}, set()),
    ("inputs, mask=None", {}, ((A, K),), {"mask": (B,)}, set()),
    ("inputs, mask=None", {}, (A,), {"mask": Registered()}, {"V2", "V3", "V4"}),  # no __len__
    ("inputs, mask=None", {}, (A,), {"mask": Registered(A)}, {"V2", "V3", "V4"}),
    ("inputs, scale=1.0", {}, (A,), {"scale": 2}, set()),
    ("inputs, scale=1.0", {}, (A,), {"scale": "s"}, set()),
    ("inputs, scale=1.0", {}, (A,), {"scale": [1, "a"]}, set()),
    ("a, b=None", {}, (3, "s"), {}, set()),  # plain values only: eager, no tensor argument
    ("a, b=None", {}, (None,), {}, set()),
    ("a, b=None", {}, (True, 1.5), {}, set()),
    ("*args", {}, (A, B), {}, set()),
    ("*args", {}, (), {}, set()),
    ("*args", {}, ([A], K), {}, set()),
    ("inputs, *args", {}, (A,), {}, set()),
    ("inputs, *args", {}, (A, B, C), {}, set()),
    ("inputs, *args, training=None", {}, (A, B), {"training": True}, set()),
    ("inputs, **kwargs", {}, (A,), {"foo": 1, "bar": "s"}, set()),
    (
        "inputs, **kwargs",
        {},
        (A,),
        {"foo": B, "bar": K},
        set(),
    ),  # the extras dict: a nested tensor argument
    ("inputs, **kwargs", {}, (A,), {"foo": 1, "bar": B}, ALL),  # ... or a mixed one
    ("inputs, **kwargs", {}, (A,), {}, set()),
    ("inputs, **kwargs", {}, (A,), {"training": True}, set()),  # popped, not an extra
    ("inputs, **kwargs", {}, (A,), {"kwargs": 1, "inputs_": "s"}, set()),
    (
        "inputs, **kwargs",
        {},
        (A,),
        {"foo": [A, 3]},
        ALL,
    ),  # mixed: the extras dict is classified too
    ("*args, **kwargs", {}, (A,), {"args": 3}, set()),
    ("*args, **kwargs", {}, (), {}, set()),
    ("inputs, *, flag=False, training=None", {}, (A,), {"flag": True}, set()),
    ("inputs, *, other", {}, (A,), {"other": B}, set()),
    ("a, /, b=None", {}, (A,), {"b": B}, set()),
    ("a, /, b=None", {}, (A, B), {}, set()),
    ("a, /, b=None, **kw", {}, (A,), {"c": 1}, set()),
    (
        "inputs, state=TENSOR",
        {"TENSOR": TENSOR_DEFAULT},
        (A,),
        {},
        set(),
    ),  # a tensor default is a tensor argument
    ("inputs, state=SYMBOLIC", {"SYMBOLIC": K}, (A,), {}, set()),
    ("inputs, pair=(None, None)", {}, (A,), {}, set()),
    ("inputs, pair=(TENSOR, None)", {"TENSOR": TENSOR_DEFAULT}, (A,), {}, {"V1", "V2"}),
    ("inputs, odd=REGISTERED", {"REGISTERED": Registered(1)}, (A,), {}, {"V2", "V3", "V4"}),
    ("inputs, empty=[]", {}, (A,), {}, set()),
]


def call_id(case: tuple[Any, ...]) -> str:
    """A test id without memory addresses (xdist workers must collect the same ids)."""
    return re.sub(r" object at 0x[0-9a-f]+", "", f"{case[0] or '()'} <- {case[2]!r}, {case[3]!r}")


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(
    ("spec", "defaults", "args", "kwargs", "raises_in"), CALLS, ids=[call_id(c) for c in CALLS]
)
def test_fast_bound_builds_what_the_slow_constructor_builds(
    variant: str,
    spec: str,
    defaults: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    raises_in: set[str],
) -> None:
    module = MODULES[variant]
    layer = make_layer(module, params(spec, defaults))
    describe = f"{variant}: call(self, {spec}) <- (*{args}, **{kwargs})"
    fast_kwargs, slow_kwargs = dict(kwargs), dict(kwargs)
    fast = module.CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, fast_kwargs)
    if variant in raises_in:
        with pytest.raises((TypeError, ValueError)):
            slow_constructor(layer, args, slow_kwargs, module)
        assert fast is None, describe
        assert fast_kwargs == kwargs and list(fast_kwargs) == list(kwargs), describe  # untouched
        return
    slow = slow_constructor(layer, args, slow_kwargs, module)
    assert fast is not None, describe
    assert differences(fast, slow) == [], describe
    assert fast_kwargs == slow_kwargs and list(fast_kwargs) == list(slow_kwargs), (
        describe
    )  # the same keywords popped
    assert fast.user_arguments_dict is not fast_kwargs and fast.arguments_dict is not fast_kwargs


#: Concrete expectations, so that a mistake both constructors share is caught too:
#: (signature, args, kwargs) -> per variant group, (user_arguments_dict, nested tensor names, eager).
CONCRETE: list[
    tuple[
        str,
        tuple[Any, ...],
        dict[str, Any],
        dict[str, tuple[list[tuple[str, Any]], list[str], bool]],
    ]
] = [
    (
        "a, b",
        (A, K),
        {"training": True},
        {
            "V1": ([("a", A), ("b", K)], [], False),
            "V2": ([("a", A), ("b", K)], [], False),
            "V3": ([("a", A), ("b", K)], [], False),
            "V4": ([("training", True), ("a", A), ("b", K)], [], False),
        },
    ),
    (
        "inputs, mask=None",
        (A,),
        {"mask": []},
        {
            "V1": ([("inputs", A), ("mask", [])], ["mask"], False),
            "V2": ([("inputs", A), ("mask", [])], [], True),
            "V3": ([("inputs", A), ("mask", [])], [], True),
            "V4": ([("inputs", A), ("mask", [])], [], True),
        },
    ),
    (
        "inputs, mask=None",
        (A,),
        {"mask": [None]},
        {
            "V1": ([("inputs", A), ("mask", [None])], [], True),
            "V2": ([("inputs", A), ("mask", [None])], [], True),
            "V3": ([("inputs", A), ("mask", [None])], ["mask"], False),
            "V4": ([("inputs", A), ("mask", [None])], ["mask"], False),
        },
    ),
]


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(
    ("spec", "args", "kwargs", "expected"),
    CONCRETE,
    ids=[call_id((c[0], None, c[1], c[2])) for c in CONCRETE],
)
def test_fast_bound_concrete_values_per_variant(
    variant: str, spec: str, args: tuple[Any, ...], kwargs: dict[str, Any], expected: dict[str, Any]
) -> None:
    module = MODULES[variant]
    layer = make_layer(module, params(spec))
    user, nested, eager = expected[variant]
    for built in (
        module.CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, dict(kwargs)),
        slow_constructor(layer, args, dict(kwargs), module),
    ):
        assert list(built.user_arguments_dict.items()) == user
        assert built.nested_tensor_argument_names == nested
        assert built.eager is eager
        assert built.first_arg is args[0]


#: Calls that do not bind, or whose classification raises: (signature, args, kwargs, error).
DECLINED: list[tuple[str, tuple[Any, ...], dict[str, Any], type[Exception]]] = [
    ("a, b", (A,), {}, TypeError),  # missing
    ("a, b", (A, B, C), {}, TypeError),  # too many positionals
    ("a, b", (A,), {"c": B}, TypeError),  # unexpected keyword
    ("a, b", (A, B), {"a": A}, TypeError),  # multiple values
    ("a, b", (A, B), {"b": A, "training": True}, TypeError),  # ... and training left alone
    ("a, *, b", (A,), {}, TypeError),  # missing keyword-only
    ("a, *, b", (A, B), {"b": B}, TypeError),
    ("a, /, b=None", (), {"a": A}, TypeError),  # positional-only by keyword
    ("a, /, b=None", (A,), {"a": A}, TypeError),
    ("inputs", (A,), {"mask": None}, TypeError),
    ("inputs", (A,), {"mask": None, "training": True}, TypeError),  # training is not popped then
    ("a, b=None", (A,), {"b": [A, 3]}, ValueError),  # tensors mixed with other values
    ("a, b=None", ([A, "s"],), {}, ValueError),
    ("a, b=None", ({"k": K, "j": 1.0},), {"training": True}, ValueError),
    ("*args", (A, [B, 2]), {}, ValueError),
    ("inputs, **kwargs", (A,), {"extra": (K, "s"), "training": True}, ValueError),
]


@pytest.mark.parametrize("variant", sorted(MODULES))
@pytest.mark.parametrize(
    ("spec", "args", "kwargs", "error"),
    DECLINED,
    ids=[call_id((c[0], None, c[1], c[2])) for c in DECLINED],
)
def test_fast_bound_declines_what_the_slow_constructor_rejects(
    variant: str, spec: str, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    module = MODULES[variant]
    layer = make_layer(module, params(spec))
    given_kwargs = dict(kwargs)
    assert (
        module.CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, given_kwargs)
        is None
    )
    assert given_kwargs == kwargs and list(given_kwargs) == list(
        kwargs
    )  # untouched, training included
    with pytest.raises(error):
        slow_constructor(layer, args, dict(kwargs), module)
    # Through `layer(...)`: `_fast_bound` declines, the slow path raises its own error.
    twin = make_layer(module, params(spec))
    twin._call_spec_fast_path = False
    with count_paths(module) as paths:
        result = outcome_of(layer, args, kwargs)
    expected = outcome_of(twin, args, kwargs)
    assert result == expected and result[0] == "error", (result, expected)
    if all(
        module.is_backend_tensor_or_symbolic(x, allow_none=True)
        for arg in args
        for x in flatten(arg)
    ):
        assert paths == ["declined", "slow"], paths
        assert result[1][0] is error
    else:
        assert paths == []  # refused by `Layer.__call__` before: not an input tensor


def flatten(value: Any) -> list[Any]:
    return list(MODULE.tree.flatten(value))


@pytest.mark.parametrize("variant", sorted(MODULES))
def test_a_positional_only_name_as_an_extra_keyword(variant: str) -> None:
    """`signature.bind` puts `a=` into `**kw` when the positional-only `a` took a positional
    argument (so does `_fast_bound`), and refuses it when `a` took none (`_fast_bound`
    declines, the slow path raises)."""
    module = MODULES[variant]
    layer = make_layer(module, params("a, /, **kw"))
    kwargs = {"a": B}
    fast = module.CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, (A,), kwargs)
    assert differences(fast, slow_constructor(layer, (A,), {"a": B}, module)) == []
    assert kwargs == {"a": B}
    with count_paths(module) as paths:
        layer(A, a=B)
    assert paths == ["bound"]
    assert list(layer.last_call_spec.user_arguments_dict.items()) == [("a", A), ("kw", {"a": B})]
    optional = make_layer(module, params("a=None, /, **kw"))
    kwargs = {"a": B}
    assert module.CallSpec._fast_bound(optional._call_spec_fast_bindings, optional, (), kwargs) is None
    assert kwargs == {"a": B}
    with count_paths(module) as paths, pytest.raises(TypeError, match="positional"):
        optional(a=B)
    assert paths == ["declined", "slow"]


@pytest.mark.parametrize("variant", sorted(MODULES))
def test_call_context_arguments_are_popped_as_each_variant_pops_them(variant: str) -> None:
    """V4 pops every call-context name call() does not accept and keeps it first in
    user_arguments_dict; V1-V3 pop only `training`, and drop it."""
    module = MODULES[variant]
    for context, kwargs, signature in (
        ({"foo_mode"}, {"training": True}, "inputs"),
        ({"training", "mask"}, {"mask": 1, "training": False}, "inputs"),
        ({"training", "mask"}, {"mask": 1}, "inputs, **kwargs"),
        ({"training", "mask"}, {"mask": 1, "other": 2}, "inputs, **kwargs"),
        (set(), {"training": True}, "inputs, training=None"),
        ({"training"}, {"training": True}, "inputs, training=None"),
    ):
        layer = make_layer(module, params(signature))
        twin = make_layer(module, params(signature))
        layer._call_context_args = twin._call_context_args = context
        twin._call_spec_fast_path = False
        with count_paths(module) as paths:
            result = outcome_of(layer, (A,), kwargs)
        expected = outcome_of(twin, (A,), kwargs)
        describe = (variant, context, kwargs, signature)
        assert result[0] == expected[0], (describe, result, expected)
        if expected[0] == "error":
            assert paths == ["declined", "slow"] and result == expected, (
                describe
            )  # the slow path's TypeError
            continue
        assert paths == ["bound"], describe
        assert differences(result[1], expected[1]) == [], describe
        assert layer.received == twin.received, describe  # call() gets what the slow path leaves
    # The V4 rule is keyed on the context args, the V1-V3 rule on `training` only.
    layer = make_layer(module, params("inputs"))
    layer._call_context_args = {"training", "mask"}
    kwargs = {"mask": 1, "training": True}
    fast = module.CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, (A,), kwargs)
    if variant == "V4":
        assert fast is not None and kwargs == {}
        assert list(fast.user_arguments_dict)[:2] in (["mask", "training"], ["training", "mask"])
        assert list(fast.user_arguments_dict)[2:] == ["inputs"]
    else:
        assert fast is None and kwargs == {"mask": 1, "training": True}


def test_fast_bound_specs_share_no_container() -> None:
    default = [1, 2]
    layer = make_layer(
        MODULE, params("a, b=None, padding=PAD, *rest, training=None, **extra", {"PAD": default})
    )
    bindings = layer._call_spec_fast_bindings
    kwargs = {"training": True, "foo": B}
    first = MODULE.CallSpec._fast_bound(bindings, layer, (A, B, None, C), kwargs)
    second = MODULE.CallSpec._fast_bound(bindings, layer, (A, B, None, C), dict(kwargs))
    slow = slow_spec(layer, (A, B, None, C), kwargs)
    assert differences(first, slow) == []
    for name in (
        "user_arguments_dict",
        "arguments_dict",
        "argument_names",
        "tensor_arguments_dict",
        "tensor_arguments_names",
        "nested_tensor_argument_names",
    ):
        assert getattr(first, name) is not getattr(second, name), name
        assert getattr(first, name) is not kwargs, name
    # `**extra`: one new dict, held by both user_arguments_dict and arguments_dict, as
    # `signature.bind` does it (checked on the slow constructor too); never the caller's.
    for built in (first, slow):
        assert built.user_arguments_dict["extra"] is built.arguments_dict["extra"]
        assert (
            built.arguments_dict["extra"] == {"foo": B}
            and built.arguments_dict["extra"] is not kwargs
        )
    assert first.arguments_dict["extra"] is not second.arguments_dict["extra"]
    assert first.arguments_dict["rest"] == (C,) and type(first.arguments_dict["rest"]) is tuple
    # Unfilled `*rest`/`**extra`: () and a new {} per CallSpec, as apply_defaults gives them.
    third = MODULE.CallSpec._fast_bound(bindings, layer, (A,), {})
    fourth = MODULE.CallSpec._fast_bound(bindings, layer, (A,), {})
    assert third.arguments_dict["rest"] == () and third.arguments_dict["extra"] == {}
    assert third.arguments_dict["extra"] is not fourth.arguments_dict["extra"]
    assert "extra" not in third.user_arguments_dict and "rest" not in third.user_arguments_dict
    first.arguments_dict["padding"] = None
    first.arguments_dict["extra"]["junk"] = 1
    first.argument_names.append("junk")
    first.tensor_arguments_names.append("junk")
    fifth = MODULE.CallSpec._fast_bound(bindings, layer, (A,), {})
    assert list(fifth.arguments_dict.items()) == [
        ("a", A),
        ("b", None),
        ("padding", default),
        ("rest", ()),
        ("training", None),
        ("extra", {}),
    ]
    assert fifth.arguments_dict["padding"] is default  # the default itself, as bind gives it
    assert fifth.argument_names == ["a", "b", "padding", "rest", "training", "extra"]
    assert fifth.tensor_arguments_names == ["a"]
    assert kwargs == {"training": True, "foo": B}  # nothing popped: call() takes training


def test_tensor_class_cache() -> None:
    module = load_layer(PATCHED, "tensor_cache")
    cache = module._CALLSPEC_FAST_TENSOR_TYPES
    assert cache == {}
    layer = make_layer(module, params("a, b=None, c=None"))
    bindings = layer._call_spec_fast_bindings

    class SubTensor(Tensor):
        pass

    seen: list[Any] = []
    original = module.is_backend_tensor_or_symbolic

    def counting(value: Any, allow_none: bool = False) -> bool:
        seen.append(value)
        return bool(original(value, allow_none=allow_none))

    with mock.patch.object(module, "is_backend_tensor_or_symbolic", counting):
        spec = module.CallSpec._fast_bound(bindings, layer, (A, 3, "s"), {})
        assert spec.eager is True and seen == [A]  # 3 and "s" are plain types: no test at all
        assert cache == {Tensor: False}
        seen.clear()
        spec = module.CallSpec._fast_bound(bindings, layer, (B, K), {})
        assert seen == [K] and cache == {Tensor: False, KerasTensor: True}  # B looked up
        assert spec.eager is False
        seen.clear()
        spec = module.CallSpec._fast_bound(bindings, layer, (KerasTensor(), C), {})
        assert seen == [] and spec.eager is False  # both looked up; symbolic from the cache
        assert spec.tensor_arguments_names == ["a", "b"]
        sub = SubTensor()
        spec = module.CallSpec._fast_bound(bindings, layer, (sub, None, [1]), {})
        assert seen == [sub, [1], 1, 1] and cache[SubTensor] is False and spec.eager is True
        seen.clear()
        # A class never accepted takes the full test every time, and is not cached.
        module.CallSpec._fast_bound(bindings, layer, (A, [1]), {})
        module.CallSpec._fast_bound(bindings, layer, (A, [1]), {})
        assert seen == [[1], 1, 1, [1], 1, 1] and list not in cache
    assert cache == {Tensor: False, KerasTensor: True, SubTensor: False}
    assert MODULE._CALLSPEC_FAST_TENSOR_TYPES is not cache  # one cache per module


# -- the variants' rules can be told apart ---------------------------------------

#: Calls on which some pair of variants' rules disagree: (signature, args, kwargs, context args).
PROBES: list[tuple[str, tuple[Any, ...], dict[str, Any], set[str]]] = [
    ("a, b", (A, B), {"training": True}, {"training"}),  # V4 keeps a popped training
    ("inputs", (A,), {"mask": 1}, {"training", "mask"}),  # V4 pops every context arg
    (
        "inputs, mask=None",
        (A,),
        {"mask": []},
        {"training"},
    ),  # V1: an empty nested is a tensor argument
    ("inputs, mask=None", (A,), {"mask": [None]}, {"training"}),  # V3-V4: None counts as a tensor
    ("inputs, mask=None", (A,), {"mask": [A, None]}, {"training"}),
    ("inputs, mask=None", (A,), {"mask": Registered(1)}, {"training"}),  # V2-V4: no __len__ raises
]
RULES = (
    "_callspec_fast_popped_names",
    "_callspec_fast_kept_arguments",
    "_callspec_fast_nested_kind",
)


def discrepancies(module: types.ModuleType) -> list[str]:
    """How `_fast_bound` of `module` departs from its slow constructor on PROBES."""
    found: list[str] = []
    for spec, args, kwargs, context in PROBES:
        layer = make_layer(module, params(spec))
        layer._call_context_args = context
        fast_kwargs, slow_kwargs = dict(kwargs), dict(kwargs)
        fast = module.CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, fast_kwargs)
        try:
            slow = slow_constructor(layer, args, slow_kwargs, module)
        except (TypeError, ValueError) as error:
            if fast is not None:
                found.append(f"{spec} <- {kwargs}: a CallSpec where the slow path raises {error!r}")
            continue
        if fast is None:
            found.append(f"{spec} <- {kwargs}: None where the slow path binds")
            continue
        found += [f"{spec} <- {kwargs}: {d}" for d in differences(fast, slow)]
        if fast_kwargs != slow_kwargs:
            found.append(f"{spec} <- {kwargs}: kwargs left {fast_kwargs} != {slow_kwargs}")
    return found


@pytest.mark.parametrize("variant", sorted(MODULES))
def test_each_variant_s_own_rules_agree_on_the_probes(variant: str) -> None:
    assert discrepancies(MODULES[variant]) == []


def rule_differs(name: str, a: str, b: str) -> bool:
    if name == "_callspec_fast_nested_kind":
        return a != b and {a, b} != {"V3", "V4"}  # V3 and V4 classify alike
    return (a == "V4") != (b == "V4")  # V1-V3 share the training rule


SWAPS = [
    (a, b, name)
    for a in sorted(MODULES)
    for b in sorted(MODULES)
    for name in RULES
    if rule_differs(name, a, b)
]


@pytest.mark.parametrize(
    ("module_variant", "rule_variant", "rule"),
    SWAPS,
    ids=[f"{a} with {b}'s {n}" for a, b, n in SWAPS],
)
def test_another_variant_s_rule_is_caught(
    module_variant: str, rule_variant: str, rule: str
) -> None:
    """The checks above can fail: `_fast_bound` with a rule of another variant departs from
    the slow constructor on some probe, and `differences` (or the outcome) says where."""
    module = MODULES[module_variant]
    with mock.patch.object(module, rule, getattr(MODULES[rule_variant], rule)):
        assert discrepancies(module) != []


@pytest.mark.parametrize(
    ("module_variant", "rule_variant"),
    [(a, b) for a in sorted(MODULES) for b in sorted(MODULES) if a != b],
)
def test_another_variant_s_rules_together_are_caught(
    module_variant: str, rule_variant: str
) -> None:
    module, other = MODULES[module_variant], MODULES[rule_variant]
    with mock.patch.multiple(module, **{name: getattr(other, name) for name in RULES}):
        assert discrepancies(module) != []


def test_comparison_catches_training_left_in_kwargs() -> None:
    layer = make_layer(MODULE, params("a, b"))
    kwargs = {"training": True}
    with mock.patch.object(
        MODULE, "_callspec_fast_popped_names", lambda layer, bindings, kwargs: ()
    ):
        assert (
            MODULE.CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, (A, B), kwargs)
            is None
        )
    assert kwargs == {"training": True}  # without the pop, training is an unexpected keyword ...
    fast = MODULE.CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, (A, B), kwargs)
    assert (
        kwargs == {} and fast.user_arguments_dict["training"] is True
    )  # ... the real rule pops it
    kept = {"training": True}
    fast = MODULE.CallSpec._fast_bound(
        make_layer(MODULE, params("a, b, training=None"))._call_spec_fast_bindings,
        layer,
        (A, B),
        kept,
    )
    assert (
        kept == {"training": True} and fast.user_arguments_dict["training"] is True
    )  # an accepted one stays
