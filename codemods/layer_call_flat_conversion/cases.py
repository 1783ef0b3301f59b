"""What `layer-call-flat-conversion` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py; tests/unit/test_layer_call_flat_conversion.py executes AFTER
against fake tree implementations), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant

LAYER = "keras/src/layers/layer.py"


def _once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


BEFORE = textwrap.dedent(
    '''\
    """A Keras-shaped layer module for the unit tests of layer-call-flat-conversion."""

    tree = None
    dtype_policies = None


    class Layer:
        _convert_input_args = True

        def __call__(self, *args, **kwargs):
            original_args = args
            original_kwargs = kwargs

            def maybe_convert(x):
                return self.dtype_policy.convert_input(x, True, "float32")

            # Used to avoid expensive `tree` operations in the most common case.
            if (
                kwargs
                or len(args) != 1
                or not is_backend_tensor_or_symbolic(args[0], allow_none=False)
            ) and self._convert_input_args:
                args = tree.map_structure(maybe_convert, args)
                kwargs = tree.map_structure(maybe_convert, kwargs)

            return args, kwargs


    class Tensor:
        pass


    def is_backend_tensor_or_symbolic(x, allow_none=False):
        if allow_none and x is None:
            return True
        return isinstance(x, Tensor)
    '''
)
UPSTREAM_BODY = (
    "            args = tree.map_structure(maybe_convert, args)\n"
    "            kwargs = tree.map_structure(maybe_convert, kwargs)\n"
)
NIGHTLY = _once(
    _once(
        BEFORE,
        "        if (\n            kwargs\n",
        "        kwargs_may_need_convert = bool(kwargs) and not (\n"
        "            len(kwargs) == 1 and \"training\" in kwargs\n        )\n"
        "        if (\n            kwargs_may_need_convert\n",
    ),
    UPSTREAM_BODY,
    UPSTREAM_BODY + "        else:\n            kwargs = dict(kwargs)\n",
)


GATE_LINE = BEFORE.splitlines().index("        if (") + 1
#: The gate's body once patched: upstream's two lines under `if flat_converted is None:`.
PATCHED_BODY = """\
            # forkgen: layer-call-flat-conversion
            # Flat args and kwargs (leaves only) are converted without the tree walks.
            flat_converted = _layer_call_convert_flat(maybe_convert, args, kwargs)
            if flat_converted is None:
""" + UPSTREAM_BODY.replace("            ", "                ") + """\
            else:
                args, kwargs = flat_converted
"""
#: What the patch appends to the module.
HELPERS = '''

# forkgen: layer-call-flat-conversion
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
        _LAYER_CALL_FLAT_LEAVES[cls] = leaf
    return leaf

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
'''
AFTER = _once(BEFORE, UPSTREAM_BODY, PATCHED_BODY) + HELPERS

CASES = (
    Case("flat args and kwargs are converted without the tree walks; the rest is kept", BEFORE, AFTER,
         detail="flat args and kwargs are converted without tree.map_structure", anchors=(("conversion gate", GATE_LINE),)),
    Case("keras-nightly's gate (a flag, an `else:` copy): its body only",
         NIGHTLY, _once(NIGHTLY, UPSTREAM_BODY, PATCHED_BODY) + HELPERS),
    Case("another gate body", _once(BEFORE, UPSTREAM_BODY, UPSTREAM_BODY + "            print(args)\n"),
         drift="anchor 'conversion gate body': expected exactly one `conversion gate body` in Layer.__call__; found 0"),
    Case("two gates", _once(BEFORE, "        return args, kwargs",
                            BEFORE[BEFORE.index("        if (\n"):BEFORE.index("        return args, kwargs")]
                            + "        return args, kwargs"),
         drift=f"layer.py:{GATE_LINE}: anchor 'conversion gate body': expected exactly one"),
    Case("a helper name taken", BEFORE + "\n\ndef _layer_call_convert_flat():\n    pass\n",
         drift="anchor '_layer_call_convert_flat': expected names free for helpers (forkgen's helper); found already bound"),
    Case("a name the helpers read unbound", _once(BEFORE, "tree = None\n", ""),
         drift="anchor 'tree': expected bound where helpers goes"),
)

MUTANTS = (
    Mutant("a None kwarg is not passed to maybe_convert", "            if value is None and not none_visited:\n",
           "            if value is None:\n"),
)
