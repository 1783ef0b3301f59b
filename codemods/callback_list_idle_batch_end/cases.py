"""What `callback-list-idle-batch-end` makes of modules shaped like Keras's callback_list.py and
callback.py (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the
equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant, piece_text

LIST = "keras/src/callbacks/callback_list.py"
CALLBACK = "keras/src/callbacks/callback.py"
CALLBACK_PY = textwrap.dedent(
    '''\
    class Callback:
        @utils.default
        def on_batch_end(self, batch, logs=None):
            """A no-op."""

        @utils.default
        def on_train_batch_end(self, batch, logs=None):
            """Calls on_batch_end."""
            # Kept for old callbacks.
            self.on_batch_end(batch, logs=logs)

        @utils.default
        def on_test_batch_end(self, batch, logs=None):
            """A no-op."""

        @utils.default
        def on_predict_batch_end(self, batch, logs=None):
            """A no-op."""
    '''
)


def hook(mode: str) -> str:
    return (f"    def on_{mode}_batch_end(self, batch, logs=None):\n"
            f"        if self._async_{mode}:\n"
            f"            self._async_dispatch(self._on_{mode}_batch_end, batch, logs)\n"
            "        else:\n"
            f"            self._on_{mode}_batch_end(batch, logs)\n\n")


BEFORE = (
    "import concurrent.futures\n\n"
    "from keras.src.callbacks.callback import Callback\n\n\n"
    "class CallbackList(Callback):\n"
    "    def _async_dispatch(self, fn, *args):\n"
    "        for future in self._futures:\n"
    "            if future.done():\n"
    "                future.result()\n"
    "                self._futures.remove(future)\n"
    "        future = self._executor.submit(fn, *args)\n"
    "        self._futures.append(future)\n\n"
    + "".join(hook(m) for m in ("train", "test", "predict"))
    + "    def _on_train_batch_end(self, batch, logs=None):\n        pass\n\n"
    "    def _on_test_batch_end(self, batch, logs=None):\n        pass\n\n"
    "    def _on_predict_batch_end(self, batch, logs=None):\n        pass\n"
)


#: The guard atop each hook, and the helpers appended (the patch's pieces, as the engine lays them out).
GUARDS = {mode: piece_text(__file__, f"{mode}_batch_end", " " * 8) for mode in ("train", "test", "predict")}
HELPERS = "\n\n" + piece_text(__file__, "helpers")
AFTER = BEFORE
for _mode, _guard in GUARDS.items():
    _head = f"    def on_{_mode}_batch_end(self, batch, logs=None):\n"
    AFTER = AFTER.replace(_head, _head + _guard)
AFTER += HELPERS


def tree(callback_list: str, callback: str = CALLBACK_PY) -> dict[str, str]:
    return {LIST: callback_list, CALLBACK: callback}


def drift(name: str, callback_list: str, words: str, callback: str = CALLBACK_PY) -> Case:
    return Case(name, tree(callback_list, callback), drift=words)


CASES = (
    Case("a guard atop each batch-end hook, the helpers appended", tree(BEFORE), {LIST: AFTER},
         detail="batch-end hooks run an idle job inline"),
    drift("another dispatch", BEFORE.replace("                self._futures.remove(future)\n", ""),
          "CallbackList._async_dispatch"),
    drift("a hook dispatching otherwise", BEFORE.replace("self._async_dispatch(self._on_test_batch_end",
                                                         "self._async_dispatch(self._on_predict_batch_end"),
          "CallbackList.on_test_batch_end"),
    drift("no concurrent.futures", BEFORE.replace("import concurrent.futures\n", "import concurrent\n"),
          "import concurrent.futures"),
    drift("a Callback hook that does something", BEFORE,
          f"{CALLBACK}:13: anchor 'Callback.on_test_batch_end': expected a docstring only; found print(batch)",
          CALLBACK_PY.replace('        """A no-op."""\n\n    @utils.default\n    def on_predict',
                              '        """A no-op."""\n        print(batch)\n\n    @utils.default\n    def on_predict')),
    drift("on_train_batch_end calls another hook", BEFORE, "Callback.on_train_batch_end",
          CALLBACK_PY.replace("self.on_batch_end(batch, logs=logs)", "self.on_epoch_end(batch, logs=logs)")),
    drift("a hook without docstring", BEFORE, "'Callback.on_predict_batch_end': expected a docstring only; found no docstring",
          CALLBACK_PY[:CALLBACK_PY.rindex('"""A no-op."""')] + "pass\n"),
)

MUTANTS = (
    Mutant("the train guard forgets on_batch_end, which Callback.on_train_batch_end calls",
           '        self, "_on_train_batch_end", ("on_train_batch_end", "on_batch_end")\n',
           '        self, "_on_train_batch_end", ("on_train_batch_end",)\n'),
    Mutant("pending futures are not reaped first",
           "        if type(futures) is not list or futures:\n", "        if type(futures) is not list:\n"),
    Mutant("a shut-down executor is taken for a working one",
           '            or executor.__dict__.get("_shutdown", True) is not False\n', "\n"),
    Mutant("the inline job's exception is dropped",
           "            callback_list._futures.append(future)\n", "            del future\n"),
    Mutant("upstream's is_default (a marked override runs code) instead of Callback's own function",
           "                if getattr(kind, hook, None) is not _forkgen_noop_hooks[hook]:\n",
           "                if not utils.is_default(getattr(member, hook)):\n"),
)


#: The synthetic files of the series' whole synthetic tree (tests/support/synthetic.py).
FILES = {"keras/src/callbacks/__init__.py": "", **tree(BEFORE)}
