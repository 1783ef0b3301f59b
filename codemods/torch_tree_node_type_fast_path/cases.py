"""What `torch-tree-node-type-fast-path` makes of torch tree modules shaped like Keras's, how the
patched `is_nested` answers beside upstream's (both run by tests/unit/test_patch_cases.py), and the
breaks of its inserted code the equivalence suite must catch."""

from __future__ import annotations

import textwrap
import types
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

from codemods.engine import Case, Mutant, Outcome, Sources, piece_text, replace_once, run_module
from codemods.torch_tree_node_type_fast_path import FLAG, PATCH

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
#: What goes right before `def is_nested` (the gate, at module level).
GATE = piece_text(__file__, "module_level").rstrip("\n")
BRANCH = piece_text(__file__, "is_nested_fast_path", "    ")
AFTER = HELPER + GATE + "\n\n\ndef is_nested(structure):\n" + BRANCH + IS_NESTED.split("\n", 1)[1] + TAIL
ANCHOR = "def is_nested(structure): return not _tree_is_leaf(structure)"
FOUND_0 = f"expected exactly one `{ANCHOR}` at module level; found 0"

CASES = (
    Case("the gate before is_nested, the branch on top of it", BEFORE, AFTER,
         detail="is_nested: type(x) in SUPPORTED_NODES for non-tuple types", anchors=((ANCHOR, 10),)),
    Case("another statement", HELPER + "def is_nested(structure):\n    return _tree_is_leaf(structure) is False\n",
         drift=FOUND_0),
    Case("another signature", HELPER + "def is_nested(x):\n    return not _tree_is_leaf(x)\n",
         drift=":10: anchor 'structure': expected bound where is_nested_fast_path goes (in is_nested or at module level); "
         "found not bound"),
    Case("two statements", HELPER + IS_NESTED.replace("    return", "    print()\n    return"), drift=FOUND_0),
    Case("another _tree_is_leaf", BEFORE.replace("not in torch_tree.SUPPORTED_NODES", "not in SUPPORTED"),
         drift="anchor 'def _tree_is_leaf': expected exactly one `def _tree_is_leaf` at module level; found 0"),
    Case("the flag already defined", BEFORE + "\n_FORKGEN_NODE_TYPE_IS_TYPE = True\n",
         drift=":17: anchor '_FORKGEN_NODE_TYPE_IS_TYPE': expected names free for module_level (forkgen's helper); "
         "found already bound"),
    Case("no is_nested", HELPER + "def other(structure):\n    return 1\n",
         drift=":1: anchor 'is_nested': expected exactly one def is_nested; found 0"),
    Case("a marked branch without its gate", HELPER + "def is_nested(structure):\n" + BRANCH + IS_NESTED.split("\n", 1)[1],
         drift=":10: anchor 'torch-tree-node-type-fast-path': expected all pieces present or none; found is_nested: "
         "first statement forkgen's, def is_nested(___): ___ missing"),
)

MUTANTS = (
    Mutant("the node type read from __class__ (a mock's or proxy's claim)", "        node_type = type(structure)\n",
           "        node_type = structure.__class__\n"),
    Mutant("namedtuples and tuple subclasses take the fast path too", "        if not issubclass(node_type, tuple):\n",
           "        if True:\n"),
)


# -- the synthetic module: a whole torchtree_impl.py, for the behaviours below and ----------------
# -- tests/unit/test_patches_together.py
#: A minimal `keras/src/tree/torchtree_impl.py` shaped like Keras 3.12.0-3.15.1's (only the
#: anchored statements follow Keras): the anchors of `torch-tree-leaf-shortcut` too (the same
#: module as that patch's cases have, a copy: the patches do not require each other), and
#: `is_nested` at the end, so the series' synthetic tree (where this package comes after that one)
#: has the anchors of both patches in one file. It imports torch's pytree as Keras does; the
#: behaviours run it (`run_module`) against the stand-in pytree they are handed (the
#: `torch_pytree` fixture, tests/support/torch_pytree.py), whose `_get_node_type` is not torch's
#: function: there the patch's import-time gate is off.
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
) + "\n\n" + IS_NESTED

PATH = "keras/src/tree/torchtree_impl.py"
#: Only the module: the package markers come from the leaf short-cut's FILES (and
#: `keras/src/tree/__init__.py` from torch-trainer-batch-size's, which anchors on it).
FILES: dict[str, str] = {PATH: TORCHTREE_PY}


# -- behaviours: the patched `is_nested` answers like upstream's, the gate off on a stand-in ------
# (Its composition with torch-tree-leaf-shortcut, a patch this one neither requires nor tolerates,
# stays in tests/unit/test_patches_together.py.)

TORCHTREE = PATH
GATE_FUNCTION = "_forkgen_node_type_is_type"


def _applied(text: str) -> str:
    src = Sources({TORCHTREE: text}.get)
    assert PATCH.check(src).outcome is Outcome.APPLIED
    PATCH.apply(src)
    return src.rendered()[TORCHTREE]


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


def patched_is_nested_answers_like_upstream() -> None:
    for gate in (False, True):
        fake = _fake_torch_tree()
        stand_ins = {"torch.utils": types.SimpleNamespace(_pytree=fake)}
        upstream = run_module(BEFORE, "upstream_tree", stand_ins)
        patched = run_module(replace_once(_applied(BEFORE), f"{FLAG} = {GATE_FUNCTION}()", f"{FLAG} = False"),
                             "patched_tree", stand_ins)
        assert upstream.torch_tree is fake and patched.torch_tree is fake
        patched._FORKGEN_NODE_TYPE_IS_TYPE = gate
        answers = [(repr(s), patched.is_nested(s)) for s in SAMPLES]
        assert answers == [(repr(s), upstream.is_nested(s)) for s in SAMPLES], gate
        # The samples cover both answers, and a type registered later is seen at once.
        assert {a for _, a in answers} == {True, False}
        fake.SUPPORTED_NODES[set] = None
        assert patched.is_nested({1}) and upstream.is_nested({1})


def the_gate_is_off_on_the_synthetic_pytree(torch_pytree: types.ModuleType) -> None:
    # The series' synthetic torch tree is a pure-Python stand-in: its `_get_node_type` is no
    # torch function, so the fast path stays off and upstream's line answers.
    stand_ins = {"torch.utils": types.SimpleNamespace(_pytree=torch_pytree.torch_tree)}
    module = run_module(_applied(TORCHTREE_PY), "synthetic_patched_tree", stand_ins)
    assert getattr(module, FLAG) is False
    assert module.is_nested([1]) and not module.is_nested(1) and module.is_nested(Point(1, 2))


def the_synthetic_tree_file_takes_the_patch() -> None:
    assert FILES[PATH] == TORCHTREE_PY
    assert PATCH.check(Sources(FILES.get)).outcome is Outcome.APPLIED


BEHAVIOURS = (
    patched_is_nested_answers_like_upstream,
    the_gate_is_off_on_the_synthetic_pytree,
    the_synthetic_tree_file_takes_the_patch,
)
