"""Stand-ins for what the synthetic torch core.py of `torch-variable-value-fast-path` (its
cases.py's `CORE_PY` and `TREE_CORE_PY`) imports under Keras's names, handed to its behaviours as
the fixture `keras_variable` (tests/unit/conftest.py; `run_module`): a `global_state` module holding a
`threading.local`, the stateless-scope functions, a `KerasVariable` with `_maybe_autocast` and
`get_autocast_scope`, and the few parts of torch the getter uses, so the upstream and patched
modules can be executed side by side offline.
"""

from __future__ import annotations

import textwrap
import types
from typing import Any

#: Stands for keras.src.backend.common.global_state: a `threading.local` read by `getattr`.
global_state = types.ModuleType("synthetic_global_state")
exec(  # noqa: S102 - a few lines of this file, executed as the stand-in module
    textwrap.dedent(
        """\
        import threading

        GLOBAL_STATE_TRACKER = threading.local()


        def set_global_attribute(name, value):
            setattr(GLOBAL_STATE_TRACKER, name, value)


        def get_global_attribute(name, default=None):
            found = getattr(GLOBAL_STATE_TRACKER, name, None)
            if found is None and default is not None:
                return default
            return found


        def clear():
            global GLOBAL_STATE_TRACKER
            GLOBAL_STATE_TRACKER = threading.local()
        """
    ),
    global_state.__dict__,
)


def in_stateless_scope() -> bool:
    return global_state.get_global_attribute("stateless_scope") is not None


def get_stateless_scope() -> Any:
    return global_state.get_global_attribute("stateless_scope")


def get_autocast_scope() -> Any:
    return global_state.get_global_attribute("autocast_scope")


class _Scope:
    """Sets one global attribute for the `with` block, then puts the previous value back."""

    NAME = ""

    def __enter__(self) -> Any:
        self._previous = global_state.get_global_attribute(self.NAME)
        global_state.set_global_attribute(self.NAME, self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        global_state.set_global_attribute(self.NAME, self._previous)


class StatelessScope(_Scope):
    NAME = "stateless_scope"

    def __init__(self, mapping: dict[int, Any] | None = None) -> None:
        self.mapping = mapping or {}

    def get_current_value(self, variable: Any) -> Any:
        return self.mapping.get(id(variable))


class AutocastScope(_Scope):
    NAME = "autocast_scope"

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def maybe_cast(self, value: Any) -> Any:
        if value.dtype.startswith("float"):
            return Tensor(value.values, self.dtype, value.device)
        return value


class DeviceScope:
    def __init__(self, device: Any) -> None:
        self.device = device

    def __enter__(self) -> None:
        self._previous = global_state.get_global_attribute("torch_device")
        global_state.set_global_attribute("torch_device", self.device)

    def __exit__(self, *exc_info: object) -> None:
        global_state.set_global_attribute("torch_device", self._previous)


class KerasVariable:
    """Stands for keras.src.backend.common.variables.Variable (the parts `.value` reads)."""

    def __init__(self, value: Any, dtype: str = "float32", autocast: bool = True, trainable: bool = True) -> None:
        self._value = value
        self._shape = (len(value.values),) if value is not None else (2,)
        self._dtype = dtype
        self._autocast = autocast
        self.trainable = trainable
        self._initializer = lambda shape, dtype: Tensor((0.0,) * shape[0], dtype, "cpu")

    def _maybe_autocast(self, value: Any) -> Any:
        autocast_scope = get_autocast_scope()
        if self._autocast and autocast_scope is not None:
            return autocast_scope.maybe_cast(value)
        return value


class Tensor:
    def __init__(self, values: tuple[float, ...] | None, dtype: str = "float32", device: str = "cpu",
                 requires_grad: bool = False) -> None:
        self.values = values
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad


class Parameter(Tensor):
    def __init__(self, tensor: Tensor, requires_grad: bool = True) -> None:
        super().__init__(tensor.values, tensor.dtype, tensor.device, requires_grad)


def _empty(size: tuple[int, ...], dtype: str, device: str) -> Tensor:
    return Tensor(None, dtype, device)


#: The parts of torch the getter uses: `torch.nn.Parameter` and `torch.empty`.
torch = types.SimpleNamespace(nn=types.SimpleNamespace(Parameter=Parameter), empty=_empty)
