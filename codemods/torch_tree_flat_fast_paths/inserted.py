"""What `torch-tree-flat-fast-paths` puts into keras/src/tree/torchtree_impl.py.

Parsed by the codemod, never imported. The body of `module_level` goes at module level right
before `def map_structure` (`torch_tree` is the module's `torch.utils._pytree`;
`_FORKGEN_NODE_TYPE_IS_TYPE` is the gate of `torch-tree-node-type-fast-path`, defined above
`def is_nested`, earlier in the file; `flatten` reads the flag when called); the body of `flatten_fast_path` goes at the top of
`flatten(structure)` and that of `map_structure_fast_path` at the top of
`map_structure(func, *structures, none_is_leaf=True)`. Upstream's statements stay below each
branch for everything the branch does not return. The comments are the markers that tell the
pieces are forkgen's.
"""
# ruff: noqa


def module_level():
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


def flatten_fast_path(structure):
    # forkgen: torch-tree-flat-fast-paths (a flat list or tuple of leaves flattens to its items)
    if _FORKGEN_FLAT_FAST_PATHS and (type(structure) is list or type(structure) is tuple):
        nodes = torch_tree.SUPPORTED_NODES
        for item in structure:
            item_type = type(item)
            if issubclass(item_type, tuple) or item_type in nodes:
                break
        else:
            return list(structure)


def map_structure_fast_path(func, structures, none_is_leaf):
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
