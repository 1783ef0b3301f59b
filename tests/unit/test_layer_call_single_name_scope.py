"""Patch layer-call-single-name-scope (keras-team/keras#23301): upstream's and the patched Layer
(codemods/layer_call_single_name_scope/cases.py) side by side on a Keras-like name-scope stack;
the codemod's cases and drift are in that cases.py."""

from __future__ import annotations

import types
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.layer_call_single_name_scope.cases import AFTER, BEFORE, NIGHTLY
from tests.support.synthetic import load_module


class Backend:
    """Keras's name-scope stack (dedup of the same caller and name; a caller's `_parent_path`
    overrides the stack) and, for "tensorflow" in a graph, TF's uniquified graph scopes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stack: list[Any] = []
        self.graph_names: set[str] = set()
        self.graph_stack: list[str] = []
        self.entered = 0
        backend = self

        class name_scope:  # noqa: N801 - Keras's name
            def __init__(self, name: str, caller: Any = None) -> None:
                self.name, self.caller, self.pushed = name, caller, False
                self.override = getattr(caller, "_parent_path", None)

            def __enter__(self) -> name_scope:
                top = backend.stack[-1] if backend.stack else None
                if top is not None and top.caller is self.caller and top.name == self.name:
                    return self
                backend.stack.append(self)
                backend.entered += 1
                self.pushed = True
                if backend.name == "tensorflow":
                    prefix = backend.graph_stack[-1] + "/" if backend.graph_stack else ""
                    unique, i = prefix + self.name, 0
                    while unique in backend.graph_names:
                        i += 1
                        unique = f"{prefix}{self.name}_{i}"
                    backend.graph_names.add(unique)
                    backend.graph_stack.append(unique)
                return self

            def __exit__(self, *exc: object) -> None:
                if self.pushed:
                    backend.stack.pop()
                    if backend.name == "tensorflow":
                        backend.graph_stack.pop()

        self.name_scope = name_scope

    def backend(self) -> str:
        return self.name

    def current_path(self) -> str:
        parts: list[str] = []
        for entry in self.stack:
            if entry.override is not None:
                parts = [p for p in entry.override.split("/") if p]
            parts.append(entry.name)
        return "/".join(parts)


def classes(source: str, backend: Backend) -> types.ModuleType:
    module = load_module(source, "single_scope_layer")
    module.backend = backend  # type: ignore[attr-defined]
    module.CallSpec = lambda args, kwargs: types.SimpleNamespace(first_arg=args[0])  # type: ignore[attr-defined]
    return module


def run(source: str, backend_name: str, plan: list[tuple[int, bool]]) -> tuple[object, ...]:
    """Build a tree of layers (outer -> middle -> leaf, some built ahead), call it per `plan`,
    and record every path the layers see."""
    backend = Backend(backend_name)
    module = classes(source, backend)
    seen: list[tuple[str, ...]] = []

    class Leaf(module.Layer):  # type: ignore[name-defined,misc]
        def call(self, x: int) -> int:
            seen.append(("call", self.name, backend.current_path(), "/".join(backend.graph_stack)))
            return x + 1

    class Parent(module.Layer):  # type: ignore[name-defined,misc]
        def __init__(self, name: str, children: list[Any]) -> None:
            super().__init__(name)
            self.children = children

        def call(self, x: int) -> int:
            seen.append(("call", self.name, backend.current_path(), "/".join(backend.graph_stack)))
            for child in self.children:
                x = child(x)
            return x

    layers: list[Any] = []
    for depth, (count, prebuilt) in enumerate(plan):
        made = [Leaf(f"leaf{depth}_{i}") for i in range(count)] if depth == len(plan) - 1 else []
        for i in range(count if not made else 0):
            made.append(Parent(f"node{depth}_{i}", layers[-1] if layers else []))
        if prebuilt:
            for layer in made:
                layer.build(1)
        layers.append(made)
    root = Parent("root", layers[0] if layers else [])
    outputs = [root(i) for i in range(3)]
    every = [layer for group in layers for layer in group] + [root]
    facts = sorted((layer.name, layer._parent_path, getattr(layer, "built_at", None)) for layer in every)
    return outputs, seen, facts, sorted(backend.graph_names), backend.entered


PLANS = st.lists(st.tuples(st.integers(1, 2), st.booleans()), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(plan=PLANS, backend_name=st.sampled_from(["torch", "jax", "numpy"]))
def test_same_paths_fewer_scopes(plan: list[tuple[int, bool]], backend_name: str) -> None:
    upstream = run(BEFORE, backend_name, plan)
    patched = run(AFTER, backend_name, plan)
    assert patched[:3] == upstream[:3]
    assert patched[4] < upstream[4]  # the second and third calls skip one scope per layer


@settings(max_examples=100, deadline=None)
@given(plan=PLANS)
def test_tensorflow_graph_names_are_kept(plan: list[tuple[int, bool]]) -> None:
    upstream = run(BEFORE, "tensorflow", plan)
    assert run(AFTER, "tensorflow", plan) == upstream
    # What the patch keeps on TF: upstream's call scopes of a built layer are `<name>_1` ...
    assert any(name.endswith("_1") for name in upstream[3])
    # ... and nightly's shape would name them differently.
    assert run(NIGHTLY.replace("self._build_from_call_spec(call_spec)", "self.build(call_spec.first_arg)"),
               "tensorflow", plan)[3] != upstream[3]
