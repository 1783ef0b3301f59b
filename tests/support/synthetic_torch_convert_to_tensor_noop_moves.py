"""The synthetic file `torch-convert-to-tensor-noop-moves` anchors on, and a stand-in for torch.

`FILES` holds a minimal `keras/src/backend/torch/core.py` shaped like Keras 3.12-3.15.1's
(written for these tests; only the anchored statements follow Keras): `get_device()` (a `str`),
a `Variable` with `.value`, `to_torch_dtype`, and `convert_to_tensor` whose tensor branch has
`if x.device != device:` around the `is_meta` branch (what `torch-convert-to-tensor-device`
anchors on too) and `if dtype is not None: x = x.to(to_torch_dtype(dtype))`. It runs against
the `torch` stand-in below, which follows torch's rules for `.to()` (aten's `to_will_alias`,
with `ensure_has_index`) and logs every `.to()`, so the upstream and patched modules can be
executed side by side offline.
"""

from __future__ import annotations

import itertools
import textwrap
from typing import Any

from tests.support.torch_current_cuda import Device, Dtype

CORE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/core.py (convert_to_tensor)."""

    from tests.support.synthetic_torch_convert_to_tensor_noop_moves import global_state
    from tests.support.synthetic_torch_convert_to_tensor_noop_moves import torch

    DEFAULT_DEVICE = "cpu"
    DTYPES = {"float32": torch.float32, "int32": torch.int32, "float64": torch.float64}


    class Variable:
        def __init__(self, value):
            self._value = value

        @property
        def value(self):
            return self._value


    def get_device():
        device = global_state.get("torch_device")
        if device is None:
            return DEFAULT_DEVICE
        return device


    def is_tensor(x):
        return torch.is_tensor(x)


    def to_torch_dtype(dtype):
        found = DTYPES.get(dtype)
        if found is None:
            raise ValueError(f"Unsupported dtype for PyTorch: {dtype}")
        return found


    def convert_to_tensor(x, dtype=None, sparse=None, ragged=None):
        if sparse:
            raise ValueError("`sparse=True` is not supported with torch backend")
        if isinstance(x, Variable) or is_tensor(x):
            if isinstance(x, Variable):
                x = x.value
            device = get_device()
            if x.device != device:
                if x.is_meta:
                    x = torch.empty_like(x, device=device)
                else:
                    x = x.to(device)
            if dtype is not None:
                x = x.to(to_torch_dtype(dtype))
            return x
        return torch.as_tensor(x, dtype=to_torch_dtype(dtype or "float32"), device=get_device())
    '''
)

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    "keras/src/backend/torch/core.py": CORE_PY,
}

#: Stands for Keras's `global_state` attributes (only "torch_device" is read).
global_state: dict[str, Any] = {}


#: torch.device and torch's dtypes: the stand-ins the "cuda" checks of patches 27 and 30 use too.
_Device = Device
_Dtype = Dtype


class _Cuda:
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


class _Torch:
    """The few parts of torch that `convert_to_tensor` uses, with torch's rules: a `device`
    never equals a `str`; `.to()` returns the tensor itself when dtype and device (an index-less
    non-cpu device taken as that kind's current device: `cuda.current` for "cuda", index 0 for
    the others) are the tensor's, else a new tensor; a torch-function mode (`mode_enabled`) sees
    every `.to()` and may answer it. `log` holds every call; `moves` each `.to()`'s target and
    whether it returned the tensor itself."""

    device = _Device
    float32 = _Dtype("float32")
    int32 = _Dtype("int32")
    float64 = _Dtype("float64")

    def __init__(self) -> None:
        self.log: list[str] = []
        self.moves: list[tuple[str, bool]] = []
        self.cuda = _Cuda()
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
                if isinstance(target, _Dtype):
                    if target is self.dtype:
                        return self
                    return Tensor(self.values, target, self.device, self.requires_grad)
                device = _Device(target)
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
        return cls(values, getattr(self, dtype), _Device(device), requires_grad)

    def empty_like(self, x: Any, device: Any) -> Any:
        self.log.append(f"empty_like({device!r})")
        return self.Tensor(None, x.dtype, _Device(device), x.requires_grad)

    def as_tensor(self, x: Any, dtype: Any, device: Any) -> Any:
        self.log.append("as_tensor")
        values = tuple(x) if isinstance(x, (list, tuple)) else (x,)
        return self.Tensor(values, dtype, _Device(device))


torch = _Torch()
