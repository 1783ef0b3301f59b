"""What `layer-call-single-name-scope` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch. BEFORE, AFTER and NIGHTLY also run side by side in tests/unit/test_layer_call_single_name_scope.py."""

from codemods.engine import Case, Mutant, piece_text

STEP_4 = "with self._open_name_scope(): self._maybe_build(call_spec)"
WITH = "        with self._open_name_scope():\n            self._maybe_build(call_spec)\n"

#: A Layer shaped like Keras 3.2-3.15.1's around step 4 (runnable against the test's `Backend`).
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
