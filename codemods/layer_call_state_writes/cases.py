"""What `layer-call-state-writes` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from codemods.engine import Case, Mutant, piece_text

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
