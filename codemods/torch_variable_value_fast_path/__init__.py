"""Patch `torch-variable-value-fast-path` (ours, not upstream): the torch backend's
`Variable.value` returns `self._value` straight away when upstream's body would return that
same object.

Upstream's getter (Keras 3.5.0-3.15.1, and keras-nightly 3.16.0.dev2026102704 in
`torch/ops/core.py`) builds the closure `maybe_use_symbolic_tensor` on every read, calls
`in_stateless_scope()`, `self._maybe_autocast(...)` (-> `get_autocast_scope()`) and
`str(get_device()) == "meta"`: three global-state look-ups, about 0.57 us a read. A
Transformer's `train_on_batch` step reads `.value` 128 times. The patch puts a guarded fast
path above the body, which is left as it is and runs whenever the fast path does not return.

Why the fast path returns exactly what the body returns. The body returns `self._value`
itself when: (1) `in_stateless_scope()` is False, so the stateless branch is skipped
(`in_stateless_scope()` is `global_state.get_global_attribute("stateless_scope") is not None`);
(2) `self._value is not None`, so the `else` runs `self._maybe_autocast(self._value)`; (3) that
returns its argument: `_maybe_autocast` returns `value` unless `self._autocast` is true and
`get_autocast_scope()` (`get_global_attribute("autocast_scope")`) is not None; (4)
`maybe_use_symbolic_tensor` returns its argument: it does unless `str(get_device()) == "meta"`,
and `get_device()` is `get_global_attribute("torch_device", None)`, or `DEFAULT_DEVICE` when that
is None; for an exact `str` device, `str(device)` is the device itself, so "not `"meta"`" is
the plain comparison. `get_global_attribute(name)` is `getattr(GLOBAL_STATE_TRACKER, name,
None)` (the default None changes nothing); on an object whose type is exactly
`threading.local`, for a name that the type does not answer itself (none of these three is a
dunder or in `dir(threading.local)`), that is the calling thread's dict's `.get(name)` (the
reasoning of `global-state-lookup-fast-path`, which this patch does not depend on). The fast
path checks exactly (1)-(4) that way, reading the tracker once, and returns `self._value`;
anything else (a scope entered, an autocast scope with an autocast variable, a device that
is "meta" or not an exact `str`, an uninitialised variable, a tracker of another type) runs
the body. The reads have no side effects the body would not have (the thread's dict of the
local is created by `__dict__` as by `getattr`).

The guards that keep it exact. `type(self)._maybe_autocast is` the `_maybe_autocast` of
`KerasVariable` captured at import (one class attribute look-up): the variables Keras makes are
instances of `keras.src.backend.Variable`, an empty subclass of this class, so a guard on the
exact class would never let the fast path run (a first draft had one); the only
method the body calls on `self` that a subclass could override is `_maybe_autocast`, and a
class whose `_maybe_autocast` is not the captured one (its own, or one monkeypatched on any
class of the MRO) runs the body. The module globals the body reaches (`in_stateless_scope`
and `get_device` of this module, `get_autocast_scope` in `_maybe_autocast`'s own globals,
`global_state.get_global_attribute`) are identical to the objects captured right after
`class Variable` when the module was imported; a monkeypatched one runs the body. The
codemod checks `get_device` to be upstream's (above the class); `in_stateless_scope`,
`get_autocast_scope`, `get_global_attribute` and `_maybe_autocast` are identical in every
release 3.5.0-3.15.1 and in keras-nightly (compared by AST). Not guarded, because no code
does it: a `_maybe_autocast` set on one instance's `__dict__`; `_value` or `_autocast`
turned into a descriptor with side effects (the fast path reads `_value` once and then
`_autocast`, where the body reads `_value` twice, the second time just before `_autocast`
inside `_maybe_autocast`: same values, one read fewer); the modules' own `global_state`
names rebound to another module.

TorchDynamo: the getter's comment says `super()` cannot be used there; the fast path calls
nothing but `type`, `dict.get` and comparisons, which Dynamo traces (and a graph break would
fall back to eager, not change results). `get_autocast_scope` is read as an attribute of the
module `_maybe_autocast` belongs to (`sys.modules[_maybe_autocast.__module__]`, captured at
import: the module whose dict is the function's globals), not by subscripting that dict
(version 1): dynamo installs its compiled and resume functions as globals of the modules whose
frames it compiles, and torch 2.5's dynamo guarded a subscripted globals dict on its length, so
each compile that grew it recompiled the others (a train step on a third batch size: 5 new
graphs with version 1, 0 with version 2 on torch 2.5.0). A module attribute is guarded by
identity, on every torch.

Applies from Keras 3.5.0 (`since`): 3.0.0-3.4.1's getter has another shape (no closure, no
meta stub). No switch: the fast path keeps no state and returns what the body would return.
"""

from __future__ import annotations

from codemods.engine import (
    TORCH_CORE_MOVED,
    TORCH_CORE_PY,
    Anchor,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    Prepend,
)

ANCHOR = "Variable.value: def maybe_use_symbolic_tensor(value): / if in_stateless_scope(): / ..."
#: Upstream's getter, 3.5.0-3.15.1 and keras-nightly (its closure is where the body reads the device).
GETTER = """
@property
def value(self):
    def maybe_use_symbolic_tensor(value):
        if str(get_device()) == "meta" and __: ___
        return value
    if in_stateless_scope(): ___
    if self._value is None: ___
    else:
        value = self._maybe_autocast(self._value)
    return maybe_use_symbolic_tensor(value)
"""
#: `get_device()` as 3.5.0-3.15.1 write it: the global "torch_device", else DEFAULT_DEVICE.
GET_DEVICE = """
def get_device():
    device = global_state.get_global_attribute("torch_device", None)
    if device is None:
        return DEFAULT_DEVICE
    return device
"""


class TorchVariableValueFastPath(DeclaredPatch):
    name = "torch-variable-value-fast-path"
    version = "2"
    headers = Headers(
        description="torch Variable.value returns self._value straight away when no stateless scope, no "
        "autocast scope (or an autocast=False variable) and a non-meta str device leave the body nothing to do.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-07",
    )
    files = (TORCH_CORE_PY,)
    moved = TORCH_CORE_MOVED
    since = "3.5.0"
    #: The fast path atop the getter, a blank line above its body; the captured originals after `class Variable`.
    edits = (
        Prepend("Variable.value", "value_fast_path", label=ANCHOR, blank_lines=1,
                description="a fast path returns `self._value` above the unchanged body"),
        Helper(Anchor("", "class Variable(___): ___", reported=False), "module_level"),
    )
    #: The body the fast path mirrors (after forkgen's fast path, when in) and the device it reads.
    relies_on = (
        Anchor("Variable", GETTER, name=ANCHOR, reported=False,
               alternatives=(GETTER.replace("def value(self):\n", "def value(self):\n    if __: ___\n"),)),
        Anchor("", GET_DEVICE, name="def get_device(): (global 'torch_device', else DEFAULT_DEVICE)", reported=False),
        Anchor("", "def get_device(___): ___", name="def get_device()", reported=False),
    )
    details = Details(apply="a fast path returning self._value at the top of Variable.value",
                      present="Variable.value has the fast path (forkgen)", upstream="")


PATCH = TorchVariableValueFastPath()
TorchVariableValueFastPathCommand = PATCH.command
