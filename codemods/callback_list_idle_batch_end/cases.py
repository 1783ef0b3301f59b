"""What `callback-list-idle-batch-end` makes of modules shaped like Keras's callback_list.py and
callback.py (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the
equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant

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


MARKER = '        # forkgen: callback-list-idle-batch-end (no-op hooks only: the job runs here, not in the pool)\n'


#: The guard atop each hook, and the helpers appended (the patch's pieces, as the engine lays them out).
GUARDS = {
    'train': MARKER + '        if self._async_train and _forkgen_idle_batch_end(\n            self, "_on_train_batch_end", ("on_train_batch_end", "on_batch_end")\n        ):\n            return _forkgen_run_batch_end(self, self._on_train_batch_end, batch, logs)\n',
    'test': MARKER + '        if self._async_test and _forkgen_idle_batch_end(self, "_on_test_batch_end", ("on_test_batch_end",)):\n            return _forkgen_run_batch_end(self, self._on_test_batch_end, batch, logs)\n',
    'predict': MARKER + '        if self._async_predict and _forkgen_idle_batch_end(self, "_on_predict_batch_end", ("on_predict_batch_end",)):\n            return _forkgen_run_batch_end(self, self._on_predict_batch_end, batch, logs)\n',
}
HELPERS = '''

# forkgen: callback-list-idle-batch-end (upstream's functions the inline run stands in for)
_forkgen_async_dispatch = CallbackList._async_dispatch
_forkgen_batch_end_jobs = {
    "_on_train_batch_end": CallbackList._on_train_batch_end,
    "_on_test_batch_end": CallbackList._on_test_batch_end,
    "_on_predict_batch_end": CallbackList._on_predict_batch_end,
}
_forkgen_noop_hooks = {
    name: Callback.__dict__[name]
    for name in ("on_batch_end", "on_train_batch_end", "on_test_batch_end", "on_predict_batch_end")
}


def _forkgen_idle_batch_end(callback_list, job, hooks):
    """Whether `_async_dispatch(job)` would hand the pool a job that calls only
    `Callback`'s own no-op `hooks` and cannot fail to be submitted: then the
    job may run here, now, with the same effects (see the patch's proof)."""
    if (
        type(callback_list) is not CallbackList
        or CallbackList._async_dispatch is not _forkgen_async_dispatch
        or getattr(CallbackList, job) is not _forkgen_batch_end_jobs[job]
    ):
        return False
    state = callback_list.__dict__
    if "_async_dispatch" in state or job in state:
        return False
    futures = state.get("_futures")
    if type(futures) is not list or futures:
        return False
    executor = state.get("_executor")
    pool_type = concurrent.futures.__dict__.get("ThreadPoolExecutor")
    pool_module = concurrent.futures.__dict__.get("thread")
    if (
        pool_type is None
        or type(executor) is not pool_type
        or getattr(pool_module, "_shutdown", True) is not False
        or executor.__dict__.get("_shutdown", True) is not False
        or executor.__dict__.get("_broken", True) is not False
    ):
        return False
    members = state.get("callbacks")
    if type(members) is not list:
        return False
    for member in members:
        kind = type(member)
        if type(kind) is not type or kind.__getattribute__ is not object.__getattribute__:
            return False
        own = getattr(member, "__dict__", None)
        for hook in hooks:
            if getattr(kind, hook, None) is not _forkgen_noop_hooks[hook]:
                return False
            if own is not None and hook in own:
                return False
    return True


def _forkgen_run_batch_end(callback_list, job, batch, logs):
    """Run `job(batch, logs)` as the pool's worker would: an exception is
    kept in a done future for the next dispatch or flush to raise."""
    try:
        job(batch, logs)
    except BaseException as error:
        future = concurrent.futures.Future()
        future.set_exception(error)
        callback_list._futures.append(future)
'''
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
