"""Patch functional-graph-fast-paths (ours) on synthetic symbolic_arguments.py / functional.py:
what the cases (codemods/functional_graph_fast_paths/cases.py) cannot say: its place in the
series, and the patched `fill_in` executed against the unpatched one on a stand-in tree."""

from __future__ import annotations

from codemods import series
from codemods.functional_graph_fast_paths import PATCH
from codemods.functional_graph_fast_paths import cases as synthetic
from codemods.functional_graph_fast_paths.cases import SA_AFTER

SA, FN = synthetic.SYMBOLIC_ARGUMENTS, synthetic.FUNCTIONAL
SA_PY = synthetic.SYMBOLIC_ARGUMENTS_PY


def test_patch_is_registered_last_with_both_files() -> None:
    assert series.SERIES_PACKAGES.index("codemods.functional_graph_fast_paths") == 17  # 18th (patch 19 came after)
    assert PATCH.files == (SA, FN)
    assert (PATCH.name, PATCH.version, PATCH.switch, PATCH.since) == ("functional-graph-fast-paths", "1", None, "3.6.0")


def test_patched_fill_in_matches_upstream_on_a_stand_in() -> None:
    """Execute both versions of the synthetic class with a tiny tree and KerasTensor."""
    import types

    class KerasTensor:
        pass

    class Sub(KerasTensor):
        pass

    def map_structure(fn, s):
        if isinstance(s, tuple):
            return tuple(map_structure(fn, x) for x in s)
        if isinstance(s, list):
            return [map_structure(fn, x) for x in s]
        if isinstance(s, dict):
            return {k: map_structure(fn, v) for k, v in s.items()}
        return fn(s)

    def load(text: str) -> type:
        body = "\n".join(line for line in text.splitlines() if not line.startswith("from "))
        namespace = {"tree": types.SimpleNamespace(map_structure=map_structure), "KerasTensor": KerasTensor}
        exec(compile(body, "<synthetic>", "exec"), namespace)  # noqa: S102
        return namespace["SymbolicArguments"]

    before, after = load(SA_PY), load(SA_AFTER)
    a, b, c, s = KerasTensor(), KerasTensor(), KerasTensor(), Sub()
    values = {id(a): "A", id(b): "B", id(s): "S"}
    cases = [((a, b), {}), ((a, b, c), {}), ((), {}), ((a, s), {}), ((a, [b]), {}), ((a, b), {"k": c}), ((a, 1), {})]
    fast_hits = 0
    for args, kwargs in cases:
        old, new = before(*args, **kwargs).fill_in(values), after(*args, **kwargs).fill_in(values)
        assert old == new and type(new[0]) is type(old[0]) and type(new[1]) is type(old[1])
        fast_hits += all(type(x) is KerasTensor for x in args) and not kwargs
    assert fast_hits == 3
