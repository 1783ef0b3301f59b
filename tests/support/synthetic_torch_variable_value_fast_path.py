"""The synthetic file `torch-variable-value-fast-path` anchors on, and what it runs against.

`CORE_PY` is a minimal `keras/src/backend/torch/core.py` shaped like Keras 3.5.0-3.15.1's
(written for these tests; only the anchored statements follow Keras): `get_device()` reading
the global "torch_device", and `class Variable(KerasVariable)` whose `value` property has the
closure, the stateless-scope branch, the uninitialised branch and the final return. It runs
against the stand-ins below: a `global_state` module holding a `threading.local`, the
stateless-scope functions, a `KerasVariable` with `_maybe_autocast` and `get_autocast_scope`,
and the few parts of torch the getter uses, so the upstream and patched modules can be executed
side by side offline.

`FILES` holds the tree's core.py, which the torch-convert-to-tensor patches anchor on too: the
`convert_to_tensor` of `synthetic_torch_convert_to_tensor_noop_moves` (this module is
registered after it in `tests/support/synthetic.py`, so its core.py is the one the tree gets)
with that file's toy `Variable` replaced by this Keras-shaped one, below a Keras-shaped
`get_device`.
"""

from __future__ import annotations

import textwrap
import types
from typing import Any

from tests.support import synthetic_torch_convert_to_tensor_noop_moves as noop_moves
from tests.support.synthetic import replace_once

MODULE = "tests.support.synthetic_torch_variable_value_fast_path"

GET_DEVICE = textwrap.dedent(
    """\
    def get_device():
        device = global_state.get_global_attribute("torch_device", None)
        if device is None:
            return DEFAULT_DEVICE
        return device
    """
)

VARIABLE = textwrap.dedent(
    '''\
    class Variable(KerasVariable):
        def _convert_to_tensor(self, value, dtype=None):
            return value

        @property
        def value(self):
            # A comment above the closure, as upstream has one.
            def maybe_use_symbolic_tensor(value):
                # A meta stub for symbolic calls.
                if str(get_device()) == "meta" and str(value.device) != "meta":
                    return torch.nn.Parameter(
                        torch.empty(
                            size=self._shape,
                            dtype=to_torch_dtype(self._dtype),
                            device="meta",
                        ),
                        requires_grad=self.trainable,
                    )
                return value

            if in_stateless_scope():
                scope = get_stateless_scope()
                value = scope.get_current_value(self)
                if value is not None:
                    value = self._maybe_autocast(value)
                    return maybe_use_symbolic_tensor(value)
            if self._value is None:
                # Not initialised: a placeholder.
                value = self._maybe_autocast(
                    self._initializer(self._shape, dtype=self._dtype)
                )
            else:
                value = self._maybe_autocast(self._value)
            return maybe_use_symbolic_tensor(value)
    '''
)

CORE_PY = (
    textwrap.dedent(
        f'''\
        """Synthetic stand-in for keras/src/backend/torch/core.py (Variable.value)."""

        from {MODULE} import KerasVariable
        from {MODULE} import get_stateless_scope
        from {MODULE} import global_state
        from {MODULE} import in_stateless_scope
        from {MODULE} import torch

        DEFAULT_DEVICE = "cpu"


        '''
    )
    + GET_DEVICE
    + "\n\n"
    + textwrap.dedent(
        """\
        def to_torch_dtype(dtype):
            return dtype


        """
    )
    + VARIABLE
)


def _tree_core() -> str:
    """noop-moves' core.py, its `Variable` replaced by the Keras-shaped one under `get_device`."""
    text = noop_moves.CORE_PY
    start = text.index("class Variable:")
    end = text.index("def get_device():")
    text = text[:start] + text[end:]
    old_device = text[text.index("def get_device():"):text.index("def is_tensor(x):")]
    text = replace_once(text, old_device, GET_DEVICE + "\n\n" + VARIABLE + "\n\n")
    return replace_once(
        text,
        "from tests.support.synthetic_torch_convert_to_tensor_noop_moves import global_state\n",
        f"from {MODULE} import KerasVariable\nfrom {MODULE} import get_stateless_scope\n"
        f"from {MODULE} import global_state\nfrom {MODULE} import in_stateless_scope\n",
    )


TREE_CORE_PY = _tree_core()

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    "keras/src/backend/torch/core.py": TREE_CORE_PY,
}


# -- the stand-ins the synthetic core.py runs against ------------------------------------------

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
