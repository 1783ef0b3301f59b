"""Property-based equivalence on the installed Keras: generated signatures and calls,
fast path on vs off, compared on CallSpecs, outputs, exceptions, and the training and
mask values that reach a nested layer; and, for every call shape (keywords, `training=None`,
nested and plain values, `*args`/`**kwargs`), which path `__call__` takes, decided here
from the signature and from whether upstream's own constructor binds the call."""

from __future__ import annotations

import inspect
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, find, given, settings
from hypothesis import strategies as st
from keras.src.layers import layer as layer_module

from tests.equivalence.helpers import (
    CALLSPEC_RUNS,
    HAS_EXTENSION,
    P,
    Recorder,
    catch,
    comparable,
    flatten,
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

pytestmark = pytest.mark.skipif(
    not CALLSPEC_RUNS, reason="the CallSpec fast path does not run here (not in this fork, or KERAS_FORKGEN_DISABLE)"
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
    # No plan for layer(x); the extension's bindings (every call that binds) still set the flag.
    assert ineligible._call_spec_fast_plan is None
    assert ineligible._call_spec_fast_path is (ineligible._call_spec_fast_bindings is not None) is HAS_EXTENSION
    assert inspect.signature(eligible.call).parameters.keys() == {"inputs", "training"}
    for wanted in (True, False):
        find(signatures(), lambda parameters, wanted=wanted: (layer_with_signature(parameters)._call_spec_fast_plan is not None) is wanted,
             settings=settings(max_examples=2000, database=None, phases=[Phase.generate]))


# -- the extension: every other call that binds ---------------------------------------

POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
#: Defaults of defaulted parameters: plain ones and, fewer, tensor-like ones.
PLAIN_OR_NOT = [None, None, None, 0, 1.5, (3, 3), [], (), (None, None), "same", tensor(7.0), (tensor(8.0), None)]
T1, T2, T3, SYM = tensor(1.0), tensor(2.0), tensor(3.0), symbolic()
TENSORS = [T1, T2, T3]
#: Positional arguments that are not one tensor each: None, nested tensors (Add()([a, b]),
#: a dict input), and a plain value (rejected by `__call__` before any CallSpec).
SPOILERS = [None, [T1, T2], (T2, None), {"a": T1, "b": T3}, 3]
#: Keyword values: tensors, symbolic ones, None, plain values, nested ones with tensors
#: (and None), empty ones, and nested values mixing tensors with plain ones (the
#: constructor raises).
KEYWORD_VALUES = [T1, T2, SYM, None, None, 0, 8, 1.5, "s", True, False, (T1, None), [T1, T2], {"k": T3},
                  (1, 2), (), {}, [T1, 1]]
#: Keyword names beyond the signature's: unexpected ones (`**kwargs` takes them, or the
#: call does not bind), `training` and `mask` (call-context and mask arguments).
EXTRA_NAMES = ["training", "training", "mask", "flag", "extra"]


@st.composite
def bound_signatures(draw: st.DrawFn) -> list[P]:
    """Signatures with up to 4 positional parameters (the first ones required), a
    `training` of any kind, at any place, with or without a default, keyword-only
    parameters (some required), and sometimes `*args` and/or `**kwargs`."""
    count = draw(st.sampled_from([0, 1, 1, 2, 2, 2, 3, 3, 4]))
    required = draw(st.integers(0, count))
    positional = []
    for i, name in enumerate("abcd"[:count]):
        kind = draw(st.sampled_from([P.POSITIONAL_OR_KEYWORD] * 3 + [P.POSITIONAL_ONLY]))
        default = P.empty if i < required else draw(st.sampled_from(PLAIN_OR_NOT))
        positional.append(P(name, kind, default=default))
    keyword = [P(name, P.KEYWORD_ONLY, default=draw(st.sampled_from([P.empty, *PLAIN_OR_NOT])))
               for name in draw(st.lists(st.sampled_from(["flag", "mask", "scale", "cache"]), max_size=3, unique=True))]
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
    var = draw(st.sampled_from([None] * 6 + ["args", "kwargs", "both"]))
    middle = [P("args", P.VAR_POSITIONAL)] if var in ("args", "both") else []
    tail = [P("kwargs", P.VAR_KEYWORD)] if var in ("kwargs", "both") else []
    return positional + middle + keyword + tail


@st.composite
def bound_calls(draw: st.DrawFn, parameters: list[P]) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    """A call of a layer whose call() has `parameters`: mostly tensors for the leading
    positional parameters (sometimes a KerasTensor: a symbolic call; sometimes None, a
    nested value or a plain one), then keywords: the signature's own names, in any order,
    and sometimes names it does not have, with values of every kind (`training=None`
    among them). And whether `training` stays a call-context argument (V4)."""
    leading = required = 0
    for parameter in parameters:
        if parameter.kind not in POSITIONAL or parameter.name == "training":
            break
        leading += 1
        required += parameter.default is P.empty
    if leading and draw(st.sampled_from([True] * 5 + [False])):
        count = draw(st.integers(max(1, required), leading))
    else:
        count = draw(st.sampled_from([1, 2, 3, 0, 4, 5]))
    args = [draw(st.sampled_from(TENSORS)) for _ in range(count)]
    if args and not draw(st.integers(0, 4)):
        args[draw(st.integers(0, count - 1))] = SYM
    if args and not draw(st.integers(0, 3)):
        args[draw(st.integers(0, count - 1))] = draw(st.sampled_from(SPOILERS))
    names = [p.name for p in parameters if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    unbound = names[count:] + names[:count] if draw(st.integers(0, 5)) else names
    keys = draw(st.lists(st.sampled_from(unbound + EXTRA_NAMES), max_size=4, unique=True)) if unbound else []
    if not keys and draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(EXTRA_NAMES), max_size=2, unique=True))
    kwargs = {}
    for key in keys:
        if key == "training":
            kwargs[key] = draw(st.sampled_from([None, True, False, None]))
        else:
            kwargs[key] = draw(st.sampled_from(KEYWORD_VALUES))
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


def without_training_context(layer: Any) -> None:
    layer._call_context_args = set(layer._call_context_args) - {"training"}


#: `Layer.__call__` accepts None among the positional arguments from Keras 3.4 on (when
#: `is_backend_tensor_or_symbolic` got its `allow_none`).
NONE_POSITIONALS = "allow_none" in inspect.signature(layer_module.is_backend_tensor_or_symbolic).parameters


def binds(parameters: list[P], args: tuple[Any, ...], kwargs: dict[str, Any], context: bool) -> bool:
    """Whether upstream's constructor builds a CallSpec for `layer(*args, **kwargs)`
    (it raises for a call that does not bind or mixes tensors with other values in a
    nested argument): upstream is the oracle."""
    probe = layer_with_signature(parameters)
    if not context:
        without_training_context(probe)
    try:
        slow_spec(probe, args, dict(kwargs))
    except Exception:  # noqa: BLE001 - any error means: no CallSpec
        return False
    return True


def has_plan(parameters: list[P]) -> bool:
    """The base patch's rule for `layer(x)`: the first parameter takes a positional
    argument, no `*args`/`**kwargs`, every other parameter has a plain default, no
    positional-only `training`."""
    if not parameters or parameters[0].kind not in POSITIONAL:
        return False
    if any(p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD) for p in parameters):
        return False
    if any(p.name == "training" and p.kind is P.POSITIONAL_ONLY for p in parameters):
        return False
    return all(plain(p.default) for p in parameters[1:])


def has_bindings(parameters: list[P]) -> bool:
    """The extension's rule: every signature but an empty one or one with a
    positional-only `training` gets a binding plan."""
    return HAS_EXTENSION and bool(parameters) and not any(
        p.name == "training" and p.kind is P.POSITIONAL_ONLY for p in parameters)


def expected_path(parameters: list[P], args: tuple[Any, ...], kwargs: dict[str, Any], context: bool) -> str:
    """Which constructor `layer(*args, **kwargs)` must use, from the README's rule:
    "none" when `__call__` rejects a positional argument that is not a tensor (or None,
    or nested ones) before building any CallSpec; "slow" when upstream's constructor
    would raise (the call does not bind, or mixes tensors with other values), or the
    layer has neither a plan nor bindings; "fast" for `layer(x)` with one tensor on a
    layer with a plan; "bound" for every other call."""
    if any(not (leaf is None or tensor_like(leaf)) for leaf in flatten(list(args))):
        return "none"
    if not NONE_POSITIONALS and any(leaf is None for leaf in flatten(list(args))):
        return "none"  # before 3.4, `__call__` rejects a None positional argument too
    if not binds(parameters, args, kwargs, context):
        return "slow"
    if not kwargs and len(args) == 1 and tensor_like(args[0]) and has_plan(parameters):
        return "fast"
    return "bound" if has_bindings(parameters) else "slow"


@given(case=bound_cases())
def test_bound_calls_follow_the_rule(case: tuple[list[P], tuple[tuple[Any, ...], dict[str, Any], bool]]) -> None:
    parameters, (args, kwargs, context) = case
    expected = expected_path(parameters, args, kwargs, context)
    event(f"expected path: {expected}")
    describe = (f"call{signature_text(parameters)} <- layer(*{[type(a).__name__ for a in args]}, **{kwargs!r})"
                + ("" if context else " with training no longer a call-context arg"))
    twins = run_twins(parameters, args, kwargs, None if context else without_training_context)
    layer = layer_with_signature(parameters)
    assert layer._call_spec_fast_path is (has_plan(parameters) or has_bindings(parameters)), describe
    assert twins.differences(describe, values=not symbolic_call(args, kwargs)) == []
    taken = [path for path in twins.fast.paths if path != "slow"]
    if expected == "none":
        assert twins.fast.paths == [] and twins.on[0] == "error", (describe, twins.fast.paths, twins.on)
    elif expected == "slow":
        assert taken == [], (describe, twins.fast.paths)
    else:
        assert twins.fast.paths == [expected], (describe, twins.fast.paths)
        # The outcome is the kill-switched twin's (`differences` compares them): an error
        # upstream raises after the CallSpec (3.4-3.9's build step on a nested None) too.


FIND = settings(max_examples=5000, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def test_bound_strategies_reach_every_path() -> None:
    # Guards the property above against generators that never reach a path, or never
    # reach a call shape the extension is about.
    for path in ("fast", "bound", "slow", "none"):
        if path == "bound" and not HAS_EXTENSION:
            continue
        find(bound_cases(),
             lambda example, path=path: expected_path(example[0], *example[1]) == path, settings=FIND)
    if not HAS_EXTENSION:
        return

    def names(s: list[P]) -> set[str]:
        return {p.name for p in s}

    for wanted in (
        # several keywords, some not `training`, bound to the signature's parameters
        lambda s, a, k, c: len([n for n in k if n in names(s) and n != "training"]) >= 2,
        lambda s, a, k, c: "training" in k and k["training"] is None,
        lambda s, a, k, c: bool(a) and isinstance(a[0], (list, dict)),
        lambda s, a, k, c: not a and bool(k),  # keywords only
        lambda s, a, k, c: any(p.kind is P.VAR_KEYWORD for p in s) and bool(set(k) - names(s)),
        lambda s, a, k, c: any(p.kind is P.VAR_POSITIONAL for p in s)
        and len(a) > len([p for p in s if p.kind in POSITIONAL]),
        lambda s, a, k, c: any(isinstance(v, (tuple, list, dict)) and v for v in k.values()),
        lambda s, a, k, c: "training" in k and "training" not in names(s),  # popped (V4: kept first)
        lambda s, a, k, c: any(isinstance(v, keras.KerasTensor) for v in (*a, *k.values())),
    ):
        find(bound_cases(),
             lambda example, wanted=wanted: expected_path(example[0], *example[1]) == "bound"
             and wanted(example[0], *example[1]), settings=FIND)
