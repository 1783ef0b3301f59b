"""Patch any-symbolic-tensors-leaf-fast-path: upstream's and the patched `any_symbolic_tensors` run
side by side on a synthetic keras_tensor module (the codemod's cases and drift are in
codemods/any_symbolic_tensors_leaf_fast_path/cases.py)."""

from __future__ import annotations

import sys
import types

import pytest

from codemods.any_symbolic_tensors_leaf_fast_path import PATCH
from codemods.any_symbolic_tensors_leaf_fast_path import cases as synthetic
from codemods.engine import Outcome, Sources
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
