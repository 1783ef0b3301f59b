"""What `layer-call-flat-conversion` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py; tests/unit/test_layer_call_flat_conversion.py executes AFTER
against fake tree implementations), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant, piece_text

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
PATCHED_BODY = piece_text(__file__, "gate_body", "            ", upstream=UPSTREAM_BODY)
#: What the patch appends to the module.
HELPERS = "\n\n" + piece_text(__file__, "helpers")
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
