"""Field matrix: a catalogue of call signatures, fast constructor vs slow, on the installed Keras."""

from __future__ import annotations

from typing import Any

import keras
import pytest

from tests.equivalence.helpers import (
    CallSpec,
    layer_from_source,
    recording,
    slow_spec,
    symbolic,
    tensor,
    variant,
)
from tests.support.equivalence import differences


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


#: Defaults the CallSpec variants classify differently (KERAS_FACTS.md): V1 counts an
#: empty nested default as a tensor argument (`all()` of nothing) and, like V2, a
#: nested default of Nones as a plain one; from V3 on, tensors-or-None nesting counts
#: as tensors. A spec listed here moves to the other list for that variant.
VARIANT_ELIGIBILITY = {
    "V1": {"inputs, padding=[]": False, "inputs, empty=()": False, "inputs, pair=(None, None)": True},
    "V2": {"inputs, pair=(None, None)": True},
}


def expected_eligible(spec: str, listed: bool) -> bool:
    return VARIANT_ELIGIBILITY.get(variant(), {}).get(spec, listed)


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
    layer = layer_from_source(spec, defaults())
    assert layer._call_spec_fast_path is True
    slow = slow_spec(layer, (x,), {})
    fast = CallSpec._fast(layer._call_spec_fast_plan, x)
    assert differences(fast, slow) == []
    with recording() as recorder:
        layer(x)
    assert len(recorder.fast) == 1 and recorder.slow == []
    assert differences(recorder.fast[0], slow) == []


def check_ineligible(spec: str, x: Any) -> None:
    layer = layer_from_source(spec, defaults())
    assert layer._call_spec_fast_path is False
    with recording() as recorder:
        try:
            layer(x)
        except Exception:  # noqa: BLE001
            # The slow path's own error: a required argument, an unclassifiable default, or
            # (3.4-3.6) a nested default holding None that the build step then trips over.
            pass
    assert recorder.fast == []
    assert len(recorder.slow) >= 1


def test_builtin_layers_are_eligible() -> None:
    for layer in (keras.layers.Dense(2), keras.layers.Dropout(0.1), keras.layers.LayerNormalization(),
                  keras.layers.BatchNormalization(), keras.layers.Embedding(5, 2), keras.layers.Activation("relu")):
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
