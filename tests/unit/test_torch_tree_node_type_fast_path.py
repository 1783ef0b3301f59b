"""Patch torch-tree-node-type-fast-path (ours): what its cases (codemods/torch_tree_node_type_fast_path/
cases.py) cannot say: with torch-tree-leaf-shortcut in either order, and the patched `is_nested`
executed beside upstream's."""

from __future__ import annotations

import types
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import pytest

from codemods.engine import Outcome, Sources
from codemods.torch_tree_leaf_shortcut import PATCH as LEAF_SHORTCUT
from codemods.torch_tree_node_type_fast_path import FLAG, PATCH
from codemods.torch_tree_node_type_fast_path import cases as synthetic
from codemods.torch_tree_node_type_fast_path.cases import BEFORE
from tests.support.synthetic import load_module

TORCHTREE = "keras/src/tree/torchtree_impl.py"
GATE = "_forkgen_node_type_is_type"


def sources(text: str) -> Sources:
    return Sources({TORCHTREE: text}.get)


def applied(text: str, *patches: Any) -> str:
    src = sources(text)
    for patch in patches or (PATCH,):
        assert patch.check(src).outcome is Outcome.APPLIED
        patch.apply(src)
    return src.rendered()[TORCHTREE]


def test_composes_with_the_leaf_shortcut_in_either_order() -> None:
    text = synthetic.TORCHTREE_PY
    ours_last = applied(text, LEAF_SHORTCUT, PATCH)
    ours_first = applied(text, PATCH, LEAF_SHORTCUT)
    assert ours_last == ours_first
    for patch in (PATCH, LEAF_SHORTCUT):
        assert patch.check(sources(ours_last)).present
    assert "# forkgen: torch-tree-leaf-shortcut" in ours_last and "# forkgen: torch-tree-node-type-fast-path" in ours_last


class Meta(type):
    def __subclasscheck__(cls, other: type) -> bool:
        return True

    def __instancecheck__(cls, other: object) -> bool:
        return True


class Odd(metaclass=Meta):
    pass


class Liar:
    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return tuple


Point = namedtuple("Point", "x y")


class Pair(tuple):  # a tuple subclass that is no namedtuple
    pass


SAMPLES: list[Any] = [
    1, 2.5, None, "s", b"b", [1], [], (1, 2), (), {"a": 1}, OrderedDict(a=1), defaultdict(list), Point(1, 2),
    Pair((1,)), {1, 2}, Odd(), Odd, Liar(), object(), type, tuple, list,
]


def _fake_torch_tree() -> types.SimpleNamespace:
    """A torch-like `_pytree`: `_get_node_type` as torch 2.13.0 computes it (namedtuples map to
    `namedtuple`), a few registered node types."""
    def is_namedtuple_class(cls: type) -> bool:
        return isinstance(cls, type) and issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)

    def _get_node_type(tree: Any) -> Any:
        return namedtuple if is_namedtuple_class(type(tree)) else type(tree)

    nodes = {list: None, tuple: None, dict: None, OrderedDict: None, defaultdict: None, namedtuple: None}
    return types.SimpleNamespace(_get_node_type=_get_node_type, SUPPORTED_NODES=nodes)


@pytest.mark.parametrize("gate", [False, True])
def test_patched_is_nested_answers_like_upstream(gate: bool) -> None:
    fake = _fake_torch_tree()
    upstream = load_module(BEFORE.replace("from torch.utils import _pytree as torch_tree\n", ""), "upstream_tree")
    patched = load_module(
        applied(BEFORE).replace("from torch.utils import _pytree as torch_tree\n", "").replace(
            f"{FLAG} = {GATE}()", f"{FLAG} = False"
        ),
        "patched_tree",
    )
    upstream.torch_tree = patched.torch_tree = fake
    patched._FORKGEN_NODE_TYPE_IS_TYPE = gate
    answers = [(repr(s), patched.is_nested(s)) for s in SAMPLES]
    assert answers == [(repr(s), upstream.is_nested(s)) for s in SAMPLES]
    # The samples cover both answers, and a type registered later is seen at once.
    assert {a for _, a in answers} == {True, False}
    fake.SUPPORTED_NODES[set] = None
    assert patched.is_nested({1}) and upstream.is_nested({1})


def test_the_gate_is_off_on_the_synthetic_pytree() -> None:
    # The series' synthetic torch tree is a pure-Python stand-in: its `_get_node_type` is no
    # torch function, so the fast path stays off and upstream's line answers.
    module = load_module(applied(synthetic.TORCHTREE_PY), "synthetic_patched_tree")
    assert getattr(module, FLAG) is False
    assert module.is_nested([1]) and not module.is_nested(1) and module.is_nested(Point(1, 2))


def test_the_synthetic_tree_file_takes_the_patch() -> None:
    assert synthetic.FILES[synthetic.PATH] == synthetic.TORCHTREE_PY
    assert PATCH.check(Sources(synthetic.FILES.get)).outcome is Outcome.APPLIED
