"""What `torch-tree-leaf-shortcut` makes of torch tree modules shaped like Keras's, how the patched
module behaves beside upstream's (both run by tests/unit/test_patch_cases.py), and the breaks of
its inserted code the equivalence suite must catch."""

from __future__ import annotations

import textwrap
import types
from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Case, Mutant, Outcome, Sources, piece_text, run_module
from codemods.torch_tree_leaf_shortcut import PATCH

ANCHOR = "children, treedef = torch_tree.tree_flatten(structure, ...)"
SHORTCUT = piece_text(__file__, "leaf_shortcut", " " * 8)
MARK = SHORTCUT.splitlines(True)[0]  # the piece's first line: forkgen's marker
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
#: master after keras#23111 (no release): `id()` in the lambda, after `structure_id = id(structure)`.
MASTER_BEFORE = BEFORE.replace(FIRST, "        structure_id = id(structure)\n" + FIRST).replace(
    "is_leaf=lambda x: x is not structure,", "is_leaf=lambda x: id(x) != structure_id,"
)
MASTER_AFTER = MASTER_BEFORE.replace("        structure_id = id(structure)\n", SHORTCUT + "        structure_id = id(structure)\n")
#: keras-nightly's shape (#23201 as merged): a helper returns a leaf with `changed=False`.
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
#: The form the PR first proposed: the short-cut heads _dict_to_ordered_dict itself.
FIRST_FORM = BEFORE.replace(
    "def _dict_to_ordered_dict(structure):\n",
    "def _dict_to_ordered_dict(structure):\n    if _tree_is_leaf(structure):\n        return structure\n\n",
)
#: The same nested shape in another function (3.15.1's `traverse` has one) stays as it is.
OTHER = BEFORE.replace("def _dict_to_ordered_dict(structure):", "def traverse(structure):", 1)
_TAIL = BEFORE.split("\n\n\n", 1)[1]
LAMBDA = "is_leaf=lambda x: x is not structure,"
FLATTEN_DRIFT = "found 0"  # the flatten, or traverse_children's shape, not found

CASES = (
    Case("inserts the short-cut above the flatten", BEFORE, AFTER,
         detail="return a leaf before traverse_children's tree_flatten", anchors=((ANCHOR, 14),)),
    Case("master's shape, with id()", MASTER_BEFORE, MASTER_AFTER, anchors=((ANCHOR, 15),)),
    Case("traverse and other functions are not touched", OTHER + "\n\n" + _TAIL,
         OTHER + "\n\n" + AFTER.split("\n\n\n", 1)[1]),
    Case("keras-nightly's shape", NIGHTLY, upstream=True,
         detail="_dict_to_ordered_dict_with_changed returns a leaf as it is (keras-nightly's shape)",
         anchors=(("def _dict_to_ordered_dict", 7),)),
    Case("the PR's first form", FIRST_FORM, upstream=True,
         detail="_dict_to_ordered_dict returns a leaf first (keras#23201's first form)"),
    Case("no function", BEFORE.replace("def _dict_to_ordered_dict(", "def _dict_to_sorted(", 1),
         drift=":1: anchor '_dict_to_ordered_dict.traverse_children': expected exactly one def _dict_to_ordered_dict; found 0"),
    Case("another signature", BEFORE.replace("_dict_to_ordered_dict(structure):", "_dict_to_ordered_dict(structure, top=True):", 1),
         drift="anchor 'def _dict_to_ordered_dict(structure)': expected exactly one `def _dict_to_ordered_dict(structure)` "
         "at module level; found 0"),
    Case("no traverse_children", BEFORE.replace("    def traverse_children():", "    def visit_children():"),
         drift=":7: anchor '_dict_to_ordered_dict.traverse_children': expected exactly one def traverse_children; found 0"),
    Case("two traverse_children", BEFORE.replace(
        "    ret = func(structure)\n", "    def traverse_children():\n        pass\n\n    ret = func(structure)\n"),
         drift=":7: anchor '_dict_to_ordered_dict.traverse_children': expected exactly one def traverse_children; found 2"),
    Case("another lambda", BEFORE.replace(LAMBDA, "is_leaf=lambda x: x is structure,"),
         drift=f":13: anchor '{ANCHOR}': expected exactly one `{ANCHOR}` in _dict_to_ordered_dict.traverse_children; found 0"),
    Case("the id lambda alone", BEFORE.replace(LAMBDA, "is_leaf=lambda x: id(x) != structure_id,"),
         drift="anchor 'traverse_children: the flatten (lambda x: x is not structure) then `if treedef.num_nodes == 1 and "
         "treedef.num_leaves == 1: return structure`': expected exactly one"),
    Case("a statement before the flatten", BEFORE.replace(FIRST, "        structure = list(structure)\n" + FIRST),
         drift="anchor 'traverse_children: the flatten"),
    Case("another single-leaf test", BEFORE.replace("treedef.num_leaves == 1", "treedef.num_leaves == 0"),
         drift="anchor 'traverse_children: the flatten"),
    Case("an unmarked short-cut", BEFORE.replace(FIRST, SHORTCUT.replace(MARK, "") + FIRST),
         drift=":14: anchor '_dict_to_ordered_dict.traverse_children: first statement': expected to edit, or edited by "
         "forkgen; found an edited form without forkgen's marker"),
    Case("another _tree_is_leaf", BEFORE.replace("not in torch_tree.SUPPORTED_NODES", "in torch_tree.LEAF_TYPES"),
         drift=":1: anchor 'def _tree_is_leaf': expected exactly one `def _tree_is_leaf` at module level; found 0"),
    Case("no _tree_is_leaf", BEFORE.replace("def _tree_is_leaf(", "def _is_leaf(", 1),
         drift="anchor '_tree_is_leaf': expected bound where leaf_shortcut goes"),
)

MUTANTS = (
    Mutant("tuples are handed back unrebuilt, as nightly's rewrite does", "    if _tree_is_leaf(structure):\n",
           "    if _tree_is_leaf(structure) or type(structure) is tuple:\n"),
    Mutant("dict-like nodes (OrderedDict, TrackedDict) count as leaves", "    if _tree_is_leaf(structure):\n",
           "    if _tree_is_leaf(structure, is_leaf=lambda x: isinstance(x, dict)):\n"),
)


# -- the synthetic module: a whole torchtree_impl.py, for the behaviours below -----------------
#: A minimal `keras/src/tree/torchtree_impl.py` shaped like Keras 3.12.0-3.15.1's: `_tree_is_leaf`,
#: `_dict_to_ordered_dict` (a top-level dict sort, else a nested `traverse_children` that flattens
#: one level and returns a single-leaf structure as it is), `traverse`, `flatten` and
#: `pack_sequence_as` (written for these tests; only the anchored statements follow Keras). It
#: imports torch's pytree as Keras does; the behaviours run it (`run_module`) against the
#: stand-in pytree they are handed (the `torch_pytree` fixture, tests/support/torch_pytree.py),
#: which counts its flattens, so the upstream and patched modules can be executed side by side
#: offline.
TORCHTREE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/tree/torchtree_impl.py (the dict-ordering part)."""

    from collections import defaultdict

    from torch.utils import _pytree as torch_tree


    def _tree_is_leaf(tree, is_leaf=None):
        if is_leaf is not None and is_leaf(tree):
            return True
        return torch_tree._get_node_type(tree) not in torch_tree.SUPPORTED_NODES


    def _sorted_copy(x):
        keys = sorted(x.keys())
        if type(x) is dict:
            return {key: x[key] for key in keys}
        if type(x) is defaultdict:
            return defaultdict(x.default_factory, {key: x[key] for key in keys})
        return None


    def _dict_to_ordered_dict(structure):
        # Only a dict or defaultdict at the top is sorted; anything else is rebuilt one level
        # down, with each child ordered in turn.
        def traverse_children():
            children, treedef = torch_tree.tree_flatten(
                structure,
                is_leaf=lambda x: x is not structure,
            )
            if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                return structure
            else:
                return torch_tree.tree_unflatten(
                    [_dict_to_ordered_dict(child) for child in children],
                    treedef,
                )

        if type(structure) in (dict, defaultdict):
            return _sorted_copy(structure)
        return traverse_children()


    def traverse(func, structure, top_down=True):
        structure = _dict_to_ordered_dict(structure)

        def visit_children():
            if _tree_is_leaf(structure):
                return structure
            items, treedef = torch_tree.tree_flatten(
                structure, is_leaf=lambda x: x is not structure
            )
            return torch_tree.tree_unflatten(
                [traverse(func, item, top_down) for item in items], treedef
            )

        if top_down:
            ret = func(structure)
            return visit_children() if ret is None else ret
        rebuilt = visit_children()
        ret = func(rebuilt)
        return rebuilt if ret is None else ret


    def flatten(structure):
        leaves, _ = torch_tree.tree_flatten(_dict_to_ordered_dict(structure))
        return leaves


    def pack_sequence_as(structure, flat_sequence):
        _, treespec = torch_tree.tree_flatten(_dict_to_ordered_dict(structure))
        return torch_tree.tree_unflatten(flat_sequence, treespec)
    '''
)

PATH = "keras/src/tree/torchtree_impl.py"

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too. The
#: synthetic files of the series' whole synthetic tree (tests/support/synthetic.py).
FILES: dict[str, str] = {
    "keras/src/tree/__init__.py": "",
    PATH: TORCHTREE_PY,
}


# -- behaviours: what the cases cannot say, the synthetic upstream and patched modules side by side

TORCHTREE = PATH


def since_and_files() -> None:
    assert PATCH.since == "3.12.0" and PATCH.files == (TORCHTREE,)



def the_synthetic_tree_file_takes_the_patch() -> None:
    sources = Sources(lambda p: FILES.get(p))
    first = PATCH.check(sources)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(sources)
    patched = sources.rendered()[TORCHTREE]
    assert patched.count("# forkgen: torch-tree-leaf-shortcut") == 1
    assert PATCH.check(Sources(lambda p: patched if p == TORCHTREE else None)).present


@cache
def _patched_module_text() -> str:
    sources = Sources(lambda p: FILES.get(p))
    PATCH.apply(sources)
    return sources.rendered()[TORCHTREE]


@cache
def _modules(torch_pytree: types.ModuleType) -> tuple[types.ModuleType, types.ModuleType]:
    """The synthetic module, upstream's and patched, on the stand-in pytree (built once per stand-in)."""
    stand_ins = {"torch.utils": types.SimpleNamespace(_pytree=torch_pytree.torch_tree)}
    return (run_module(TORCHTREE_PY, "torchtree_upstream", stand_ins),
            run_module(_patched_module_text(), "torchtree_patched", stand_ins))


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
def patched_orders_like_upstream(torch_pytree: types.ModuleType, structure: Any) -> None:
    UPSTREAM, PATCHED = _modules(torch_pytree)
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
def flattens(torch_tree: Any) -> Iterator[list[int]]:
    counted: list[int] = []
    start = torch_tree.flattens
    yield counted
    counted.append(torch_tree.flattens - start)


def a_leaf_is_returned_as_it_is_without_a_flatten(torch_pytree: types.ModuleType) -> None:
    UPSTREAM, PATCHED = _modules(torch_pytree)
    torch_tree = torch_pytree.torch_tree
    # Each leaf: int, None, str, object, dict subclass.
    for leaf in [1, None, "s", object(), Leafy(b=1)]:
        with flattens(torch_tree) as upstream:
            assert UPSTREAM._dict_to_ordered_dict(leaf) is leaf
        with flattens(torch_tree) as patched:
            assert PATCHED._dict_to_ordered_dict(leaf) is leaf
        assert upstream == [1] and patched == [0], leaf


def nodes_still_take_the_round_trip_and_come_back_as_fresh_copies(torch_pytree: types.ModuleType) -> None:
    UPSTREAM, PATCHED = _modules(torch_pytree)
    inner = {"b": 1, "a": 2}
    structure = [inner, (3, Point(4, 5)), OrderedDict(z=1, y=2)]
    for module in (UPSTREAM, PATCHED):
        with flattens(torch_pytree.torch_tree) as counted:
            out = module._dict_to_ordered_dict(structure)
        assert out == structure and out is not structure and out[1] is not structure[1]
        # Only the top-level dict of each subtree is sorted; below a dict nothing is (3.15.1).
        assert list(out[0]) == ["a", "b"] and list(out[2]) == ["z", "y"]
        nested = module._dict_to_ordered_dict({"b": {"d": 1, "c": 2}, "a": 0})
        assert list(nested) == ["a", "b"] and list(nested["b"]) == ["d", "c"]
        # One flatten for each of the list, tuple, Point and OrderedDict; upstream also one for
        # each of the five leaves below them, the fork none.
        assert counted == [4 if module is PATCHED else 9]


def dicts_are_sorted_even_when_torch_does_not_register_defaultdict(torch_pytree: types.ModuleType) -> None:
    # Older torch releases register no defaultdict: it is a leaf for tree_flatten. 3.15.1 sorts
    # it all the same (its dict test comes first) and so does the fork: the short-cut sits after it.
    UPSTREAM, PATCHED = _modules(torch_pytree)
    torch_tree = torch_pytree.torch_tree
    removed = torch_tree.SUPPORTED_NODES.pop(defaultdict)
    try:
        value = defaultdict(int, b=1, a=2)
        for module in (UPSTREAM, PATCHED):
            out = module._dict_to_ordered_dict(value)
            assert type(out) is defaultdict and list(out) == ["a", "b"] and out is not value
    finally:
        torch_tree.SUPPORTED_NODES[defaultdict] = removed


def errors_are_the_same(torch_pytree: types.ModuleType) -> None:
    UPSTREAM, PATCHED = _modules(torch_pytree)
    for structure in ({"a": 1, Unsortable(): 2}, [{"a": 1, 3: 2}], (1, {2: 0, "b": 1})):
        expected = outcome(UPSTREAM, "_dict_to_ordered_dict", structure)
        assert expected[0] == "raised" and expected[1] is TypeError
        assert outcome(PATCHED, "_dict_to_ordered_dict", structure) == expected


BEHAVIOURS = (
    since_and_files,
    the_synthetic_tree_file_takes_the_patch,
    patched_orders_like_upstream,
    a_leaf_is_returned_as_it_is_without_a_flatten,
    nodes_still_take_the_round_trip_and_come_back_as_fresh_copies,
    dicts_are_sorted_even_when_torch_does_not_register_defaultdict,
    errors_are_the_same,
)
