"""Patch torch-tree-node-type-fast-path on the installed fork (torch backend only).

The torch tree's `is_nested(x)` (keras/src/tree/torchtree_impl.py) is upstream's `not
_tree_is_leaf(x)`, i.e. whether torch's `_get_node_type(x)` is a registered pytree node type;
the patch answers `type(x) in SUPPORTED_NODES` for non-tuple types when its import-time gate
holds. The oracle is the release under test: upstream's own `is_nested`, compiled from the
unpatched sources into the installed module (`tests/equivalence/upstream.py`). The patched
function (and `keras.tree.is_nested`, against `keras.tree.is_nested` with upstream's in place)
must give what it gives, for every object: tensors, containers, namedtuples and tuple subclasses,
metaclasses that override the subclass checks, objects whose `__class__` lies, mocks, types
registered at run time; with the same errors.
"""

from __future__ import annotations

import functools
import inspect
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.equivalence import pytree_proof, upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-tree-node-type-fast-path"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-tree-node-type-fast-path"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the torch tree is used on the torch backend only"),
]
ACTIVE = APPLIED and keras.backend.backend() == "torch"

if ACTIVE:
    import torch
    from torch.utils import _pytree as torch_tree

    #: The torch tree module the patch rewrote (keras/src/tree/torchtree_impl.py).
    impl = upstream.patched_module(NAME, "torchtree_impl.py")


@functools.cache
def upstream_is_nested() -> Any:
    """Upstream's `is_nested` of the release under test (its `_tree_is_leaf` is the module's)."""
    return upstream.original(impl.is_nested)


def reference(structure: Any) -> bool:
    """Upstream's answer for `structure`."""
    return upstream_is_nested()(structure)  # type: ignore[no-any-return]


def keras_tree_upstream(structure: Any) -> bool:
    """`keras.tree.is_nested` with upstream's `is_nested` in the module (the patch off)."""
    with upstream.upstream(impl, "is_nested"):
        return keras.tree.is_nested(structure)  # type: ignore[no-any-return]


def outcome(function: Any, structure: Any) -> tuple[str, Any]:
    try:
        return "value", function(structure)
    except Exception as error:  # noqa: BLE001 - the same error is part of the behaviour
        return "error", (type(error), str(error))


Point = namedtuple("Point", "x y")


class Pair(tuple):  # type: ignore[type-arg]
    """A tuple subclass that is no namedtuple."""


class Fields(tuple):  # type: ignore[type-arg]
    """A tuple subclass with `_fields` but no `_make`/`_asdict`: not a namedtuple for torch."""

    _fields = ("a",)


class Everything(type):
    """A metaclass that claims every class and instance, tuple included."""

    def __subclasscheck__(cls, other: type) -> bool:
        return True

    def __instancecheck__(cls, other: object) -> bool:
        return True


class Claims(metaclass=Everything):
    pass


class Unhashable(type):
    def __hash__(cls) -> int:
        raise TypeError("this type cannot be hashed")


class Odd(metaclass=Unhashable):
    pass


class ClaimsList:
    """An object whose `__class__` says list (its type is no pytree node)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return list


class TupleClaimsDict(tuple):  # type: ignore[type-arg]
    """A tuple subclass whose `__class__` says dict."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return dict


class Registered:
    """Registered as a pytree node during a test, as `register_tree_node_class` does."""


def fixed_objects() -> list[Any]:
    tensor = torch.ones(2)
    return [
        tensor, torch.nn.Parameter(torch.zeros(1)), torch.Size([2, 3]), torch.max(torch.ones(2, 2), 0),
        np.ones(2), np.float32(1), 1, 2.5, True, None, "s", b"b", [tensor], [], (tensor,), (), {"a": 1},
        OrderedDict(a=1), defaultdict(list), deque([1]), {1}, frozenset(), Point(1, 2), Pair((1,)), Fields((1,)),
        Claims(), Claims, ClaimsList(), TupleClaimsDict((1,)), mock.Mock(spec=list), mock.Mock(spec=tuple),
        mock.MagicMock(), object(), type, tuple, list, Point, keras.Variable(1.0), keras.KerasTensor((2,)),
        keras.layers.Dense(1), Odd(),
    ]


def test_the_patch_is_in() -> None:
    assert f"# forkgen: {NAME}" in inspect.getsource(impl.is_nested)
    assert f"# forkgen: {NAME}" not in upstream.upstream_source(impl)


def test_the_gate_is_on_exactly_when_torch_has_the_proven_node_type_function() -> None:
    # On iff the installed torch's `_get_node_type` and `is_namedtuple_class` are the sources the
    # proof read (their digests in the codemod, tests/equivalence/pytree_proof.py) and nothing in
    # `_pytree` shadows the builtins they call: the fast path is live on every torch that has them
    # (else the comparisons below would test upstream's line only), off on any other.
    proven = pytree_proof.has_proven_sources(torch_tree, "torch_tree_node_type_fast_path")
    shadowed = any(name in vars(torch_tree) for name in ("type", "isinstance", "issubclass", "tuple"))
    expected = proven and not shadowed
    assert impl._FORKGEN_NODE_TYPE_IS_TYPE is expected
    assert impl._forkgen_node_type_is_type() is expected


def test_where_the_gate_is_on_torch_computes_the_node_type_the_fast_path_assumes() -> None:
    # The fast path answers `type(x) in SUPPORTED_NODES` for every x whose type is no tuple's:
    # measured here, torch's own `_get_node_type` gives `type(x)` for each such object.
    if not impl._FORKGEN_NODE_TYPE_IS_TYPE:
        pytest.skip("the gate is off with this torch: upstream's line answers (the tests below compare it with itself)")
    objects = [x for x in fixed_objects() if not issubclass(type(x), tuple)]
    assert objects and all(torch_tree._get_node_type(x) is type(x) for x in objects)


def test_fixed_objects_answer_like_upstream() -> None:
    objects = fixed_objects()
    answers = [outcome(impl.is_nested, x) for x in objects]
    assert answers == [outcome(reference, x) for x in objects]
    assert [outcome(keras.tree.is_nested, x) for x in objects] == [outcome(keras_tree_upstream, x) for x in objects]
    assert {a for a in answers if a[0] == "value"} == {("value", True), ("value", False)}
    assert ("error", (TypeError, "this type cannot be hashed")) in answers


def test_a_type_registered_later_is_nested_at_once() -> None:
    assert impl.is_nested(Registered()) is False
    torch_tree.register_pytree_node(Registered, lambda x: ([], None), lambda c, _: Registered())
    try:
        assert impl.is_nested(Registered()) is True is reference(Registered())
    finally:
        pytree_proof.deregister_pytree_node(torch_tree, Registered)
    assert impl.is_nested(Registered()) is False


@pytest.mark.parametrize("change", ["wrapped", "replaced", "shadowed"])
def test_the_gate_is_off_for_another_node_type_function(change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    original = torch_tree._get_node_type
    if change == "wrapped":
        monkeypatch.setattr(torch_tree, "_get_node_type", functools.wraps(original)(lambda tree: original(tree)))
    elif change == "replaced":
        monkeypatch.setattr(torch_tree, "_get_node_type", lambda tree: type(tree))
    else:
        monkeypatch.setattr(torch_tree, "issubclass", lambda cls, base: False, raising=False)
    assert impl._forkgen_node_type_is_type() is False


def _leaves() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.booleans(),
        st.builds(lambda n: torch.zeros(n), st.integers(0, 3)),
        st.builds(lambda n: np.zeros(n), st.integers(0, 3)),
        st.sampled_from([Claims(), ClaimsList(), mock.Mock(spec=dict), object(), Claims, Point, Odd()]),
    )


def _nodes(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3).map(Pair),
        st.lists(children, max_size=3).map(deque),
        st.builds(Point, children, children),
        st.builds(lambda x: TupleClaimsDict((x,)), children),
        st.dictionaries(st.text(max_size=2), children, max_size=3),
        st.dictionaries(st.text(max_size=2), children, max_size=3).map(OrderedDict),
        st.dictionaries(st.text(max_size=2), children, max_size=3).map(lambda d: defaultdict(list, d)),
    )


@given(st.recursive(_leaves(), _nodes, max_leaves=8))
def test_generated_objects_answer_like_upstream(structure: Any) -> None:
    assert outcome(impl.is_nested, structure) == outcome(reference, structure)
    assert outcome(keras.tree.is_nested, structure) == outcome(keras_tree_upstream, structure)
