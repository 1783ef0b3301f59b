"""Synthetic Keras-shaped `dtypes.py` and `variables.py` for the patches `dtype-fast-paths`
(both files) and `memoised-result-type` (dtypes.py): ONE module for both, since both patches
anchor on dtypes.py.

Only the anchors are shaped like Keras 3.15.1 (`ALLOWED_DTYPES`, `PYTHON_DTYPES_MAP`, the
statements of `standardize_dtype`, `_lattice_result_type` and the end of `result_type`); the
promotion rule is a small one of our own, which, like Keras's, reads `floatx()`. `load` runs
a pair of (patched or not) texts against a fake `config` to compare their behaviour.
"""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager

DTYPES_PY = "keras/src/backend/common/dtypes.py"
VARIABLES_PY = "keras/src/backend/common/variables.py"

DTYPES = textwrap.dedent(
    '''\
    import functools

    from keras.src.api_export import keras_export
    from keras.src.backend import config
    from keras.src.backend.common.variables import standardize_dtype

    FLOAT8_TYPES = ("float8_e4m3fn", "float8_e5m2")

    # All supported dtypes in Keras
    ALLOWED_DTYPES = (
        "float16",
        "float32",
        "float64",
        "int8",
        "int32",
        "int64",
        "uint8",
        "bfloat16",
        "bool",
        "string",
        "float8_e4m3fn",
        "float8_e5m2",
        "complex64",
    )
    PYTHON_DTYPES_MAP = {
        bool: "bool",
        int: "int32",
        float: "float32",
        str: "string",
        # special case for string value
        "int": "int32",
        complex: "complex64",
    }


    @functools.lru_cache(512)
    def _least_upper_bound(*nodes):
        """The widest of `nodes` (a toy rule: by position in ALLOWED_DTYPES)."""
        return max(nodes, key=ALLOWED_DTYPES.index)


    def _lattice_result_type(*args):
        dtypes = [standardize_dtype(arg) for arg in args]
        weak = [arg is int or arg is float for arg in args]
        if all(weak):
            return "int32" if all(d.startswith("int") for d in dtypes) else config.floatx()
        strong = [d for d, w in zip(dtypes, weak) if not w]
        out_dtype = _least_upper_bound(*strong)
        if any(w and d.startswith("float") for d, w in zip(dtypes, weak)) and not out_dtype.startswith(
            ("float", "bfloat", "complex")
        ):
            out_dtype = config.floatx()
        return out_dtype


    @keras_export("keras.backend.result_type")
    def result_type(*dtypes):
        """Returns the type from applying the Keras type promotion rules."""
        if len(dtypes) == 0:
            return config.floatx()
        for dtype in dtypes:
            if dtype in FLOAT8_TYPES:
                raise ValueError(
                    "There is no implicit conversions from float8 dtypes to others."
                    f" You must cast it internally. Received: {dtypes}"
                )
        return _lattice_result_type(
            *(config.floatx() if arg is None else arg for arg in dtypes),
        )
    '''
)

VARIABLES = textwrap.dedent(
    '''\
    from keras.src.api_export import keras_export
    from keras.src.backend import config
    from keras.src.backend.common import dtypes


    class Variable:
        pass


    @keras_export(
        ["keras.utils.standardize_dtype", "keras.backend.standardize_dtype"]
    )
    def standardize_dtype(dtype):
        if dtype is None:
            return config.floatx()
        dtype = dtypes.PYTHON_DTYPES_MAP.get(dtype, dtype)
        if hasattr(dtype, "name"):
            dtype = dtype.name
        elif hasattr(dtype, "__name__"):
            dtype = dtype.__name__
        elif hasattr(dtype, "__str__") and (
            "torch" in str(dtype) or "jax.numpy" in str(dtype)
        ):
            dtype = str(dtype).split(".")[-1]

        if dtype not in dtypes.ALLOWED_DTYPES:
            raise ValueError(f"Invalid dtype: {dtype}")
        return dtype


    def standardize_shape(shape):
        return tuple(shape)
    '''
)

#: Merged by the lead into the synthetic trees of the CLI tests (tests/support/synthetic.py).
#: The package markers let setup.py's find_packages() (Keras 3.0-3.2 trees) ship both files.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/common/__init__.py": "",
    DTYPES_PY: DTYPES,
    VARIABLES_PY: VARIABLES,
}


class Config(types.ModuleType):
    """A fake `keras.src.backend.config`: floatx and its setter."""

    def __init__(self) -> None:
        super().__init__("keras.src.backend.config")
        self._floatx = "float32"

    def floatx(self) -> str:
        return self._floatx

    def set_floatx(self, value: str) -> None:
        self._floatx = value


@contextmanager
def load(dtypes_text: str = DTYPES, variables_text: str = VARIABLES) -> Iterator[tuple[types.ModuleType, types.ModuleType, Config]]:
    """Execute the two texts as `dtypes` and `variables` modules, importing each other and a
    fake config; yields (dtypes, variables, config). sys.modules is restored afterwards."""
    names = ["keras", "keras.src", "keras.src.api_export", "keras.src.backend", "keras.src.backend.config",
             "keras.src.backend.common", "keras.src.backend.common.dtypes", "keras.src.backend.common.variables"]
    saved = {name: sys.modules.get(name) for name in names}
    config = Config()
    packages = {name: types.ModuleType(name) for name in names[:2] + ["keras.src.backend", "keras.src.backend.common"]}
    for package in packages.values():
        package.__path__ = []
    api_export = types.ModuleType("keras.src.api_export")
    api_export.keras_export = lambda *a, **k: (lambda f: f)  # type: ignore[attr-defined]
    dtypes = types.ModuleType("keras.src.backend.common.dtypes")
    variables = types.ModuleType("keras.src.backend.common.variables")
    packages["keras.src.backend"].config = config  # type: ignore[attr-defined]
    packages["keras.src.backend.common"].dtypes = dtypes  # type: ignore[attr-defined]
    packages["keras.src.backend.common"].variables = variables  # type: ignore[attr-defined]
    sys.modules.update(packages)
    sys.modules.update({"keras.src.api_export": api_export, "keras.src.backend.config": config,
                        "keras.src.backend.common.dtypes": dtypes, "keras.src.backend.common.variables": variables})
    try:
        exec(compile(variables_text, "<variables.py>", "exec"), variables.__dict__)
        exec(compile(dtypes_text, "<dtypes.py>", "exec"), dtypes.__dict__)
        yield dtypes, variables, config
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
