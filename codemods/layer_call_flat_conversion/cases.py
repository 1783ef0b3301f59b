"""What `layer-call-flat-conversion` makes of Layer modules shaped like Keras's, the patched helper
executed (AFTER, by `run_module`) against fake tree implementations shaped like optree (sorted
visit, None visited, original key order) and torch's pytree (insertion order, None not visited)
(both run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence
suite must catch. The patch applied after layer-call-training-only-conversion and before it:
tests/unit/test_patches_together.py (it runs both patches)."""

from __future__ import annotations

import textwrap
import types
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Case, Mutant, Sources, applied_piece, piece_text, run_module
from codemods.layer_call_flat_conversion import PATCH

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
#: BEFORE as layer-call-training-only-conversion leaves it (its pieces as applied, read with
#: `applied_piece`): the flag before the gate as its first operand, the `elif` copy, its helper.
_TRAINING_ONLY = "layer-call-training-only-conversion"
_MAYBE_CONVERT = '            return self.dtype_policy.convert_input(x, True, "float32")\n\n'
_COPY = applied_piece(_TRAINING_ONLY, "gate_copy", "        ")
TRAINING_ONLY = _once(_once(_once(
    BEFORE, _MAYBE_CONVERT, _MAYBE_CONVERT + applied_piece(_TRAINING_ONLY, "gate_flag", "        ") + "\n"),
    "            kwargs\n            or len(args)", "            kwargs_may_need_convert\n            or len(args)"),
    UPSTREAM_BODY, UPSTREAM_BODY + _COPY[_COPY.index("        elif "):]) + "\n\n" + applied_piece(_TRAINING_ONLY, "helper")

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
    Case("layer-call-training-only-conversion's gate (its flag, its `elif` copy): its body only",
         TRAINING_ONLY, _once(TRAINING_ONLY, UPSTREAM_BODY, PATCHED_BODY) + HELPERS,
         detail="flat args and kwargs are converted without tree.map_structure",
         anchors=(("conversion gate", TRAINING_ONLY.splitlines().index("        if (") + 1),)),
)

MUTANTS = (
    Mutant("a None kwarg is not passed to maybe_convert", "            if value is None and not none_visited:\n",
           "            if value is None:\n"),
    Mutant("the tree's mode stored while torch.compile traces (a store replayed after every compiled call)",
           "            if not _layer_call_flat_compiling():\n                _LAYER_CALL_FLAT_TREE[\"mode\"] = mode\n",
           "            _LAYER_CALL_FLAT_TREE[\"mode\"] = mode\n"),
)


# -- behaviours: the gate as reported, the patched helper executed against fake trees ----------


def sources(text: str) -> Sources:
    return Sources(lambda path: text if path == LAYER else None)


def check(text: str) -> Any:
    return PATCH.check(sources(text))


def the_gate_is_reported_with_its_first_operand() -> None:
    # The codemod's cases (the change, the nightly gate, drift) are CASES above.
    assert check(BEFORE).anchors[0].description.startswith("a `kwargs` gate whose body maps")
    assert AFTER.count("# forkgen: layer-call-flat-conversion") == 2


def after_training_only_conversion_the_gate_is_reported_with_its_flag() -> None:
    assert check(TRAINING_ONLY).anchors[0].description.startswith("a `kwargs_may_need_convert` gate whose body maps")
    both = _once(TRAINING_ONLY, UPSTREAM_BODY, PATCHED_BODY) + HELPERS
    assert "if flat_converted is None:" in both and "elif kwargs and self._convert_input_args:" in both
    assert both.index("def _layer_call_kwargs_may_need_convert") < both.index("_LAYER_CALL_FLAT_SCALARS = ")
    result = check(both)
    assert result.present and result.anchors[0].description.startswith("a `kwargs_may_need_convert` gate")


class FakeTree:
    """A tree of tuples/lists/dicts with a configurable visit order."""

    def __init__(self, sorted_visit: bool, none_visited: bool, rebuild_sorted: bool = False) -> None:
        self.sorted_visit, self.none_visited, self.rebuild_sorted = sorted_visit, none_visited, rebuild_sorted

    def is_nested(self, x: Any) -> bool:
        return type(x) in (tuple, list, dict)

    def map_structure(self, f: Any, s: Any) -> Any:
        if type(s) in (tuple, list):
            return type(s)(self.map_structure(f, v) for v in s)
        if type(s) is dict:
            keys = sorted(s) if self.sorted_visit else list(s)
            done = {k: self.map_structure(f, s[k]) for k in keys}
            return {k: done[k] for k in (sorted(s) if self.rebuild_sorted else s)}
        if s is None and not self.none_visited:
            return None
        return f(s)


def patched(fake: FakeTree) -> types.ModuleType:
    module = run_module(AFTER, "synthetic_flat_layer")
    module.tree = fake  # type: ignore[attr-defined]
    return module


TREES = [FakeTree(True, True), FakeTree(False, False), FakeTree(True, False), FakeTree(False, True)]


def probe_finds_each_tree_shape() -> None:
    for fake in TREES:
        assert patched(fake)._layer_call_flat_tree() == (fake.sorted_visit, fake.none_visited)
    assert patched(FakeTree(True, True, rebuild_sorted=True))._layer_call_flat_tree() is False


leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=2), st.floats(allow_nan=False))
value = st.one_of(leaf, st.lists(leaf, max_size=2), st.dictionaries(st.sampled_from("qp"), leaf, max_size=2))


@settings(max_examples=150, deadline=None)
@given(
    args=st.lists(value, max_size=3).map(tuple),
    kwargs=st.dictionaries(st.sampled_from(["mask", "cache", "b", "a", "z"]), value, max_size=4),
    which=st.integers(0, 4),
    fail_on=st.one_of(st.none(), st.integers(1, 6)),
)
def helper_matches_map_structure(args: Any, kwargs: Any, which: int, fail_on: Any) -> None:
    fake = [*TREES, FakeTree(True, True, rebuild_sorted=True)][which]
    module = patched(fake)

    def recorder() -> tuple[list[Any], Any]:
        calls: list[Any] = []

        def f(x: Any) -> Any:
            calls.append(x)
            if len(calls) == fail_on:
                raise KeyError(len(calls))
            return ("c", x)

        return calls, f

    ref_calls, ref_f = recorder()
    calls, f = recorder()
    try:
        expected: Any = (fake.map_structure(ref_f, args), fake.map_structure(ref_f, kwargs))
    except KeyError as error:
        expected = ("raised", error.args)
    try:
        got = module._layer_call_convert_flat(f, args, kwargs)
        if got is None:
            flat = all(type(v) not in (list, dict, tuple) for v in (*args, *kwargs.values()))
            assert not flat or which == 4
            got = (fake.map_structure(f, args), fake.map_structure(f, kwargs))
    except KeyError as error:
        got = ("raised", error.args)
    assert calls == ref_calls
    assert got == expected
    if expected[0] != "raised":
        assert list(got[1]) == list(expected[1]) and got[1] is not kwargs and type(got[0]) is tuple


def tensors_are_leaves_unless_the_tree_nests_them() -> None:
    fake = FakeTree(False, False)
    module = patched(fake)
    t = module.Tensor()
    out = module._layer_call_convert_flat(lambda x: ("c", x), (t,), {"mask": t})
    assert out == ((("c", t),), {"mask": ("c", t)})
    fake.is_nested = lambda x: isinstance(x, module.Tensor) or type(x) in (tuple, list, dict)  # type: ignore[method-assign]
    assert patched(fake)._layer_call_convert_flat(lambda x: x, (t,), {}) is None
    # Subclasses of the scalar types are left to the tree walk.
    assert module._layer_call_convert_flat(lambda x: x, (), {"a": type("S", (str,), {})("s")}) is None


BEHAVIOURS = (
    the_gate_is_reported_with_its_first_operand,
    after_training_only_conversion_the_gate_is_reported_with_its_flag,
    probe_finds_each_tree_shape,
    helper_matches_map_structure,
    tensors_are_leaves_unless_the_tree_nests_them,
)
