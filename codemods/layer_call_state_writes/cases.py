"""What `layer-call-state-writes` makes of Layer modules shaped like Keras's, how the patched Layer
behaves beside upstream's (both run by tests/unit/test_patch_cases.py), and the breaks of its
inserted code the equivalence suite must catch."""

from __future__ import annotations

import contextlib
import types
from typing import Any

from codemods.engine import Case, Mutant, Outcome, Sources, piece_text, run_module
from codemods.layer_call_state_writes import PATCH

BEFORE = '''\
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
'''
AFTER = BEFORE.replace(
    "        self._called = True\n", piece_text(__file__, "called_write", "        ", upstream="self._called = True\n")
).replace("            self.built = True\n", piece_text(__file__, "built_write", "            ", upstream="self.built = True\n"))
#: Keras 3.0-3.9 guard `built` themselves (#20880 made the write unconditional in 3.10).
OLD = BEFORE.replace("            self.built = True\n", "            if not self.built:\n                self.built = True\n")

CASES = (
    Case("guards both writes and nothing else", BEFORE, AFTER, detail="guard self._called and self.built",
         anchors=(("self._called = True", 8), ("self.built = True", 12))),
    Case("guards only _called where the release guards built", OLD,
         OLD.replace("        self._called = True\n",
                     "        if not self._called:  # forkgen: layer-call-state-writes\n            self._called = True\n"),
         detail="guard self._called"),
    Case("keras-nightly guards both (#23200)", AFTER.replace("  # forkgen: layer-call-state-writes", ""), upstream=True),
    Case("a write gone", BEFORE.replace("        self._called = True\n", ""), drift="0 unguarded and 0 guarded"),
    Case("a write twice", BEFORE.replace("        self._called = True\n", "        self._called = True\n" * 2),
         drift="2 unguarded and 0 guarded"),
    Case("another value", BEFORE.replace("            self.built = True\n", "            self.built = 1\n"),
         drift="0 unguarded and 0 guarded"),
)

MUTANTS = (
    Mutant("the _called guard inverted", "    if not self._called:  # forkgen: layer-call-state-writes\n",
           "    if self._called:  # forkgen: layer-call-state-writes\n"),
    Mutant("the built guard inverted", "    if not self.built:  # forkgen: layer-call-state-writes\n",
           "    if self.built:  # forkgen: layer-call-state-writes\n"),
)


# -- behaviours: the patched Layer's state is upstream's, with fewer attribute writes ---------------


class Recorder:
    """A Layer-like base whose attribute writes are counted, as Layer.__setattr__ tracks them."""

    @property
    def writes(self) -> list[str]:
        return self.__dict__.setdefault("_writes", [])  # type: ignore[no-any-return]

    def __setattr__(self, name: str, value: object) -> None:
        self.writes.append(name)
        object.__setattr__(self, name, value)


def make(source: str) -> Any:
    """A Dense-like layer on the synthetic Layer of `source`, its writes recorded."""
    text = "from recorder import Recorder\n" + source.replace("class Layer:", "class Layer(Recorder):")
    layer_class = run_module(text, "layer", {"recorder": types.SimpleNamespace(Recorder=Recorder)}).Layer

    class Dense(layer_class):  # type: ignore[valid-type,misc]
        def _check_super_called(self) -> None:
            pass

        def _scope(self) -> object:
            return contextlib.nullcontext()

        def call(self, x: int) -> int:
            return x + 1

    return Dense()


def run(source: str) -> tuple[list[str], dict[str, object]]:
    layer = make(source)
    outputs = [layer(i) for i in range(3)]
    state = {"_called": layer._called, "built": layer.built, "outputs": outputs}
    return layer.writes, state


def same_state_fewer_writes() -> None:
    upstream_writes, upstream_state = run(BEFORE)
    patched_writes, patched_state = run(AFTER)
    assert patched_state == upstream_state == {"_called": True, "built": True, "outputs": [1, 2, 3]}
    # __init__ writes both once; upstream writes both again on every one of the 3 calls.
    assert upstream_writes.count("_called") == 4 and patched_writes.count("_called") == 2
    assert upstream_writes.count("built") == 4 and patched_writes.count("built") == 2


def a_layer_unbuilt_by_hand_is_built_again() -> None:
    # Upstream writes `built = True` after every call; the guard must still write it when a
    # user (or Keras, e.g. on quantization) reset it to False between calls.
    for source in (BEFORE, AFTER):
        layer = make(source)
        layer(1)
        layer.built = False
        layer(2)
        assert layer.built is True


def the_present_tree_reports_where_the_writes_are() -> None:
    present = PATCH.check(Sources(lambda path: AFTER))
    assert present.outcome is Outcome.APPLIED and present.present
    assert [(a.name, a.line) for a in present.anchors] == [("self._called = True", 9), ("self.built = True", 14)]


BEHAVIOURS = (same_state_fewer_writes, a_layer_unbuilt_by_hand_is_built_again, the_present_tree_reports_where_the_writes_are)
