"""Patch layer-call-flat-conversion on the synthetic Keras-shaped layer module of its cases
(codemods/layer_call_flat_conversion/cases.py): the gate as layer-call-training-only-conversion
leaves it, both patches in either order, and the patched helper executed against fake tree
implementations shaped like optree (sorted visit, None visited, original key order) and torch's
pytree (insertion order, None not visited)."""

from __future__ import annotations

import types
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Sources
from codemods.layer_call_flat_conversion import PATCH
from codemods.layer_call_flat_conversion.cases import AFTER, BEFORE, LAYER
from codemods.layer_call_training_only_conversion import PATCH as TRAINING_ONLY
from tests.support.synthetic import load_module


def sources(text: str) -> Sources:
    return Sources(lambda path: text if path == LAYER else None)


def check(text: str) -> Any:
    return PATCH.check(sources(text))


def test_the_gate_is_reported_with_its_first_operand() -> None:
    # The codemod's cases (the change, the nightly gate, drift) are in the package's cases.py.
    assert check(BEFORE).anchors[0].description.startswith("a `kwargs` gate whose body maps")
    assert AFTER.count("# forkgen: layer-call-flat-conversion") == 2


def test_composes_with_training_only_conversion_both_ways() -> None:
    src = sources(BEFORE.replace("tree = None\n", "tree = None\nfrom keras.src import dtype_policies\n"))
    TRAINING_ONLY.apply(src)
    first = src.text(LAYER) or ""
    assert "kwargs_may_need_convert" in first
    src = sources(first)
    PATCH.apply(src)
    both = src.text(LAYER) or ""
    assert "if flat_converted is None:" in both and "elif kwargs and self._convert_input_args:" in both
    assert both.index("def _layer_call_kwargs_may_need_convert") < both.index("_LAYER_CALL_FLAT_SCALARS = ")
    # Both patches recognise the result as theirs (a re-run of the series is a no-op).
    assert TRAINING_ONLY.check(sources(both)).present
    result = PATCH.check(sources(both))
    assert result.present and result.anchors[0].description.startswith("a `kwargs_may_need_convert` gate")


# --- the patched helper, executed against fake trees ----------------------------------------


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
    module = load_module(AFTER, "synthetic_flat_layer")
    module.tree = fake  # type: ignore[attr-defined]
    return module


TREES = [FakeTree(True, True), FakeTree(False, False), FakeTree(True, False), FakeTree(False, True)]


def test_probe_finds_each_tree_shape() -> None:
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
def test_helper_matches_map_structure(args: Any, kwargs: Any, which: int, fail_on: Any) -> None:
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


def test_tensors_are_leaves_unless_the_tree_nests_them() -> None:
    fake = FakeTree(False, False)
    module = patched(fake)
    t = module.Tensor()
    out = module._layer_call_convert_flat(lambda x: ("c", x), (t,), {"mask": t})
    assert out == ((("c", t),), {"mask": ("c", t)})
    fake.is_nested = lambda x: isinstance(x, module.Tensor) or type(x) in (tuple, list, dict)  # type: ignore[method-assign]
    assert patched(fake)._layer_call_convert_flat(lambda x: x, (t,), {}) is None
    # Subclasses of the scalar types are left to the tree walk.
    assert module._layer_call_convert_flat(lambda x: x, (), {"a": type("S", (str,), {})("s")}) is None
