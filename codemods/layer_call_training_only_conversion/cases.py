"""What `layer-call-training-only-conversion` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py; tests/unit/test_layer_call_training_only_conversion.py executes
BEFORE and AFTER side by side), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant, piece_text


def _once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


BEFORE = textwrap.dedent(
    '''\
    """A Keras-shaped layer module for the unit tests of layer-call-training-only-conversion."""

    from _tl_fakes import backend
    from _tl_fakes import dtype_policies
    from _tl_fakes import tree


    class Layer:
        def __init__(self, accepts_training=True, convert_input_args=True):
            self._convert_input_args = convert_input_args
            self.accepts_training = accepts_training
            self.dtype_policy = dtype_policies.DTypePolicy()
            self.input_dtype = "float32"
            self.autocast = True

        def call(self, x, **kwargs):
            return x, kwargs

        def __call__(self, *args, **kwargs):
            original_args = args
            original_kwargs = kwargs

            # 1. Convert any array arguments to tensors of correct dtype.
            def maybe_convert(x):
                return self.dtype_policy.convert_input(
                    x, self.autocast, self.input_dtype
                )

            # Used to avoid expensive `tree` operations in the most common case.
            if (
                kwargs
                or len(args) != 1
                or not is_backend_tensor_or_symbolic(args[0], allow_none=False)
                or backend.standardize_dtype(args[0].dtype) != self.input_dtype
            ) and self._convert_input_args:
                args = tree.map_structure(maybe_convert, args)
                kwargs = tree.map_structure(maybe_convert, kwargs)

            # Like CallSpec and steps 5-6: pop what call() does not take, inject.
            if not self.accepts_training:
                kwargs.pop("training", None)
            kwargs["mask"] = None
            outputs = self.call(*args, **kwargs)
            self.recorded = (original_args, original_kwargs)
            return outputs


    def is_backend_tensor_or_symbolic(x, allow_none=False):
        if allow_none and x is None:
            return True
        return backend.is_tensor(x)
'''
)
#: The flag after `maybe_convert`, as the gate's first operand, the kwargs copy in an `elif` of
#: the gate, the helper at the end of the module.
MAYBE_CONVERT = "                x, self.autocast, self.input_dtype\n            )\n\n"
GATE_END = "            kwargs = tree.map_structure(maybe_convert, kwargs)\n"
COPY = piece_text(__file__, "gate_copy", "        ")
AFTER = _once(_once(_once(
    BEFORE, MAYBE_CONVERT, MAYBE_CONVERT + piece_text(__file__, "gate_flag", "        ") + "\n"),
    "            kwargs\n            or len(args)", "            kwargs_may_need_convert\n            or len(args)"),
    GATE_END, GATE_END + COPY[COPY.index("        elif "):]) + "\n\n" + piece_text(__file__, "helper")
MARK = "# forkgen: layer-call-training-only-conversion"
# keras-nightly's shape: the flag inline, without our marker, and an unconditional copy.
NIGHTLY = _once(
    BEFORE,
    """\
        # Used to avoid expensive `tree` operations in the most common case.
        if (
            kwargs
""",
    """\
        kwargs_may_need_convert = bool(kwargs) and not (
            len(kwargs) == 1 and "training" in kwargs
        )

        # Used to avoid expensive `tree` operations in the most common case.
        if (
            kwargs_may_need_convert
""",
)
NIGHTLY = _once(
    NIGHTLY,
    """\
            kwargs = tree.map_structure(maybe_convert, kwargs)
""",
    """\
            kwargs = tree.map_structure(maybe_convert, kwargs)
        else:
            # `kwargs` get mutated later, so create a copy.
            kwargs = dict(kwargs)
""",
)
GATE_LINE = BEFORE.splitlines().index("        if (") + 1
GATE_END = """\
        ) and self._convert_input_args:
            args = tree.map_structure(maybe_convert, args)
            kwargs = tree.map_structure(maybe_convert, kwargs)
"""
COPY = "        elif kwargs and self._convert_input_args:  #"


def _gates(found: str) -> str:
    return f"expected exactly one `conversion gate` in Layer.__call__; found {found}"


CASES = (
    Case("training-only calls skip the conversion and get a copy of their kwargs", BEFORE, AFTER,
         detail="training-only calls skip the conversion and get a copy of their kwargs",
         anchors=(("original_kwargs = kwargs", 21), ("maybe_convert", 24), ("conversion gate", GATE_LINE),
                  ("dtype_policies", 4))),
    Case("keras-nightly: the flag and an unconditional copy", NIGHTLY, upstream=True,
         detail="upstream gates conversion on `kwargs_may_need_convert` with nightly's unconditional "
         "`else: kwargs = dict(kwargs)` (Node recording already changed)"),
    Case("#23296's reviewed `elif kwargs:` copy", NIGHTLY.replace("        else:\n", "        elif kwargs:\n"),
         upstream=True, detail="upstream gates conversion on `kwargs_may_need_convert` with #23296's `elif kwargs:` "
         "copy (Node recording already changed)"),
    Case("our copy's shape without our markers (a flag nobody of ours wrote)",
         NIGHTLY.replace("        else:\n", "        elif kwargs and self._convert_input_args:\n"), upstream=True,
         detail="upstream gates conversion on `kwargs_may_need_convert` with an `elif` copy"),
    Case("the gate gone", BEFORE.replace("        ) and self._convert_input_args:", "        ) and self._convert_inputs:"),
         drift=_gates("0 without the branch and 0 with it")),
    Case("two gates", _once(BEFORE, GATE_END, GATE_END + "        if (\n            kwargs\n            or args\n"
                            "        ) and self._convert_input_args:\n            pass\n"),
         drift=f"layer.py:{GATE_LINE}: anchor 'conversion gate': " + _gates("2 without the branch")),
    Case("another gate body", _once(BEFORE, "            args = tree.map_structure(maybe_convert, args)\n", ""),
         drift="`args = tree.map_structure(maybe_convert, args)` in Layer.__call__; found 0"),
    Case("original_kwargs gone", _once(BEFORE, "        original_kwargs = kwargs\n", ""),
         drift="anchor 'original_kwargs = kwargs': expected exactly one"),
    Case("maybe_convert without convert_input",
         BEFORE.replace("self.dtype_policy.convert_input(", "self.dtype_policy.cast_input("),
         drift="layer.py:24: anchor 'self.dtype_policy.convert_input(___)': expected exactly one "
         "`self.dtype_policy.convert_input(___)` in Layer.__call__.maybe_convert; found 0"),
    Case("no dtype_policies import", _once(BEFORE, "from _tl_fakes import dtype_policies\n", ""),
         drift="layer.py:1: anchor 'dtype_policies': expected bound where helper goes"),
    Case("half a patch: the flag and the gate, without the copy and the helper",
         AFTER.split(COPY)[0] + "\n        return args\n",
         drift=f"layer.py:{GATE_LINE + 7}: anchor 'layer-call-training-only-conversion': expected all pieces "
         "present or none; found the flag forkgen's, the kwargs copy, the helper missing"),
    Case("the gate has an else branch of its own", _once(BEFORE, GATE_END, GATE_END + "        else:\n            pass\n"),
         drift=_gates("0 without the branch and 0 with it")),
    Case("version 1 of this patch (#23296's `elif kwargs:` copy, marked as ours)",
         _once(AFTER, COPY, "        elif kwargs:  #"), drift=_gates("0 without the branch and 0 with it")),
)

MUTANTS = (
    Mutant("copy the kwargs of every unconverted call (#23296's `elif kwargs:`)",
           "    elif kwargs and self._convert_input_args:  # forkgen: layer-call-training-only-conversion\n",
           "    elif kwargs:  # forkgen: layer-call-training-only-conversion\n"),
)
