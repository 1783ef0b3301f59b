"""What `torch-tree-flat-fast-paths` makes of torch tree modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant
from codemods.torch_tree_leaf_shortcut import cases as leaf_shortcut

FLATTEN = """\
def flatten(structure):
    # Dicts are sorted first, for the order the other tree implementations give.
    structure = _dict_to_ordered_dict(structure)
    leaves, _ = torch_tree.tree_flatten(structure)
    return leaves
"""
MAP_STRUCTURE = """\
def map_structure(func, *structures, none_is_leaf=True):
    if not structures:
        raise ValueError("Must provide at least one structure")

    map_func = func
    if not none_is_leaf:

        def skip_none(*args):
            if args[0] is None:
                if any(arg is not None for arg in args):
                    raise ValueError(f"None against a value: {args}.")
                return None
            return func(*args)

        map_func = skip_none

    return torch_tree.tree_map(map_func, *structures)
"""
NODE_TYPE_GATE = "_FORKGEN_NODE_TYPE_IS_TYPE = False\n"
#: The import, `_tree_is_leaf` and `_dict_to_ordered_dict` as the leaf short-cut's cases have
#: them, the node-type gate's flag (torch-tree-node-type-fast-path comes first), `flatten`, `map_structure`.
BEFORE = (f"from torch.utils import _pytree as torch_tree\n\n\n{leaf_shortcut.BEFORE}\n\n{NODE_TYPE_GATE}\n\n"
          f"{FLATTEN}\n\n{MAP_STRUCTURE}")
#: What goes first in `flatten`.
FLATTEN_BRANCH = textwrap.indent(textwrap.dedent(
    """\
    # forkgen: torch-tree-flat-fast-paths (a flat list or tuple of leaves flattens to its items)
    if _FORKGEN_FLAT_FAST_PATHS and (type(structure) is list or type(structure) is tuple):
        nodes = torch_tree.SUPPORTED_NODES
        for item in structure:
            item_type = type(item)
            if issubclass(item_type, tuple) or item_type in nodes:
                break
        else:
            return list(structure)
    """
), "    ")
#: What goes first in `map_structure`.
MAP_BRANCH = textwrap.indent(textwrap.dedent(
    """\
    # forkgen: torch-tree-flat-fast-paths (func over a flat list, tuple or dict of leaves)
    if _FORKGEN_FLAT_FAST_PATHS and none_is_leaf is True and len(structures) == 1:
        structure = structures[0]
        kind = type(structure)
        if kind is list or kind is tuple or kind is dict:
            keys = list(structure.keys()) if kind is dict else None
            leaves = list(structure.values()) if kind is dict else list(structure)
            nodes = torch_tree.SUPPORTED_NODES
            for leaf in leaves:
                leaf_type = type(leaf)
                if issubclass(leaf_type, tuple) or leaf_type in nodes:
                    break
            else:
                values = list(map(func, leaves))
                if len(values) != len(leaves):
                    # `func` raised StopIteration, which ends torch's `map` early too: torch's
                    # own length error, from the spec it would have built.
                    rebuilt = dict(zip(keys, leaves)) if kind is dict else kind(leaves)
                    torch_tree.tree_structure(rebuilt).unflatten(values)
                if kind is dict:
                    return dict(zip(keys, values))
                return values if kind is list else tuple(values)
    """
), "    ")
#: What goes right before `def map_structure`.
GATE = textwrap.dedent(
    """\
    # forkgen: torch-tree-flat-fast-paths (the gate, checked once at import)
    def _forkgen_flat_nodes_are_torchs():
        # True when the torch functions a flat list, tuple or dict goes through in `flatten`
        # and `tree_map` are the ones forkgen read (torch 2.13.0's) and the registry maps
        # list, tuple and dict to them. Anything else turns both fast paths off.
        import hashlib
        import inspect
        import types

        namespace = vars(torch_tree)
        expected = (
            ("tree_flatten", "8961e2f25a32ddfc8641d6eaf1e77cf6494076f15f057d90f6e9680e83a8045c"),
            ("tree_is_leaf", "4e6c9609a297a900298e525a867853507ed5646f554cd98f50e1916d129727d0"),
            ("tree_unflatten", "2f908e013cc85f3ab9a7b8be27c60d4f2f264f5b7491ec28259abb42ccad2913"),
            ("tree_map", "0672ad0ef94560392bbd5ce4075030d6d43d7d374005d6b39a2a6a38d540c1aa"),
            ("_list_flatten", "10a60d070abf12ad10091720ce8d27444a9389a1525133492b7c3e2deb221aae"),
            ("_list_unflatten", "4a07e0c7afbcc8beb0617f9bb207f97d834d4f269dae4321480b111688316c70"),
            ("_tuple_flatten", "07a6e14b7ada4913a0fb85ef90f35ea2b3dedb676a813d517d5f2706555d2e03"),
            ("_tuple_unflatten", "9ab15f68693ed5e7930fe67c2ff87e465d318bcac80e1d5c193de655dfe39b07"),
            ("_dict_flatten", "9119512ea3a887386a85129620e75dfb286d0c767899a4cf8dddaa77a74008ed"),
            ("_dict_unflatten", "7d19d05fcfd436386c42f2f0e9f85f0d46a954e837fe20443262e5fd78ef1b05"),
        )
        functions = {}
        for name, digest in expected:
            function = namespace.get(name)
            if (
                type(function) is not types.FunctionType
                or function.__globals__ is not namespace
                or hasattr(function, "__wrapped__")
            ):
                return False
            functions[name] = function
        spec_type = namespace.get("TreeSpec")
        unflatten = vars(spec_type).get("unflatten") if isinstance(spec_type, type) else None
        if type(unflatten) is not types.FunctionType or unflatten.__globals__ is not namespace:
            return False
        sources = [(unflatten, "461c3fb85ef17312d1b393600436278440c80c5902703b6c8c73dab84f7819d3")]
        sources += [(functions[name], digest) for name, digest in expected]
        for function, digest in sources:
            try:
                source = inspect.getsource(function)
            except Exception:
                return False
            if hashlib.sha256(source.encode("utf-8")).hexdigest() != digest:
                return False
        nodes = torch_tree.SUPPORTED_NODES
        for kind, name in ((list, "_list"), (tuple, "_tuple"), (dict, "_dict")):
            node = nodes.get(kind)
            if (
                node is None
                or getattr(node, "flatten_fn", None) is not functions[name + "_flatten"]
                or getattr(node, "unflatten_fn", None) is not functions[name + "_unflatten"]
            ):
                return False
        return True


    _FORKGEN_FLAT_FAST_PATHS = _FORKGEN_NODE_TYPE_IS_TYPE and _forkgen_flat_nodes_are_torchs()
    """
)
FLATTEN_AT, MAP_AT = "def flatten(structure):\n", "def map_structure(func, *structures, none_is_leaf=True):\n"
AFTER = BEFORE.replace(FLATTEN_AT, FLATTEN_AT + FLATTEN_BRANCH).replace(MAP_AT, GATE + "\n\n" + MAP_AT + MAP_BRANCH)
FLATTEN_ANCHOR = "def flatten(structure): _dict_to_ordered_dict, then torch_tree.tree_flatten"
MAP_ANCHOR = "def map_structure(func, *structures, none_is_leaf=True): ... torch_tree.tree_map(map_func, *structures)"
NO_FLATTEN = f":1: anchor '{FLATTEN_ANCHOR}': expected exactly one `{FLATTEN_ANCHOR}` at module level; found 0"
NO_MAP = f":1: anchor '{MAP_ANCHOR}': expected exactly one `{MAP_ANCHOR}` at module level; found 0"
FREE = "anchor '_FORKGEN_FLAT_FAST_PATHS': expected names free for module_level (forkgen's helper); found already bound"

CASES = (
    Case("a branch on top of each function, the gate before map_structure", BEFORE, AFTER,
         detail="flatten/map_structure: flat containers of leaves without tree walks", anchors=tuple([('def flatten(structure): _dict_to_ordered_dict, then torch_tree.tree_flatten', 37), ('def map_structure(func, *structures, none_is_leaf=True): ... torch_tree.tree_map(map_func, *structures)', 44)])),
    Case("flatten's signature", BEFORE.replace("def flatten(structure):", "def flatten(structure, sort=True):"),
         drift=NO_FLATTEN),
    Case("flatten's flatten", BEFORE.replace("    leaves, _ = torch_tree.tree_flatten(structure)\n",
                                             "    leaves = torch_tree.tree_leaves(structure)\n"), drift=NO_FLATTEN),
    Case("flatten without the dict sort", BEFORE.replace("    structure = _dict_to_ordered_dict(structure)\n", ""),
         drift=NO_FLATTEN),
    Case("flatten's fourth statement", BEFORE.replace("    return leaves\n", "    return leaves\n    print()\n"),
         drift=NO_FLATTEN),
    Case("map_structure's signature", BEFORE.replace("none_is_leaf=True):", "none_is_leaf=False):"), drift=NO_MAP),
    Case("map_structure's tree_map", BEFORE.replace("tree_map(map_func, *structures)", "tree_map(func, *structures)"),
         drift=NO_MAP),
    Case("map_structure's map_func", BEFORE.replace("    map_func = func\n", "    map_func = functools.partial(func)\n"),
         drift=NO_MAP),
    Case("map_structure's none test", BEFORE.replace("    if not none_is_leaf:\n", "    if none_is_leaf is False:\n"),
         drift=NO_MAP),
    Case("a _dict_to_ordered_dict the leaf short-cut does not know",
         BEFORE.replace("is_leaf=lambda x: x is not structure,\n", "is_leaf=None,\n", 1),
         drift="anchor 'children, treedef = torch_tree.tree_flatten(structure, ...)': expected exactly one"),
    Case("another _tree_is_leaf", BEFORE.replace("not in torch_tree.SUPPORTED_NODES", "not in SUPPORTED"),
         drift=":1: anchor 'def _tree_is_leaf': expected exactly one `def _tree_is_leaf` at module level; found 0"),
    Case("no node-type gate", BEFORE.replace(NODE_TYPE_GATE, ""),
         drift="anchor '_FORKGEN_NODE_TYPE_IS_TYPE': expected bound where module_level goes"),
    Case("the node-type gate below map_structure", BEFORE.replace(NODE_TYPE_GATE, "") + "\n\n" + NODE_TYPE_GATE,
         drift="anchor '_FORKGEN_NODE_TYPE_IS_TYPE': expected torch-tree-node-type-fast-path's gate assigned once "
         "above `def map_structure` (that patch first); found one below it"),
    Case("the flag already defined", BEFORE + "\n_FORKGEN_FLAT_FAST_PATHS = True\n", drift=FREE),
    Case("half applied", AFTER.replace(MAP_BRANCH, ""), drift="anchor 'torch-tree-flat-fast-paths': expected all pieces "
         "present or none; found flatten: first statement, def map_structure(___): ___ forkgen's, map_structure: "
         "first statement missing"),
    Case("the flag without its gate function", AFTER.replace(GATE.split("\n\n\n")[0] + "\n\n\n", ""), drift=FREE),
)

MUTANTS = (
    Mutant("flatten takes namedtuples and tuple subclasses for leaves",
           "            if issubclass(item_type, tuple) or item_type in nodes:\n", "            if item_type in nodes:\n"),
    Mutant("map_structure sorts a dict's keys (torch keeps insertion order)",
           "            keys = list(structure.keys()) if kind is dict else None\n",
           "            keys = sorted(structure.keys()) if kind is dict else None\n"),
)
