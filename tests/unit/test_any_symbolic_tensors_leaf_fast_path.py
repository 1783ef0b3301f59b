"""Patch any-symbolic-tensors-leaf-fast-path on synthetic keras_tensor modules."""

from __future__ import annotations

import sys
import types

import pytest

from codemods.any_symbolic_tensors_leaf_fast_path import PATCH
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support import synthetic_any_symbolic_tensors_leaf_fast_path as synthetic
from tests.support.synthetic import load_module

PATH = "keras/src/backend/common/keras_tensor.py"
SOURCE = synthetic.KERAS_TENSOR_PY


def sources(text: str) -> Sources:
    return Sources({PATH: text}.get)


def patched(text: str = SOURCE) -> str:
    s = sources(text)
    assert PATCH.check(s).outcome is Outcome.APPLIED
    PATCH.apply(s)
    return s.rendered()[PATH]


def test_check_and_apply_inserts_the_guard_around_upstreams_statement() -> None:
    check = PATCH.check(sources(SOURCE))
    assert (check.outcome, check.present) == (Outcome.APPLIED, False)
    assert [(a.name, a.line) for a in check.anchors] == [("if tree.is_nested(x):", 16)]
    new = patched()
    assert "# forkgen: any-symbolic-tensors-leaf-fast-path" in new
    assert new.count("tree.is_nested(x)") == 2  # upstream's test, and the learning helper's
    loop = new[new.index("def any_symbolic_tensors"):]
    order = ["isinstance(x, KerasTensor)", "leaf = _forkgen_any_symbolic_leaf_types.get(type(x))", "continue",
             "if tree.is_nested(x):", "if leaf is None:"]
    assert [loop.index(s) for s in order] == sorted(loop.index(s) for s in order)
    assert new.index("_forkgen_any_symbolic_leaf_types = {}") < new.index("def any_symbolic_tensors")
    compile(new, PATH, "exec")


def test_rerun_is_a_noop_with_present() -> None:
    new = patched()
    check = PATCH.check(sources(new))
    assert (check.outcome, check.present) == (Outcome.APPLIED, True)


def test_unmarked_leaf_skip_is_upstream() -> None:
    upstream = SOURCE.replace(
        "            if tree.is_nested(x):\n",
        "            if x is None:\n                continue\n            if tree.is_nested(x):\n",
    )
    assert PATCH.check(sources(upstream)).outcome is Outcome.UPSTREAM


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("            if tree.is_nested(x):\n", "            if tree.is_leaf(x):\n"), "exactly one `if tree.is_nested(x):`"),
        (("            if isinstance(x, KerasTensor):\n                return True\n", ""),
         "the first statement of the loop"),
        (("        for x in items:", "        for y in items:"), "exactly one `for x in ...` loop"),
    ],
)
def test_drift_is_reported_precisely(change: tuple[str, str], message: str) -> None:
    text = SOURCE.replace(*change)
    assert text != SOURCE
    with pytest.raises(AnchorDrift, match="keras_tensor.py") as error:
        PATCH.check(sources(text))
    assert message in str(error.value)


def test_taken_helper_name_is_drift() -> None:
    with pytest.raises(AnchorDrift, match="_forkgen_any_symbolic_learn"):
        PATCH.check(sources(SOURCE + "\n\ndef _forkgen_any_symbolic_learn(x):\n    pass\n"))


def test_statement_after_the_nested_test_is_drift() -> None:
    text = SOURCE.replace("    return False\n", "            print(x)\n    return False\n")
    with pytest.raises(AnchorDrift, match="the loop's second and last statement"):
        PATCH.check(sources(text))


def _modules(monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, types.ModuleType]:
    upstream = load_module(SOURCE, "synthetic_anysym_upstream")
    fork = load_module(patched(), "synthetic_anysym_fork")
    core = types.ModuleType("keras.src.ops.core")
    core.is_tensor = lambda x: isinstance(x, Tensor)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "keras.src.ops.core", core)
    return upstream, fork


class Tensor:
    pass


def test_patched_function_returns_upstreams_value_and_skips_is_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream, fork = _modules(monkeypatch)
    kt_up, kt_fork = upstream.KerasTensor((1,)), fork.KerasTensor((1,))
    cases = [
        ((), None), ((1, "a", None, 2.0, True), None), ((Tensor(), Tensor()), None), (([1, [2]],), None),
        ((Tensor(), {"a": "K"}), None), ((), {"a": Tensor(), "b": ["K"]}), ((object(), ("K",)), {"c": 3}),
    ]
    for args, kwargs in cases:
        def swap(v: object, kt: object) -> object:
            if v == "K":
                return kt
            if isinstance(v, list):
                return [swap(i, kt) for i in v]
            if isinstance(v, tuple):
                return tuple(swap(i, kt) for i in v)
            if isinstance(v, dict):
                return {k: swap(i, kt) for k, i in v.items()}
            return v
        for _ in range(2):
            assert fork.any_symbolic_tensors(swap(args, kt_fork), swap(kwargs, kt_fork)) == upstream.any_symbolic_tensors(
                swap(args, kt_up), swap(kwargs, kt_up)
            ), (args, kwargs)
    tree = synthetic.tree
    before = tree.calls
    fork.any_symbolic_tensors((Tensor(), Tensor(), None, 3, "s"))
    assert tree.calls == before  # Tensor learnt: no is_nested at all
    upstream.any_symbolic_tensors((Tensor(), Tensor(), None, 3, "s"))
    assert tree.calls == before + 5
    assert fork._forkgen_any_symbolic_leaf_types[Tensor] is True
    assert fork._forkgen_any_symbolic_leaf_types[list] is False
    fork.any_symbolic_tensors(([1],))
    assert tree.calls == before + 6  # a nested class keeps upstream's test


def test_nothing_is_learnt_before_ops_core_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    fork = load_module(patched(), "synthetic_anysym_fork_early")
    monkeypatch.delitem(sys.modules, "keras.src.ops.core", raising=False)
    assert fork.any_symbolic_tensors((Tensor(),)) is False
    assert fork._forkgen_any_symbolic_leaf_types == {}
