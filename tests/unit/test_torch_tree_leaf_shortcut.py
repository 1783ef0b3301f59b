"""Patch torch-tree-leaf-shortcut (keras-team/keras#23201's leaf short-cut) on synthetic torch
tree modules."""

from __future__ import annotations

import textwrap
from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import libcst.matchers as m
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.patchlib import AnchorDrift, Outcome, Sources
from codemods.torch_tree_leaf_shortcut import PATCH, AddLeafShortcutCommand
from codemods.torch_tree_leaf_shortcut.add_leaf_shortcut import LEAF_SHORTCUT, pieces
from tests.support import synthetic_torch_tree_leaf_shortcut as synthetic
from tests.support.synthetic import assert_applies_once, load_module

TORCHTREE = "keras/src/tree/torchtree_impl.py"
MARK = "        # forkgen: torch-tree-leaf-shortcut (keras#23201: a leaf would flatten to itself alone)\n"
SHORTCUT = MARK + "        if _tree_is_leaf(structure):\n            return structure\n"

HELPER = textwrap.dedent(
    """\
    def _tree_is_leaf(tree, is_leaf=None):
        if is_leaf is not None and is_leaf(tree):
            return True
        return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES


    """
)
BEFORE = HELPER + textwrap.dedent(
    """\
    def _dict_to_ordered_dict(structure):
        def func(x):
            if type(x) is dict:
                return {k: x[k] for k in sorted(x)}
            return None

        def traverse_children():
            children, treedef = torch_tree.tree_flatten(
                structure,
                is_leaf=lambda x: x is not structure,
            )
            if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                return structure
            else:
                return torch_tree.tree_unflatten(
                    [_dict_to_ordered_dict(c) for c in children], treedef
                )

        ret = func(structure)
        if ret is None:
            return traverse_children()
        return ret
    """
)
FIRST = "        children, treedef = torch_tree.tree_flatten(\n"
AFTER = BEFORE.replace(FIRST, SHORTCUT + FIRST)
# master after keras#23111 (no release): `id()` in the lambda, after `structure_id = id(structure)`.
MASTER_BEFORE = BEFORE.replace(FIRST, "        structure_id = id(structure)\n" + FIRST).replace(
    "is_leaf=lambda x: x is not structure,", "is_leaf=lambda x: id(x) != structure_id,"
)
MASTER_AFTER = MASTER_BEFORE.replace("        structure_id = id(structure)\n", SHORTCUT + "        structure_id = id(structure)\n")
# keras-nightly's shape (#23201 as merged): a helper returns a leaf with `changed=False`.
NIGHTLY = HELPER + textwrap.dedent(
    """\
    def _dict_to_ordered_dict(structure):
        return _dict_to_ordered_dict_with_changed(structure)[0]


    def _dict_to_ordered_dict_with_changed(structure):
        if type(structure) is dict:
            return {k: structure[k] for k in sorted(structure)}, True
        node_def = torch_tree.SUPPORTED_NODES.get(torch_tree._get_node_type(structure))
        if node_def is None:
            return structure, False
        return structure, False
    """
)
# The form the PR first proposed: the short-cut heads _dict_to_ordered_dict itself.
FIRST_FORM = BEFORE.replace(
    "def _dict_to_ordered_dict(structure):\n",
    "def _dict_to_ordered_dict(structure):\n    if _tree_is_leaf(structure):\n        return structure\n\n",
)


def check(source: str) -> Any:
    return PATCH.check(Sources(lambda p: source if p == TORCHTREE else None))


class TestAddLeafShortcut(CodemodTest):
    TRANSFORM = AddLeafShortcutCommand

    def test_inserts_the_shortcut_above_the_flatten(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_master_shape_with_id(self) -> None:
        self.assertCodemod(MASTER_BEFORE, MASTER_AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)
        self.assertCodemod(MASTER_AFTER, MASTER_AFTER, expected_skip=True)

    def test_noop_on_the_upstream_shapes(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY, expected_skip=True)
        self.assertCodemod(FIRST_FORM, FIRST_FORM, expected_skip=True)

    def test_traverse_and_other_functions_are_not_touched(self) -> None:
        # The same nested shape in another function (3.15.1's `traverse` has one) stays as it is.
        other = BEFORE.replace("def _dict_to_ordered_dict(structure):", "def traverse(structure):", 1)
        source = other + "\n\n" + BEFORE.split("\n\n\n", 1)[1]
        self.assertCodemod(source, other + "\n\n" + AFTER.split("\n\n\n", 1)[1])


def test_outcomes_and_anchor_lines() -> None:
    before = check(BEFORE)
    assert before.outcome is Outcome.APPLIED and not before.present
    assert [(a.name, a.line) for a in before.anchors] == [
        ("children, treedef = torch_tree.tree_flatten(structure, ...)", 14)
    ]
    assert check(MASTER_BEFORE).anchors[0].line == 15
    for source in (AFTER, MASTER_AFTER):
        present = check(source)
        assert present.outcome is Outcome.APPLIED and present.present
    # forkgen's piece is known by its marker, whatever its test (as in a mutant's build).
    mutated = AFTER.replace("if _tree_is_leaf(structure):", "if _tree_is_leaf(structure) or type(structure) is tuple:")
    assert check(mutated).present
    nightly = check(NIGHTLY)
    assert nightly.outcome is Outcome.UPSTREAM and "_dict_to_ordered_dict_with_changed" in nightly.detail
    assert nightly.anchors[0].line == 7
    first = check(FIRST_FORM)
    assert first.outcome is Outcome.UPSTREAM and "first form" in first.detail


def test_apply_then_check_again_is_present_and_byte_identical() -> None:
    assert_applies_once(PATCH, TORCHTREE, BEFORE, AFTER)


def test_the_template_is_one_marked_shortcut() -> None:
    (piece,) = pieces()
    assert "# forkgen: torch-tree-leaf-shortcut" in MARK and "_tree_is_leaf(structure)" in SHORTCUT
    assert PATCH.since == "3.12.0" and PATCH.files == (TORCHTREE,)
    assert piece.leading_lines[-1].comment is not None
    assert piece.leading_lines[-1].comment.value == MARK.strip()
    assert m.matches(piece, LEAF_SHORTCUT)


@pytest.mark.parametrize(
    ("source", "anchor", "found", "line"),
    [
        (BEFORE.replace("def _dict_to_ordered_dict(", "def _dict_to_sorted(", 1),
         "_dict_to_ordered_dict", "found 0", 1),
        (BEFORE.replace("_dict_to_ordered_dict(structure):", "_dict_to_ordered_dict(structure, top=True):", 1),
         "def _dict_to_ordered_dict", "another signature", 7),
        (BEFORE.replace("    def traverse_children():", "    def visit_children():"),
         "def traverse_children", "found neither", 7),
        (BEFORE.replace("    ret = func(structure)\n",
                        "    def traverse_children():\n        pass\n\n    ret = func(structure)\n"),
         "def traverse_children", "found 2", 7),
        (BEFORE.replace("is_leaf=lambda x: x is not structure,", "is_leaf=lambda x: x is structure,"),
         "children, treedef = torch_tree.tree_flatten(structure, ...)", "found another statement", 14),
        (BEFORE.replace("is_leaf=lambda x: x is not structure,", "is_leaf=lambda x: id(x) != structure_id,"),
         "children, treedef = torch_tree.tree_flatten(structure, ...)", "`lambda x: x is not structure`", 14),
        (BEFORE.replace(FIRST, "        structure = list(structure)\n" + FIRST),
         "children, treedef = torch_tree.tree_flatten(structure, ...)", "found another statement", 14),
        (BEFORE.replace("treedef.num_leaves == 1", "treedef.num_leaves == 0"),
         "if treedef.num_nodes == 1 and treedef.num_leaves == 1:", "found another statement", 18),
        (BEFORE.replace(FIRST, SHORTCUT.replace(MARK, "") + FIRST),
         "if _tree_is_leaf(structure):", "forkgen's marker above it", 14),
        (BEFORE.replace("not in torch_tree.SUPPORTED_NODES", "in torch_tree.LEAF_TYPES"),
         "def _tree_is_leaf", "another body or signature", 1),
        (BEFORE.replace("def _tree_is_leaf(", "def _is_leaf(", 1), "_tree_is_leaf", "found 0", 1),
    ],
    ids=["no function", "signature", "no traverse_children", "two traverse_children", "lambda", "id lambda alone",
         "statement before the flatten", "single-leaf test", "unmarked shortcut", "helper body", "no helper"],
)
def test_drift(source: str, anchor: str, found: str, line: int) -> None:
    with pytest.raises(AnchorDrift) as caught:
        check(source)
    assert caught.value.anchor == anchor and found in str(caught.value)
    assert (caught.value.path, caught.value.line) == (TORCHTREE, line)


def test_a_tree_without_the_torch_tree_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == TORCHTREE and "no such file" in str(caught.value)


def test_the_synthetic_tree_file_takes_the_patch() -> None:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    first = PATCH.check(sources)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(sources)
    patched = sources.rendered()[TORCHTREE]
    assert patched.count("# forkgen: torch-tree-leaf-shortcut") == 1
    assert PATCH.check(Sources(lambda p: patched if p == TORCHTREE else None)).present


# -- behaviour: the synthetic upstream and patched modules, side by side -----------------------

def _patched_module_text() -> str:
    sources = Sources(lambda p: synthetic.FILES.get(p))
    PATCH.apply(sources)
    return sources.rendered()[TORCHTREE]


UPSTREAM = load_module(synthetic.TORCHTREE_PY, "torchtree_upstream")
PATCHED = load_module(_patched_module_text(), "torchtree_patched")
Point = namedtuple("Point", ["y", "x"])


class Leafy(dict):  # type: ignore[type-arg]
    """A dict subclass: a leaf for torch's pytree (not registered)."""


class Unsortable:
    """A key `sorted` rejects next to a str."""

    def __repr__(self) -> str:
        return "Unsortable()"


def describe(out: Any, inputs: dict[int, str]) -> Any:
    """`out` as comparable facts: node types, key order, and each object's identity relative to
    the input (the name of the input object it is, or "new")."""
    name = inputs.get(id(out), "new")
    if type(out) in (dict, defaultdict, OrderedDict):
        extra = (out.default_factory,) if type(out) is defaultdict else ()
        return (type(out), name, *extra, [(k, describe(v, inputs)) for k, v in out.items()])
    if type(out) in (list, tuple) or isinstance(out, Point):
        return (type(out), name, [describe(v, inputs) for v in out])
    return ("leaf", name)


def names(structure: Any) -> dict[int, str]:
    """A name for every object in `structure` (by id), its path from the root."""
    found: dict[int, str] = {}

    def walk(node: Any, path: str) -> None:
        found.setdefault(id(node), path)
        if isinstance(node, dict) and type(node) is not Leafy:
            for key, value in node.items():
                walk(value, f"{path}/{key!r}")
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(value, f"{path}/{index}")

    walk(structure, "")
    return found


def outcome(module: Any, function: str, structure: Any, *args: Any, func: Any = None) -> tuple[object, ...]:
    """What `module.<function>` gives for `structure`, as comparable facts (or its error)."""
    call = getattr(module, function)
    try:
        out = call(func, structure, *args) if func is not None else call(structure, *args)
    except Exception as error:
        return ("raised", type(error), str(error))
    return ("returned", describe(out, names(structure)))


def recurse(x: Any) -> None:
    return None


def list_to_tuple(x: Any) -> Any:
    return tuple(x) if isinstance(x, list) else None


def keep_dicts(x: Any) -> Any:
    return x if isinstance(x, dict) else None


leaves = st.one_of(
    st.integers(-3, 3), st.text(max_size=2), st.none(), st.floats(allow_nan=False),
    st.builds(object), st.builds(lambda d: Leafy(d), st.dictionaries(st.sampled_from("ab"), st.integers(0, 2))),
)
keys = st.sampled_from(["c", "a", "b", "d"])


def nodes(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=3),
        st.dictionaries(keys, children, max_size=3).map(lambda d: defaultdict(list, d)),
        st.dictionaries(keys, children, max_size=3).map(OrderedDict),
        st.tuples(children, children).map(lambda t: Point(*t)),
    )


structures = st.recursive(leaves, nodes, max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(structure=structures)
def test_patched_orders_like_upstream(structure: Any) -> None:
    for function in ("_dict_to_ordered_dict", "flatten"):
        assert outcome(PATCHED, function, structure) == outcome(UPSTREAM, function, structure)
    for func in (recurse, list_to_tuple, keep_dicts):
        for top_down in (True, False):
            assert outcome(PATCHED, "traverse", structure, top_down, func=func) == outcome(
                UPSTREAM, "traverse", structure, top_down, func=func
            )
    flat = UPSTREAM.flatten(structure)
    assert outcome(PATCHED, "pack_sequence_as", structure, flat) == outcome(
        UPSTREAM, "pack_sequence_as", structure, flat
    )


@contextmanager
def flattens() -> Iterator[list[int]]:
    counted: list[int] = []
    start = synthetic.torch_tree.flattens
    yield counted
    counted.append(synthetic.torch_tree.flattens - start)


@pytest.mark.parametrize("leaf", [1, None, "s", object(), Leafy(b=1)], ids=["int", "None", "str", "object", "dict subclass"])
def test_a_leaf_is_returned_as_it_is_without_a_flatten(leaf: Any) -> None:
    with flattens() as upstream:
        assert UPSTREAM._dict_to_ordered_dict(leaf) is leaf
    with flattens() as patched:
        assert PATCHED._dict_to_ordered_dict(leaf) is leaf
    assert upstream == [1] and patched == [0]


def test_nodes_still_take_the_round_trip_and_come_back_as_fresh_copies() -> None:
    inner = {"b": 1, "a": 2}
    structure = [inner, (3, Point(4, 5)), OrderedDict(z=1, y=2)]
    for module in (UPSTREAM, PATCHED):
        with flattens() as counted:
            out = module._dict_to_ordered_dict(structure)
        assert out == structure and out is not structure and out[1] is not structure[1]
        # Only the top-level dict of each subtree is sorted; below a dict nothing is (3.15.1).
        assert list(out[0]) == ["a", "b"] and list(out[2]) == ["z", "y"]
        nested = module._dict_to_ordered_dict({"b": {"d": 1, "c": 2}, "a": 0})
        assert list(nested) == ["a", "b"] and list(nested["b"]) == ["d", "c"]
        # One flatten for each of the list, tuple, Point and OrderedDict; upstream also one for
        # each of the five leaves below them, the fork none.
        assert counted == [4 if module is PATCHED else 9]


def test_dicts_are_sorted_even_when_torch_does_not_register_defaultdict() -> None:
    # Older torch releases register no defaultdict: it is a leaf for tree_flatten. 3.15.1 sorts
    # it all the same (its dict test comes first) and so does the fork: the short-cut sits after it.
    removed = synthetic.torch_tree.SUPPORTED_NODES.pop(defaultdict)
    try:
        value = defaultdict(int, b=1, a=2)
        for module in (UPSTREAM, PATCHED):
            out = module._dict_to_ordered_dict(value)
            assert type(out) is defaultdict and list(out) == ["a", "b"] and out is not value
    finally:
        synthetic.torch_tree.SUPPORTED_NODES[defaultdict] = removed


def test_errors_are_the_same() -> None:
    for structure in ({"a": 1, Unsortable(): 2}, [{"a": 1, 3: 2}], (1, {2: 0, "b": 1})):
        expected = outcome(UPSTREAM, "_dict_to_ordered_dict", structure)
        assert expected[0] == "raised" and expected[1] is TypeError
        assert outcome(PATCHED, "_dict_to_ordered_dict", structure) == expected
