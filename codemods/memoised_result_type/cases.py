"""What `memoised-result-type` makes of dtypes.py modules shaped like Keras's, how the patched
`result_type` behaves beside upstream's (both run by tests/unit/test_patch_cases.py), and the breaks
of its inserted code the equivalence suite must catch."""

import functools
import textwrap
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import DTYPES_PY, Case, Mutant, Sources, piece_text, run_module
from codemods.memoised_result_type import PATCH

#: A synthetic dtypes.py shaped like Keras 3.15.1's where the patch anchors (`_lattice_result_type`
#: and the end of `result_type`), with a small promotion rule of our own that reads `floatx()`:
#: the same text as dtype-fast-paths' `DTYPES` (codemods/dtype_fast_paths/cases.py), kept here as
#: this patch does not require that one (`load` runs it with `VARIABLES`, below).
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

ANCHOR = '@keras_export("keras.backend.result_type")\n'
FINAL = "        return _lattice_result_type(\n"
#: What the patch puts after `def _lattice_result_type`, and before the final return of `result_type`.
MODULE_BLOCK = piece_text(__file__, "module_level") + "\n\n"
#: `UPSTREAM_VALUE`: the value of upstream's `return _lattice_result_type(...)`, as codegen re-indents it.
VALUE = "_lattice_result_type(\n                *(config.floatx() if arg is None else arg for arg in dtypes),\n            )"
LOOKUP = piece_text(__file__, "memo_lookup", "    ").replace("UPSTREAM_VALUE", VALUE, 1)
AFTER = DTYPES.replace(ANCHOR, MODULE_BLOCK + ANCHOR, 1).replace(
    "    return _lattice_result_type(\n", LOOKUP + "    return _lattice_result_type(\n", 1
)
# The upstream PR's shape (#23336, if merged as proposed): an lru_cache'd helper called from
# result_type, with an uncached fallback for unhashable arguments.
UPSTREAM = DTYPES.replace(ANCHOR, textwrap.dedent(
    """\
    @functools.lru_cache(maxsize=512)
    def _result_type_cached(tagged, floatx):
        return _lattice_result_type(*(floatx if d is None else d for _, d in tagged))


    """
) + ANCHOR, 1).replace(
    "    return _lattice_result_type(\n",
    "    try:\n        return _result_type_cached(tuple((type(d), d) for d in dtypes), config.floatx())\n"
    "    except TypeError:\n        pass\n    return _lattice_result_type(\n",
    1,
)


CASES = (
    Case("the memo after _lattice_result_type, the look-up before the return", DTYPES, AFTER,
         detail="memoise result_type",
         anchors=(("def _lattice_result_type", 42), ("return _lattice_result_type(...)", 67))),
    Case("the upstream PR's shape: result_type calls an lru_cache'd helper", UPSTREAM, upstream=True),
    *(Case(f"drift: {name}", text, drift=drift) for name, text, drift in (
        ("no result_type", DTYPES.replace("def result_type(", "def promote_types("),
         ":1: anchor 'result_type': expected exactly one def result_type"),
        ("no lattice", DTYPES.replace("def _lattice_result_type(", "def _lattice("),
         ":1: anchor 'def _lattice_result_type': expected exactly one `def _lattice_result_type` at module level; found 0"),
        ("another signature", DTYPES.replace("def result_type(*dtypes)", "def result_type(*args)")
         .replace("in dtypes", "in args"), ":67: anchor 'dtypes': expected bound where memo_lookup goes (in result_type or at module level); found not bound"),
        ("the return reshaped", DTYPES.replace("    return _lattice_result_type(", "    return _least_upper_bound("),
         ":57: anchor 'return _lattice_result_type(...)': expected exactly one"),
        ("two returns", DTYPES.replace("        return config.floatx()\n    for", "        return _lattice_result_type()\n    for"),
         ":60: anchor 'return _lattice_result_type(...)': expected exactly one `return _lattice_result_type(...)` in "
         "result_type; found 2"),
        ("the look-up removed", AFTER.replace(LOOKUP, ""), "all pieces present or none"),
        ("the helpers removed", AFTER.replace(MODULE_BLOCK, ""), "all pieces present or none"),
        ("a helper's name taken", DTYPES + "\n_forkgen_memoise = None\n",
         "anchor '_forkgen_memoise': expected names free for module_level (forkgen's helper); found already bound"),
    )),
)

MUTANTS = (
    Mutant("the memo key ignores floatx", "        key = [config.floatx()]\n", '        key = ["float32"]\n'),
    Mutant("the memo used while torch.compile traces (version 1)",
           '        if torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():\n',
           "        if False:\n"),
)


# -- behaviours: upstream's and the patched result_type side by side --------------------------------

#: A synthetic variables.py whose `standardize_dtype` has the statements of Keras 3.15.1's, which
#: `result_type` calls on every argument (the same text as dtype-fast-paths' `VARIABLES`,
#: codemods/dtype_fast_paths/cases.py, kept here as this patch does not require that one).
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


class Config:
    """A fake `keras.src.backend.config`: floatx and its setter."""

    def __init__(self) -> None:
        self._floatx = "float32"

    def floatx(self) -> str:
        return self._floatx

    def set_floatx(self, value: str) -> None:
        self._floatx = value


class Late:
    """`keras.src.backend.common.dtypes` for variables.py, which imports it before dtypes.py (which
    imports variables.py) has run: every attribute is read from `module` once it is there."""

    module: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)


def load(dtypes_text: str = DTYPES, variables_text: str = VARIABLES) -> tuple[types.ModuleType, types.ModuleType, Config]:
    """Execute the two texts as `dtypes` and `variables` modules, importing each other and a fake
    config (`run_module`: nothing outside them changes); returns (dtypes, variables, config)."""
    config = Config()
    late = Late()
    keras = {
        "keras.src.api_export": types.SimpleNamespace(keras_export=lambda *a, **k: (lambda f: f)),
        "keras.src.backend": types.SimpleNamespace(config=config),
        "keras.src.backend.common": types.SimpleNamespace(dtypes=late),
    }
    variables = run_module(variables_text, "keras.src.backend.common.variables", keras)
    keras["keras.src.backend.common.variables"] = variables
    dtypes = late.module = run_module(dtypes_text, "keras.src.backend.common.dtypes", keras)
    return dtypes, variables, config


@functools.cache
def patched(source: str = DTYPES) -> str:
    tree = Sources(lambda path: source if path == DTYPES_PY else None)
    PATCH.apply(tree)
    return tree.rendered()[DTYPES_PY]


class Named:
    """A user dtype object whose `name` may change: must never be answered from the memo."""

    def __init__(self, name: Any) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Named({self.name!r})"


class Renamed:
    """A class (heap type) with a mutable `name` attribute."""

    name = "int8"


class OddStr(str):
    name = "int8"


class Counted:
    """Counts its hash calls: the memo must not hash user objects."""

    hashes = 0

    def __init__(self) -> None:
        self.name = "int32"

    def __hash__(self) -> int:
        Counted.hashes += 1
        return 7


ALLOWED = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bfloat16", "bool", "string",
           "float8_e4m3fn", "float8_e5m2", "complex64"]
SCALARS: list[Any] = [
    *ALLOWED, None, int, float, bool, str, complex, np.float32, np.int8, np.dtype("float16"), np.dtype("int64"),
    np.dtype(">f4"), "int", "nope", 1, 1.5, True, Named("int8"), Renamed, OddStr("float32"), ["int8"], ("int8",),
]


def outcome(function: Any, *args: Any) -> tuple[str, Any]:
    try:
        result = function(*args)
    except Exception as error:  # noqa: BLE001 - the comparison is of any error
        return "raised", (type(error), str(error))
    return "returned", (type(result), result)


def both(calls: list[tuple[Any, ...]], floatxs: tuple[str, ...] = ("float32", "float16", "float64", "float32")) -> int:
    """Every call, under every floatx in turn, twice (to hit the memo), upstream vs patched;
    returns the size of the patched module's memo afterwards."""
    results = []
    memoised = 0
    for source in (DTYPES, patched()):
        dtypes, _, config = load(source, VARIABLES)
        got: list[tuple[str, Any]] = []
        for floatx in floatxs:
            config.set_floatx(floatx)
            got.extend(outcome(dtypes.result_type, *args) for _ in range(2) for args in calls)
        results.append(got)
        memoised = len(getattr(dtypes, "_FORKGEN_RESULT_TYPES", ()))
    assert results[0] == results[1]
    return memoised


def same_results_for_every_pair_under_every_floatx() -> None:
    assert both([(), *((a,) for a in SCALARS), *((a, b) for a in SCALARS for b in SCALARS)]) > 100


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(SCALARS) | st.text(max_size=8), max_size=4),
       st.lists(st.sampled_from(["float16", "float32", "float64", "bfloat16"]), min_size=1, max_size=3))
def same_results_for_any_arguments(args: list[Any], floatxs: list[str]) -> None:
    both([tuple(args)], tuple(floatxs))


def the_memo_answers_and_follows_floatx() -> None:
    dtypes, _, config = load(patched(), VARIABLES)
    assert dtypes.result_type("int8", float) == "float32"
    assert len(dtypes._FORKGEN_RESULT_TYPES) == 1
    config.set_floatx("float16")
    assert dtypes.result_type("int8", float) == "float16"
    assert dtypes.result_type(None) == "float16"
    config.set_floatx("float32")
    assert dtypes.result_type("int8", float) == "float32" and dtypes.result_type(None) == "float32"
    assert len(dtypes._FORKGEN_RESULT_TYPES) == 4
    # np.dtype and static types key it; their key tells them apart from equal strings.
    assert dtypes.result_type(np.dtype("float16"), np.float32) == "float32"
    assert dtypes.result_type(np.dtype("float16"), np.float32) == "float32"
    assert len(dtypes._FORKGEN_RESULT_TYPES) == 5
    assert dtypes.result_type(np.dtype("float16"), "float32") == "float32"
    assert len(dtypes._FORKGEN_RESULT_TYPES) == 6


def objects_that_may_change_are_never_memoised() -> None:
    dtypes, _, _config = load(patched(), VARIABLES)
    named = Named("int8")
    assert dtypes.result_type(named) == "int8"
    named.name = "float16"
    assert dtypes.result_type(named) == "float16"
    assert dtypes.result_type(Renamed) == "int8"
    Renamed.name = "bool"
    try:
        assert dtypes.result_type(Renamed) == "bool"
    finally:
        Renamed.name = "int8"
    assert dtypes.result_type(OddStr("float32")) == "int8"
    before = Counted.hashes
    assert dtypes.result_type(Counted()) == "int32"
    assert Counted.hashes == before + 1  # upstream's own PYTHON_DTYPES_MAP.get, nothing more
    assert dtypes._FORKGEN_RESULT_TYPES == {}


def errors_are_raised_every_time_and_never_memoised() -> None:
    dtypes, _, _config = load(patched(), VARIABLES)
    for _ in range(2):
        with pytest.raises(ValueError, match="no implicit conversions from float8"):
            dtypes.result_type("float8_e5m2", "float32")
        with pytest.raises(ValueError, match="Invalid dtype: nope"):
            dtypes.result_type("nope")
        with pytest.raises(TypeError, match="unhashable") as caught:
            dtypes.result_type(["int8"])
        assert caught.value.__context__ is None
    assert dtypes._FORKGEN_RESULT_TYPES == {}


def the_memo_is_bounded() -> None:
    dtypes, _, config = load(patched(), VARIABLES)
    for i in range(600):
        config.set_floatx(f"float{i}")
        dtypes.result_type("int8")
    assert 0 < len(dtypes._FORKGEN_RESULT_TYPES) <= 512


BEHAVIOURS = (same_results_for_every_pair_under_every_floatx, same_results_for_any_arguments,
              the_memo_answers_and_follows_floatx, objects_that_may_change_are_never_memoised,
              errors_are_raised_every_time_and_never_memoised, the_memo_is_bounded)
