"""Patch dtype-fast-paths (keras-team/keras#23182) on synthetic dtypes.py / variables.py."""

from __future__ import annotations

import enum
import functools
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodContext, TransformSkip, transform_module

from codemods.dtype_fast_paths import PATCH
from codemods.dtype_fast_paths.cases import (
    DTYPES,
    DTYPES_AFTER,
    DTYPES_NIGHTLY,
    DTYPES_PY,
    VARIABLES,
    VARIABLES_AFTER,
    VARIABLES_PY,
    load,
)
from codemods.engine import Sources

# The change, no change when applied, upstream's shape and drift: cases.py.


def sources(dtypes: str = DTYPES, variables: str = VARIABLES) -> Sources:
    files = {DTYPES_PY: dtypes, VARIABLES_PY: variables}
    return Sources(lambda path: files.get(path))


@functools.cache
def patched(dtypes: str = DTYPES, variables: str = VARIABLES) -> dict[str, str]:
    tree = sources(dtypes, variables)
    PATCH.apply(tree)
    return {DTYPES_PY: dtypes, VARIABLES_PY: variables, **tree.rendered()}


def test_reports_name_both_files_and_the_state_of_each_piece() -> None:
    before = PATCH.check(sources())
    assert [(a.name, a.line, a.description, a.path) for a in before.anchors] == [
        ("ALLOWED_DTYPES = (...)", 10, "module level (ALLOWED_DTYPES_SET: absent)", DTYPES_PY),
        ("def standardize_dtype", 13, "first statement (fast path: absent)", VARIABLES_PY),
        ("if dtype not in dtypes.ALLOWED_DTYPES", 26, "in standardize_dtype (absent)", VARIABLES_PY),
    ]
    assert patched() == {DTYPES_PY: DTYPES_AFTER, VARIABLES_PY: VARIABLES_AFTER}
    after = PATCH.check(sources(DTYPES_AFTER, VARIABLES_AFTER))
    assert [a.description for a in after.anchors][0] == "module level (ALLOWED_DTYPES_SET: ours)"


def test_the_command_alone_on_nightlys_dtypes_py_skips() -> None:
    command = PATCH.command(CodemodContext(filename=DTYPES_PY))
    assert isinstance(transform_module(command, DTYPES_NIGHTLY), TransformSkip)


# -- behaviour: upstream and patched standardize_dtype side by side --------------------------


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


def test_same_results_and_errors_as_upstream() -> None:
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
def test_same_answer_for_any_string(value: Any) -> None:
    after = patched()
    with load() as (_, upstream, _config):
        expected = outcome(upstream.standardize_dtype, value)
    with load(*after.values()) as (_, ours, _config):
        assert outcome(ours.standardize_dtype, value) == expected


def test_floatx_for_none_is_read_at_call_time() -> None:
    with load(*patched().values()) as (_, ours, config):
        config.set_floatx("float16")
        assert ours.standardize_dtype(None) == "float16"
