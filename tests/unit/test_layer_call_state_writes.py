"""Patch layer-call-state-writes (keras-team/keras#23200): the patched Layer behaves as upstream's, with
fewer attribute writes (what it makes of the code: its cases, codemods/layer_call_state_writes/cases.py)."""

from __future__ import annotations

from typing import Any

from codemods.engine import Outcome, Sources
from codemods.layer_call_state_writes import PATCH
from codemods.layer_call_state_writes.cases import AFTER, BEFORE


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


def test_the_present_tree_reports_where_the_writes_are() -> None:
    present = PATCH.check(Sources(lambda path: AFTER))
    assert present.outcome is Outcome.APPLIED and present.present
    assert [(a.name, a.line) for a in present.anchors] == [("self._called = True", 9), ("self.built = True", 14)]
