"""A stand-in for torch that the synthetic torch core.py of `torch-convert-to-tensor-device` (its
cases.py's `CORE_PY`) runs against: its behaviours are handed this module (the fixture
`torch_device_moves`, tests/unit/conftest.py) and give its `torch` and `global_state` to the
module's `import torch` and Keras `global_state` import (`run_module`). The stand-in
logs every move, copy and cast, so the upstream and patched modules can be executed side by side
offline.
"""

from __future__ import annotations

import itertools
from typing import Any

#: Stands for Keras's `global_state` attributes (only "torch_device" is read).
global_state: dict[str, Any] = {}


class _Torch:
    """The few parts of torch that `convert_to_tensor` uses, with torch's comparison and
    aliasing rules: a `device` never equals a `str`; `.to()` to the same device and dtype
    returns the tensor itself, anything else a new tensor."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self._ids = itertools.count()

    class device:  # noqa: N801 - torch's name
        def __init__(self, spec: str) -> None:
            self.type = spec

        def __eq__(self, other: object) -> bool:
            if isinstance(other, _Torch.device):
                return self.type == other.type
            return NotImplemented

        def __hash__(self) -> int:
            return hash(self.type)

        def __repr__(self) -> str:
            return f"device(type={self.type!r})"

    class dtype:  # noqa: N801 - torch's name
        def __init__(self, name: str) -> None:
            self.name = name

        def __eq__(self, other: object) -> bool:
            return isinstance(other, _Torch.dtype) and self.name == other.name

        def __hash__(self) -> int:
            return hash(self.name)

        def __repr__(self) -> str:
            return f"torch.{self.name}"

    class Tensor:
        def __init__(self, owner: _Torch, values: tuple[float, ...] | None, dtype: Any, device: Any,
                     requires_grad: bool = False) -> None:
            self.owner = owner
            self.values = values
            self.dtype = dtype
            self.device = device
            self.requires_grad = requires_grad
            self.serial = next(owner._ids)

        @property
        def is_meta(self) -> bool:
            return bool(self.device.type == "meta")

        def to(self, target: Any) -> _Torch.Tensor:
            self.owner.log.append(f"to({target!r})")
            if isinstance(target, _Torch.dtype):
                if target == self.dtype:
                    return self
                return _Torch.Tensor(self.owner, self.values, target, self.device, self.requires_grad)
            device = target if isinstance(target, _Torch.device) else _Torch.device(target)
            if device == self.device:
                return self
            if self.is_meta:
                raise NotImplementedError("Cannot copy out of meta tensor; no data!")
            return _Torch.Tensor(self.owner, self.values, self.dtype, device, self.requires_grad)

    def is_tensor(self, x: object) -> bool:
        return isinstance(x, _Torch.Tensor)

    def tensor(self, values: tuple[float, ...], dtype: str = "float32", device: str = "cpu",
               requires_grad: bool = False) -> _Torch.Tensor:
        return _Torch.Tensor(self, values, _Torch.dtype(dtype), _Torch.device(device), requires_grad)

    def empty_like(self, x: _Torch.Tensor, device: Any) -> _Torch.Tensor:
        self.log.append(f"empty_like({device!r})")
        target = device if isinstance(device, _Torch.device) else _Torch.device(device)
        return _Torch.Tensor(self, None, x.dtype, target, x.requires_grad)

    def as_tensor(self, x: Any, dtype: Any, device: Any) -> _Torch.Tensor:
        self.log.append("as_tensor")
        values = tuple(x) if isinstance(x, (list, tuple)) else (x,)
        return _Torch.Tensor(self, values, dtype, _Torch.device(device))


torch = _Torch()
