"""What `dtype-fast-paths` makes of dtypes.py / variables.py shaped like Keras's, how the patched
`standardize_dtype` behaves beside upstream's (both run by tests/unit/test_patch_cases.py), and the
breaks of its inserted code the equivalence suite must catch.

The synthetic Keras-shaped `dtypes.py` and `variables.py` are this module's: only the anchors are
shaped like Keras 3.15.1 (`ALLOWED_DTYPES`, `PYTHON_DTYPES_MAP`, the statements of
`standardize_dtype`, `_lattice_result_type` and the end of `result_type`); the promotion rule is
a small one of our own, which, like Keras's, reads `floatx()`. `load` runs a pair of (patched or
not) texts against a fake `config` to compare their behaviour (the behaviours at the end).
"""

import enum
import functools
import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodContext, TransformSkip, transform_module

from codemods.dtype_fast_paths import PATCH
from codemods.engine import DTYPES_PY, VARIABLES_PY, Case, Mutant, Sources, piece_text

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


# -- behaviours: the reports, and upstream's and the patched standardize_dtype side by side --------


def sources(dtypes: str = DTYPES, variables: str = VARIABLES) -> Sources:
    files = {DTYPES_PY: dtypes, VARIABLES_PY: variables}
    return Sources(lambda path: files.get(path))


@functools.cache
def patched(dtypes: str = DTYPES, variables: str = VARIABLES) -> dict[str, str]:
    tree = sources(dtypes, variables)
    PATCH.apply(tree)
    return {DTYPES_PY: dtypes, VARIABLES_PY: variables, **tree.rendered()}


def reports_name_both_files_and_the_state_of_each_piece() -> None:
    before = PATCH.check(sources())
    assert [(a.name, a.line, a.description, a.path) for a in before.anchors] == [
        ("ALLOWED_DTYPES = (...)", 10, "module level (ALLOWED_DTYPES_SET: absent)", DTYPES_PY),
        ("def standardize_dtype", 13, "first statement (fast path: absent)", VARIABLES_PY),
        ("if dtype not in dtypes.ALLOWED_DTYPES", 26, "in standardize_dtype (absent)", VARIABLES_PY),
    ]
    assert patched() == {DTYPES_PY: DTYPES_AFTER, VARIABLES_PY: VARIABLES_AFTER}
    after = PATCH.check(sources(DTYPES_AFTER, VARIABLES_AFTER))
    assert [a.description for a in after.anchors][0] == "module level (ALLOWED_DTYPES_SET: ours)"


def the_command_alone_on_nightlys_dtypes_py_skips() -> None:
    command = PATCH.command(CodemodContext(filename=DTYPES_PY))
    assert isinstance(transform_module(command, DTYPES_NIGHTLY), TransformSkip)


class Named:
    def __init__(self, name: Any) -> None:
        self.name = name


class DunderNamed:
    def __init__(self, name: str) -> None:
        self.__name__ = name


class TorchLike:
    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


class StrEnumDtype(str, enum.Enum):  # noqa: UP042 - a (str, Enum) member, as the spec names it
    float32 = "int32"  # its value is a canonical string; upstream reads its `.name`


class OddStr(str):
    name = "int8"


class EqualsFloat32:
    """Hashes like nothing allowed but equals "float32": passes the tuple test, not a set test."""

    def __eq__(self, other: object) -> bool:
        return other == "float32"

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "EqualsFloat32()"


def outcome(function: Any, value: Any) -> tuple[str, Any]:
    try:
        result = function(value)
    except Exception as error:  # noqa: BLE001 - the comparison is of any error
        return "raised", (type(error), str(error))
    return "returned", (type(result), result if not isinstance(result, EqualsFloat32) else "EqualsFloat32")


ALLOWED = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bfloat16", "bool", "string",
           "float8_e4m3fn", "float8_e5m2", "complex64"]
INPUTS: list[Any] = [
    *ALLOWED, *(a.upper() for a in ALLOWED), "int", "float", "", "torch.float32", "jax.numpy.int8", None,
    bool, int, float, str, complex, bytes, np.float32, np.int64, np.bool_, np.dtype("float32"), np.dtype("int8"),
    np.dtype("complex64"), np.dtype(">f4"), Named("float32"), Named("nope"), Named(["unhashable"]), DunderNamed("int8"),
    TorchLike("torch.float32"), TorchLike("jax.numpy.bfloat16"), TorchLike("mlx.core.float32"),
    StrEnumDtype.float32, OddStr("float32"), OddStr("bogus"), EqualsFloat32(), 1, 1.5, True, object,
    ["float32"], {"float32": 1}, ("float32",),
]


def same_results_and_errors_as_upstream() -> None:
    after = patched()
    with load() as (_, upstream, _config):
        expected = [outcome(upstream.standardize_dtype, value) for value in INPUTS]
    with load(*after.values()) as (dtypes, ours, _config):
        assert isinstance(dtypes.ALLOWED_DTYPES_SET, frozenset)
        got = [outcome(ours.standardize_dtype, value) for value in INPUTS]
        canonical = "".join(["float", "32"])  # not the interned literal
        assert ours.standardize_dtype(canonical) is canonical
    assert got == expected

    def of(kind: type) -> list[tuple[str, Any]]:
        return [e for value, e in zip(INPUTS, expected, strict=True) if type(value) is kind]

    # The pathological inputs the spec lists keep upstream's answers, not nightly's.
    assert of(StrEnumDtype) == [("returned", (str, "float32"))]
    assert of(OddStr) == [("returned", (str, "int8"))] * 2
    assert of(EqualsFloat32) == [("returned", (EqualsFloat32, "EqualsFloat32"))]
    assert [kind for kind, _ in of(Named)] == ["returned", "raised", "raised"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.sampled_from(ALLOWED), st.text(max_size=12), st.builds(OddStr, st.sampled_from(ALLOWED)),
                 st.builds(TorchLike, st.sampled_from(ALLOWED).map(lambda s: "torch." + s))))
def same_answer_for_any_string(value: Any) -> None:
    after = patched()
    with load() as (_, upstream, _config):
        expected = outcome(upstream.standardize_dtype, value)
    with load(*after.values()) as (_, ours, _config):
        assert outcome(ours.standardize_dtype, value) == expected


def floatx_for_none_is_read_at_call_time() -> None:
    with load(*patched().values()) as (_, ours, config):
        config.set_floatx("float16")
        assert ours.standardize_dtype(None) == "float16"


BEHAVIOURS = (reports_name_both_files_and_the_state_of_each_piece, the_command_alone_on_nightlys_dtypes_py_skips,
              same_results_and_errors_as_upstream, same_answer_for_any_string, floatx_for_none_is_read_at_call_time)
