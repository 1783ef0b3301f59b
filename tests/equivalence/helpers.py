"""Building layers with given call signatures, and watching the CallSpecs they build."""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import keras
import numpy as np
from keras.src.layers import layer as layer_module

CallSpec = layer_module.CallSpec
P = inspect.Parameter

#: CallSpec takes the layer's call-context arguments from Keras 3.10 (variant V4) on.
_TAKES_CONTEXT_ARGS = "call_context_args" in inspect.signature(CallSpec.__init__).parameters


def attention_layer(num_heads: int = 2, key_dim: int = 4, dropout: float = 0.0) -> Any:
    """MultiHeadAttention with seeded dropout where the release allows a seed (3.5+);
    before, without dropout, so that two such layers compute alike."""
    if "seed" in inspect.signature(keras.layers.MultiHeadAttention.__init__).parameters:
        return keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim, dropout=dropout, seed=3)
    return keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim)


def variant() -> str:
    """The CallSpec variant (V1-V4) forkgen found in the installed fork."""
    from keras.src import forkgen_provenance

    return str(forkgen_provenance.PROVENANCE["callspec_variant"])


def patch_applied(name: str) -> bool:
    """Whether the installed fork applies patch `name` (its provenance says "applied") and runs it
    in this process (not disabled by KERAS_FORKGEN_DISABLE, read by the fork at import)."""
    from keras.src import forkgen_provenance

    patches = forkgen_provenance.PROVENANCE.get("patches", [])
    return any(p["name"] == name and p["outcome"] == "applied" for p in patches) and name not in disabled_patches()


def disabled_patches() -> frozenset[str]:
    """The patches the installed fork runs as upstream's statements in this process."""
    try:
        from keras.src import forkgen_switches
    except ImportError:  # a fork built before the switches
        return frozenset()
    return frozenset(forkgen_switches.DISABLED)


def get_mask(x: Any) -> Any:
    """The Keras mask attached to `x` (`backend.get_keras_mask` from 3.6, `_keras_mask` before)."""
    getter = getattr(keras.src.backend, "get_keras_mask", None)
    return getter(x) if getter is not None else getattr(x, "_keras_mask", None)


def set_mask(x: Any, mask: Any) -> None:
    setter = getattr(keras.src.backend, "set_keras_mask", None)
    if setter is not None:
        setter(x, mask)
    else:
        x._keras_mask = mask


def flatten(structure: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts (`keras.tree` is public only from 3.3)."""
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in flatten(item)]
    if isinstance(structure, dict):
        return [leaf for item in structure.values() for leaf in flatten(item)]
    return [structure]


def slow_spec(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The CallSpec the unpatched `__call__` builds for `layer(*args, **kwargs)`.

    Like upstream's constructor it is handed `kwargs` itself, and may pop from it
    (a `training` that call() does not accept): pass a copy, and compare that copy
    with the one handed to the fast constructor.
    """
    if _TAKES_CONTEXT_ARGS:
        return CallSpec(layer._call_signature, layer._call_context_args, args, kwargs)
    return CallSpec(layer._call_signature, args, kwargs)


def fast_spec(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The CallSpec the patched `__call__` builds on its fast path for `layer(*args, **kwargs)`:
    `CallSpec._fast` for one tensor and no kwargs on a layer with a plan, else
    `CallSpec._fast_bound` (which, like `slow_spec`, may pop call-context keywords from
    `kwargs`, and returns None for a call it hands to the slow constructor).
    Whether the guard would take the fast path at all is not checked here."""
    if not kwargs and len(args) == 1 and layer._call_spec_fast_plan is not None:
        return CallSpec._fast(layer._call_spec_fast_plan, args[0])
    return CallSpec._fast_bound(layer._call_spec_fast_bindings, layer, args, kwargs)


def tensor(value: float = 1.0, shape: tuple[int, ...] = (2, 3)) -> Any:
    """An eager backend tensor."""
    return keras.ops.convert_to_tensor(np.full(shape, value, dtype="float32"))


def symbolic(shape: tuple[int, ...] = (2, 3)) -> Any:
    return keras.KerasTensor(shape, dtype="float32")


def to_numpy(x: Any) -> Any:
    return keras.ops.convert_to_numpy(x)


#: Whether the installed fork carries the extension (`CallSpec._fast_bound`: every call
#: that binds). Wheels built with the base patch only do not.
HAS_EXTENSION = "_fast_bound" in CallSpec.__dict__
#: The CallSpec fast path runs in this process: the fork carries it and KERAS_FORKGEN_DISABLE does
#: not switch it off (then CallSpec is upstream's class, without `_fast`).
CALLSPEC_RUNS = "_fast" in CallSpec.__dict__


@dataclass
class Built:
    """One CallSpec built while recording: by which constructor, and the state of the
    kwargs dict it was handed once it returned (the slow constructor pops from it)."""

    path: str  # "slow" (CallSpec.__init__), "fast" (CallSpec._fast) or "bound" (CallSpec._fast_bound)
    spec: Any
    kwargs_after: dict[str, Any] | None
    #: The layer whose `__call__` (or `compute_output_spec`) built it, and the kwargs it was
    #: handed (a shallow copy taken before the constructor ran).
    layer: Any = None
    kwargs_before: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recorder:
    """Every CallSpec built, by which path, and what `call` received."""

    slow: list[Any] = field(default_factory=list)
    fast: list[Any] = field(default_factory=list)
    bound: list[Any] = field(default_factory=list)
    built: list[Built] = field(default_factory=list)
    #: Calls `CallSpec._fast_bound` declined (returned None for): the layer and the kwargs.
    declined: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    #: Declined calls that nonetheless changed the kwargs dict (must stay empty).
    declined_mutations: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    received: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    @property
    def specs(self) -> list[Any]:
        """Every CallSpec built, in the order they were built."""
        return [b.spec for b in self.built]

    @property
    def paths(self) -> list[str]:
        return [b.path for b in self.built]


@contextmanager
def recording() -> Iterator[Recorder]:
    """Record the CallSpecs built by `CallSpec.__init__`, `CallSpec._fast` and (with the
    extension) `CallSpec._fast_bound`, with a copy of the kwargs dict each left behind."""
    recorder = Recorder()
    original_init = CallSpec.__init__
    original_fast = CallSpec._fast.__func__
    original_bound = CallSpec._fast_bound.__func__ if HAS_EXTENSION else None

    def caller() -> Any:
        return sys._getframe(2).f_locals.get("self")

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        recorder.slow.append(self)  # recorded even when binding then raises
        handed = args[-1] if args else kwargs.get("kwargs")
        entry = Built("slow", self, None, caller(), dict(handed) if isinstance(handed, dict) else {})
        recorder.built.append(entry)
        original_init(self, *args, **kwargs)
        entry.kwargs_after = dict(handed) if isinstance(handed, dict) else None

    def fast(cls: type, *args: Any) -> Any:
        spec = original_fast(cls, *args)
        recorder.fast.append(spec)
        recorder.built.append(Built("fast", spec, {}, caller(), {}))
        return spec

    def bound(cls: type, bindings: Any, layer: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        assert original_bound is not None
        before = dict(kwargs)
        spec = original_bound(cls, bindings, layer, args, kwargs)
        if spec is None:  # handed to the slow constructor, which records itself
            recorder.declined.append((layer, before))
            if dict(kwargs) != before or list(kwargs) != list(before):
                recorder.declined_mutations.append((before, dict(kwargs)))
            return spec
        recorder.bound.append(spec)
        recorder.built.append(Built("bound", spec, dict(kwargs), caller(), before))
        return spec

    patches = [mock.patch.object(CallSpec, "__init__", init), mock.patch.object(CallSpec, "_fast", classmethod(fast))]
    if HAS_EXTENSION:
        patches.append(mock.patch.object(CallSpec, "_fast_bound", classmethod(bound)))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield recorder


def layer_with_signature(parameters: list[P], recorder_box: list[Recorder | None] | None = None) -> Any:
    """A Layer whose `call` has exactly `parameters` (after self).

    `call` returns its first tensor-like positional argument (or a constant)
    and, when `recorder_box[0]` is set, records what it received.
    """
    box = recorder_box if recorder_box is not None else [None]

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if box[0] is not None:
            box[0].received.append((args, kwargs))
        for value in (*args, *kwargs.values()):
            if keras.ops.is_tensor(value) or isinstance(value, keras.KerasTensor):
                return value
        return keras.ops.zeros((1,))

    call.__signature__ = inspect.Signature([P("self", P.POSITIONAL_ONLY), *parameters])  # type: ignore[attr-defined]
    # One name for every generated layer, so that error messages compare equal.
    return type("Generated", (keras.layers.Layer,), {"call": call})(name="generated")


def parameters_from_source(spec: str, defaults: dict[str, Any] | None = None) -> list[P]:
    """The parameters of `def f(<spec>)`, e.g. "inputs, /, training=None"."""
    namespace: dict[str, Any] = dict(defaults or {})
    exec(f"def f({spec}):\n    pass\n", namespace)
    return list(inspect.signature(namespace["f"]).parameters.values())


def layer_from_source(
    spec: str, defaults: dict[str, Any] | None = None, recorder_box: list[Recorder | None] | None = None
) -> Any:
    """A Layer whose `call` is `def call(self, <spec>)`, e.g. "inputs, /, training=None"."""
    return layer_with_signature(parameters_from_source(spec, defaults), recorder_box)


def disable_fast_path(model: Any) -> None:
    """Send every layer of `model` (itself included) down the slow path."""
    for layer in model._flatten_layers(include_self=True, recursive=True):
        layer._call_spec_fast_path = False


def catch(fn: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", result) or ("error", (type, message)); object addresses in the
    message (`at 0x7f...`, which differ between any two runs) are blanked."""
    try:
        return "ok", fn()
    except Exception as error:  # noqa: BLE001 - the exception is what gets compared
        return "error", (type(error), re.sub(r"0x[0-9a-fA-F]+", "0x…", str(error)))


def comparable(value: Any, values: bool = True) -> Any:
    """Outputs and received arguments, as values (tensors become lists).

    With `values=False` (a symbolic call, where `call` runs on placeholder
    tensors whose contents are arbitrary) tensors compare by shape and dtype.
    """
    if isinstance(value, keras.KerasTensor):
        return ("KerasTensor", shape_of(value), value.dtype)
    if keras.ops.is_tensor(value) and not values:
        return ("tensor", shape_of(value), str(value.dtype))
    if keras.ops.is_tensor(value):
        try:
            return ("tensor", to_numpy(value).tolist())
        except Exception:  # noqa: BLE001 - a tensor with no data (torch "meta", a tracer)
            return ("tensor without data", shape_of(value), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [comparable(v, values) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, comparable(v, values)) for k, v in value.items()])
    return value


def shape_of(value: Any) -> tuple[Any, ...]:
    """A tensor's shape with every unknown dimension as None (jax traces a `None` batch
    dimension as a symbolic dimension object, a new one for every trace)."""
    return tuple(d if d is None or isinstance(d, int) else None for d in value.shape)


def symbolic_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return any(isinstance(v, keras.KerasTensor) for v in flatten((args, kwargs)))


def spec_values(spec: Any, values: bool = True) -> list[tuple[str, Any]]:
    """A CallSpec's fields as values (see `comparable`), in attribute order: for
    comparing CallSpecs built from different tensor objects (two models)."""
    return [(name, comparable(value, values)) for name, value in vars(spec).items()]


def same_kwargs(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two kwargs dicts left behind by CallSpec constructors: same keys in the same
    order, identical values (or containers rebuilt by each layer's input conversion
    holding identical leaves: `tests.support.equivalence.same`)."""
    from tests.support.equivalence import same

    if a is None or b is None:
        return a is b
    return list(a) == list(b) and all(same(a[k], b[k]) for k in a)


@dataclass
class Twins:
    """`layer(*args, **kwargs)` on a layer as built (fast path allowed) and on its
    twin with the per-layer kill switch set: outcomes and recordings."""

    on: tuple[str, Any]
    off: tuple[str, Any]
    fast: Recorder
    slow: Recorder

    def differences(self, describe: str, values: bool = True) -> list[str]:
        """Every way the two calls differ: outcome, CallSpecs field by field (see
        tests.support.equivalence.differences), the kwargs each constructor left
        behind, and what `call` received. `describe` names the call in messages."""
        from tests.support.equivalence import FIELDS, differences

        found: list[str] = []
        if self.on[0] != self.off[0]:
            return [f"{describe}: outcome {self.on!r} != {self.off!r}"]
        if self.on[0] == "error":
            if self.on[1] != self.off[1]:
                found.append(f"{describe}: error {self.on[1]!r} != {self.off[1]!r}")
        elif comparable(self.on[1], values) != comparable(self.off[1], values):
            found.append(f"{describe}: output {comparable(self.on[1], values)!r} != {comparable(self.off[1], values)!r}")
        if self.slow.fast or self.slow.bound or self.slow.declined:
            found.append(f"{describe}: the kill-switched twin took a fast path")
        if self.fast.declined_mutations:
            found.append(f"{describe}: a declined _fast_bound changed kwargs: {self.fast.declined_mutations!r}")
        if len(self.fast.built) != len(self.slow.built):
            found.append(f"{describe}: {self.fast.paths} CallSpecs built vs {self.slow.paths}")
        for on, off in zip(self.fast.built, self.slow.built, strict=False):
            if on.path != "slow":
                found += [f"{describe}: {on.path} vs slow CallSpec: {d}" for d in differences(on.spec, off.spec)]
                if self.on[0] == "ok" and not same_kwargs(on.kwargs_after, off.kwargs_after):
                    found.append(f"{describe}: kwargs left {on.kwargs_after!r} != {off.kwargs_after!r}")
            else:
                # Both slow: `__call__` converted array-likes (e.g. a numpy bool) afresh for
                # each layer, so the two CallSpecs hold equal, not identical, values.
                mine = [(name, comparable(getattr(on.spec, name, None), values)) for name in FIELDS]
                theirs = [(name, comparable(getattr(off.spec, name, None), values)) for name in FIELDS]
                if mine != theirs:
                    found.append(f"{describe}: slow CallSpecs differ: {mine!r} != {theirs!r}")
                if self.on[0] == "ok" and comparable(on.kwargs_after, values) != comparable(off.kwargs_after, values):
                    found.append(f"{describe}: kwargs left {on.kwargs_after!r} != {off.kwargs_after!r}")
        received_on = [comparable(r, values) for r in self.fast.received]
        received_off = [comparable(r, values) for r in self.slow.received]
        if received_on != received_off:
            found.append(f"{describe}: call() received {received_on!r} != {received_off!r}")
        return found


def run_twins(
    parameters: list[P],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    prepare: Callable[[Any], None] | None = None,
) -> Twins:
    """Build two layers whose `call` has `parameters`, set the kill switch on the second,
    apply `prepare` to both, and call each as `layer(*args, **kwargs)` (a fresh kwargs
    dict each) while recording."""
    results = []
    for fast in (True, False):
        box: list[Recorder | None] = [None]
        layer = layer_with_signature(parameters, box)
        if prepare is not None:
            prepare(layer)
        if not fast:
            layer._call_spec_fast_path = False
        with recording() as recorder:
            box[0] = recorder
            outcome = catch(lambda layer=layer: layer(*args, **dict(kwargs)))
        results.append((outcome, recorder))
    (on, fast_recorder), (off, slow_recorder) = results
    return Twins(on, off, fast_recorder, slow_recorder)


@dataclass
class Compiled:
    """What `torch.compile` made of one call (see `compiled`)."""

    #: Whether `fullgraph=True` traced the call (dynamo could put all of it in one graph).
    fullgraph: bool
    #: The frames dynamo compiled without `fullgraph` (each graph break starts another).
    frames: int
    #: The ops in those frames' graphs.
    ops: int
    #: What the call without `fullgraph` returned.
    result: Any

    def no_worse_than(self, reference: Compiled) -> None:
        """The call compiles no worse than `reference` (the same call with a patch switched off,
        under the same torch): one graph wherever the reference is one graph, and never more
        frames. What a torch's dynamo can trace is measured, not assumed: the reference shows it."""
        assert self.fullgraph or not reference.fullgraph, "the reference traces as one graph, this does not"
        assert self.frames <= reference.frames, (self.frames, reference.frames)


def compiled(fn: Callable[..., Any], *args: Any, prepare: Callable[[], None] | None = None) -> Compiled:
    """`fn(*args)` under `torch.compile` (backend "eager") twice, from a reset dynamo each time:
    with `fullgraph=True` (did it trace as one graph?) and with dynamo's own counter (frames,
    ops, the result). `prepare` runs before each (to clear a cache the traced code fills)."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    try:
        torch._dynamo.reset()
        if prepare is not None:
            prepare()
        try:
            torch.compile(fn, fullgraph=True, backend="eager")(*args)
            fullgraph = True
        except torch._dynamo.exc.Unsupported:
            fullgraph = False
        torch._dynamo.reset()
        if prepare is not None:
            prepare()
        counter = CompileCounter()
        result = torch.compile(fn, backend=counter)(*args)
        return Compiled(fullgraph, int(counter.frame_count), int(counter.op_count), result)
    finally:
        torch._dynamo.reset()


_TRACES_KERAS_STATE: list[bool] = []


def require_dynamo_reading_keras_state() -> None:
    """Skip the calling compile test where this torch's dynamo cannot trace a read of a
    `threading.local`'s `__dict__` in one graph (measured, not assumed from a version: torch
    2.3's raises Unsupported, 2.4 and later trace it). Keras keeps its global state in such a
    local; there upstream's own train step already splits into about 180 graphs, and graph counts
    compared against upstream's are not a measure of a patch. COMPATIBILITY.md names the torch
    the fork's torch.compile support starts with."""
    import threading

    import pytest
    import torch
    import torch._dynamo

    if not _TRACES_KERAS_STATE:
        state = threading.local()
        state.probe = 1

        def read(x: Any) -> Any:
            tracker = state
            return x + tracker.__dict__.get("probe")

        torch._dynamo.reset()
        try:
            torch.compile(read, fullgraph=True, backend="eager")(torch.ones(1))
            _TRACES_KERAS_STATE.append(True)
        except torch._dynamo.exc.Unsupported:
            _TRACES_KERAS_STATE.append(False)
        finally:
            torch._dynamo.reset()
    if not _TRACES_KERAS_STATE[0]:
        pytest.skip(f"torch {torch.__version__}'s dynamo cannot trace a threading.local's __dict__ (Keras's global "
                    "state): torch.compile of Keras splits everywhere there (COMPATIBILITY.md)")


def backend_numpy() -> Any:
    """The torch backend's numpy module, whose functions `ops.numpy`'s call: `backend.numpy` in
    3.x's layout, `backend.ops.numpy` in keras-nightly's (`keras.src.backend` has no `numpy`)."""
    from keras.src import backend as backend_module

    ops_package = getattr(backend_module, "ops", None)
    module = ops_package.numpy if hasattr(ops_package, "numpy") else backend_module.numpy
    assert module.divide_no_nan.__module__.startswith("keras.src.backend.torch."), module
    return module
