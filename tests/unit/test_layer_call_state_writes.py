"""Patch layer-call-state-writes (keras-team/keras#23200) on synthetic Layer modules."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from libcst.codemod import CodemodTest

from codemods.layer_call_state_writes import PATCH, GuardStateWritesCommand
from codemods.patchlib import AnchorDrift, Outcome, Sources

BEFORE = textwrap.dedent(
    """\
    class Layer:
        def __init__(self):
            self._called = False
            self.built = False

        def __call__(self, *args, **kwargs):
            self._check_super_called()
            self._called = True
            with self._scope():
                # Run the call.
                outputs = self.call(*args)
                self.built = True
            return outputs

        def build(self, shape):
            self.built = True
    """
)
AFTER = textwrap.dedent(
    """\
    class Layer:
        def __init__(self):
            self._called = False
            self.built = False

        def __call__(self, *args, **kwargs):
            self._check_super_called()
            if not self._called:  # forkgen: layer-call-state-writes
                self._called = True
            with self._scope():
                # Run the call.
                outputs = self.call(*args)
                if not self.built:  # forkgen: layer-call-state-writes
                    self.built = True
            return outputs

        def build(self, shape):
            self.built = True
    """
)
# keras-nightly's shape since #23200: the same guards, without forkgen's marker.
NIGHTLY = AFTER.replace("  # forkgen: layer-call-state-writes", "")


def check(source: str) -> Outcome:
    return PATCH.check(Sources(lambda path: source)).outcome


class TestGuardStateWrites(CodemodTest):
    TRANSFORM = GuardStateWritesCommand

    def test_guards_both_writes_and_nothing_else(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)

    def test_noop_on_the_upstream_shape(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY, expected_skip=True)


def test_outcomes() -> None:
    assert check(BEFORE) is Outcome.APPLIED
    assert check(NIGHTLY) is Outcome.UPSTREAM
    present = PATCH.check(Sources(lambda path: AFTER))
    assert present.outcome is Outcome.APPLIED and present.present
    assert [(a.name, a.line) for a in present.anchors] == [("self._called = True", 9), ("self.built = True", 14)]


@pytest.mark.parametrize(
    ("source", "found"),
    [
        (BEFORE.replace("        self._called = True\n", ""), "0 unguarded and 0 guarded"),
        (BEFORE.replace("        self._called = True\n", "        self._called = True\n        self._called = True\n"),
         "2 unguarded and 0 guarded"),
        (BEFORE.replace("            self.built = True\n", "            self.built = 1\n"), "0 unguarded and 0 guarded"),
    ],
    ids=["write gone", "written twice", "another value"],
)
def test_drift(source: str, found: str) -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda path: source))
    assert found in str(caught.value) and str(caught.value).startswith("keras/src/layers/layer.py:")


class Recorder:
    """A Layer-like base whose attribute writes are counted, as Layer.__setattr__ tracks them."""

    @property
    def writes(self) -> list[str]:
        return self.__dict__.setdefault("_writes", [])  # type: ignore[no-any-return]

    def __setattr__(self, name: str, value: object) -> None:
        self.writes.append(name)
        object.__setattr__(self, name, value)


def make(source: str) -> Any:
    namespace: dict[str, object] = {}
    exec(compile(source.replace("class Layer:", "class Layer(Recorder):"), "<layer>", "exec"),
         {"Recorder": Recorder}, namespace)
    layer_class = namespace["Layer"]

    class Dense(layer_class):  # type: ignore[valid-type,misc]
        def _check_super_called(self) -> None:
            pass

        def _scope(self) -> object:
            import contextlib

            return contextlib.nullcontext()

        def call(self, x: int) -> int:
            return x + 1

    return Dense()


def run(source: str) -> tuple[list[str], dict[str, object]]:
    layer = make(source)
    outputs = [layer(i) for i in range(3)]
    state = {"_called": layer._called, "built": layer.built, "outputs": outputs}
    return layer.writes, state


def test_same_state_fewer_writes() -> None:
    upstream_writes, upstream_state = run(BEFORE)
    patched_writes, patched_state = run(AFTER)
    assert patched_state == upstream_state == {"_called": True, "built": True, "outputs": [1, 2, 3]}
    # __init__ writes both once; upstream writes both again on every one of the 3 calls.
    assert upstream_writes.count("_called") == 4 and patched_writes.count("_called") == 2
    assert upstream_writes.count("built") == 4 and patched_writes.count("built") == 2


def test_a_layer_unbuilt_by_hand_is_built_again() -> None:
    # Upstream writes `built = True` after every call; the guard must still write it when a
    # user (or Keras, e.g. on quantization) reset it to False between calls.
    for source in (BEFORE, AFTER):
        layer = make(source)
        layer(1)
        layer.built = False
        layer(2)
        assert layer.built is True


def test_a_release_that_guards_built_itself_gets_only_the_called_guard() -> None:
    # Keras 3.0-3.9: `built` was guarded upstream, `_called` was not.
    old = BEFORE.replace(
        "            self.built = True\n", "            if not self.built:\n                self.built = True\n"
    )
    sources = Sources(lambda path: old)
    first = PATCH.check(sources)
    assert first.outcome is Outcome.APPLIED and not first.present and first.detail == "guard self._called"
    PATCH.apply(sources)
    patched = sources.rendered()["keras/src/layers/layer.py"]
    assert patched.count("# forkgen: layer-call-state-writes") == 1
    again = PATCH.check(Sources(lambda path: patched))
    assert again.outcome is Outcome.APPLIED and again.present
