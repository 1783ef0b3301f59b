"""What `torch-tree-node-type-fast-path` puts into keras/src/tree/torchtree_impl.py.

Parsed by the codemod, never imported. The body of `module_level` goes at module level right
before `def is_nested` (`torch_tree` is the module's `torch.utils._pytree`); the body of
`is_nested_fast_path` goes at the top of `is_nested(structure)`, whose upstream line (`return
not _tree_is_leaf(structure)`) stays below it for tuples and whenever the gate is off. The
comments are the markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def module_level():
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


def is_nested_fast_path(structure):
    # forkgen: torch-tree-node-type-fast-path (a type that is not a tuple's is its own node type)
    if _FORKGEN_NODE_TYPE_IS_TYPE:
        node_type = type(structure)
        if not issubclass(node_type, tuple):
            return node_type in torch_tree.SUPPORTED_NODES
