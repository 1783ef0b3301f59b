"""What `dtype-fast-paths` makes of dtypes.py / variables.py shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch.

The synthetic Keras-shaped `dtypes.py` and `variables.py` are this module's: only the anchors are
shaped like Keras 3.15.1 (`ALLOWED_DTYPES`, `PYTHON_DTYPES_MAP`, the statements of
`standardize_dtype`, `_lattice_result_type` and the end of `result_type`); the promotion rule is
a small one of our own, which, like Keras's, reads `floatx()`. `load` runs a pair of (patched or
not) texts against a fake `config` to compare their behaviour (tests/unit/test_dtype_fast_paths.py,
tests/unit/test_memoised_result_type.py).
"""

import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager

from codemods.engine import DTYPES_PY, VARIABLES_PY, Case, Mutant, piece_text

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


SET_LINE = "ALLOWED_DTYPES_SET = frozenset(ALLOWED_DTYPES)"
FINAL = "    if dtype not in dtypes.ALLOWED_DTYPES:\n"
#: The final test as applied: the piece's header, upstream's test where it says `UPSTREAM`.
OUR_FINAL = piece_text(__file__, "final_check", "    ").splitlines(True)[0].replace(
    "UPSTREAM", "dtype not in dtypes.ALLOWED_DTYPES", 1)
DTYPES_AFTER = DTYPES.replace("\nPYTHON_DTYPES_MAP = {",
                              "\n" + piece_text(__file__, "allowed_dtypes_set") + "PYTHON_DTYPES_MAP = {", 1)
VARIABLES_AFTER = VARIABLES.replace(
    "def standardize_dtype(dtype):\n", "def standardize_dtype(dtype):\n" + piece_text(__file__, "fast_path", "    "), 1
).replace(FINAL, OUR_FINAL, 1)
# keras-nightly's shape (#23182 as merged, with the MLX additions this patch does not carry).
DTYPES_NIGHTLY = DTYPES.replace("\nPYTHON_DTYPES_MAP = {", f"\n{SET_LINE}\nPYTHON_DTYPES_MAP = {{", 1)
VARIABLES_NIGHTLY = VARIABLES.replace(
    "def standardize_dtype(dtype):\n",
    "def standardize_dtype(dtype):\n    if isinstance(dtype, str) and dtype in dtypes.ALLOWED_DTYPES_SET:\n"
    "        return dtype\n", 1,
).replace(FINAL, "    if dtype not in dtypes.ALLOWED_DTYPES_SET:\n", 1).replace("dtype.name\n", "dtype.name.lower()\n", 1)
CHAIN = ('    elif hasattr(dtype, "__str__") and (\n        "torch" in str(dtype) or "jax.numpy" in str(dtype)\n'
         "    ):\n")


def tree(dtypes: str = DTYPES, variables: str = VARIABLES) -> dict[str, str]:
    return {DTYPES_PY: dtypes, VARIABLES_PY: variables}


CASES = (
    Case("the set after the tuple, the fast path first, the set asked first in the final test", tree(),
         tree(DTYPES_AFTER, VARIABLES_AFTER), detail="add ALLOWED_DTYPES_SET, the fast path and the set test",
         anchors=(("ALLOWED_DTYPES = (...)", 10), ("def standardize_dtype", 13),
                  ("if dtype not in dtypes.ALLOWED_DTYPES", 26))),
    Case("keras-nightly (#23182 as merged)", tree(DTYPES_NIGHTLY, VARIABLES_NIGHTLY), upstream=True,
         detail="ALLOWED_DTYPES_SET and the str fast path are upstream's",
         anchors=(("ALLOWED_DTYPES = (...)", 10), ("def standardize_dtype", 13),
                  ("if dtype not in dtypes.ALLOWED_DTYPES", 28))),
    Case("keras-nightly's variables.py alone (its command run on it)", {VARIABLES_PY: VARIABLES_NIGHTLY}, upstream=True),
    *(Case(f"drift: {name}", tree(dtypes, variables), drift=drift) for name, dtypes, variables, drift in (
        ("tuple gone", DTYPES.replace("ALLOWED_DTYPES = (", "SUPPORTED_DTYPES = ("), VARIABLES,
         f"{DTYPES_PY}:1: anchor 'ALLOWED_DTYPES = (...)': expected exactly one `ALLOWED_DTYPES = (...)` at module "
         "level; found 0"),
        ("tuple twice", DTYPES + "ALLOWED_DTYPES = ()\n", VARIABLES, f"{DTYPES_PY}:10: anchor 'ALLOWED_DTYPES = (...)'"
         ": expected exactly one `ALLOWED_DTYPES = (...)` at module level; found 2"),
        ("tuple not literal", DTYPES.replace('    "float16",\n', "    FLOAT16,\n"), VARIABLES,
         f"{DTYPES_PY}:11: anchor 'ALLOWED_DTYPES = (...)': expected a tuple of string literals; found FLOAT16"),
        ("allowed str mapped", DTYPES.replace('"int": "int32"', '"float32": "float16"'), VARIABLES,
         f"{DTYPES_PY}:31: anchor 'PYTHON_DTYPES_MAP': expected builtin type and string keys, no allowed dtype "
         "string among them; found 'float32'"),
        ("odd map key", DTYPES.replace("bool: ", "SOME_NAME: "), VARIABLES, f"{DTYPES_PY}:26: anchor "
         "'PYTHON_DTYPES_MAP': expected builtin type and string keys, no allowed dtype string among them; found SOME_NAME"),
        ("final test gone", DTYPES, VARIABLES.replace(FINAL, "    if dtype not in dtypes.ALLOWED:\n"),
         f"{VARIABLES_PY}:13: anchor 'if dtype not in dtypes.ALLOWED_DTYPES': expected exactly one "
         "`if dtype not in dtypes.ALLOWED_DTYPES` in standardize_dtype; found 0"),
        ("chain true for a dtype", DTYPES, VARIABLES.replace('"jax.numpy" in', '"float" in'),
         f"{VARIABLES_PY}:21: anchor 'standardize_dtype if/elif chain': expected no test true for an allowed dtype "
         "string; found hasattr(dtype, '__str__') and ('torch' in str(dtype) or 'flo for 'float16'"),
        ("unknown chain test", DTYPES, VARIABLES.replace('"jax.numpy" in str(dtype)', "dtype.isalpha()"),
         f"{VARIABLES_PY}:21: anchor 'standardize_dtype if/elif chain': expected hasattr/str/in tests; found "
         "hasattr(dtype, '__str__') and ('torch' in str(dtype) or dtyp"),
        ("else branch", DTYPES, VARIABLES.replace(CHAIN, "    else:\n"), f"{VARIABLES_PY}:1: anchor "
         "'standardize_dtype's body': expected exactly one `standardize_dtype's body` at module level; found 0"),
        ("extra statement", DTYPES, VARIABLES.replace("    return dtype\n\n\ndef standardize_shape",
                                                      "    dtype = dtype.lower()\n    return dtype\n\n\ndef standardize_shape"),
         f"{VARIABLES_PY}:1: anchor 'standardize_dtype's body': expected exactly one"),
        ("half upstream", DTYPES_NIGHTLY, VARIABLES, f"{VARIABLES_PY}:13: anchor 'dtype-fast-paths': expected all "
         "pieces upstream's or none; found ALLOWED_DTYPES_SET upstream's, def standardize_dtype, "),
        ("half ours", DTYPES_AFTER, VARIABLES, f"{VARIABLES_PY}:13: anchor 'dtype-fast-paths': expected all pieces "
         "present or none; found ALLOWED_DTYPES_SET forkgen's, def standardize_dtype, "),
    )),
)

MUTANTS = (
    Mutant("the fast path accepts str subclasses",
           "    if type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET:  # forkgen: dtype-fast-paths\n",
           "    if isinstance(dtype, str) and dtype in dtypes.ALLOWED_DTYPES_SET:  # forkgen: dtype-fast-paths\n"),
)
