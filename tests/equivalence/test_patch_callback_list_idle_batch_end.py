"""Patch callback-list-idle-batch-end on the installed fork (every backend: CallbackList is shared).

Upstream's `CallbackList.on_{train,test,predict}_batch_end` hand `self._on_*_batch_end` to a
thread pool when dispatch is asynchronous; the patch runs that job inline when every callback's
hook is `Callback`'s own no-op. The oracle is the release under test: the three hooks compiled
from the unpatched source (`tests/equivalence/upstream.py`) put in place of the patched ones.
Each scenario runs twice, patch on and patch off, and must give the same: the calls each
callback sees, the values `pythonify_logs` reads (probes counting `__float__`), the exceptions
raised and at which call, histories, outputs and progress-bar output of real models.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import io
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from keras.src import backend as keras_backend
from keras.src.callbacks.callback_list import CallbackList
from keras.src.utils import python_utils

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "callback-list-idle-batch-end"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply callback-list-idle-batch-end")
#: Backends whose CallbackList dispatches batch-end hooks to a thread pool (`backend.IS_THREAD_SAFE`;
#: not tensorflow): elsewhere the hooks are synchronous and the patched branches never run, so the
#: tests that expect a pool (a worker thread, a pending future, where an exception surfaces) skip.
ASYNC = bool(keras_backend.IS_THREAD_SAFE)
async_only = pytest.mark.skipif(not ASYNC, reason="this backend's CallbackList dispatches synchronously")
MODES = ("train", "test", "predict")
HOOKS = tuple(f"on_{mode}_batch_end" for mode in MODES)


@contextlib.contextmanager
def patch_off() -> Iterator[None]:
    """CallbackList with upstream's three batch-end hooks (the patch off)."""
    with contextlib.ExitStack() as stack:
        for hook in HOOKS:
            stack.enter_context(upstream.upstream(CallbackList, hook))
        yield


def both(scenario: Callable[[], Any]) -> tuple[Any, Any]:
    """The scenario's result with the patch on, then off."""
    on = scenario()
    with patch_off():
        off = scenario()
    return on, off


# -- recorders ----------------------------------------------------------------------------------

LOCK = threading.Lock()


class Probe:
    """A log value whose conversion by `pythonify_logs` is seen (`__float__`)."""

    def __init__(self, seen: list[Any], name: str) -> None:
        self.seen, self.name = seen, name

    def __float__(self) -> float:
        with LOCK:
            self.seen.append(("float", self.name))
        return 1.5


def recorder(hooks: tuple[str, ...], *, async_safe: bool = False, raising: str | None = None,
             marked_default: bool = False) -> Any:
    """A Callback overriding `hooks`, recording (hook, batch, logs); `raising`: that hook raises;
    `marked_default`: its overrides carry `utils.default`'s mark (still code that runs)."""

    def make(hook: str) -> Callable[..., None]:
        def method(self: Any, batch: Any, logs: Any = None) -> None:
            with LOCK:  # and whether it runs where upstream runs it (a pool thread or not)
                self.calls.append((hook, batch, dict(logs or {}), threading.current_thread() is threading.main_thread()))
            if hook == raising:
                raise ValueError(f"{hook} failed at {batch}")

        return python_utils.default(method) if marked_default else method

    namespace: dict[str, Any] = {hook: make(hook) for hook in hooks}
    namespace["async_safe"] = async_safe
    kind = type("Recorder", (keras.callbacks.Callback,), namespace)
    callback = kind()
    callback.calls = []
    return callback


def drive(callbacks: CallbackList, mode: str, batches: int, logs: Callable[[int], Any]) -> list[Any]:
    """One begin/batches/end block of `mode` on `callbacks`, by hand; what each call raised."""
    raised: list[Any] = []

    def call(what: str, *args: Any) -> None:
        try:
            getattr(callbacks, what)(*args)
        except Exception as error:  # the same error, at the same call
            raised.append((what, args[:1], type(error).__name__, str(error)))

    call(f"on_{mode}_begin")
    for batch in range(batches):
        call(f"on_{mode}_batch_begin", batch)
        call(f"on_{mode}_batch_end", batch, logs(batch))
        # Upstream's pool worker keeps up (the schedule the patch takes): where a failed job's
        # exception comes out otherwise depends on thread timing, in upstream itself (its
        # reaping loop removes from the list it iterates, skipping the future after a done one).
        concurrent.futures.wait(list(callbacks._futures))
    if mode == "train":
        call("on_epoch_end", 0, {"loss": 1.0})
    call(f"on_{mode}_end")
    return raised


def outcome(make: Callable[[], list[Any]], mode: str, batches: int = 4,
            logs: Callable[[int], Any] | None = None, after: Callable[[CallbackList], None] | None = None) -> Any:
    members = make()
    seen: list[Any] = []
    callbacks = CallbackList(members, add_history=mode == "train", model=keras.Sequential())
    if after:
        after(callbacks)
    raised = drive(callbacks, mode, batches, logs or (lambda b: {"loss": Probe(seen, f"loss{b}"), "n": b}))
    calls = [sorted(getattr(m, "calls", []), key=repr) for m in callbacks.callbacks]
    return raised, calls, sorted(seen), failed(callbacks), callbacks._executor is None


def failed(callbacks: CallbackList) -> list[str]:
    """The failed jobs the list still holds (upstream also keeps finished successful ones until
    they are reaped, which raise nothing: they are not part of what is compared)."""
    return [repr(f.exception()) for f in callbacks._futures if f.done() and f.exception() is not None]


# -- the fast path and every guard, on CallbackList driven by hand ------------------------------


def test_the_patch_is_in() -> None:
    for hook in HOOKS:
        assert inspect.getsource(getattr(CallbackList, hook)).count(f"# forkgen: {NAME}") == 1
    assert f"# forkgen: {NAME}" not in upstream.upstream_source(inspect.getmodule(CallbackList))


@pytest.mark.parametrize("mode", MODES)
def test_no_callbacks_runs_the_job_inline(mode: str) -> None:
    on, off = both(lambda: outcome(list, mode))
    assert on == off
    # pythonify_logs ran on every batch's logs in both (the probes were converted once each).
    assert on[2] == sorted(("float", f"loss{b}") for b in range(4))


@async_only
def test_the_fast_path_is_taken_and_starts_no_pool_thread() -> None:
    callbacks = CallbackList([], model=keras.Sequential())
    callbacks.on_predict_begin()
    executor = callbacks._executor
    callbacks.on_predict_batch_end(0, {"outputs": np.zeros((2, 3))})
    assert callbacks._futures == [] and not executor._threads
    callbacks.on_predict_end()
    with patch_off():
        callbacks.on_predict_begin()
        executor = callbacks._executor
        callbacks.on_predict_batch_end(0, {"outputs": np.zeros((2, 3))})
        assert len(callbacks._futures) == 1 and executor._threads
        callbacks.on_predict_end()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("async_safe", [False, True])
@pytest.mark.parametrize("which", ["on_batch_end", *HOOKS, "marked default"])
def test_callbacks_with_a_hook_of_their_own(mode: str, async_safe: bool, which: str) -> None:
    hook = f"on_{mode}_batch_end" if which == "marked default" else which

    def make() -> list[Any]:
        return [recorder((hook,), async_safe=async_safe, marked_default=which == "marked default")]

    on, off = both(lambda: outcome(make, mode))
    assert on == off
    expected = 4 if hook == f"on_{mode}_batch_end" or (mode == "train" and hook == "on_batch_end") else 0
    assert len(on[1][0]) == expected


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("hook", ["on_batch_end", *HOOKS])
def test_a_callback_added_after_construction(mode: str, hook: str) -> None:
    # Dispatch was configured asynchronous at construction; the newcomer's hook must still run.
    on, off = both(lambda: outcome(list, mode, after=lambda c: c.callbacks.append(recorder((hook,)))))
    assert on == off


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("async_safe", [False, True])
def test_exceptions_in_a_callback(mode: str, async_safe: bool) -> None:
    make = lambda: [recorder((f"on_{mode}_batch_end",), async_safe=async_safe, raising=f"on_{mode}_batch_end")]  # noqa: E731
    on, off = both(lambda: outcome(make, mode))
    assert on[:3] == off[:3] and on[0]


@async_only
@pytest.mark.parametrize("mode", MODES)
def test_an_exception_in_the_inline_job_is_raised_where_upstream_raises_it(mode: str) -> None:
    # Keys pythonify_logs cannot sort: the job fails; upstream raises at the next dispatch.
    bad = lambda b: {1: 0.0, "a": 1.0} if b == 1 else {"a": 1.0}  # noqa: E731
    on, off = both(lambda: outcome(list, mode, logs=bad))
    assert on[:3] == off[:3]
    # Raised at the next dispatch, and again at each one after (a failed future is never reaped).
    assert on[0][0][:2] == (f"on_{mode}_batch_end", (2,)) and on[0][-1][0] == f"on_{mode}_end"


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_job_left_pending_is_raised_by_the_flush(mode: str) -> None:
    bad = lambda b: {1: 0.0, "a": 1.0} if b == 3 else {"a": 1.0}  # noqa: E731
    on, off = both(lambda: outcome(list, mode, logs=bad))
    assert on[:3] == off[:3] and on[0]


def hook_call(callbacks: CallbackList, mode: str, logs: Any = None) -> Any:
    try:
        getattr(callbacks, f"on_{mode}_batch_end")(0, logs or {"a": 1.0})
        return ("ok", list(callbacks._futures) and "future")
    except Exception as error:
        return ("raised", type(error).__name__, str(error))


GUARDS: dict[str, Callable[[CallbackList], Any]] = {
    "no executor (outside begin/end)": lambda c: setattr(c, "_executor", None),
    "executor shut down": lambda c: c._executor.shutdown(),
    "executor of another type": lambda c: setattr(c, "_executor", concurrent.futures.Executor()),
    "futures not a list": lambda c: setattr(c, "_futures", ()),
    "callbacks a tuple": lambda c: setattr(c, "callbacks", tuple(c.callbacks)),
    "instance _async_dispatch": lambda c: setattr(c, "_async_dispatch", lambda fn, *a: EVENTS.append("dispatch")),
}
EVENTS: list[str] = []


@async_only
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("guard", list(GUARDS))
def test_each_guard_false_takes_upstreams_way(mode: str, guard: str) -> None:
    def scenario() -> Any:
        EVENTS.clear()
        callbacks = CallbackList([], model=keras.Sequential())
        getattr(callbacks, f"on_{mode}_begin")()
        GUARDS[guard](callbacks)
        result = hook_call(callbacks, mode), list(EVENTS)
        callbacks._executor = None
        return result

    on, off = both(scenario)
    assert on == off


@async_only
@pytest.mark.parametrize("mode", MODES)
def test_a_pending_future_is_reaped_as_upstream_does(mode: str) -> None:
    def scenario() -> Any:
        callbacks = CallbackList([], model=keras.Sequential())
        getattr(callbacks, f"on_{mode}_begin")()
        failed: concurrent.futures.Future[Any] = concurrent.futures.Future()
        failed.set_exception(KeyError("earlier"))
        callbacks._futures.append(failed)
        result = hook_call(callbacks, mode)
        callbacks._futures.clear()
        getattr(callbacks, f"on_{mode}_end")()
        return result

    on, off = both(scenario)
    assert on == off == ("raised", "KeyError", "'earlier'")


class Meta(type):
    pass


def odd_members() -> dict[str, Callable[[], Any]]:
    def instance_hook(hook: str) -> Any:
        callback = keras.callbacks.Callback()
        callback.calls = []
        setattr(callback, hook, lambda batch, logs=None: callback.calls.append((hook, batch)))
        return callback

    class Watched(keras.callbacks.Callback):
        def __getattribute__(self, name: str) -> Any:
            if name.startswith("on_") and name.endswith("batch_end"):
                object.__getattribute__(self, "calls").append(("looked up", name))
            return object.__getattribute__(self, name)

    def watched() -> Any:
        callback = Watched()
        callback.calls = []
        return callback

    return {
        "hook set on the instance": lambda: None,  # filled per mode below
        "own __getattribute__": watched,
        "another metaclass": lambda: Meta("M", (keras.callbacks.Callback,), {})(),
    }, instance_hook


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["hook set on the instance", "on_batch_end set on the instance",
                                  "own __getattribute__", "another metaclass"])
def test_members_the_guard_cannot_vouch_for(mode: str, kind: str) -> None:
    makers, instance_hook = odd_members()

    def make() -> list[Any]:
        if kind == "hook set on the instance":
            return [instance_hook(f"on_{mode}_batch_end")]
        if kind == "on_batch_end set on the instance":
            return [instance_hook("on_batch_end")]
        return [makers[kind]()]

    def scenario() -> Any:
        members = make()
        callbacks = CallbackList(members, model=keras.Sequential())
        raised = drive(callbacks, mode, 3, lambda b: {"a": float(b)})
        return raised, [sorted(getattr(m, "calls", []), key=repr) for m in members]

    on, off = both(scenario)
    assert on == off


@async_only
def test_a_subclass_takes_upstreams_way() -> None:
    class Mine(CallbackList):
        def _on_predict_batch_end(self, batch: Any, logs: Any = None) -> None:
            EVENTS.append(f"mine {batch} {threading.current_thread() is threading.main_thread()}")

    def scenario() -> Any:
        EVENTS.clear()
        callbacks = Mine([], model=keras.Sequential())
        drive(callbacks, "predict", 2, lambda b: None)
        return sorted(EVENTS)

    on, off = both(scenario)
    assert on == off == ["mine 0 False", "mine 1 False"]


@async_only
@pytest.mark.parametrize("what", ["_async_dispatch", "_on_predict_batch_end"])
def test_a_monkeypatched_method_takes_upstreams_way(what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    original = getattr(CallbackList, what)

    def spy(self: Any, *args: Any) -> Any:
        EVENTS.append(what)
        return original(self, *args)

    monkeypatch.setattr(CallbackList, what, spy)

    def scenario() -> Any:
        EVENTS.clear()
        drive(CallbackList([], model=keras.Sequential()), "predict", 3, lambda b: {"a": 1.0})
        return list(EVENTS)

    on, off = both(scenario)
    assert on == off == [what] * 3


@settings(max_examples=60)
@given(
    plan=st.lists(st.tuples(st.sampled_from(MODES), st.integers(0, 3),
                            st.sampled_from(["none", "noop", "hook", "safe hook", "raising", "train only",
                                             "bad logs"])),
                  min_size=1, max_size=4),
)
def test_like_upstream_on_any_plan(plan: list[tuple[str, int, str]]) -> None:
    """Blocks of any mode and length on one CallbackList, with members of every kind."""

    def members(kind: str, mode: str) -> list[Any]:
        hook = f"on_{mode}_batch_end"
        return {
            "none": [], "noop": [keras.callbacks.Callback()],
            "hook": [recorder((hook,))], "safe hook": [recorder((hook,), async_safe=True)],
            "raising": [recorder((hook,), async_safe=True, raising=hook)],
            "train only": [recorder(("on_train_batch_end",))], "bad logs": [],
        }[kind]

    def scenario() -> Any:
        results = []
        for mode, batches, kind in plan:
            logs = (lambda b: {1: 0.0, "a": 1.0}) if kind == "bad logs" else (lambda b: {"a": float(b)})
            made = members(kind, mode)
            callbacks = CallbackList(made, model=keras.Sequential())
            raised = drive(callbacks, mode, batches, logs)
            results.append((raised, [sorted(m.calls, key=repr) for m in made if hasattr(m, "calls")],
                            failed(callbacks), callbacks._executor is None))
        return results

    on, off = both(scenario)
    assert on == off


# -- real models: fit, evaluate, predict ---------------------------------------------------------


class LogAll(keras.callbacks.Callback):
    """Records every batch hook and epoch end with the shapes of the logs it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Any] = []

    def _record(self, name: str, step: Any, logs: Any) -> None:
        with LOCK:
            self.calls.append((name, step, sorted((k, np.asarray(v).shape) for k, v in (logs or {}).items())))

    def on_train_batch_begin(self, batch: Any, logs: Any = None) -> None:
        self._record("on_train_batch_begin", batch, logs)

    def on_train_batch_end(self, batch: Any, logs: Any = None) -> None:
        self._record("on_train_batch_end", batch, logs)

    def on_test_batch_begin(self, batch: Any, logs: Any = None) -> None:
        self._record("on_test_batch_begin", batch, logs)

    def on_test_batch_end(self, batch: Any, logs: Any = None) -> None:
        self._record("on_test_batch_end", batch, logs)

    def on_predict_batch_begin(self, batch: Any, logs: Any = None) -> None:
        self._record("on_predict_batch_begin", batch, logs)

    def on_predict_batch_end(self, batch: Any, logs: Any = None) -> None:
        self._record("on_predict_batch_end", batch, logs)

    def on_epoch_end(self, epoch: Any, logs: Any = None) -> None:
        self._record("on_epoch_end", epoch, logs)


def model() -> Any:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


DATA = (np.random.default_rng(0).normal(size=(40, 4)).astype("float32"), np.arange(40) % 3)


def run_model(callbacks: Callable[[], list[Any]], verbose: int) -> Any:
    m = model()
    x, y = DATA
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        history = m.fit(x, y, batch_size=8, epochs=2, verbose=verbose, callbacks=callbacks(),
                        validation_data=(x[:16], y[:16]), shuffle=False).history
        evaluated = m.evaluate(x, y, batch_size=8, verbose=verbose, callbacks=callbacks(), return_dict=True)
        made = callbacks()
        predicted = m.predict(x, batch_size=16, verbose=verbose, callbacks=made)
    # Times masked; of each progress bar, its last state (how many updates it draws depends on
    # the clock: Progbar skips one that comes within its interval of the previous).
    text = re.sub(r"\d+(\.\d+)?(e-?\d+)?\s*(ms|s|us)(/step)?", "T", out.getvalue())
    text = "\n".join(line.rsplit("\r", 1)[-1].replace("\x08", "").rstrip() for line in text.split("\n"))
    return history, evaluated, predicted.tolist(), [sorted(getattr(c, "calls", []), key=repr) for c in made], text


@pytest.mark.skipif(keras.backend.backend() == "numpy", reason="the numpy backend does not train")
@pytest.mark.parametrize("verbose", [0, 1, 2])
@pytest.mark.parametrize("kind", ["none", "history", "log all", "safe log all"])
def test_fit_evaluate_predict_like_upstream(verbose: int, kind: str) -> None:
    def callbacks() -> list[Any]:
        if kind == "none":
            return []
        if kind == "history":
            return [keras.callbacks.History()]
        made = LogAll()
        made.async_safe = kind == "safe log all"
        return [made]

    on, off = both(lambda: run_model(callbacks, verbose))
    assert on == off
