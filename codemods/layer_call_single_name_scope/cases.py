"""What `layer-call-single-name-scope` (keras-team/keras#23301) makes of Layer modules shaped like
Keras's, how upstream's and the patched Layer behave side by side on a Keras-like name-scope
stack (BEFORE, AFTER and NIGHTLY run by `run_module`; both run by tests/unit/test_patch_cases.py),
and the breaks of its inserted code the equivalence suite must catch."""

from __future__ import annotations

import types
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import Case, Mutant, piece_text, run_module

STEP_4 = "with self._open_name_scope(): self._maybe_build(call_spec)"
WITH = "        with self._open_name_scope():\n            self._maybe_build(call_spec)\n"

#: A Layer shaped like Keras 3.2-3.15.1's around step 4 (runnable against the behaviours' `Backend`).
BEFORE = '''\
class Layer:
    def __init__(self, name):
        self.name = name
        self.built = False
        self._parent_path = None

    def __call__(self, *args, **kwargs):
        call_spec = CallSpec(args, kwargs)

        ################
        # 4. Call build
        with self._open_name_scope():
            self._maybe_build(call_spec)

        ####################
        # 7. Call the layer.
        with self._open_name_scope():
            outputs = self.call(*args, **kwargs)
            self.built = True
        return outputs

    def _maybe_build(self, call_spec):
        if self.built:
            return
        self.build(call_spec.first_arg)

    def build(self, shape):
        with self._open_name_scope():
            self.built_at = backend.current_path()
        self.built = True

    def _open_name_scope(self):
        if self._parent_path is None:
            self._parent_path = backend.current_path()
        return backend.name_scope(self.name, caller=self)
'''
AFTER = BEFORE.replace(WITH, piece_text(__file__, "build_step", "        ", upstream=WITH))
#: keras-nightly's shape (#23301): `_maybe_build` opens the scope after its early return.
NIGHTLY = BEFORE.replace(WITH, "        self._maybe_build(call_spec)\n").replace(
    "        self.build(call_spec.first_arg)\n",
    "        with self._open_name_scope():\n            self._build_from_call_spec(call_spec)\n",
)
#: Keras 3.0-3.1: no `_open_name_scope` yet.
OLD_WITH = "with backend.name_scope(self.name, caller=self):\n"
OLD = BEFORE.replace(WITH, WITH.replace("with self._open_name_scope():\n", OLD_WITH))
OLD_AFTER = AFTER.replace("            with self._open_name_scope():\n                self._maybe_build",
                          f"            {OLD_WITH}                self._maybe_build")
EARLY_RETURN = "        if self.built:\n            return\n"

CASES = (
    Case("guards the build step's scope and nothing else", BEFORE, AFTER,
         detail="guard the name scope around self._maybe_build(call_spec)", anchors=((STEP_4, 12),)),
    Case("the 3.0 scope", OLD, OLD_AFTER),
    Case("keras-nightly opens the scope in _maybe_build (#23301)", NIGHTLY, upstream=True,
         anchors=(("self._maybe_build(call_spec)", 12),)),
    Case("two scopes", BEFORE.replace(WITH, WITH + WITH),
         drift=f":12: anchor '{STEP_4}': expected exactly one `{STEP_4}` in Layer.__call__; found 2 unguarded"),
    Case("scope around more", BEFORE.replace(WITH, WITH + "            self.counted = True\n"),
         drift=f":13: anchor '{STEP_4}': expected `{STEP_4}` in Layer.__call__, or nightly's scope inside "
         "_maybe_build; found 1 `self._maybe_build(call_spec)` and 0 scope(s) in _maybe_build"),
    Case("scope gone without nightly's", BEFORE.replace(WITH, "        self._maybe_build(call_spec)\n"),
         drift=f":12: anchor '{STEP_4}': expected `{STEP_4}` in Layer.__call__, or nightly's scope inside "
         "_maybe_build; found 1 `self._maybe_build(call_spec)` and 0 scope(s) in _maybe_build"),
    Case("early return reshaped", BEFORE.replace(EARLY_RETURN, "        if self.built and self.ok:\n            return\n"),
         drift=":12: anchor 'if self.built: return': expected as the first statement of Layer._maybe_build; "
         "found another statement"),
    Case("early return gone", BEFORE.replace(EARLY_RETURN, ""),
         drift=":12: anchor 'if self.built: return': expected as the first statement of Layer._maybe_build; "
         "found another statement"),
    Case("no _maybe_build", BEFORE.replace("    def _maybe_build(", "    def maybe_build("),
         drift=":1: anchor 'Layer._maybe_build': expected exactly one def _maybe_build; found 0"),
    Case("unmarked guard", AFTER.replace("  # forkgen: layer-call-single-name-scope", ""),
         drift=f":12: anchor '{STEP_4}': expected unguarded, or guarded by forkgen; found a guard without forkgen's marker"),
)

MUTANTS = (
    Mutant("a layer that is not built builds outside its scope",
           '    if self.built and backend.backend() != "tensorflow":  # forkgen: layer-call-single-name-scope\n',
           '    if backend.backend() != "tensorflow":  # forkgen: layer-call-single-name-scope\n'),
)


# -- behaviours: upstream's and the patched Layer see the same name-scope paths, with fewer scopes


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
    module = run_module(source, "single_scope_layer")
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
def same_paths_fewer_scopes(plan: list[tuple[int, bool]], backend_name: str) -> None:
    upstream = run(BEFORE, backend_name, plan)
    patched = run(AFTER, backend_name, plan)
    assert patched[:3] == upstream[:3]
    assert patched[4] < upstream[4]  # the second and third calls skip one scope per layer


@settings(max_examples=100, deadline=None)
@given(plan=PLANS)
def tensorflow_graph_names_are_kept(plan: list[tuple[int, bool]]) -> None:
    upstream = run(BEFORE, "tensorflow", plan)
    assert run(AFTER, "tensorflow", plan) == upstream
    # What the patch keeps on TF: upstream's call scopes of a built layer are `<name>_1` ...
    assert any(name.endswith("_1") for name in upstream[3])
    # ... and nightly's shape would name them differently.
    assert run(NIGHTLY.replace("self._build_from_call_spec(call_spec)", "self.build(call_spec.first_arg)"),
               "tensorflow", plan)[3] != upstream[3]


BEHAVIOURS = (same_paths_fewer_scopes, tensorflow_graph_names_are_kept)
