"""What `layer-call-flat-conversion` inserts into keras/src/layers/layer.py.

Parsed by the engine, never imported. `gate_body` becomes the body of upstream's conversion
gate in `Layer.__call__`: `UPSTREAM` stands for upstream's two `tree.map_structure` lines,
which are moved, unchanged, under `if flat_converted is None:`. `helpers` is appended to the
module (its docstrings are indented here as they read once at module level).
"""
# ruff: noqa


def gate_body(maybe_convert, args, kwargs):
    # forkgen: layer-call-flat-conversion
    # Flat args and kwargs (leaves only) are converted without the tree walks.
    flat_converted = _layer_call_convert_flat(maybe_convert, args, kwargs)
    if flat_converted is None:
        UPSTREAM
    else:
        args, kwargs = flat_converted


def helpers():
    # forkgen: layer-call-flat-conversion
    import sys as _layer_call_flat_sys

    # A tuple, not a frozenset: torch.compile's guards on a set of classes fail.
    _LAYER_CALL_FLAT_SCALARS = (type(None), bool, int, float, str)
    _LAYER_CALL_FLAT_LEAVES = {}
    _LAYER_CALL_FLAT_TREE = {}

    def _layer_call_flat_tree():
        """How this `tree.map_structure` maps a tuple and a dict of leaves, found
    once by asking it: `(sorted_keys, none_visited)`, or False when it does
    something else (then every call keeps the tree walks)."""
        mode = _LAYER_CALL_FLAT_TREE.get("mode")
        if mode is None:
            calls = []

            def record(x):
                calls.append(x)
                return x if x is None else -x

            probe = {"b": 1, "c": None, "a": 2}
            mapped = tree.map_structure(record, probe)
            mapped_tuple = tree.map_structure(record, (3, None, 4))
            mode = False
            if (
                type(mapped) is dict
                and list(mapped) == list(probe)
                and [mapped["b"], mapped["c"], mapped["a"]] == [-1, None, -2]
                and type(mapped_tuple) is tuple
                and mapped_tuple == (-3, None, -4)
            ):
                mode = {
                    (2, 1, None, 3, None, 4): (True, True),
                    (2, 1, 3, 4): (True, False),
                    (1, None, 2, 3, None, 4): (False, True),
                    (1, 2, 3, 4): (False, False),
                }.get(tuple(calls), False)
            if not _layer_call_flat_compiling():
                _LAYER_CALL_FLAT_TREE["mode"] = mode
        return mode

    def _layer_call_is_flat_leaf(value):
        """Whether `tree.map_structure` sees `value` as a leaf: None, exact
    bool/int/float/str, or a backend tensor/KerasTensor type the tree does
    not treat as a node (asked once per type)."""
        cls = type(value)
        if cls in _LAYER_CALL_FLAT_SCALARS:
            return True
        leaf = _LAYER_CALL_FLAT_LEAVES.get(cls)
        if leaf is None:
            leaf = is_backend_tensor_or_symbolic(value) and not tree.is_nested(
                value
            )
            if not _layer_call_flat_compiling():
                _LAYER_CALL_FLAT_LEAVES[cls] = leaf
        return leaf

    def _layer_call_flat_compiling():
        """Whether torch.compile is tracing: then the answers above are not
    remembered (a store dynamo traces is a write it replays after every
    compiled call, and the guard on the missing key recompiles the next one)."""
        torch = _layer_call_flat_sys.modules.get("torch")
        return torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)()

    def _layer_call_convert_flat(maybe_convert, args, kwargs):
        """`(tree.map_structure(maybe_convert, args),
    tree.map_structure(maybe_convert, kwargs))` for flat args and kwargs,
    without the tree walks: `maybe_convert` runs on the same leaves in the
    same order, the results are a new tuple and a new dict in the caller's
    key order. None when a value is not a leaf (the caller walks the trees).
    """
        mode = _layer_call_flat_tree()
        if not mode:
            return None
        for value in args:
            if not _layer_call_is_flat_leaf(value):
                return None
        for value in kwargs.values():
            if not _layer_call_is_flat_leaf(value):
                return None
        sorted_keys, none_visited = mode
        if none_visited:
            new_args = tuple([maybe_convert(value) for value in args])
        else:
            new_args = tuple(
                [value if value is None else maybe_convert(value) for value in args]
            )
        converted = {}
        for key in sorted(kwargs) if sorted_keys else kwargs:
            value = kwargs[key]
            if value is None and not none_visited:
                converted[key] = value
            else:
                converted[key] = maybe_convert(value)
        if sorted_keys:
            converted = {key: converted[key] for key in kwargs}
        return new_args, converted
