"""Patch memoised-result-type (keras-team/keras#23336): the patched result_type answers as upstream's
on the synthetic dtypes.py (what it makes of the code: its cases, codemods/memoised_result_type/cases.py)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.dtype_fast_paths.cases import DTYPES_PY, VARIABLES, load
from codemods.engine import Sources
from codemods.memoised_result_type import PATCH
from codemods.memoised_result_type.cases import AFTER, DTYPES


@functools.cache
def patched(source: str = DTYPES) -> str:
    tree = Sources(lambda path: source if path == DTYPES_PY else None)
    PATCH.apply(tree)
    return tree.rendered()[DTYPES_PY]


def test_the_synthetic_tree_takes_the_patch() -> None:
    assert patched() == AFTER


# -- behaviour: upstream and patched result_type side by side ---------------------------------


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
        with load(source, VARIABLES) as (dtypes, _, config):
            got: list[tuple[str, Any]] = []
            for floatx in floatxs:
                config.set_floatx(floatx)
                got.extend(outcome(dtypes.result_type, *args) for _ in range(2) for args in calls)
            results.append(got)
            memoised = len(getattr(dtypes, "_FORKGEN_RESULT_TYPES", ()))
    assert results[0] == results[1]
    return memoised


def test_same_results_for_every_pair_under_every_floatx() -> None:
    assert both([(), *((a,) for a in SCALARS), *((a, b) for a in SCALARS for b in SCALARS)]) > 100


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(SCALARS) | st.text(max_size=8), max_size=4),
       st.lists(st.sampled_from(["float16", "float32", "float64", "bfloat16"]), min_size=1, max_size=3))
def test_same_results_for_any_arguments(args: list[Any], floatxs: list[str]) -> None:
    both([tuple(args)], tuple(floatxs))


def test_the_memo_answers_and_follows_floatx() -> None:
    with load(patched(), VARIABLES) as (dtypes, _, config):
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


def test_objects_that_may_change_are_never_memoised() -> None:
    with load(patched(), VARIABLES) as (dtypes, _, _config):
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


def test_errors_are_raised_every_time_and_never_memoised() -> None:
    with load(patched(), VARIABLES) as (dtypes, _, _config):
        for _ in range(2):
            with pytest.raises(ValueError, match="no implicit conversions from float8"):
                dtypes.result_type("float8_e5m2", "float32")
            with pytest.raises(ValueError, match="Invalid dtype: nope"):
                dtypes.result_type("nope")
            with pytest.raises(TypeError, match="unhashable") as caught:
                dtypes.result_type(["int8"])
            assert caught.value.__context__ is None
        assert dtypes._FORKGEN_RESULT_TYPES == {}


def test_the_memo_is_bounded() -> None:
    with load(patched(), VARIABLES) as (dtypes, _, config):
        for i in range(600):
            config.set_floatx(f"float{i}")
            dtypes.result_type("int8")
        assert 0 < len(dtypes._FORKGEN_RESULT_TYPES) <= 512
