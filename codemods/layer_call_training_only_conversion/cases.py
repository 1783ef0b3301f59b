"""What `layer-call-training-only-conversion` (nightly's training-only gate, without
keras-team/keras#23296's copy) makes of Layer modules shaped like Keras's, the synthetic upstream
and patched `__call__` (BEFORE and AFTER, run by `run_module` on fakes of Keras's backend, tree and
dtype policies) executed side by side (both run by tests/unit/test_patch_cases.py), and the breaks
of its inserted code the equivalence suite must catch. The patch on the synthetic tree's layer.py,
with the CallSpec patches: tests/unit/test_patches_together.py."""

from __future__ import annotations

import textwrap
import types
from functools import cache
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Case, Mutant, piece_text, run_module


def _once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


BEFORE = textwrap.dedent(
    '''\
    """A Keras-shaped layer module for the unit tests of layer-call-training-only-conversion."""

    from keras.src import backend
    from keras.src import dtype_policies
    from keras.src import tree


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
    Case("no dtype_policies import", _once(BEFORE, "from keras.src import dtype_policies\n", ""),
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


# -- behaviours: the synthetic upstream and patched modules side by side ---------------------------


def the_patched_module_has_three_marked_pieces() -> None:
    # Its codemod cases (the change, the upstream shapes, drift) are CASES above.
    assert AFTER.count(MARK) == 3


class Tensor:
    def __init__(self, value: float, dtype: str) -> None:
        self.value = value
        self.dtype = dtype

    def __eq__(self, other: object) -> bool:
        return type(other) is Tensor and (self.value, self.dtype) == (other.value, other.dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.value}, {self.dtype})"


class DTypePolicy:
    conversions: list[str] = []

    def convert_input(self, x: Any, autocast: bool, dtype: str) -> Any:
        DTypePolicy.conversions.append(type(x).__name__)
        if isinstance(x, Tensor):
            return Tensor(x.value, dtype) if autocast and x.dtype.startswith("float") and x.dtype != dtype else x
        if hasattr(x, "__array__"):
            return Tensor(float(np.asarray(x)), dtype)
        return x


class LoudPolicy(DTypePolicy):
    def convert_input(self, x: Any, autocast: bool, dtype: str) -> Any:
        return ("loud", super().convert_input(x, autocast, dtype))


def map_structure(func: Any, structure: Any) -> Any:
    if isinstance(structure, dict):
        return {k: map_structure(func, v) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)):
        return type(structure)(map_structure(func, v) for v in structure)
    return func(structure)


#: What BEFORE and AFTER import from `keras.src`: a backend, a tree, dtype policies.
FAKES = types.SimpleNamespace(
    backend=types.SimpleNamespace(is_tensor=lambda x: isinstance(x, Tensor), standardize_dtype=lambda d: d),
    tree=types.SimpleNamespace(map_structure=map_structure),
    dtype_policies=types.SimpleNamespace(DTypePolicy=DTypePolicy),
)


@cache
def modules() -> tuple[Any, Any]:
    """Upstream's and the patched module, on the fakes (built once)."""
    return (run_module(BEFORE, "training_only_before", {"keras.src": FAKES}),
            run_module(AFTER, "training_only_after", {"keras.src": FAKES}))


VALUES = st.sampled_from(
    [None, True, False, 0, 1, np.bool_(True), np.float32(2.0), "x", Tensor(3.0, "float32"), Tensor(3.0, "float16")]
)
ARGS = st.sampled_from(
    [(Tensor(1.0, "float32"),), (Tensor(1.0, "float16"),), (Tensor(1.0, "int32"),), (np.float32(1.0),),
     (Tensor(1.0, "float32"), Tensor(2.0, "float32")), ([Tensor(1.0, "float32")],), (None,), ()]
)


def run(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], accepts: bool, converts: bool,
        policy: type[DTypePolicy], override: bool) -> tuple[Any, ...]:
    layer = module.Layer(accepts_training=accepts, convert_input_args=converts)
    layer.dtype_policy = policy()
    if override:
        layer.dtype_policy.convert_input = lambda x, autocast, dtype: ("instance", x)
    DTypePolicy.conversions = []
    passed = dict(kwargs)
    try:
        outputs = layer(*args, **passed)
    except Exception as error:
        return ("raised", type(error).__name__, str(error))
    recorded_args, recorded_kwargs = layer.recorded
    return outputs, recorded_args, dict(recorded_kwargs), passed, list(DTypePolicy.conversions)


@settings(max_examples=400, deadline=None)
@given(
    args=ARGS,
    kwargs=st.dictionaries(st.sampled_from(["training", "mask", "other"]), VALUES, max_size=2),
    accepts=st.booleans(),
    converts=st.booleans(),
    policy=st.sampled_from([DTypePolicy, LoudPolicy]),
    override=st.booleans(),
)
def patched_call_behaves_as_upstream(args: tuple[Any, ...], kwargs: dict[str, Any], accepts: bool,
                                     converts: bool, policy: type[DTypePolicy], override: bool) -> None:
    upstream_module, patched_module = modules()
    upstream = run(upstream_module, args, kwargs, accepts, converts, policy, override)
    patched = run(patched_module, args, kwargs, accepts, converts, policy, override)
    if upstream[0] == "raised":
        assert patched == upstream
        return
    # What call() receives: the same.
    assert patched[0] == upstream[0] and patched[1] == upstream[1]
    skipped = (
        converts and set(kwargs) == {"training"} and any(kwargs["training"] is v for v in (None, True, False))
        and policy is DTypePolicy and not override
        and len(args) == 1 and isinstance(args[0], Tensor) and args[0].dtype == "float32"
    )
    # Conversions: all of upstream's, except the ones of a training-only call, which change nothing.
    assert patched[4] == ([] if skipped else upstream[4])
    # The recorded kwargs: upstream's, including what steps 5-6 wrote into them on a layer that
    # does not convert (not #23296's kwargs as passed).
    assert patched[2] == upstream[2]
    if not converts:
        assert "mask" in patched[2] and patched[2]["mask"] is None
    # The caller's dict is never written into (`**kwargs` is a new dict either way).
    assert patched[3] == kwargs == upstream[3]


def training_only_calls_skip_the_conversion() -> None:
    upstream_module, patched_module = modules()
    x = Tensor(1.0, "float32")
    for training in (True, False, None):
        assert run(patched_module, (x,), {"training": training}, True, True, DTypePolicy, False)[4] == []
        assert run(upstream_module, (x,), {"training": training}, True, True, DTypePolicy, False)[4] == [
            "Tensor", type(training).__name__
        ]


BEHAVIOURS = (
    the_patched_module_has_three_marked_pieces,
    patched_call_behaves_as_upstream,
    training_only_calls_skip_the_conversion,
)
