"""Patch torch-tree-node-type-fast-path (ours) on synthetic torch tree modules, alone and with
torch-tree-leaf-shortcut in either order."""

from __future__ import annotations

import textwrap
import types
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import AnchorDrift, Outcome, Sources
from codemods.torch_tree_leaf_shortcut import PATCH as LEAF_SHORTCUT
from codemods.torch_tree_node_type_fast_path import PATCH, AddNodeTypeFastPathCommand
from codemods.torch_tree_node_type_fast_path.add_fast_path import FLAG, GATE, pieces
from tests.support import synthetic_torch_tree_node_type_fast_path as synthetic
from tests.support.synthetic import load_module

TORCHTREE = "keras/src/tree/torchtree_impl.py"
HELPER = textwrap.dedent(
    """\
    from torch.utils import _pytree as torch_tree


    def _tree_is_leaf(tree, is_leaf=None):
        if is_leaf is not None and is_leaf(tree):
            return True
        return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES


    """
)
IS_NESTED = "def is_nested(structure):\n    return not _tree_is_leaf(structure)\n"
TAIL = "\n\ndef traverse(func, structure):\n    return func(structure)\n"
BEFORE = HELPER + IS_NESTED + TAIL
BRANCH = (
    "    # forkgen: torch-tree-node-type-fast-path (a type that is not a tuple's is its own node type)\n"
    "    if _FORKGEN_NODE_TYPE_IS_TYPE:\n"
    "        node_type = type(structure)\n"
    "        if not issubclass(node_type, tuple):\n"
    "            return node_type in torch_tree.SUPPORTED_NODES\n"
)


def sources(text: str) -> Sources:
    return Sources({TORCHTREE: text}.get)


def applied(text: str, *patches: Any) -> str:
    src = sources(text)
    for patch in patches or (PATCH,):
        assert patch.check(src).outcome is Outcome.APPLIED
        patch.apply(src)
    return src.rendered()[TORCHTREE]


def test_inserts_the_gate_before_is_nested_and_the_branch_on_top_of_it() -> None:
    after = applied(BEFORE)
    gate = "# forkgen: torch-tree-node-type-fast-path (the gate, checked once at import)\n"
    assert after.startswith(HELPER + gate + f"def {GATE}():\n")
    assert f"\n\n\n{FLAG} = {GATE}()\n\n\ndef is_nested(structure):\n" in after
    assert after.endswith("def is_nested(structure):\n" + BRANCH + "    return not _tree_is_leaf(structure)\n" + TAIL)
    # Nothing else changed: without the inserted pieces, the file is upstream's, byte for byte.
    module = cst.parse_module(after)
    kept = [s for s in module.body if not (isinstance(s, cst.FunctionDef) and s.name.value == GATE)]
    kept = [s for s in kept if "_FORKGEN_NODE_TYPE_IS_TYPE = " not in module.code_for_node(s)]
    stripped = module.with_changes(body=kept).code.replace(BRANCH, "")
    assert stripped == BEFORE


def test_check_reports_the_anchor_line_then_present_and_a_rerun_is_a_noop() -> None:
    check = PATCH.check(sources(BEFORE))
    assert (check.outcome, check.present) == (Outcome.APPLIED, False)
    assert [(a.name, a.line) for a in check.anchors] == [
        ("def is_nested(structure): return not _tree_is_leaf(structure)", HELPER.count("\n") + 1)
    ]
    after = applied(BEFORE)
    again = PATCH.check(sources(after))
    assert (again.outcome, again.present) == (Outcome.APPLIED, True)
    command = AddNodeTypeFastPathCommand(CodemodContext(filename=TORCHTREE))
    with pytest.raises(SkipFile, match="in already"):
        command.transform_module_impl(cst.parse_module(after))


def test_the_template_pieces() -> None:
    gate, branch = pieces()
    assert isinstance(gate[0], cst.FunctionDef) and gate[0].name.value == GATE
    assert len(branch) == 1 and isinstance(branch[0], cst.If)


@pytest.mark.parametrize(
    ("source", "anchor", "found", "line"),
    [
        (HELPER + "def is_nested(structure):\n    return _tree_is_leaf(structure) is False\n", "def is_nested", "another statement", 11),
        (HELPER + "def is_nested(x):\n    return not _tree_is_leaf(x)\n", "def is_nested", "another signature", 10),
        (HELPER + IS_NESTED.replace("    return", "    print()\n    return"), "def is_nested", "2 statements", 11),
        (BEFORE.replace("not in torch_tree.SUPPORTED_NODES", "not in SUPPORTED"), "def _tree_is_leaf", "another body", 4),
        (BEFORE + f"\n{FLAG} = True\n", f"{GATE} / {FLAG}", "already defined", 10),
        (HELPER + "def other(structure):\n    return 1\n", "is_nested", "", 0),
    ],
)
def test_drift(source: str, anchor: str, found: str, line: int) -> None:
    with pytest.raises(AnchorDrift) as error:
        PATCH.check(sources(source))
    message = str(error.value)
    assert anchor in message and found in message
    if line:
        assert f"{TORCHTREE}:{line}" in message


def test_a_marked_branch_without_its_gate_is_drift() -> None:
    after = applied(BEFORE)
    module = cst.parse_module(after)
    without_gate = module.with_changes(
        body=[s for s in module.body if not (isinstance(s, cst.FunctionDef) and s.name.value == GATE)]
    ).code
    with pytest.raises(AnchorDrift, match="1 of its 2 statements"):
        PATCH.check(sources(without_gate))


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
