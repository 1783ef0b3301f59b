"""What `callback-list-idle-batch-end` puts into keras/src/callbacks/callback_list.py.

Parsed by the codemod, never imported. The body of `helpers` is appended to the module (it
captures, after `class CallbackList`, the functions the fast path stands in for, and defines the
guard and the inline run). The bodies of `train_batch_end`, `test_batch_end` and
`predict_batch_end` go first in `CallbackList.on_train_batch_end`, `on_test_batch_end` and
`on_predict_batch_end`, above upstream's body, which runs whenever the fast path does not return.
The comments are the markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def helpers():
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


def train_batch_end(self, batch, logs=None):
    # forkgen: callback-list-idle-batch-end (no-op hooks only: the job runs here, not in the pool)
    if self._async_train and _forkgen_idle_batch_end(
        self, "_on_train_batch_end", ("on_train_batch_end", "on_batch_end")
    ):
        return _forkgen_run_batch_end(self, self._on_train_batch_end, batch, logs)


def test_batch_end(self, batch, logs=None):
    # forkgen: callback-list-idle-batch-end (no-op hooks only: the job runs here, not in the pool)
    if self._async_test and _forkgen_idle_batch_end(self, "_on_test_batch_end", ("on_test_batch_end",)):
        return _forkgen_run_batch_end(self, self._on_test_batch_end, batch, logs)


def predict_batch_end(self, batch, logs=None):
    # forkgen: callback-list-idle-batch-end (no-op hooks only: the job runs here, not in the pool)
    if self._async_predict and _forkgen_idle_batch_end(self, "_on_predict_batch_end", ("on_predict_batch_end",)):
        return _forkgen_run_batch_end(self, self._on_predict_batch_end, batch, logs)
