"""What `layer-call-proven-steps` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch.

The cases give the patch one file, so its table is empty (`{}`): the table of a whole tree is
tested in tests/unit/test_proven_steps.py."""

from codemods.engine import Case, Mutant, piece_text

#: Step 7's autocast decision, as Keras writes it.
AUTOCAST = '''\
                current_scope = backend.get_autocast_scope()
                new_scope = None
                if current_scope is not None:
                    new_scope = backend.AutocastScope(None)
                elif self.compute_dtype != self.variable_dtype:
                    new_scope = backend.AutocastScope(self.compute_dtype)
                if new_scope is not None:
                    with new_scope:
                        outputs = super().__call__(*args, **kwargs)
                else:
                    outputs = super().__call__(*args, **kwargs)
'''

BEFORE = '''\
from keras.src import backend
from keras.src.backend.common import global_state
from keras.src.distribution import distribution_lib


class Layer(Operation):
    def __call__(self, *args, **kwargs):
        original_args = args
        original_kwargs = kwargs
        call_spec = CallSpec(args, kwargs)
        fast_lane = _layer_call_fast_lane(self, original_args, call_spec)
        if not (fast_lane and _layer_call_fast_lane_spec_passes(self, call_spec.first_arg)):
            self._assert_input_compatibility(call_spec.first_arg)
        if self.built:
            self._maybe_build(call_spec)
        else:
            with self._open_name_scope():
                self._maybe_build(call_spec)
        call_context = self._get_call_context()

        for context_arg in self._call_context_args:
            self._resolve_and_populate_arg(context_arg, call_spec, call_context, kwargs)
        try:
            with self._open_name_scope():
''' + AUTOCAST + '''                if not self.built:
                    self.built = True
        finally:
            self._maybe_reset_call_context()
        return outputs

    def call(self, *args, **kwargs):
        raise NotImplementedError


def _layer_call_fast_lane(layer, args, call_spec):
    return False
'''

LANE = (
    "        fast_lane = _layer_call_fast_lane(self, original_args, call_spec)\n"
    "        if not (fast_lane and _layer_call_fast_lane_spec_passes(self, call_spec.first_arg)):\n"
    "            self._assert_input_compatibility(call_spec.first_arg)\n"
)
CONTEXT = '''\
        call_context = self._get_call_context()

        for context_arg in self._call_context_args:
            self._resolve_and_populate_arg(context_arg, call_spec, call_context, kwargs)
'''
#: Step 7's `with`, as the autocast piece left it.
SCOPE = "            with self._open_name_scope():\n                if proven_steps & 4:"
RESET = "            self._maybe_reset_call_context()\n"
HELPER = piece_text(__file__, "helper").replace("__table", "{}")


def _wrapped(old: str, name: str, indent: str) -> str:
    return piece_text(__file__, name, indent, upstream=old)


AFTER = (
    BEFORE.replace(LANE, LANE + piece_text(__file__, "proven", "        "))
    .replace(CONTEXT, _wrapped(CONTEXT, "call_context", "        "))
    .replace(AUTOCAST, _wrapped(AUTOCAST, "autocast", "                "))
    .replace(SCOPE, "            with (_LAYER_CALL_PROVEN_NO_SCOPE if proven_steps & 1 else self._open_name_scope()):"
                    "  # forkgen: layer-call-proven-steps\n                if proven_steps & 4:")
    .replace(RESET, _wrapped(RESET, "reset", "            "))
    .replace("\n\nclass Layer(Operation):", "\n\n" + HELPER + "\n\nclass Layer(Operation):")
)


def _drift(name: str, old: str, new: str, drift: str) -> Case:
    assert BEFORE.count(old) == 1, old
    return Case(name, BEFORE.replace(old, new), drift=drift)


CASES = (
    Case("the flag, the three steps guarded, the table before Layer", BEFORE, AFTER,
         detail="the classes proven skip the name scope, call context and autocast steps "
                "(0 classes: name scope 0; call context 0; autocast 0)",
         anchors=(("the fast lane's check", 12), ("call context", 19), ("name scope", 24), ("autocast", 25),
                  ("context reset", 39), ("class Layer", 6))),
    Case("keras-nightly's bare get_autocast_scope",
         BEFORE.replace("backend.get_autocast_scope()", "get_autocast_scope()"),
         AFTER.replace("backend.get_autocast_scope()", "get_autocast_scope()")),
    _drift("no fast lane", LANE, "", "expected exactly one"),
    _drift("another autocast decision", "                new_scope = None\n", "", "expected exactly one"),
    _drift("the context reset moved out of the finally", RESET, "            pass\n", "expected exactly one"),
    Case("a helper name taken", BEFORE + "\n_layer_call_proven_steps = None\n", drift="_layer_call_proven_steps"),
    Case("half applied", AFTER.replace(_wrapped(RESET, "reset", "            "), RESET),
         drift="expected all pieces present or none"),
)
MUTANTS = (
    Mutant("a class whose proof failed a stored-callable condition skips the step anyway",
           "                steps &= ~bits\n", "                pass\n"),
    Mutant("a layer with a forward hook skips the steps",
           "            or layer._forward_hooks\n", ""),
    Mutant("the outermost call skips the loss clearing with the context",
           "            self._clear_losses()  # what the outermost call's context step does that call() may see",
           "            pass"),
    Mutant("a subclass of a proven class takes its proof",
           "            and _layer_call_proven_object(key) is cls\n", ""),
    Mutant("a module written to after its import keeps its classes' proofs",
           "                return False\n        return True\n", "                pass\n        return True\n"),
    Mutant("the watcher forgets what a monkeypatched name held",
           "                    _layer_call_proven_originals.setdefault((id(mapping), key), then)\n",
           "                    pass\n"),
)
