"""Synthetic files for patch operation-call-error-info (keras-team/keras#23183).

`FILES` holds the three Keras-shaped modules the patch anchors on, reduced to the anchors:
`traceback_utils.py` with the wrapper `inject_argument_info_in_traceback` (written here from
its documented behaviour, in our words) and `format_argument_value`, `operation.py` with
`Operation.__call__` and `core.py` with `Cond.__call__`, both wrapping `call_fn` inside
`if traceback_utils.is_traceback_filtering_enabled():` as Keras 3.0.0-3.15.1 do.

`load(files)` executes such a tree (patched or not) against the stand-ins below for the
Keras modules it imports, so the unit tests can run upstream's and the patched code side by
side.
"""

from __future__ import annotations

import builtins
import textwrap
import types
from collections.abc import Mapping
from typing import Any

TRACEBACK_UTILS = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/utils/traceback_utils.py."""

    import inspect
    from functools import wraps

    from keras.src import backend
    from keras.src import tree

    #: Stands for the global `traceback_filtering` attribute.
    STATE = {"traceback_filtering": True}


    def is_traceback_filtering_enabled():
        return STATE["traceback_filtering"]


    def filter_traceback(fn):
        return fn


    def inject_argument_info_in_traceback(fn, object_name=None):
        """`fn`, re-raising what it raises with the arguments of the call listed."""

        @wraps(fn)
        def error_handler(*args, **kwargs):
            if not is_traceback_filtering_enabled():
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if hasattr(e, "_keras_call_info_injected"):
                    raise e
                signature = inspect.signature(fn)
                try:
                    arguments = signature.bind(*args, **kwargs).arguments
                except TypeError:
                    raise e
                listed = []
                for parameter in signature.parameters.values():
                    if parameter.name in arguments:
                        shown = tree.map_structure(
                            format_argument_value, arguments[parameter.name]
                        )
                    else:
                        shown = parameter.default
                    listed.append(f"  • {parameter.name}={shown}")
                if not listed:
                    raise e.with_traceback(e.__traceback__) from None
                text = e.args[0] if e.args else ""
                who = object_name if object_name else fn.__name__
                message = (
                    f"Exception encountered when calling {who}.\\n\\n"
                    f"\\x1b[1m{text}\\x1b[0m\\n\\n"
                    f"Arguments received by {who}:\\n" + "\\n".join(listed)
                )
                try:
                    new_e = e.__class__(message)
                except TypeError:
                    new_e = RuntimeError(message)
                new_e._keras_call_info_injected = True
                raise new_e.with_traceback(e.__traceback__) from None

        return error_handler


    def format_argument_value(value):
        if backend.is_tensor(value):
            return f"Tensor(shape={value.shape})"
        return repr(value)
    '''
)

OPERATION = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/operation.py."""

    from keras.src.backend.common.keras_tensor import any_symbolic_tensors
    from keras.src.utils import traceback_utils


    class Operation:
        def __init__(self, name=None):
            self.name = name

        @traceback_utils.filter_traceback
        def __call__(self, *args, **kwargs):
            if traceback_utils.is_traceback_filtering_enabled():
                # Pick the function to call.
                if any_symbolic_tensors(args, kwargs):
                    call_fn = self.symbolic_call
                elif getattr(self, "quantization_mode", None) is not None:
                    call_fn = self.quantized_call
                else:
                    call_fn = self.call
                call_fn = traceback_utils.inject_argument_info_in_traceback(
                    call_fn,
                    object_name=(f"{self.__class__.__name__}.call()"),
                )
                return call_fn(*args, **kwargs)

            # Plain flow.
            if any_symbolic_tensors(args, kwargs):
                return self.symbolic_call(*args, **kwargs)
            return self.call(*args, **kwargs)

        def symbolic_call(self, *args, **kwargs):
            return self.compute_output_spec(*args, **kwargs)

        def quantized_call(self, *args, **kwargs):
            return self.call(*args, **kwargs)
    '''
)

CORE = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/core.py."""

    from keras.src.backend.common.keras_tensor import any_symbolic_tensors
    from keras.src.ops.operation import Operation
    from keras.src.utils import traceback_utils


    def helper_before():
        return None


    class Cond(Operation):
        @traceback_utils.filter_traceback
        def __call__(self, *args, **kwargs):
            def call_fn(*args, **kwargs):
                if any_symbolic_tensors(args, kwargs):
                    return self.symbolic_call(*args, **kwargs)
                else:
                    return self.call(*args, **kwargs)

            if traceback_utils.is_traceback_filtering_enabled():
                # Wrap call_fn to describe its arguments in an error.
                call_fn = traceback_utils.inject_argument_info_in_traceback(
                    call_fn,
                    object_name=(f"{self.__class__.__name__}.call()"),
                )
                return call_fn(*args, **kwargs)

            # Plain flow.
            return call_fn(*args, **kwargs)

        def call(self, pred, true_fn, false_fn):
            return true_fn() if pred else false_fn()

        def compute_output_spec(self, pred, true_fn, false_fn):
            return true_fn()
    '''
)

TRACEBACK_UTILS_PY = "keras/src/utils/traceback_utils.py"
OPERATION_PY = "keras/src/ops/operation.py"
CORE_PY = "keras/src/ops/core.py"

FILES: dict[str, str] = {
    "keras/src/ops/__init__.py": "",
    "keras/src/utils/__init__.py": "",
    TRACEBACK_UTILS_PY: TRACEBACK_UTILS,
    OPERATION_PY: OPERATION,
    CORE_PY: CORE,
}


# -- stand-ins for the Keras modules the synthetic files import ---------------------------------


class Tensor:
    """Stands for an eager tensor (`format_argument_value` shows its shape)."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape

    def __repr__(self) -> str:
        return f"Tensor{self.shape}"


class Symbolic:
    """Stands for a KerasTensor: its presence makes `Operation.__call__` call `symbolic_call`."""

    def __repr__(self) -> str:
        return "<Symbolic>"


def _map_structure(fn: Any, x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _map_structure(fn, v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_map_structure(fn, v) for v in x)
    return fn(x)


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def _any_symbolic_tensors(args: Any = None, kwargs: Any = None) -> bool:
    return any(isinstance(leaf, Symbolic) for leaf in _leaves([args or (), kwargs or {}]))


def load(files: Mapping[str, str]) -> dict[str, types.ModuleType]:
    """Execute the synthetic traceback_utils, operation and core modules of `files`."""
    loaded: dict[str, Any] = {
        "keras.src": types.SimpleNamespace(
            backend=types.SimpleNamespace(backend=lambda: "numpy", is_tensor=lambda x: isinstance(x, Tensor)),
            tree=types.SimpleNamespace(map_structure=_map_structure),
        ),
        "keras.src.backend.common.keras_tensor": types.SimpleNamespace(any_symbolic_tensors=_any_symbolic_tensors),
    }

    def fake_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if name.startswith("keras"):
            return loaded[name]
        return builtins.__import__(name, globals, locals, fromlist, level)

    modules: dict[str, types.ModuleType] = {}
    for dotted, path, attr in (
        ("keras.src.utils", TRACEBACK_UTILS_PY, "traceback_utils"),
        ("keras.src.ops.operation", OPERATION_PY, None),
        ("keras.src.ops.core", CORE_PY, None),
    ):
        module = types.ModuleType(path)
        module.__dict__["__builtins__"] = {**vars(builtins), "__import__": fake_import}
        exec(compile(files[path], path, "exec"), module.__dict__)
        modules[path] = module
        loaded[dotted] = types.SimpleNamespace(**{attr: module}) if attr else types.SimpleNamespace(**module.__dict__)
    return modules
