"""Field matrix: a catalogue of call signatures and calls, fast constructors vs slow, on the installed Keras.

First `layer(x)` (the base patch: `CallSpec._fast`, taken when the layer has a plan,
`_call_spec_fast_plan is not None`); then the extension (`CallSpec._fast_bound`): every
other call that binds, positional or keyword, nested, `*args`/`**kwargs`, call-context
keywords; and the calls that must stay on upstream's constructor (they do not bind, or
it raises), where `_fast_bound` declines and leaves kwargs alone. `_call_spec_fast_path` is True when either fast path may be
taken for some call of the layer; set to False it sends every call down the slow path.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
from keras.src.layers import layer as layer_module

from tests.equivalence.helpers import (
    CALLSPEC_RUNS,
    HAS_EXTENSION,
    CallSpec,
    P,
    Recorder,
    attention_layer,
    comparable,
    disable_fast_path,
    flatten,
    layer_from_source,
    layer_with_signature,
    parameters_from_source,
    recording,
    run_twins,
    same_kwargs,
    slow_spec,
    symbolic,
    symbolic_call,
    tensor,
    to_numpy,
    variant,
)
from tests.support.equivalence import differences, same

pytestmark = pytest.mark.skipif(
    not CALLSPEC_RUNS, reason="the CallSpec fast path does not run here (not in this fork, or KERAS_FORKGEN_DISABLE)"
)

ROOT = Path(__file__).resolve().parents[2]


def register_nested(cls: type) -> bool:
    """Register `cls` as a nested type with the installed Keras's tree; whether it could."""
    try:
        from keras.src.tree import register_tree_node_class  # 3.3+
    except ImportError:
        pass
    else:
        register_tree_node_class(cls)
        return True
    try:
        from keras.src.utils import tree as utils_tree  # 3.1-3.2: optree, namespace "keras"
    except ImportError:
        return False  # 3.0: dm-tree, which has no registry
    optree = getattr(utils_tree, "optree", None)
    if optree is None:
        return False
    optree.register_pytree_node_class(cls, namespace="keras")
    return True


class Lenless:
    """A nested type registered with Keras's tree that has no `__len__`."""

    def __init__(self, *items: Any) -> None:
        self.items = items

    # optree (and dm-tree) protocol
    def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
        return self.items, None

    @classmethod
    def tree_unflatten(cls, metadata: None, children: Any) -> Lenless:
        return cls(*children)

    # torch.utils._pytree protocol (the torch backend's tree)
    def torchtree_flatten(self) -> tuple[list[Any], None]:
        return list(self.items), None

    def torchtree_flatten_with_keys(self) -> tuple[list[Any], None]:
        from torch.utils._pytree import SequenceKey

        return [(SequenceKey(i), v) for i, v in enumerate(self.items)], None

    @classmethod
    def torchtree_unflatten(cls, children: Any, metadata: None) -> Lenless:
        return cls(*children)


LENLESS_IS_NESTED = register_nested(Lenless)


def defaults() -> dict[str, Any]:
    return {
        "TENSOR": tensor(3.0),
        "SYMBOLIC": symbolic(),
        "LENLESS": Lenless(1, 2),
        "PAIR": (tensor(4.0), None),
    }


ELIGIBLE = [
    "inputs",
    "inputs, training=None",
    "inputs, training=None, mask=None",
    "inputs, scale=1.0",
    "inputs, pool=(3, 3)",
    "inputs, /, training=None",
    "inputs, *, flag=False",
    "inputs, other_mask=None",
    "inputs, padding=[]",
    "inputs, names=('a', None)",
    "inputs, options={'k': 1}",
    "inputs, empty=()",
    "x, training=False, mask=None, *, axis=-1",
]
INELIGIBLE = [
    "*args",
    "inputs, *args",
    "inputs, **kwargs",
    "inputs, other",
    "inputs, *, other",
    "inputs, state=TENSOR",
    "inputs, state=SYMBOLIC",
    "inputs, pair=(None, None)",
    "inputs, pair=PAIR",
    "inputs, odd=LENLESS",
    "inputs, training=None, /",
    "training, /",
]


#: Defaults the CallSpec variants classify differently (docs/keras-releases.md): V1 counts an
#: empty nested default as a tensor argument (`all()` of nothing) and, like V2, a
#: nested default of Nones as a plain one; from V3 on, tensors-or-None nesting counts
#: as tensors. A spec listed here moves to the other list for that variant.
VARIANT_ELIGIBILITY = {
    "V1": {"inputs, padding=[]": False, "inputs, empty=()": False, "inputs, pair=(None, None)": True},
    "V2": {"inputs, pair=(None, None)": True},
}


def expected_eligible(spec: str, listed: bool) -> bool:
    return VARIANT_ELIGIBILITY.get(variant(), {}).get(spec, listed)


#: INELIGIBLE specs the extension gives no bindings (a positional-only `training`): every
#: call of such a layer but `layer(x)` stays on upstream's constructor. Every other
#: signature with a parameter has bindings, so the layer's flag is True.
NO_BINDINGS = {"inputs, training=None, /", "training, /"}

#: INELIGIBLE specs on which `layer(x)` does not bind (a required argument is missing) or
#: upstream's constructor raises (a nested default without `len`): `_fast_bound` declines.
#: On every other, `layer(x)` takes the bound path.
LAYER_X_DECLINED = {"inputs, other", "inputs, *, other", "inputs, odd=LENLESS"}


@pytest.fixture(params=["eager", "symbolic"])
def x(request: pytest.FixtureRequest) -> Any:
    return tensor(1.5) if request.param == "eager" else symbolic()


@pytest.mark.parametrize("spec", ELIGIBLE)
def test_eligible(spec: str, x: Any) -> None:
    if expected_eligible(spec, True):
        check_eligible(spec, x)
    else:
        check_ineligible(spec, x)


@pytest.mark.parametrize("spec", INELIGIBLE)
def test_ineligible(spec: str, x: Any) -> None:
    if "LENLESS" in spec and not LENLESS_IS_NESTED:
        pytest.skip("this Keras's tree (dm-tree) has no registry: a Lenless default is a plain leaf")
    if expected_eligible(spec, False):
        check_eligible(spec, x)
    else:
        check_ineligible(spec, x)


def check_eligible(spec: str, x: Any) -> None:
    """`layer(x)` takes the base fast path (`CallSpec._fast`) and builds the slow path's CallSpec."""
    layer = layer_from_source(spec, defaults())
    assert layer._call_spec_fast_plan is not None, f"call(self, {spec}): no plan for layer(x)"
    assert layer._call_spec_fast_path is True, f"call(self, {spec})"
    slow = slow_spec(layer, (x,), {})
    fast = CallSpec._fast(layer._call_spec_fast_plan, x)
    assert differences(fast, slow) == [], f"call(self, {spec}): layer(x)"
    with recording() as recorder:
        layer(x)
    assert recorder.paths == ["fast"], f"call(self, {spec}): layer(x) built {recorder.paths}"
    assert differences(recorder.fast[0], slow) == [], f"call(self, {spec}): layer(x)"


def check_ineligible(spec: str, x: Any) -> None:
    """`layer(x)` has no plan, so it does not take `CallSpec._fast`; with the extension it
    takes `CallSpec._fast_bound` when it binds, else upstream's constructor. The layer's
    flag is True exactly when the extension gives it bindings."""
    layer = layer_from_source(spec, defaults())
    assert layer._call_spec_fast_plan is None, f"call(self, {spec}): layer(x) must have no plan"
    bindable = HAS_EXTENSION and spec not in NO_BINDINGS
    assert (getattr(layer, "_call_spec_fast_bindings", None) is not None) is bindable, f"call(self, {spec})"
    assert layer._call_spec_fast_path is bindable, f"call(self, {spec})"
    with recording() as recorder:
        try:
            layer(x)
        except Exception:  # noqa: BLE001
            # The slow path's own error: a required argument, an unclassifiable default, or
            # (3.4-3.6) a nested default holding None that the build step then trips over.
            pass
    assert recorder.fast == [], f"call(self, {spec}): layer(x) built {recorder.paths}"
    declined = spec in LAYER_X_DECLINED or release_expected(layer, (x,), {}, "bound") != "bound"
    if bindable and not declined:
        assert recorder.paths[:1] == ["bound"], f"call(self, {spec}): layer(x) built {recorder.paths}"
    else:
        assert recorder.bound == [], f"call(self, {spec}): layer(x) built {recorder.paths}"
        assert len(recorder.slow) >= 1, f"call(self, {spec}): layer(x) built {recorder.paths}"
    if bindable:
        check_bound_call(spec, (x,), {}, "slow" if declined else "bound")


def test_builtin_layers_are_eligible() -> None:
    for layer in (keras.layers.Dense(2), keras.layers.Dropout(0.1), keras.layers.LayerNormalization(),
                  keras.layers.BatchNormalization(), keras.layers.Embedding(5, 2), keras.layers.Activation("relu")):
        assert layer._call_spec_fast_plan is not None, type(layer).__name__
        assert layer._call_spec_fast_path is True, type(layer).__name__


def test_fast_specs_share_nothing_between_calls() -> None:
    padding: list[int] = [0]
    layer = layer_from_source("inputs, padding=PAD, training=None", {"PAD": padding})  # eligible in every variant
    first = CallSpec._fast(layer._call_spec_fast_plan, tensor(1.0))
    first.argument_names.append("junk")
    first.arguments_dict["training"] = True
    first.user_arguments_dict["extra"] = 1
    first.tensor_arguments_dict.clear()
    first.nested_tensor_argument_names.append("junk")
    second = CallSpec._fast(layer._call_spec_fast_plan, tensor(2.0))
    reference = slow_spec(layer, (second.first_arg,), {})
    assert differences(second, reference) == []
    assert second.arguments_dict["padding"] is padding


# -- the extension: every other call that binds ----------------------------------------

needs_extension = pytest.mark.skipif(not HAS_EXTENSION, reason="this fork was built without the extension")

MHA_SPEC = (
    "query, value, key=None, query_mask=None, value_mask=None, key_mask=None, "
    "attention_mask=None, return_attention_scores=False, training=None, use_causal_mask=False"
)
#: KerasHub's CachedMultiHeadAttention and TransformerDecoder call signatures.
CACHED_SPEC = "query, value, attention_mask=None, cache=None, cache_update_index=None, training=None"
DECODER_SPEC = (
    "decoder_sequence, decoder_padding_mask=None, self_attention_cache=None, "
    "self_attention_cache_update_index=None, training=None"
)
T, F = {"training": True}, {"training": False}

#: (call signature, positional arguments, kwargs, the path `__call__` must take).
#: Positional arguments: "t" a tensor (eager, symbolic or either, by mode), "N" None,
#: "L" a list of two tensors, "D" a dict {"a": tensor, "b": tensor}, "M" a list mixing a
#: tensor and a float (upstream's constructor raises on it). A kwargs value written as one
#: of these letters prefixed with "@" ("@t", "@L", ...) stands for the same. Paths: "bound"
#: (CallSpec._fast_bound), "fast" (CallSpec._fast, `layer(x)`), "slow" (upstream's
#: constructor: `_fast_bound` declined, or the layer has no bindings).
BOUND_CALLS: list[tuple[str, str, dict[str, Any], str]] = [
    # call() takes `training`: positional-or-keyword with a default, keyword-only,
    # required, before or after other defaulted parameters
    ("inputs, training=None", "t", T, "bound"),
    ("inputs, training=None", "t", F, "bound"),
    ("inputs, training=None", "t", {}, "fast"),
    ("inputs, training=None", "t", {"training": None}, "bound"),
    ("inputs, training=False, mask=None", "t", T, "bound"),
    ("inputs, mask=None, training=None", "t", F, "bound"),
    ("inputs, mask=None, training=None", "tt", T, "bound"),
    ("inputs, *, training=None", "t", T, "bound"),
    ("inputs, *, training", "t", F, "bound"),
    ("inputs, *, training", "t", {}, "slow"),  # missing the required training: the slow path's TypeError
    ("inputs, training", "t", T, "bound"),
    ("inputs, training", "t", {}, "slow"),
    ("inputs, scale=1.0, *, flag=False, training=None", "t", T, "bound"),
    ("inputs, /, training=None", "t", T, "bound"),
    ("a, b, /, training=None", "tt", F, "bound"),
    ("a, b, training=None", "tt", {}, "bound"),
    ("a, b, training=None", "tt", T, "bound"),
    ("a, b, training=None", "t", T, "slow"),  # b is required
    ("a, b=None, c=None, training=False", "t", T, "bound"),
    ("a, b=None, c=None, training=False", "tt", {}, "bound"),
    ("a, b=None, c=None, training=False", "ttt", F, "bound"),
    ("a, b, c, *, training=None, flag=(3, 3)", "ttt", T, "bound"),
    ("inputs, state=TENSOR, training=None", "tt", T, "bound"),
    ("inputs, state=TENSOR, training=None", "t", T, "bound"),  # a tensor default: a tensor argument
    ("inputs, pair=PAIR, training=None", "t", F, "bound"),  # a nested default: eager is False
    ("a, b=None, training=None", "tt", {"training": None}, "bound"),
    ("a, b=None, training=None", "t", {"training": 1}, "bound"),
    ("a, b=None, training=None, mask=None", "tt", {"training": True, "mask": None}, "bound"),
    ("inputs, training=None", "tt", {}, "bound"),  # the second positional binds to training
    ("inputs, training=None, mask=None", "tt", {}, "bound"),
    # MultiHeadAttention: positional, keyword-only (`layer(query=q, value=v)`), masks
    (MHA_SPEC, "tt", {}, "bound"),
    (MHA_SPEC, "tt", T, "bound"),
    (MHA_SPEC, "ttt", F, "bound"),
    (MHA_SPEC, "", {"query": "@t", "value": "@t"}, "bound"),
    (MHA_SPEC, "", {"value": "@t", "query": "@t", "training": False}, "bound"),  # keywords out of order
    (MHA_SPEC, "t", {"value": "@t", "attention_mask": "@t", "use_causal_mask": True}, "bound"),
    (MHA_SPEC, "tt", {"use_causal_mask": True, "return_attention_scores": True, "training": None}, "bound"),
    (MHA_SPEC, "t", {}, "slow"),  # value is required
    (MHA_SPEC, "", {"value": "@t"}, "slow"),  # query is required
    # KerasHub: attention with a cache, decoder blocks, embeddings, Softmax(x, mask=m)
    (CACHED_SPEC, "", {"query": "@t", "value": "@t", "attention_mask": "@t", "cache": "@t",
                       "cache_update_index": 3}, "bound"),
    (CACHED_SPEC, "tt", {"attention_mask": None, "cache": None, "cache_update_index": None}, "bound"),
    (CACHED_SPEC, "tt", {"cache_update_index": 0, "cache": "@t"}, "bound"),
    (DECODER_SPEC, "t", {"decoder_padding_mask": "@t", "self_attention_cache": None,
                         "self_attention_cache_update_index": None}, "bound"),
    (DECODER_SPEC, "t", {"decoder_padding_mask": "@t", "self_attention_cache": "@t",
                         "self_attention_cache_update_index": 8}, "bound"),
    ("inputs, attention_mask=None", "t", {"attention_mask": None}, "bound"),
    ("inputs, mask=None", "t", {"mask": "@t"}, "bound"),  # Softmax
    ("inputs, mask=None", "t", {"mask": None}, "bound"),
    ("inputs, mask=None", "t", {"mask": "@t", "training": True}, "bound"),  # training popped (V4: kept first)
    ("inputs, start_index=0", "t", {"start_index": 2}, "bound"),  # PositionEmbedding
    ("inputs, reverse=False", "t", {"reverse": True}, "bound"),  # ReversibleEmbedding
    ("inputs, use_causal_mask=False", "t", {"use_causal_mask": True}, "bound"),
    # nested and None arguments: Add()([a, b]), Concatenate, dict inputs, optional tensors
    ("inputs", "L", {}, "bound"),
    ("inputs", "D", {}, "bound"),
    ("inputs, training=None", "D", F, "bound"),
    ("inputs, mask=None", "L", {"mask": "@L"}, "bound"),
    ("inputs, cache=None", "t", {"cache": "@D"}, "bound"),
    ("inputs, mask=None", "t", {"mask": []}, "bound"),  # an empty nested value is plain
    ("a, b=None, training=None", "t", {"b": None}, "bound"),
    ("a, b=None, training=None", "tN", {}, "bound"),
    ("a, b=None, training=None", "tN", T, "bound"),
    ("a, b=None, training=None", "L", {}, "bound"),
    ("a, b=None, training=None", "tL", T, "bound"),
    ("a, b=None, training=None", "", {"a": "@t", "b": "@L"}, "bound"),
    # call() does not take `training`: it is popped (V4: kept first in user_arguments_dict)
    ("inputs", "t", T, "bound"),
    ("inputs", "t", F, "bound"),
    ("inputs", "t", {"training": None}, "bound"),
    ("inputs, mask=None", "t", T, "bound"),
    ("a, b", "tt", {}, "bound"),
    ("a, b", "tt", T, "bound"),
    ("a, b", "t", {"b": "@t", "training": False}, "bound"),
    ("a, b=None", "tt", F, "bound"),
    ("inputs, other", "tt", {}, "bound"),
    ("inputs, other", "t", {}, "slow"),
    ("inputs, state=TENSOR", "tt", {}, "bound"),
    ("inputs, state=TENSOR", "t", T, "bound"),
    ("inputs, odd=LENLESS", "tt", T, "bound"),
    ("inputs", "L", T, "bound"),
    # *args and **kwargs
    ("*args", "tt", {}, "bound"),
    ("*args", "t", {}, "bound"),
    ("*args, **kwargs", "tt", {"training": True}, "bound"),  # training still popped: not a parameter
    ("*args, **kwargs", "", {"x": "@t"}, "bound"),
    # the names of *rest/**options as keywords go to **options (not `args`/`kwargs`: the jax
    # backend's symbolic call passes them on to functions with parameters of those names)
    ("*rest, **options", "t", {"rest": "@t"}, "bound"),
    ("inputs, **options", "t", {"options": 1}, "bound"),
    ("inputs, *args", "t", {}, "bound"),
    ("inputs, *args", "ttt", {}, "bound"),
    ("inputs, *args, training=None", "tt", T, "bound"),
    ("inputs, *args, flag=False", "ttt", {"flag": True}, "bound"),
    ("inputs, *args, **kwargs", "ttt", {"extra": "@t"}, "bound"),
    ("inputs, **kwargs", "t", {}, "bound"),
    ("inputs, **kwargs", "t", {"cache": "@t", "state": "@L"}, "bound"),
    ("inputs, **kwargs", "t", {"foo": 1, "flag": True}, "bound"),
    ("inputs, **kwargs", "t", {"foo": 1, "bar": "x", "training": True}, "bound"),
    ("inputs, **kwargs", "t", {"cache": "@t", "foo": 1}, "slow"),  # **kwargs mixes a tensor and an int: ValueError
    ("inputs, training=None, **kwargs", "t", T, "bound"),
    ("inputs, *, mask=None, **kwargs", "t", {"other": "@L", "mask": "@t"}, "bound"),
    ("inputs, **kwargs", "t", {"other": "@M"}, "slow"),  # a mixed nested value in **kwargs
    # must stay slow: the call does not bind, or upstream's constructor raises
    ("a, b=None, training=None", "ttt", {}, "bound"),  # the third positional binds to training
    ("a, b=None, training=None", "tttt", {}, "slow"),  # too many positionals: TypeError
    ("inputs", "tt", T, "slow"),
    ("inputs, mask=None", "t", {"bogus": 1}, "slow"),  # unexpected keyword
    ("inputs, mask=None", "t", {"bogus": 1, "training": True}, "slow"),  # ... after a popped training
    ("inputs, mask=None", "t", {"inputs": "@t"}, "slow"),  # duplicate: positional and keyword
    ("inputs, *args, **kwargs", "tt", {"inputs": "@t"}, "slow"),
    ("a, b", "", {"b": "@t"}, "slow"),  # missing the required a
    ("a, /, b=None", "", {"a": "@t"}, "slow"),  # positional-only passed as a keyword
    ("a, /, **kwargs", "t", {"a": "@t"}, "bound"),  # a took a positional: the keyword goes to **kwargs
    ("inputs", "M", {}, "slow"),  # tensors mixed with non-tensors in a nested value: ValueError
    ("inputs", "M", T, "slow"),  # ... after a popped training
    ("inputs, mask=None", "t", {"mask": "@M"}, "slow"),
    ("a, b=None", "tM", {}, "slow"),
    ("inputs, training=None, /", "t", T, "slow"),  # positional-only training: no bindings
    ("inputs, training=None, /", "tt", {}, "slow"),
]


def call_id(case: tuple[str, str, dict[str, Any], str]) -> str:
    spec, kinds, kwargs, expected = case
    return f"{expected}: call(self, {spec}) <- ({kinds}, {kwargs})"


def positional(kinds: str, mode: str, start: int = 0) -> tuple[Any, ...]:
    """The positional arguments `kinds` stands for; in "mixed" mode tensors alternate
    eager (even) and symbolic (odd), counting from `start`."""
    counter = [start]

    def one() -> Any:
        i = counter[0]
        counter[0] += 1
        if mode == "eager" or (mode == "mixed" and i % 2 == 0):
            return tensor(1.0 + i)
        return keras.Input((3,))

    args: list[Any] = []
    for kind in kinds:
        if kind == "t":
            args.append(one())
        elif kind == "N":
            args.append(None)
        elif kind == "L":
            args.append([one(), one()])
        elif kind == "D":
            args.append({"a": one(), "b": one()})
        elif kind == "M":
            args.append([one(), 2.0])
        else:
            raise ValueError(kind)
    return tuple(args)


def keywords(kwargs: dict[str, Any], mode: str, start: int) -> dict[str, Any]:
    """`kwargs` with each "@<kind>" value replaced by what `<kind>` stands for."""
    resolved = {}
    for i, (name, value) in enumerate(kwargs.items()):
        if isinstance(value, str) and value.startswith("@"):
            value = positional(value[1:], mode, start + 2 * i)[0]
        resolved[name] = value
    return resolved


def call_arguments(kinds: str, kwargs: dict[str, Any], mode: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return positional(kinds, mode), keywords(kwargs, mode, 2 * len(kinds) + 1)


def tensor_count(kinds: str, kwargs: dict[str, Any]) -> int:
    keyword_kinds = "".join(v[1:] for v in kwargs.values() if isinstance(v, str) and v.startswith("@"))
    return sum(kind in "tLDM" for kind in kinds + keyword_kinds)


def is_tensor_value(value: Any) -> bool:
    return keras.ops.is_tensor(value) or isinstance(value, keras.KerasTensor)


def nested_tensor_value(value: Any) -> bool:
    """A list, tuple or dict whose leaves are all tensors: non-empty from V2 on (V1 counts an
    empty one too), and None counts with the tensors from V3 on."""
    if not isinstance(value, (list, tuple, dict)):
        return False
    if len(value) == 0:
        return variant() == "V1"
    leaves = flatten(value)
    allow_none = variant() in ("V3", "V4")
    return all(is_tensor_value(v) or (allow_none and v is None) for v in leaves)


def expected_fields(layer: Any, spec: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What `CallSpec._fast_bound` must build for `layer(*args, **kwargs)`, a call that binds,
    spelled out from the signature and the call alone (docs/keras-releases.md), without the
    inserted code: positional arguments fill the positional parameters in order, the rest
    goes to `*args`; keywords go to their parameters, the rest to `**kwargs`;
    `user_arguments_dict` holds what was bound in signature order, after (V4) the
    call-context keywords call() does not accept, which are popped from kwargs (V1-V3:
    only `training`, dropped); `arguments_dict` every parameter with defaults applied."""
    parameters = parameters_from_source(spec, defaults())
    names = [p.name for p in parameters]
    if variant() == "V4":
        context = [n for n in layer._call_context_args if n in kwargs and n not in names]
    else:
        context = ["training"] if "training" in kwargs and "training" not in names else []
    rest = {k: v for k, v in kwargs.items() if k not in context}
    bound: dict[str, Any] = {}
    positional_parameters = [p for p in parameters if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    for parameter, value in zip(positional_parameters, args, strict=False):
        bound[parameter.name] = value
    var_positional = [p.name for p in parameters if p.kind is P.VAR_POSITIONAL]
    var_keyword = [p.name for p in parameters if p.kind is P.VAR_KEYWORD]
    if len(args) > len(positional_parameters):
        bound[var_positional[0]] = tuple(args[len(positional_parameters):])
    for parameter in parameters:
        if parameter.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY) and parameter.name in rest:
            assert parameter.name not in bound, "not a call that binds"
            bound[parameter.name] = rest.pop(parameter.name)
    if rest:
        bound[var_keyword[0]] = dict(rest)
    arguments: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name in bound:
            arguments[parameter.name] = bound[parameter.name]
        elif parameter.kind is P.VAR_POSITIONAL:
            arguments[parameter.name] = ()
        elif parameter.kind is P.VAR_KEYWORD:
            arguments[parameter.name] = {}
        else:
            assert parameter.default is not P.empty, "not a call that binds"
            arguments[parameter.name] = parameter.default
    user = [n for n in names if n in bound]
    if variant() == "V4":
        user = context + user
    tensors = [n for n in names if is_tensor_value(arguments[n]) or nested_tensor_value(arguments[n])]
    nested = [n for n in tensors if not is_tensor_value(arguments[n])]
    symbolic_arguments = [n for n in tensors if isinstance(arguments[n], keras.KerasTensor)]
    return {
        "user_arguments_dict": user,
        "arguments_dict": names,
        "argument_names": names,
        "tensor_arguments_dict": tensors,
        "tensor_arguments_names": tensors,
        "nested_tensor_argument_names": nested,
        "kwargs_after": [k for k in kwargs if k not in context],
        "eager": not nested and not symbolic_arguments,
        "values": {**({n: kwargs[n] for n in context} if variant() == "V4" else {}), **bound},
        "first_arg": arguments[names[0]],
    }


#: `Layer.__call__` accepts None among the positional arguments from Keras 3.4 on (the same
#: release that gave `is_backend_tensor_or_symbolic` its `allow_none`); before, it raises
#: before any CallSpec is built.
NONE_POSITIONALS = "allow_none" in inspect.signature(layer_module.is_backend_tensor_or_symbolic).parameters


def release_expected(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], expected: str) -> str:
    """The table's path on this release: a "bound" call that this release's `__call__`
    rejects before building a CallSpec (a None positional before 3.4) builds none ("none"),
    and one that this release's own constructor refuses (V1-V2 count None in a nested value
    as a non-tensor, so `(t, None)` mixes) stays "slow"."""
    if expected != "bound":
        return expected
    if not NONE_POSITIONALS and any(leaf is None for leaf in flatten(list(args))):
        return "none"
    try:
        slow_spec(layer, args, dict(kwargs))
    except Exception:  # noqa: BLE001 - upstream's own refusal
        return "slow"
    return expected


def check_bound_call(
    spec: str, args: tuple[Any, ...], kwargs: dict[str, Any], expected: str,
    prepare: Callable[[Any], None] | None = None,
) -> None:
    describe = f"call(self, {spec}) <- layer(*{[type(a).__name__ for a in args]}, **{kwargs!r})"
    parameters = parameters_from_source(spec, defaults())
    layer = layer_with_signature(parameters)
    if prepare is not None:
        prepare(layer)
    expected = release_expected(layer, args, kwargs, expected)
    assert layer._call_spec_fast_path is (
        layer._call_spec_fast_plan is not None or layer._call_spec_fast_bindings is not None
    ), describe
    if expected == "bound":
        # The fast constructor, directly, against the slow one, each handed its own kwargs copy.
        fast_kwargs, slow_kwargs = dict(kwargs), dict(kwargs)
        fast = CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, fast_kwargs)
        assert fast is not None, (describe, "declined")
        slow = slow_spec(layer, args, slow_kwargs)
        assert differences(fast, slow) == [], describe
        assert same_kwargs(fast_kwargs, slow_kwargs), (describe, fast_kwargs, slow_kwargs)
        # ... and against what the signature and the call alone say it must be.
        want = expected_fields(layer, spec, args, kwargs)
        for name in ("user_arguments_dict", "arguments_dict", "tensor_arguments_dict"):
            assert list(getattr(fast, name)) == want[name], (describe, name, list(getattr(fast, name)))
        for name in ("argument_names", "tensor_arguments_names", "nested_tensor_argument_names"):
            assert getattr(fast, name) == want[name], (describe, name, getattr(fast, name))
        assert list(fast_kwargs) == want["kwargs_after"], (describe, fast_kwargs)
        assert fast.eager is want["eager"], (describe, fast.eager)
        assert same(fast.first_arg, want["first_arg"]), describe
        for key, value in want["values"].items():
            assert same(fast.user_arguments_dict[key], value), (describe, key)
        for key in want["tensor_arguments_dict"]:
            assert fast.arguments_dict[key] is fast.tensor_arguments_dict[key], describe
            if key in fast.user_arguments_dict:
                assert fast.user_arguments_dict[key] is fast.arguments_dict[key], describe
        # Every container new: a second call's spec shares none of the first's.
        again = CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, dict(kwargs))
        for name in ("user_arguments_dict", "arguments_dict", "argument_names", "tensor_arguments_dict",
                     "tensor_arguments_names", "nested_tensor_argument_names"):
            assert getattr(fast, name) is not getattr(again, name), (describe, name)
        for parameter in parameters:
            if parameter.kind is P.VAR_KEYWORD:  # an unbound **kwargs too is a new {} every call
                assert fast.arguments_dict[parameter.name] is not again.arguments_dict[parameter.name], describe
    elif expected == "slow" and layer._call_spec_fast_bindings is not None:
        # Declined: None, and the kwargs dict untouched (upstream's constructor pops from it).
        handed = dict(kwargs)
        assert CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, handed) is None, describe
        assert list(handed) == list(kwargs) and all(handed[k] is kwargs[k] for k in kwargs), (describe, handed)
    # End to end: the layer as built vs its kill-switched twin.
    twins = run_twins(parameters, args, kwargs, prepare)
    assert twins.differences(describe, values=not symbolic_call(args, kwargs)) == []
    if expected == "none":
        assert twins.fast.paths == [] and twins.on[0] == "error", (describe, twins.fast.paths, twins.on)
    elif expected == "slow":
        assert "fast" not in twins.fast.paths and "bound" not in twins.fast.paths, (describe, twins.fast.paths)
    else:
        assert twins.fast.paths[:1] == [expected], (describe, twins.fast.paths)
        # The outcome is the kill-switched twin's (`differences` compares them): an error
        # upstream raises after the CallSpec (3.4-3.9's build step on a nested None) too.


def bound_cases(modes: tuple[str, ...]) -> list[Any]:
    cases = []
    for case in BOUND_CALLS:
        tensors = tensor_count(case[1], case[2])
        for mode in modes:
            if mode == "mixed" and tensors < 2:
                continue
            cases.append(pytest.param(*case, mode, id=f"{mode}-{call_id(case)}"))
    return cases


@needs_extension
@pytest.mark.parametrize(("spec", "kinds", "kwargs", "expected", "mode"), bound_cases(("eager", "symbolic", "mixed")))
def test_bound_calls(spec: str, kinds: str, kwargs: dict[str, Any], expected: str, mode: str) -> None:
    if "LENLESS" in spec and not LENLESS_IS_NESTED:
        pytest.skip("this Keras's tree (dm-tree) has no registry")
    args, kwargs = call_arguments(kinds, kwargs, mode)
    check_bound_call(spec, args, kwargs, expected)


class Wrapper(keras.layers.Layer):
    """A layer whose own call() does not take `training`; it calls `inner(x)`."""

    def __init__(self, inner: Any) -> None:
        super().__init__(name="wrapper")
        self.inner = inner

    def call(self, inputs: Any, other: Any = None) -> Any:
        return self.inner(inputs)


@needs_extension
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("kinds", ["t", "tt"])
def test_training_popped_from_a_layer_reaches_its_sublayers_as_upstream(kinds: str, training: bool) -> None:
    """`wrapper(x, training=b)` on a layer whose call() lacks `training`: V4 keeps the
    popped value in user_arguments_dict, so the call context hands it to the inner
    layer; V1-V3 drop it, so the inner layer gets no training at all."""
    args = positional(kinds, "eager")
    seen = {}
    for fast in (True, False):
        box: list[Recorder | None] = [None]
        inner = layer_from_source("inputs, training=None", recorder_box=box)
        wrapper = Wrapper(inner)
        if not fast:
            disable_fast_path(wrapper)
        wrapper(*args)  # build (a first call may also trace call() to build the inner layer)
        with recording() as recorder:
            box[0] = recorder
            wrapper(*args, training=training)
        seen[fast] = (recorder.paths, [(len(a), sorted(k)) for a, k in recorder.received],
                      [k.get("training") for _, k in recorder.received])
    describe = f"Wrapper.call(self, inputs, other=None) <- wrapper({kinds}, training={training})"
    assert seen[True][0] == ["bound", "fast"], (describe, seen[True][0])
    assert seen[False][0] == ["slow", "slow"], (describe, seen[False][0])
    assert seen[True][1:] == seen[False][1:], (describe, seen)
    expected = [training] if variant() == "V4" else [None]
    assert seen[True][2] == expected, (describe, seen[True][2])


needs_context_args = pytest.mark.skipif(
    not hasattr(keras.layers.Layer, "_register_call_context_args"), reason="call-context args are Keras 3.10+ (V4)"
)


def without_training_context(layer: Any) -> None:
    layer._call_context_args = {"foo_mode"}


def foo_mode_context(layer: Any) -> None:
    layer._register_call_context_args("foo_mode")


@needs_extension
@needs_context_args
@pytest.mark.parametrize(
    ("spec", "kinds", "kwargs", "prepare", "expected"),
    [
        # training is no longer a call-context arg and call() lacks it: binding raises upstream,
        # so the fast path must not be taken (and must not hide the error)
        ("inputs", "t", T, without_training_context, "slow"),
        ("a, b", "tt", F, without_training_context, "slow"),
        # ... call() takes it: an ordinary argument
        ("inputs, training=None", "t", T, without_training_context, "bound"),
        # another registered context arg: training still popped and kept
        ("inputs, foo_mode=False", "t", T, foo_mode_context, "bound"),
        ("inputs", "tt", {}, foo_mode_context, "slow"),
        ("a, b=None", "tt", T, foo_mode_context, "bound"),
        # a registered context arg call() takes is an ordinary argument; one it does not
        # take is popped and kept first, before what was bound
        ("inputs, foo_mode=False", "t", {"foo_mode": True}, foo_mode_context, "bound"),
        ("inputs, training=None", "t", {"foo_mode": True, "training": True}, foo_mode_context, "bound"),
        ("inputs", "t", {"foo_mode": True}, foo_mode_context, "bound"),
        ("inputs", "t", {"foo_mode": 1}, without_training_context, "bound"),
        ("inputs, mask=None", "t", {"mask": "@t", "foo_mode": True, "training": False}, foo_mode_context, "bound"),
        ("inputs, **kwargs", "t", {"bar": 1, "foo_mode": True}, foo_mode_context, "bound"),
        ("inputs, **kwargs", "", {"inputs": "@t", "bar": "@L", "training": True}, foo_mode_context, "bound"),
        # popped only once the call is known to bind: upstream pops, then raises
        ("inputs", "t", {"foo_mode": True, "bogus": 1}, foo_mode_context, "slow"),
        ("inputs", "M", {"foo_mode": True}, foo_mode_context, "slow"),
        ("inputs", "", {"foo_mode": True}, foo_mode_context, "slow"),
    ],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_call_context_args(
    spec: str, kinds: str, kwargs: dict[str, Any], prepare: Callable[[Any], None], expected: str
) -> None:
    args, kwargs = call_arguments(kinds, kwargs, "eager")
    check_bound_call(spec, args, kwargs, expected, prepare)
    if prepare is without_training_context and "training" not in spec and "training" in kwargs:
        twins = run_twins(parameters_from_source(spec), args, kwargs, prepare)
        assert twins.on[0] == "error" and twins.on[1][0] is TypeError, (spec, twins.on)


@needs_extension
def test_call_signature_replaced_after_init_takes_the_slow_path() -> None:
    def replace(layer: Any) -> None:
        layer._call_signature = inspect.signature(lambda a, b, training=None, scale=2.0: None)

    x, y = tensor(1.0), tensor(2.0)
    for kwargs in ({}, T):
        twins = run_twins(parameters_from_source("a, b, training=None"), (x, y), kwargs, replace)
        assert twins.differences(f"replaced signature <- layer(x, y, **{kwargs})") == []
        assert twins.fast.paths == ["slow"], (kwargs, twins.fast.paths)
        assert twins.fast.slow[0].argument_names == ["a", "b", "training", "scale"], kwargs


@needs_extension
def test_per_layer_kill_switch_covers_every_call_shape() -> None:
    parameters = parameters_from_source("a, b=None, training=None")
    x, y = tensor(1.0), tensor(2.0)
    for args, kwargs in (((x,), {}), ((x, y), {}), ((x,), T), ((x, y), F)):
        describe = f"call(self, a, b=None, training=None) <- layer({len(args)} tensors, **{kwargs})"
        on = layer_with_signature(parameters)
        off = layer_with_signature(parameters)
        off._call_spec_fast_path = False
        with recording() as recorder:
            expected = on(*args, **dict(kwargs))
        assert recorder.paths == (["fast"] if len(args) == 1 and not kwargs else ["bound"]), describe
        with recording() as recorder:
            result = off(*args, **dict(kwargs))
        assert recorder.paths == ["slow"], describe
        assert to_numpy(result).tolist() == to_numpy(expected).tolist(), describe


KILL_SWITCH_SCRIPT = """
import json
from tests.equivalence.helpers import layer_from_source, recording, tensor
report = {}
for spec, args, kwargs in [("inputs", 1, {}), ("inputs", 1, {"training": True}),
                           ("a, b, training=None", 2, {}), ("a, b, training=None", 2, {"training": False})]:
    layer = layer_from_source(spec)
    with recording() as recorder:
        layer(*[tensor(float(i)) for i in range(args)], **kwargs)
    report[f"{spec} <- {args}, {kwargs}"] = [layer._call_spec_fast_path, layer._call_spec_fast_plan is None,
        getattr(layer, "_call_spec_fast_bindings", None) is None, recorder.paths]
print(json.dumps(report))
"""


def test_environment_kill_switch_covers_every_call_shape() -> None:
    env = {**os.environ, "KERAS_CALLSPEC_FAST_PATH": "0", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", KILL_SWITCH_SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report) == 4
    for call, state in report.items():
        assert state == [False, True, True, ["slow"]], (call, state)


@needs_extension
def test_fast_bound_specs_share_nothing_between_calls() -> None:
    padding: list[int] = [0]
    layer = layer_from_source("a, b=None, padding=PAD, training=None", {"PAD": padding})
    bindings = layer._call_spec_fast_bindings
    x, y = tensor(1.0), tensor(2.0)
    first = CallSpec._fast_bound(bindings, layer, (x, y), {"training": True})
    first.argument_names.append("junk")
    first.arguments_dict["padding"] = None
    first.user_arguments_dict["extra"] = 1
    first.tensor_arguments_dict.clear()
    first.tensor_arguments_names.append("junk")
    first.nested_tensor_argument_names.append("junk")
    second = CallSpec._fast_bound(bindings, layer, (x, y), {"training": True})
    for name in ("user_arguments_dict", "arguments_dict", "argument_names", "tensor_arguments_dict",
                 "tensor_arguments_names", "nested_tensor_argument_names"):
        assert getattr(first, name) is not getattr(second, name), name
    assert differences(second, slow_spec(layer, (x, y), {"training": True})) == []
    assert second.arguments_dict["padding"] is padding
    third = CallSpec._fast_bound(bindings, layer, (x,), {})
    assert list(third.arguments_dict) == ["a", "b", "padding", "training"]
    assert third.arguments_dict["b"] is None and third.arguments_dict["training"] is None


# -- built-in layers through the extension ----------------------------------------------


def built_twins(make: Callable[[], Any], *args: Any) -> tuple[Any, Any]:
    """Two identically built layers with the same weights; the second kill-switched."""
    layers = []
    for _ in range(2):
        keras.utils.set_random_seed(5)
        layer = make()
        layer(*args)  # build
        layers.append(layer)
    layers[1].set_weights(layers[0].get_weights())
    disable_fast_path(layers[1])
    return layers[0], layers[1]


BUILTIN_CALLS = {
    "MultiHeadAttention(q, v)": (lambda: attention_layer(dropout=0.5), "tt", {}),
    "MultiHeadAttention(q, v, training=True)": (lambda: attention_layer(dropout=0.5), "tt", T),
    "MultiHeadAttention(q, v, training=False)": (lambda: attention_layer(dropout=0.5), "tt", F),
    "MultiHeadAttention(q, v, k, training=True)": (lambda: attention_layer(), "ttt", T),
    "Dropout(x, training=True)": (lambda: keras.layers.Dropout(0.5, seed=3), "t", T),
    "BatchNormalization(x, training=True)": (lambda: keras.layers.BatchNormalization(), "t", T),
    "BatchNormalization(x, training=False)": (lambda: keras.layers.BatchNormalization(), "t", F),
    "Dense(x, training=True)": (lambda: keras.layers.Dense(2), "t", T),
    "LayerNormalization(x, training=False)": (lambda: keras.layers.LayerNormalization(), "t", F),
}


@needs_extension
@pytest.mark.parametrize("mode", ["eager", "symbolic"])
@pytest.mark.parametrize("name", list(BUILTIN_CALLS))
def test_builtin_layers_bound_calls(name: str, mode: str) -> None:
    make, kinds, kwargs = BUILTIN_CALLS[name]
    args = tuple(tensor(1.0 + i, (2, 4, 3)) if mode == "eager" else keras.Input((4, 3)) for i in range(len(kinds)))
    fast_layer, slow_layer = built_twins(make, *(tensor(1.0, (2, 4, 3)) for _ in kinds))
    keras.utils.set_random_seed(9)
    with recording() as on:
        fast_out = fast_layer(*args, **dict(kwargs))
    keras.utils.set_random_seed(9)
    with recording() as off:
        slow_out = slow_layer(*args, **dict(kwargs))
    assert on.paths[0] == "bound", (name, on.paths)
    assert set(off.paths) == {"slow"}, (name, off.paths)
    assert differences(on.specs[0], off.specs[0]) == [], name
    assert same_kwargs(on.built[0].kwargs_after, off.built[0].kwargs_after), name
    values = mode == "eager"
    assert comparable(fast_out, values) == comparable(slow_out, values), name
    if values:
        # The layer's state after the call (BatchNormalization's moving statistics, seed states).
        for a, b in zip(fast_layer.get_weights(), slow_layer.get_weights(), strict=True):
            assert np.array_equal(a, b), name


def test_multi_head_attention_bindings() -> None:
    mha = keras.layers.MultiHeadAttention(2, 4)
    assert mha._call_spec_fast_plan is None  # `value` is required: mha(q) is not a fast call
    if HAS_EXTENSION:
        bindings = mha._call_spec_fast_bindings
        assert mha._call_spec_fast_path is True
        assert bindings is not None and bindings.argument_names[:2] == ("query", "value")
        assert CallSpec._fast_bound(bindings, mha, (tensor(1.0),), {}) is None  # value is missing
    else:
        assert mha._call_spec_fast_path is False
