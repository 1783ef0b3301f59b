"""Patch dtype-fast-paths (keras-team/keras#23182) on synthetic dtypes.py / variables.py."""

from __future__ import annotations

import enum
import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.dtype_fast_paths import (
    PATCH,
    AllowedDtypesSetCommand,
    StandardizeDtypeFastPathCommand,
)
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support.synthetic_dtype_fast_paths import (
    DTYPES,
    DTYPES_PY,
    FILES,
    VARIABLES,
    VARIABLES_PY,
    load,
)

MARK = "  # forkgen: dtype-fast-paths"
SET_LINE = "ALLOWED_DTYPES_SET = frozenset(ALLOWED_DTYPES)"
FAST = "    if type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET:"
FINAL = "    if dtype not in dtypes.ALLOWED_DTYPES:\n"
OUR_FINAL = (
    "    if not (type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET) and dtype not in dtypes.ALLOWED_DTYPES:"
)

DTYPES_AFTER = DTYPES.replace("\nPYTHON_DTYPES_MAP = {", f"\n{SET_LINE}{MARK}\nPYTHON_DTYPES_MAP = {{", 1)
VARIABLES_AFTER = VARIABLES.replace(
    "def standardize_dtype(dtype):\n", f"def standardize_dtype(dtype):\n{FAST}{MARK}\n        return dtype\n", 1
).replace(FINAL, f"{OUR_FINAL}{MARK}\n", 1)
# keras-nightly's shape (#23182 as merged, with the MLX additions this patch does not carry).
DTYPES_NIGHTLY = DTYPES.replace("\nPYTHON_DTYPES_MAP = {", f"\n{SET_LINE}\nPYTHON_DTYPES_MAP = {{", 1)
VARIABLES_NIGHTLY = VARIABLES.replace(
    "def standardize_dtype(dtype):\n",
    "def standardize_dtype(dtype):\n    if isinstance(dtype, str) and dtype in dtypes.ALLOWED_DTYPES_SET:\n"
    "        return dtype\n", 1,
).replace(FINAL, "    if dtype not in dtypes.ALLOWED_DTYPES_SET:\n", 1).replace("dtype.name\n", "dtype.name.lower()\n", 1)


def sources(dtypes: str = DTYPES, variables: str = VARIABLES) -> Sources:
    files = {DTYPES_PY: dtypes, VARIABLES_PY: variables}
    return Sources(lambda path: files.get(path))


@functools.cache
def patched(dtypes: str = DTYPES, variables: str = VARIABLES) -> dict[str, str]:
    tree = sources(dtypes, variables)
    PATCH.apply(tree)
    return {DTYPES_PY: dtypes, VARIABLES_PY: variables, **tree.rendered()}


class TestAllowedDtypesSet(CodemodTest):
    TRANSFORM = AllowedDtypesSetCommand

    def test_adds_the_set_after_the_tuple(self) -> None:
        self.assertCodemod(DTYPES, DTYPES_AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(DTYPES_AFTER, DTYPES_AFTER, expected_skip=True)

    def test_noop_on_the_upstream_shape(self) -> None:
        self.assertCodemod(DTYPES_NIGHTLY, DTYPES_NIGHTLY, expected_skip=True)


class TestStandardizeDtypeFastPath(CodemodTest):
    TRANSFORM = StandardizeDtypeFastPathCommand

    def test_inserts_the_fast_path_and_the_set_test(self) -> None:
        self.assertCodemod(VARIABLES, VARIABLES_AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(VARIABLES_AFTER, VARIABLES_AFTER, expected_skip=True)

    def test_noop_on_the_upstream_shape(self) -> None:
        self.assertCodemod(VARIABLES_NIGHTLY, VARIABLES_NIGHTLY, expected_skip=True)


def test_outcomes_and_the_synthetic_tree() -> None:
    first = PATCH.check(Sources(lambda path: FILES.get(path)))
    assert first.outcome is Outcome.APPLIED and not first.present
    assert [(a.name, a.line, a.path) for a in first.anchors] == [
        ("ALLOWED_DTYPES = (...)", 10, DTYPES_PY),
        ("def standardize_dtype", 13, VARIABLES_PY),
        ("if dtype not in dtypes.ALLOWED_DTYPES", 26, VARIABLES_PY),
    ]
    after = patched()
    assert after == {DTYPES_PY: DTYPES_AFTER, VARIABLES_PY: VARIABLES_AFTER}
    again = PATCH.check(sources(*after.values()))
    assert again.outcome is Outcome.APPLIED and again.present
    assert PATCH.check(sources(DTYPES_NIGHTLY, VARIABLES_NIGHTLY)).outcome is Outcome.UPSTREAM


@pytest.mark.parametrize(
    ("dtypes", "variables", "where", "found"),
    [
        (DTYPES.replace("ALLOWED_DTYPES = (", "SUPPORTED_DTYPES = ("), VARIABLES, f"{DTYPES_PY}:1:", "found 0"),
        (DTYPES + "ALLOWED_DTYPES = ()\n", VARIABLES, f"{DTYPES_PY}:10:", "found 2"),
        (DTYPES.replace('    "float16",\n', "    FLOAT16,\n"), VARIABLES, f"{DTYPES_PY}:10:", "a tuple of string"),
        (DTYPES.replace('"int": "int32"', '"float32": "float16"'), VARIABLES, f"{DTYPES_PY}:", "'float32'"),
        (DTYPES.replace("bool: ", "SOME_NAME: "), VARIABLES, f"{DTYPES_PY}:", "SOME_NAME"),
        (DTYPES, VARIABLES.replace(FINAL, "    if dtype not in dtypes.ALLOWED:\n"), f"{VARIABLES_PY}:13:", "found 0"),
        (DTYPES, VARIABLES.replace('"jax.numpy" in', '"float" in'), f"{VARIABLES_PY}:21:", "for 'float16'"),
        (DTYPES, VARIABLES.replace('"jax.numpy" in str(dtype)', "dtype.isalpha()"), f"{VARIABLES_PY}:21:",
         "hasattr/str/in tests"),
        (DTYPES, VARIABLES.replace('    elif hasattr(dtype, "__str__") and (\n        "torch" in str(dtype) or "jax.numpy" in '
                                   'str(dtype)\n    ):\n', "    else:\n"), f"{VARIABLES_PY}:22:", "an else"),
        (DTYPES, VARIABLES.replace("    return dtype\n\n\ndef standardize_shape", "    dtype = dtype.lower()\n"
                                   "    return dtype\n\n\ndef standardize_shape"), f"{VARIABLES_PY}:", "/ Assign / Return"),
        (DTYPES_NIGHTLY, VARIABLES, f"{VARIABLES_PY}:13:", "set theirs, fast path absent"),
        (DTYPES_AFTER, VARIABLES, f"{VARIABLES_PY}:13:", "set ours, fast path absent"),
    ],
    ids=["tuple gone", "tuple twice", "tuple not literal", "allowed str mapped", "odd map key", "final test gone",
         "chain true for a dtype", "unknown chain test", "else branch", "extra statement", "half upstream",
         "half ours"],
)
def test_drift(dtypes: str, variables: str, where: str, found: str) -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(sources(dtypes, variables))
    assert str(caught.value).startswith(where) and found in str(caught.value), str(caught.value)


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
