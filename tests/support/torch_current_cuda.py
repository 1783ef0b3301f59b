"""A stand-in for torch whose current cuda device the tests set, and the checks of the "cuda" fast
paths of patches `torch-ops-plain-tensor-fast-paths` (27) and `torch-mean-metric-fast-paths` (30).

On a GPU machine Keras's torch `get_device()` is the str "cuda", without an index. torch's
`tensor.to("cuda")` returns the tensor itself exactly when it is on the *current* cuda device
(aten's `ensure_has_index` takes the index from the device guard, as `torch.cuda.current_device()`
does), and the current device changes (`torch.cuda.set_device`, `with torch.cuda.device(i)`).
The stand-in follows that rule (`keeps`), counts every `torch.cuda.current_device()` call and
raises from it as a CPU-only torch does, so the patches' helpers (the checkout's `inserted.py`
pieces in tests/unit, the installed fork's functions in tests/equivalence, rebound onto the
stand-in) can be checked on a machine without a GPU: the fast path is taken for "cuda" exactly
when torch's rule keeps every tensor where it is, the current device is asked at each call (a
remembered answer goes stale) and only when a tensor under test is on a cuda device.

`CoreTorch` (the instance `torch`) and `global_state` are what the synthetic torch core.py of
`torch-convert-to-tensor-noop-moves` (its cases.py's `CORE_PY`) is handed for its `import torch`
and Keras `global_state` import (the fixture `torch_current_cuda`, tests/unit/conftest.py): the same
`Device` and dtypes, torch's rules for `.to()` (aten's `to_will_alias`, with `ensure_has_index`),
every `.to()` logged, so the upstream and patched modules can be executed side by side offline.

Imports nothing but the standard library (the equivalence venv has no libcst).
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Iterator
from typing import Any

#: Keras's torch `get_device()` strings the checks try: "cuda", as on a default GPU machine, and
#: the others; those of `NEVER` never take a fast path (an index-less device other than "cuda",
#: whose current device the patches do not ask for, "meta", strings torch rejects).
NEVER = ("mps", "xpu", "meta", "meta:0", "bogus", "CUDA")
DEVICES = ("cpu", "cuda", "cuda:0", "cuda:1", "mps:0", "cpu:0", *NEVER)
#: Where the tensors under test are.
PLACES = ("cpu", "cuda:0", "cuda:1", "mps:0", "meta")


class Device:
    """torch.device: `Device("type")`, `Device("type:index")`, `Device("type", index)` or a copy of
    a `Device`; equal
    when type and index are; never equal to anything else (a str included)."""

    KNOWN = ("cpu", "cuda", "meta", "mps", "xpu")

    def __init__(self, spec: Any, index: int | None = None) -> None:
        if isinstance(spec, Device) and index is None:
            self.type, self.index = spec.type, spec.index
            return
        if not isinstance(spec, str):
            raise TypeError(f"device() received an invalid combination of arguments: {spec!r}")
        kind, _, given = spec.partition(":")
        if kind not in self.KNOWN or (given and not given.isdigit()) or (given and index is not None):
            raise RuntimeError(f"Expected one of cpu, cuda, meta, mps, xpu device type at start of device string: {spec}")
        self.type = kind
        self.index = int(given) if given else index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Device):
            return (self.type, self.index) == (other.type, other.index)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __repr__(self) -> str:
        return f"device(type={self.type!r}" + (f", index={self.index})" if self.index is not None else ")")


class Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class Torch:
    """The parts of torch the two patches' helpers read. `current` is the current cuda device
    (`torch.cuda.current_device()`, counted in `asked`); with `cuda_built` False that call
    raises as a CPU-only torch's does. A tensor's `item()` on a cuda device is a sync: counted
    in `synced`."""

    float32, bfloat16, float16, float64 = Dtype("float32"), Dtype("bfloat16"), Dtype("float16"), Dtype("float64")
    strided = "strided"
    device = Device

    def __init__(self, cuda_built: bool = True) -> None:
        self.cuda_built = cuda_built
        self.current = 0
        self.asked = 0
        self.synced = 0
        torch = self

        class Tensor:
            def __init__(self, place: str, dtype: Dtype | None = None, value: float = 1.0) -> None:
                self.device = Device(place)
                self.dtype = dtype or torch.float32
                self.value = value
                self.layout = torch.strided
                self.requires_grad = False

            @property
            def is_cpu(self) -> bool:
                return bool(self.device.type == "cpu")

            def dim(self) -> int:
                return 0

            def is_inference(self) -> bool:
                return False

            def item(self) -> float:
                if self.device.type != "cpu":
                    torch.synced += 1
                return self.value

        class Parameter(Tensor):
            pass

        def current_device() -> int:
            torch.asked += 1
            if not torch.cuda_built:
                raise AssertionError("Torch not compiled with CUDA enabled")
            return torch.current

        self.Tensor = Tensor
        self.nn = types.SimpleNamespace(Parameter=Parameter)
        self.cuda = types.SimpleNamespace(current_device=current_device)
        self.compiler = types.SimpleNamespace(is_dynamo_compiling=lambda: False, is_compiling=lambda: False)
        self._C = types.SimpleNamespace(
            _is_torch_function_mode_enabled=lambda: False, _len_torch_dispatch_stack=lambda: 0,
            _are_functorch_transforms_active=lambda: False,
        )

    def is_grad_enabled(self) -> bool:
        return True

    def divide(self, total: Any, count: Any) -> tuple[Any, ...]:
        return ("divide", total, count)

    def keeps(self, tensor: Any, device: str) -> bool:
        """torch's answer: Keras's `convert_to_tensor(tensor)` under `get_device() == device`
        returns `tensor` itself (`tensor.to(device)` aliases: the device, its index filled in with
        the current one by `ensure_has_index`, is the tensor's; a meta tensor gets `empty_like`)."""
        try:
            target = Device(device)
        except RuntimeError:
            return False  # upstream raises
        if tensor.device.type == "meta":
            return False
        if target.type == "cuda" and target.index is None:
            target = Device("cuda", self.current)
        elif target.type in ("mps", "xpu") and target.index is None:
            target = Device(target.type, 0)  # their current device, which the stand-in never changes
        return bool(target == tensor.device)


def rebind(namespace: dict[str, Any], functions: tuple[Callable[..., Any], ...]) -> dict[str, Any]:
    """Copies of the installed fork's `functions` that read their globals from `namespace`
    (where the stand-in's parts are), bound there under their names."""
    for function in functions:
        namespace[function.__name__] = types.FunctionType(
            function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__)
    return namespace


def _runs(torch: Torch, sizes: tuple[int, ...]) -> Iterator[tuple[str, int, tuple[str, ...]]]:
    """(get_device(), current cuda device, where each tensor is: every tuple of each size) in an
    order that changes the current device between calls with the same device string and tensors
    (no cuda tensor on a CPU-only torch)."""
    shown = [p for p in PLACES if torch.cuda_built or not p.startswith("cuda")]
    for device in DEVICES:
        for where in itertools.chain(*(itertools.product(shown, repeat=n) for n in sizes)):
            for current in (0, 1, 0):
                yield device, current, where


# -- patch 27: `_forkgen_place` and `_forkgen_plain_tensors` ------------------------------------


def ops_names(torch: Torch) -> dict[str, Any]:
    """What the module_level piece of patch 27 reads when it is executed (its module's names)."""
    core: dict[str, Any] = {"get_device": lambda: torch.keras_device}  # type: ignore[attr-defined]

    class Variable:
        def __init__(self, value: Any) -> None:
            self._value = value

        @property
        def value(self) -> Any:
            return self._value

        def _maybe_autocast(self, value: Any) -> Any:
            return value

    core["Variable"] = Variable
    exec("def convert_to_tensor(x, dtype=None, sparse=None):\n    raise AssertionError('not called')\n", core)
    return {"torch": torch, "convert_to_tensor": core["convert_to_tensor"]}


def ops_standin(namespace: dict[str, Any], torch: Torch) -> dict[str, Any]:
    """The installed module's globals (`namespace`, a copy) with what its module_level piece binds
    from torch and the core module taken from the stand-in, and an empty device memo."""
    names = ops_names(torch)
    core = names["convert_to_tensor"].__globals__
    namespace.update(
        names, _forkgen_convert_to_tensor=names["convert_to_tensor"], _forkgen_core=core,
        _forkgen_variable=core["Variable"], _forkgen_value=core["Variable"].value,
        _forkgen_maybe_autocast=core["Variable"]._maybe_autocast, _forkgen_places={},
        _forkgen_compiling=torch.compiler.is_dynamo_compiling, _forkgen_tensor=torch.Tensor,
        _forkgen_parameter=torch.nn.Parameter, _forkgen_cpu=Device("cpu"),
    )
    return namespace


def check_plain_tensors(namespace: dict[str, Any], torch: Torch) -> int:
    """`_forkgen_plain_tensors` returns the values themselves exactly when torch's rule keeps each
    where it is, for "cuda", "cpu" and indexed devices (never for those of `NEVER`), asking
    for the current cuda device at most once a call and only with a first tensor on a cuda
    device. Returns how many calls took the fast path."""
    plain = namespace["_forkgen_plain_tensors"]
    variable = namespace["_forkgen_variable"]
    taken = 0
    for device, current, where in _runs(torch, (1, 2)):
        for wrapped in (False, True):
            torch.keras_device = device  # type: ignore[attr-defined]
            torch.current = current
            tensors = [torch.nn.Parameter(p) if i else torch.Tensor(p) for i, p in enumerate(where)]
            values = [variable(t) if wrapped and i else t for i, t in enumerate(tensors)]
            asked = torch.asked
            got = plain(tuple(values), frozenset((torch.float32,)))
            keeps = all(torch.keeps(t, device) for t in tensors)
            case = (device, current, where, wrapped, torch.asked - asked)
            assert got is None or got == tensors and all(a is b for a, b in zip(got, tensors, strict=True)), case
            assert (got is not None) == (keeps and device not in NEVER), case
            assert torch.asked - asked <= (device == "cuda" and tensors[0].device.type == "cuda"), case
            taken += got is not None
    return taken


# -- patch 30: `_forkgen_mean_place`, `_forkgen_mean_current`, `_forkgen_mean_state` ------------

_OPS = ("sum", "shape", "cast", "convert_to_tensor", "broadcast_to", "divide_no_nan")


def _op(name: str) -> Callable[..., Any]:
    def op(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{name} is not called by the checks")

    op.__name__ = name
    return op


def mean_names(torch: Torch) -> dict[str, Any]:
    """What the helpers piece of patch 30 reads when it is executed (its module's names), a
    backend that is not torch's (the piece then imports nothing: `mean_standin` sets the rest)."""

    class Metric:
        @property
        def dtype(self) -> Any:
            return self._dtype

    ops = types.SimpleNamespace(**{name: _op(name) for name in _OPS})
    losses = types.SimpleNamespace(loss=types.SimpleNamespace(squeeze_or_expand_to_same_rank=_op("squeeze")))
    return {"backend": types.SimpleNamespace(backend=lambda: "stand-in"), "Metric": Metric, "ops": ops,
            "losses": losses, "reduce_to_samplewise_values": _op("reduce_to_samplewise_values")}


class _Variable:
    """backend.Variable's stand-in: the nine attributes the state check compares."""

    def __init__(self, value: Any) -> None:
        self._value = value
        self._dtype = "float32"
        self._shape = ()
        self._autocast = False

    def assign_add(self, value: Any) -> None: ...
    def assign(self, value: Any) -> None: ...
    def __add__(self, value: Any) -> Any: ...
    def _convert_to_tensor(self, value: Any) -> Any: ...
    def _direct_assign(self, value: Any) -> None: ...
    def _maybe_autocast(self, value: Any) -> Any: ...

    @property
    def value(self) -> Any:
        return self._value

    @property
    def shape(self) -> Any:
        return self._shape

    @property
    def dtype(self) -> Any:
        return self._dtype


_VARIABLE_ATTRIBUTES = (
    _Variable.assign_add, _Variable.assign, _Variable.__add__, _Variable._convert_to_tensor, _Variable._direct_assign,
    _Variable._maybe_autocast, _Variable.value, _Variable.shape, _Variable.dtype,
)


def mean_standin(namespace: dict[str, Any], torch: Torch) -> dict[str, Any]:
    """The module's globals (`namespace`: the executed helpers piece's, or a copy of the installed
    module's) with the stand-in's torch, variables, core module, ops and scopes, empty memos, and
    `_forkgen_mean_accumulate`/`_forkgen_mean_quotient` replaced by recorders (into `namespace["ran"]`)."""
    names = mean_names(torch)
    ran: list[tuple[Any, ...]] = []
    ops = names["ops"]
    namespace.update(
        names, ran=ran, _forkgen_torch=torch, _forkgen_mean_variable=_Variable,
        _FORKGEN_MEAN_VARIABLE_ATTRIBUTES=_VARIABLE_ATTRIBUTES,
        _forkgen_mean_core={"get_device": lambda: torch.keras_device},  # type: ignore[attr-defined]
        _forkgen_in_stateless_scope=lambda: False, _forkgen_get_autocast_scope=lambda: None,
        _forkgen_get_keras_mask=lambda values: None, _forkgen_mean_metric_dtype=names["Metric"].dtype,
        _forkgen_reduce_to_samplewise_values=names["reduce_to_samplewise_values"],
        _forkgen_mean_ops=[(names["reduce_to_samplewise_values"], ops.sum, ops.shape, ops.cast, ops.convert_to_tensor,
                            ops.broadcast_to, ops.divide_no_nan,
                            names["losses"].loss.squeeze_or_expand_to_same_rank)],
        _forkgen_mean_classes={}, _forkgen_mean_places={},
        _forkgen_mean_accumulate=lambda *args: ran.append(("accumulate", *args)),
        _forkgen_mean_quotient=lambda total, count: ran.append(("quotient", total, count)) or "quotient",
    )
    namespace["backend"].get_keras_mask = namespace["_forkgen_get_keras_mask"]
    if "get_keras_mask" in namespace:  # keras-nightly's module imports it
        namespace["get_keras_mask"] = namespace["_forkgen_get_keras_mask"]
    return namespace


def check_mean_state(namespace: dict[str, Any], torch: Torch) -> int:
    """`Mean.update_state`'s and `Mean.result`'s fast paths (through `_forkgen_mean_update` and
    `_forkgen_mean_result`) are taken exactly when torch's rule keeps both variables' parameters
    (and the values) where they are, for "cuda", "cpu" and indexed devices; for "cuda" the
    current device is asked at each call, only with the total on a cuda device; the cuda result
    is the sync-free quotient, the cpu one reads the count. Returns how many updates were taken."""
    metric_class = type("Mean", (namespace["Metric"],), {})
    taken = 0
    for device, current, (total_place, count_place, values_place) in _runs(torch, (3,)):
        torch.keras_device = device  # type: ignore[attr-defined]
        torch.current = current
        where = (total_place, count_place, values_place)
        metric = metric_class()
        metric._dtype = "float32"
        metric.total = _Variable(torch.nn.Parameter(total_place))
        metric.count = _Variable(torch.nn.Parameter(count_place, value=2.0))
        values = torch.Tensor(values_place)
        params = (metric.total._value, metric.count._value)
        kept = device not in NEVER and all(torch.keeps(t, device) for t in params)
        case = (device, current, where)

        asked, ran = torch.asked, len(namespace["ran"])
        found = namespace["_forkgen_mean_state"](metric)
        assert (found is not None) == kept, case
        if found is not None:
            assert found[0] is params[0] and found[1] is params[1] and found[3] == device, case
            assert found[2] == params[0].device and isinstance(found[2], Device), case
        assert torch.asked - asked <= (device == "cuda" and total_place.startswith("cuda")), case

        asked = torch.asked
        updated = namespace["_forkgen_mean_update"](metric, values, None)
        assert updated == (kept and torch.keeps(values, device)), case
        assert torch.asked - asked <= (device == "cuda" and total_place.startswith("cuda")), case
        if updated:
            assert namespace["ran"][ran:] == [("accumulate", *params, values, None, 0, device)], case
            taken += 1

        synced, ran = torch.synced, len(namespace["ran"])
        result = namespace["_forkgen_mean_result"](metric)
        assert torch.synced == synced, case  # no `item()` off the cpu
        if kept and params[0].device.type == "cuda":
            assert result == "quotient" and namespace["ran"][ran:] == [("quotient", *params)], case
        else:
            assert namespace["ran"][ran:] == [], case
            assert result is None or (kept and params[0].is_cpu), case
    return taken


# -- patch 50 (torch-convert-to-tensor-noop-moves): what its synthetic core.py runs against -------

#: Stands for Keras's `global_state` attributes (only "torch_device" is read).
global_state: dict[str, Any] = {}


class CoreCuda:
    """torch.cuda's `current_device()`: the current cuda device's index (`current`, which
    `torch.cuda.set_device` sets), counting how often it is asked (`asked`)."""

    def __init__(self) -> None:
        self.current = 0
        self.asked = 0

    def current_device(self) -> int:
        self.asked += 1
        return self.current

    def set_device(self, index: int) -> None:
        self.current = index


class CoreTorch:
    """The few parts of torch that `convert_to_tensor` uses, with torch's rules: a `device`
    never equals a `str`; `.to()` returns the tensor itself when dtype and device (an index-less
    non-cpu device taken as that kind's current device: `cuda.current` for "cuda", index 0 for
    the others) are the tensor's, else a new tensor; a torch-function mode (`mode_enabled`) sees
    every `.to()` and may answer it. `log` holds every call; `moves` each `.to()`'s target and
    whether it returned the tensor itself."""

    device = Device
    float32 = Dtype("float32")
    int32 = Dtype("int32")
    float64 = Dtype("float64")

    def __init__(self) -> None:
        self.log: list[str] = []
        self.moves: list[tuple[str, bool]] = []
        self.cuda = CoreCuda()
        self._ids = itertools.count()
        self.mode: Any = None
        torch = self

        class Tensor:
            def __init__(self, values: tuple[float, ...] | None, dtype: Any, device: Any,
                         requires_grad: bool = False) -> None:
                self.values = values
                self.dtype = dtype
                self.device = device
                self.requires_grad = requires_grad
                self.serial = next(torch._ids)

            @property
            def is_meta(self) -> bool:
                return bool(self.device.type == "meta")

            def to(self, target: Any) -> Any:
                out = self._to(target)
                torch.moves.append((repr(target), out is self))
                return out

            def _to(self, target: Any) -> Any:
                torch.log.append(f"to({target!r})")
                if torch.mode is not None:
                    return torch.mode(self, target)
                if isinstance(target, Dtype):
                    if target is self.dtype:
                        return self
                    return Tensor(self.values, target, self.device, self.requires_grad)
                device = Device(target)
                if device.type != "cpu" and device.index is None:
                    # ensure_has_index: the current device of that kind
                    device.index = torch.cuda.current if device.type == "cuda" else 0
                if device == self.device:
                    return self
                if self.is_meta:
                    raise NotImplementedError("Cannot copy out of meta tensor; no data!")
                return Tensor(self.values, self.dtype, device, self.requires_grad)

        class Parameter(Tensor):
            pass

        class Logged(Tensor):
            """A subclass overriding `.to` (as a `__torch_function__` subclass may)."""

            def to(self, target: Any) -> Any:
                torch.log.append("Logged.to")
                return super().to(target)

        class _C:
            @staticmethod
            def _is_torch_function_mode_enabled() -> bool:
                return torch.mode is not None

        class nn:  # noqa: N801 - torch's name
            pass

        nn.Parameter = Parameter  # type: ignore[attr-defined]
        self.Tensor = Tensor
        self.Logged = Logged
        self.nn = nn
        self._C = _C

    def is_tensor(self, x: object) -> bool:
        return isinstance(x, self.Tensor)

    def tensor(self, values: tuple[float, ...], dtype: str = "float32", device: str = "cpu",
               requires_grad: bool = False, kind: str = "Tensor") -> Any:
        cls = {"Tensor": self.Tensor, "Parameter": self.nn.Parameter, "Logged": self.Logged}[kind]
        return cls(values, getattr(self, dtype), Device(device), requires_grad)

    def empty_like(self, x: Any, device: Any) -> Any:
        self.log.append(f"empty_like({device!r})")
        return self.Tensor(None, x.dtype, Device(device), x.requires_grad)

    def as_tensor(self, x: Any, dtype: Any, device: Any) -> Any:
        self.log.append("as_tensor")
        values = tuple(x) if isinstance(x, (list, tuple)) else (x,)
        return self.Tensor(values, dtype, Device(device))


torch = CoreTorch()
