"""Patch `callback-list-idle-batch-end` (ours, not upstream): when every callback's batch-end
hook is `Callback`'s own no-op, `CallbackList.on_{train,test,predict}_batch_end` run the job they
would hand the thread pool right away, in the calling thread, instead of submitting it.

Upstream (3.12.0-3.15.1 and keras-nightly, the same `callback_list.py`): when no callback that
is not `async_safe` overrides a batch-end hook at construction, each batch's
`on_*_batch_end` calls `_async_dispatch(self._on_*_batch_end, batch, logs)`: it reaps the done
futures (re-raising their exceptions) and `submit`s the job to a `ThreadPoolExecutor`, which
wakes or starts a worker thread that takes the GIL to run `pythonify_logs(logs)` and each
callback's hook. `fit`, `evaluate` and `predict` without callbacks (or with `History` only)
do this on every batch, for nothing: 32 batches of `predict`'s hooks cost 2.8 ms of its
~30 ms (MLP of the issue, torch CPU, 2 busy cores); driven alone, 32 batches of evaluate's
hooks (two scalar logs) take 1.6 ms upstream and 0.4-0.9 ms patched (`pythonify_logs` stays).

The patch puts a guard above each of the three bodies (left as they are, and run whenever the
guard is false): if the dispatch flag is on and `_forkgen_idle_batch_end` holds, it calls
`self._on_*_batch_end(batch, logs)` itself (the very bound method upstream would submit), and an
exception it raises goes into a done `Future` appended to `self._futures`, as the pool's worker
(`_WorkItem.run`, which catches `BaseException` into `set_exception`) would leave it.

Why that is upstream's behaviour. The guard holds only when: (1) `self` is exactly a
`CallbackList` whose `_async_dispatch` and `_on_*_batch_end` (class and instance) are the
functions captured when the module was imported, so upstream would call exactly
`_async_dispatch(self._on_*_batch_end, batch, logs)` with upstream's code; (2)
`self._futures` is an empty list: the reaping loop has nothing to reap or raise; (3)
`self._executor` is exactly a `ThreadPoolExecutor` that is not shut down nor broken, and the
interpreter is not shutting down: `submit` would not raise (its three checks); (4) every member
of `self.callbacks` (a list) is of a class whose metaclass is `type` and whose
`__getattribute__` is `object`'s, whose class-level hook is `Callback`'s own function captured
at import, not shadowed in its instance dict: the hook the job calls is that function. The
codemod checks those functions in `callback.py`: `on_test_batch_end`, `on_predict_batch_end`
and `on_batch_end` are a docstring, `on_train_batch_end` is a docstring and
`self.on_batch_end(batch, logs=logs)` (hence the train guard also checks `on_batch_end`). So
the job calls `pythonify_logs(logs)` (upstream's own, whatever it does: converting tensors,
calling `__float__`, warning) and hooks that do nothing; running it inline does the same
things, once, with the same exception, if any, raised at the later point where upstream raises
it when its worker has finished the job before the next dispatch (the next dispatch's reaping,
then every later one, and `_flush_futures`, which `on_*_end` and `on_epoch_end` call). Upstream
itself decides that point by thread timing: its reaping loop removes from the list it iterates,
so a done future right after another done one is only reaped a dispatch later; the patch is
upstream under the schedule where the worker keeps up. After a successful job upstream keeps a
finished future whose `result()` is None until the next reaping or flush: nothing to raise,
and the flush leaves `_futures` a new empty list either way. `_on_begin`/`_on_end` (the
executor's creation and `shutdown`) are untouched.

What differs, none of it Keras behaviour: the job runs in the calling thread, before the hook
returns, rather than in a pool thread at an unspecified time before the next flush (so a
warning `pythonify_logs` raises, e.g. numpy 2's DeprecationWarning about torch's `__array__`,
is issued from the main thread; a profiler trace shows its ops on the main thread); and no
pool worker thread is started (`threading.enumerate()` during the loop).

Left out: the batch-begin hooks (synchronous upstream: only a `pythonify_logs(None)` and a loop
to save, about 2 us a batch); `on_batch_end` (no trainer calls it); callbacks with a hook of
their own (upstream's way, unchanged). Applies from 3.12.0 (`since`), the first release whose
`callback_list.py` is 3.15.1's (keras-nightly's is too); earlier releases differ in how the
executor is created and how logs are converted. No switch: the fast path keeps no state.
"""

from __future__ import annotations

import libcst as cst

from codemods import engine
from codemods.engine import (
    Anchor,
    AnchorDrift,
    Append,
    DeclaredPatch,
    Details,
    Headers,
    Prepend,
    Sources,
)

CALLBACK_LIST_PY = "keras/src/callbacks/callback_list.py"
#: Read only: the hooks the guard accepts must be no-ops there.
CALLBACK_PY = "keras/src/callbacks/callback.py"
#: Each batch-end hook, its dispatch flag and its job.
HOOKS = {"train": "_async_train", "test": "_async_test", "predict": "_async_predict"}
DISPATCH = """
def _async_dispatch(self, fn, *args):
    for future in self._futures:
        if future.done():
            future.result()
            self._futures.remove(future)
    future = self._executor.submit(fn, *args)
    self._futures.append(future)
"""
BODY = "if {flag}:\n    self._async_dispatch(self._on_{mode}_batch_end, batch, logs)\nelse:\n    self._on_{mode}_batch_end(batch, logs)"
#: `Callback`'s hooks the guard takes for no-ops: a docstring, and on_train_batch_end's call.
NOOPS = {"on_batch_end": "", "on_test_batch_end": "", "on_predict_batch_end": "",
         "on_train_batch_end": "self.on_batch_end(batch, logs=logs)"}


class CallbackListIdleBatchEnd(DeclaredPatch):
    name = "callback-list-idle-batch-end"
    version = "1"
    headers = Headers(
        description="CallbackList's batch-end hooks run the job inline instead of submitting it to the thread "
        "pool when every callback's hook is Callback's own no-op.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-04",
    )
    files = (CALLBACK_LIST_PY,)
    since = "3.12.0"
    edits = (
        *(Prepend(f"CallbackList.on_{mode}_batch_end", f"{mode}_batch_end",
                  description="the job runs inline when every hook is a no-op ({state})") for mode in HOOKS),
        Append("helpers", label="the guard and the inline run"),
    )
    relies_on = (
        Anchor("CallbackList", DISPATCH, name="CallbackList._async_dispatch", description="reaps, then submits"),
        *(Anchor(f"CallbackList.on_{mode}_batch_end", BODY.format(flag=f"self.{flag}", mode=mode), reported=False)
          for mode, flag in HOOKS.items()),
        Anchor("", "import concurrent.futures", reported=False),
        Anchor("", "from keras.src.callbacks.callback import Callback", reported=False),
        *(Anchor("Callback", f"def {hook}(self, batch, logs=None): ___", path=CALLBACK_PY, reported=False)
          for hook in NOOPS),
    )
    details = Details(apply="batch-end hooks run an idle job inline",
                      present="batch-end hooks run an idle job inline (forkgen)", upstream="")

    def verify(self, sources: Sources, analysis: engine.Analysis) -> None:
        """Semantic: `Callback`'s hooks the guard relies on do nothing but what NOOPS says."""
        if not sources.exists(CALLBACK_PY):  # the command run alone on callback_list.py
            return
        for hook, call in NOOPS.items():
            for node, line in self.matches(sources, Anchor("Callback", f"def {hook}(self, batch, logs=None): ___",
                                                           path=CALLBACK_PY)):
                body = list(cst.ensure_type(node, cst.FunctionDef).body.body)
                doc = bool(body) and isinstance(body[0], cst.SimpleStatementLine) and isinstance(
                    getattr(body[0].body[0], "value", None), (cst.SimpleString, cst.ConcatenatedString))
                rest = body[1:]
                if not doc or len(rest) != bool(call) or (call and engine.compile_pattern(call).match(rest[0]) is None):
                    found = "; ".join(cst.Module([]).code_for_node(s.with_changes(leading_lines=())).strip()
                                      for s in rest)
                    raise AnchorDrift(CALLBACK_PY, line, f"Callback.{hook}",
                                      f"a docstring{' and ' + call if call else ''} only", found or "no docstring")


PATCH = CallbackListIdleBatchEnd()
CallbackListIdleBatchEndCommand = PATCH.command
