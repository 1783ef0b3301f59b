"""Property-based equivalence on the installed Keras: generated signatures and calls,
fast path on vs off, compared on CallSpecs, outputs, exceptions, and the training and
mask values that reach a nested layer; and, for the calls the extension is about
(several positional tensors, `training=<bool>`), which path `__call__` takes, decided
here from the signature alone."""

from __future__ import annotations

import inspect
from typing import Any

import keras
import numpy as np
from hypothesis import HealthCheck, Phase, event, find, given, settings
from hypothesis import strategies as st

from tests.equivalence.helpers import (
    HAS_EXTENSION,
    P,
    Recorder,
    catch,
    comparable,
    layer_with_signature,
    recording,
    run_twins,
    set_mask,
    slow_spec,
    symbolic,
    symbolic_call,
    tensor,
    variant,
)

NAMES = ["inputs", "x", "training", "mask", "x_mask", "scale", "other", "flag"]
KINDS = st.sampled_from([P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.VAR_POSITIONAL, P.KEYWORD_ONLY, P.VAR_KEYWORD])
# Defaults are built once, per backend, when the module is imported.
DEFAULTS = [P.empty, None, True, False, 0, 1.5, "same", (), [], {}, (3, 3), (None, None), (None, 3),
            [1, "a"], {"k": 1}, ("a", None), tensor(7.0), (tensor(8.0), None), (tensor(8.0), 3)]
VALUES = [tensor(1.0), tensor(2.0), None, 3, "s", True, (tensor(4.0), None), [tensor(5.0)], (1, 2)]
FIRST = [tensor(9.0), tensor(9.5), symbolic(), None, 3, [tensor(1.0), tensor(2.0)]]


@st.composite
def signatures(draw: st.DrawFn) -> list[P]:
    names = draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True))
    kinds = sorted(draw(st.lists(KINDS, min_size=len(names), max_size=len(names))))
    parameters: list[P] = []
    seen_default = False
    for name, kind in zip(names, kinds, strict=True):
        if kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
            if all(p.kind != kind for p in parameters):
                parameters.append(P(name, kind))
            continue
        default = draw(st.sampled_from(DEFAULTS))
        positional = kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
        if positional and seen_default and default is P.empty:
            default = None  # a required positional parameter may not follow a defaulted one
        seen_default |= positional and default is not P.empty
        parameters.append(P(name, kind, default=default))
    return parameters


@st.composite
def calls(draw: st.DrawFn) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if draw(st.integers(0, 3)):  # mostly `layer(value)`, the shape the fast path is about
        args: tuple[Any, ...] = (draw(st.sampled_from(FIRST)),)
    else:
        args = tuple(draw(st.lists(st.sampled_from(VALUES + FIRST), max_size=3)))
    kwargs: dict[str, Any] = {}
    if draw(st.booleans()):
        kwargs = draw(st.dictionaries(st.sampled_from(NAMES + ["extra"]), st.sampled_from(VALUES), max_size=2))
    return args, kwargs


def signature_text(parameters: list[P]) -> str:
    return str(inspect.Signature(parameters))


@given(parameters=signatures(), call=calls())
def test_generated_signatures_and_calls(parameters: list[P], call: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
    args, kwargs = call
    twins = run_twins(parameters, args, kwargs)
    describe = f"call{signature_text(parameters)} <- layer(*{args!r}, **{kwargs!r})"
    assert twins.differences(describe, values=not symbolic_call(args, kwargs)) == []
    if twins.on[0] == "ok":
        assert len(twins.fast.built) >= 1, describe


class Outer(keras.layers.Layer):
    """Calls an inner layer as `inner(x)`; its own call takes training and mask."""

    def __init__(self, inner: Any) -> None:
        super().__init__(name="outer")
        self.inner = inner

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        return self.inner(inputs)


TRAINING = st.sampled_from(["absent", None, True, False])


@given(parameters=signatures(), training=TRAINING, masked=st.booleans())
def test_training_and_mask_reach_nested_layers_alike(parameters: list[P], training: Any, masked: bool) -> None:
    def run_nested(fast: bool) -> tuple[Any, list[Any]]:
        box: list[Recorder | None] = [None]
        inner = layer_with_signature(parameters, box)
        outer = Outer(inner)
        if not fast:
            inner._call_spec_fast_path = False
            outer._call_spec_fast_path = False
        x = tensor(1.0)
        if masked:
            set_mask(x, keras.ops.convert_to_tensor(np.array([True, False])))
        kwargs = {} if training == "absent" else {"training": training}
        with recording() as recorder:
            box[0] = recorder
            result = catch(lambda: outer(x, **kwargs))
        return result[0], [comparable(r) for r in recorder.received]

    assert run_nested(True) == run_nested(False)


def test_signature_strategy_reaches_both_paths() -> None:
    # Guards the properties above against a generator that never makes a layer with a
    # plan for layer(x), or never one without.
    eligible = layer_with_signature([P("inputs", P.POSITIONAL_OR_KEYWORD), P("training", P.POSITIONAL_OR_KEYWORD, default=None)])
    ineligible = layer_with_signature([P("inputs", P.VAR_POSITIONAL)])
    assert eligible._call_spec_fast_plan is not None and eligible._call_spec_fast_path
    assert ineligible._call_spec_fast_plan is None and not ineligible._call_spec_fast_path
    assert inspect.signature(eligible.call).parameters.keys() == {"inputs", "training"}
    for wanted in (True, False):
        find(signatures(), lambda parameters, wanted=wanted: (layer_with_signature(parameters)._call_spec_fast_plan is not None) is wanted,
             settings=settings(max_examples=2000, database=None, phases=[Phase.generate]))


# -- the extension: several positional tensors and training=<bool> --------------------

POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
#: Defaults of defaulted parameters: plain ones and, fewer, tensor-like ones.
PLAIN_OR_NOT = [None, None, None, 0, 1.5, (3, 3), [], (), (None, None), "same", tensor(7.0), (tensor(8.0), None)]
T1, T2, T3, SYM = tensor(1.0), tensor(2.0), tensor(3.0), symbolic()
TENSORS = [T1, T2, T3]
#: Positional arguments that are not one tensor each (they keep the slow path).
SPOILERS = [None, [T1, T2]]
ODD_KWARGS = [{"training": None}, {"training": np.True_}, {"training": 1}, {"training": True, "flag": 1}, {"mask": None}]


@st.composite
def bound_signatures(draw: st.DrawFn) -> list[P]:
    """Signatures with up to 4 positional parameters (the first ones required), a
    `training` of any kind, at any place, with or without a default, keyword-only
    parameters, and sometimes `*args` or `**kwargs`."""
    count = draw(st.sampled_from([0, 1, 1, 2, 2, 2, 3, 3, 4]))
    required = draw(st.integers(0, count))
    positional = []
    for i, name in enumerate("abcd"[:count]):
        kind = draw(st.sampled_from([P.POSITIONAL_OR_KEYWORD] * 3 + [P.POSITIONAL_ONLY]))
        default = P.empty if i < required else draw(st.sampled_from(PLAIN_OR_NOT))
        positional.append(P(name, kind, default=default))
    keyword = [P(name, P.KEYWORD_ONLY, default=draw(st.sampled_from([P.empty, *PLAIN_OR_NOT])))
               for name in draw(st.lists(st.sampled_from(["flag", "mask", "scale"]), max_size=2, unique=True))]
    training_kind = draw(st.sampled_from([None, None, P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY,
                                          P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY, P.POSITIONAL_OR_KEYWORD]))
    if training_kind is not None:
        training = P("training", training_kind, default=draw(st.sampled_from([None, None, False, True, P.empty])))
        if training_kind is P.KEYWORD_ONLY:
            keyword.insert(draw(st.integers(0, len(keyword))), training)
        else:
            last = draw(st.booleans())  # mostly after the other positional parameters
            positional.insert(len(positional) if last else draw(st.integers(0, len(positional))), training)
    # Positional-only first; no required positional parameter after a defaulted one.
    positional.sort(key=lambda p: p.kind)
    seen_default = False
    for i, parameter in enumerate(positional):
        if parameter.default is P.empty and seen_default:
            positional[i] = parameter.replace(default=None)
        seen_default |= positional[i].default is not P.empty
    var = draw(st.sampled_from([None] * 14 + ["args", "kwargs"]))
    middle = [P("args", P.VAR_POSITIONAL)] if var == "args" else []
    tail = [P("kwargs", P.VAR_KEYWORD)] if var == "kwargs" else []
    return positional + middle + keyword + tail


@st.composite
def bound_calls(draw: st.DrawFn, parameters: list[P]) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    """A call of a layer whose call() has `parameters`: mostly n tensors for the
    leading positional parameters, no kwargs or `training=<bool>`, sometimes a
    KerasTensor among the tensors (a symbolic call, still fast); else any n from 0 to 4,
    a None or a nested list, odd kwargs. And whether `training` stays a call-context
    argument (V4)."""
    leading = required = 0
    for parameter in parameters:
        if parameter.kind not in POSITIONAL or parameter.name == "training":
            break
        leading += 1
        required += parameter.default is P.empty
    if leading and draw(st.sampled_from([True] * 5 + [False])):
        count = draw(st.integers(max(1, required), leading))
    else:
        count = draw(st.sampled_from([1, 2, 3, 0, 4]))
    args = [draw(st.sampled_from(TENSORS)) for _ in range(count)]
    if args and not draw(st.integers(0, 4)):
        args[draw(st.integers(0, count - 1))] = SYM
    if args and not draw(st.integers(0, 5)):
        args[draw(st.integers(0, count - 1))] = draw(st.sampled_from(SPOILERS))
    choice = draw(st.integers(0, 5))
    kwargs = {} if choice < 2 else {"training": choice % 2 == 0} if choice < 5 else dict(draw(st.sampled_from(ODD_KWARGS)))
    context = draw(st.sampled_from([True, True, True, False])) if variant() == "V4" else True
    return tuple(args), kwargs, context


@st.composite
def bound_cases(draw: st.DrawFn) -> tuple[list[P], tuple[tuple[Any, ...], dict[str, Any], bool]]:
    parameters = draw(bound_signatures())
    return parameters, draw(bound_calls(parameters))


_PLAIN: dict[int, bool] = {}


def plain(default: Any) -> bool:
    """Whether the slow constructor itself classifies `default` as a plain, non-tensor
    argument (no required parameter, not a tensor argument, no error): upstream's
    classification is the oracle, not the fork's inserted rule."""
    if default is P.empty:
        return False
    if id(default) not in _PLAIN:
        probe = layer_with_signature([P("x", P.POSITIONAL_OR_KEYWORD), P("d", P.POSITIONAL_OR_KEYWORD, default=default)])
        try:
            spec = slow_spec(probe, (T1,), {})
        except Exception:  # noqa: BLE001 - an unclassifiable default
            _PLAIN[id(default)] = False
        else:
            _PLAIN[id(default)] = "d" not in spec.tensor_arguments_dict
    return _PLAIN[id(default)]


def tensor_like(value: Any) -> bool:
    return isinstance(value, keras.KerasTensor) or keras.ops.is_tensor(value)


def expected_path(parameters: list[P], args: tuple[Any, ...], kwargs: dict[str, Any], context: bool) -> str:
    """Which constructor `layer(*args, **kwargs)` must use, from the README's rule:
    "fast" (`layer(x)` on a layer whose other parameters all have plain defaults),
    "bound" (n positional tensors bound to the first n parameters, none of them
    `training`, every later parameter with a plain default, `training` excepted when
    passed; kwargs empty or exactly `training=<bool>`; V4: a `training` call() does
    not take is accepted only while it is a call-context argument), else "slow"."""
    n = len(args)
    if n == 0 or not all(tensor_like(a) for a in args) or n > len(parameters):
        return "slow"
    if any(p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD) for p in parameters):
        return "slow"
    if any(p.name == "training" and p.kind is P.POSITIONAL_ONLY for p in parameters):
        return "slow"
    first, rest = parameters[:n], parameters[n:]
    if any(p.kind not in POSITIONAL for p in first):
        return "slow"
    if not kwargs and n == 1:
        return "fast" if all(plain(p.default) for p in rest) else "slow"
    if not HAS_EXTENSION:
        return "slow"
    passes_training = bool(kwargs)
    if passes_training and (list(kwargs) != ["training"] or type(kwargs["training"]) is not bool):
        return "slow"
    if any(p.name == "training" for p in first):
        return "slow"
    if not all(plain(p.default) or (passes_training and p.name == "training") for p in rest):
        return "slow"
    names = [p.name for p in parameters]
    if passes_training and "training" not in names and variant() == "V4" and not context:
        return "slow"
    return "bound"


def expected_flag(parameters: list[P]) -> bool:
    """`_call_spec_fast_path` as built: some call of the layer may take a fast path."""
    tensors = (T1, T2, T3, T1, T2)
    shapes = [((tensors[0],), {})]
    shapes += [(tensors[:n], kw) for n in range(1, len(parameters) + 1) for kw in ({}, {"training": True})]
    return any(expected_path(parameters, args, kwargs, True) != "slow" for args, kwargs in shapes)


def without_training_context(layer: Any) -> None:
    layer._call_context_args = set(layer._call_context_args) - {"training"}


@given(case=bound_cases())
def test_bound_calls_follow_the_rule(case: tuple[list[P], tuple[tuple[Any, ...], dict[str, Any], bool]]) -> None:
    parameters, (args, kwargs, context) = case
    expected = expected_path(parameters, args, kwargs, context)
    event(f"expected path: {expected}")
    describe = (f"call{signature_text(parameters)} <- layer(*{[type(a).__name__ for a in args]}, **{kwargs!r})"
                + ("" if context else " with training no longer a call-context arg"))
    twins = run_twins(parameters, args, kwargs, None if context else without_training_context)
    assert layer_with_signature(parameters)._call_spec_fast_path is expected_flag(parameters), describe
    assert twins.differences(describe, values=not symbolic_call(args, kwargs)) == []
    taken = [path for path in twins.fast.paths if path != "slow"]
    if expected == "slow":
        assert taken == [], (describe, twins.fast.paths)
    else:
        assert twins.fast.paths == [expected], (describe, twins.fast.paths)
        assert twins.on[0] == "ok", (describe, twins.on)


FIND = settings(max_examples=5000, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def test_bound_strategies_reach_every_path() -> None:
    # Guards the property above against generators that never reach a path.
    for path in ("fast", "bound", "slow"):
        if path == "bound" and not HAS_EXTENSION:
            continue
        find(bound_cases(),
             lambda example, path=path: expected_path(example[0], *example[1]) == path, settings=FIND)
    # ... and the kinds of `training` that matter: passed to call() that takes it after n > 1
    # positionals, popped from one that does not, required and keyword-only.
    if HAS_EXTENSION:
        for wanted in (
            lambda s, a, k: len(a) > 1 and "training" in k and any(p.name == "training" for p in s),
            lambda s, a, k: "training" in k and all(p.name != "training" for p in s),
            lambda s, a, k: "training" in k and any(p.name == "training" and p.default is P.empty for p in s),
            lambda s, a, k: "training" in k and any(p.name == "training" and p.kind is P.KEYWORD_ONLY for p in s),
        ):
            find(bound_cases(),
                 lambda example, wanted=wanted: expected_path(example[0], *example[1]) == "bound"
                 and wanted(example[0], example[1][0], example[1][1]), settings=FIND)
