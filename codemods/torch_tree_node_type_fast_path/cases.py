"""What `torch-tree-node-type-fast-path` makes of torch tree modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant

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
GATE = textwrap.dedent(
    """\
    # forkgen: torch-tree-node-type-fast-path (the gate, checked once at import)
    def _forkgen_node_type_is_type():
        # True when torch's `_get_node_type` is the one forkgen read (torch 2.13.0's): `type(x)`
        # unless `is_namedtuple_class(type(x))`, which holds only for subclasses of tuple. Any
        # other torch (or a wrapped, replaced or unreadable function) turns the fast path off.
        import hashlib
        import inspect
        import types

        namespace = vars(torch_tree)
        if any(name in namespace for name in ("type", "isinstance", "issubclass", "tuple")):
            return False
        expected = (
            ("_get_node_type", "8b85dd5e2720a696372934ad6ac503977d6ce7ddb851cf1ed7d4e3f006a49db5"),
            ("is_namedtuple_class", "963b6fb69615df3ad4fe10f4d3dfe3585013fe1cba3530d86d4d6295e8855c2b"),
        )
        for name, digest in expected:
            function = namespace.get(name)
            if (
                type(function) is not types.FunctionType
                or function.__globals__ is not namespace
                or hasattr(function, "__wrapped__")
            ):
                return False
            try:
                source = inspect.getsource(function)
            except Exception:
                return False
            if hashlib.sha256(source.encode("utf-8")).hexdigest() != digest:
                return False
        return True


    _FORKGEN_NODE_TYPE_IS_TYPE = _forkgen_node_type_is_type()
    """
).rstrip("\n")
BRANCH = (
    "    # forkgen: torch-tree-node-type-fast-path (a type that is not a tuple's is its own node type)\n"
    "    if _FORKGEN_NODE_TYPE_IS_TYPE:\n"
    "        node_type = type(structure)\n"
    "        if not issubclass(node_type, tuple):\n"
    "            return node_type in torch_tree.SUPPORTED_NODES\n"
)
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
