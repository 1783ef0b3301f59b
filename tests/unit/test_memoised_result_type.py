"""Patch memoised-result-type (keras-team/keras#23336) on the synthetic dtypes.py."""

from __future__ import annotations

import functools
import textwrap
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.memoised_result_type import PATCH, MemoiseResultTypeCommand
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support.synthetic_dtype_fast_paths import (
    DTYPES,
    DTYPES_PY,
    FILES,
    VARIABLES,
    load,
)

ANCHOR = '@keras_export("keras.backend.result_type")\n'
FINAL = "        return _lattice_result_type(\n"
#: What the patch puts after `def _lattice_result_type` (pinned: a change is a new version).
MODULE_BLOCK = '_FORKGEN_RESULT_TYPES = {}  # forkgen: memoised-result-type\n_FORKGEN_KEY_CLASSES = {id(str): str, id(type(None)): type(None)}  # forkgen: memoised-result-type\n\n\n# forkgen: memoised-result-type\ndef _forkgen_key_class(cls):\n    """Whether `cls` is numpy\'s, torch\'s or TensorFlow\'s dtype class (remembered if so)."""\n    import sys\n\n    numpy = sys.modules.get("numpy")\n    torch = sys.modules.get("torch")\n    tf_dtypes = sys.modules.get("tensorflow.python.framework.dtypes")\n    if (\n        (numpy is not None and type(numpy.dtype) is not type and type(cls) is type(numpy.dtype))\n        or (torch is not None and cls is getattr(torch, "dtype", None))\n        or (tf_dtypes is not None and cls is getattr(tf_dtypes, "DType", None))\n    ):\n        _FORKGEN_KEY_CLASSES[id(cls)] = cls\n        return True\n    return False\n\n\n# forkgen: memoised-result-type\ndef _forkgen_result_type_key(dtypes):\n    """The memo key of `result_type(*dtypes)`, or None when an argument cannot key it."""\n    import sys\n\n    # None while torch.compile traces: Dynamo cannot follow the memo\'s id() look-ups and\n    # would split the graph there, so traced code takes upstream\'s path.\n    torch = sys.modules.get("torch")\n    if torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():\n        return None\n    key = [config.floatx()]\n    for dtype in dtypes:\n        cls = type(dtype)\n        if _FORKGEN_KEY_CLASSES.get(id(cls)) is not cls:\n            if cls is type:\n                if dtype.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE: a mutable class\n                    return None\n            elif not _forkgen_key_class(cls):\n                return None\n        key.append(cls)\n        key.append(dtype)\n    return tuple(key)\n\n\n# forkgen: memoised-result-type\ndef _forkgen_memoise(key, result):\n    """Remember `result` for `key` (at most 512 entries), unless floatx changed meanwhile."""\n    if config.floatx() == key[0]:\n        if len(_FORKGEN_RESULT_TYPES) >= 512:\n            _FORKGEN_RESULT_TYPES.clear()\n        _FORKGEN_RESULT_TYPES[key] = result\n    return result\n\n\n'
LOOKUP = textwrap.indent(
    textwrap.dedent(
        """\
        if (memo_key := _forkgen_result_type_key(dtypes)) is not None:  # forkgen: memoised-result-type
            memoised = _FORKGEN_RESULT_TYPES.get(memo_key)
            if memoised is None:
                memoised = _forkgen_memoise(memo_key, _lattice_result_type(
                    *(config.floatx() if arg is None else arg for arg in dtypes),
                ))
            return memoised
        """
    ),
    "    ",
)
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


def check(source: str) -> Any:
    return PATCH.check(Sources(lambda path: source if path == DTYPES_PY else None))


@functools.cache
def patched(source: str = DTYPES) -> str:
    tree = Sources(lambda path: source if path == DTYPES_PY else None)
    PATCH.apply(tree)
    return tree.rendered()[DTYPES_PY]


class TestMemoiseResultType(CodemodTest):
    TRANSFORM = MemoiseResultTypeCommand

    def test_inserts_the_memo_and_the_lookup(self) -> None:
        self.assertCodemod(DTYPES, AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)

    def test_noop_on_the_upstream_shape(self) -> None:
        self.assertCodemod(UPSTREAM, UPSTREAM, expected_skip=True)


def test_outcomes_and_the_synthetic_tree() -> None:
    first = PATCH.check(Sources(lambda path: FILES.get(path)))
    assert first.outcome is Outcome.APPLIED and not first.present
    assert [(a.name, a.line) for a in first.anchors] == [("def _lattice_result_type", 42),
                                                          ("return _lattice_result_type(...)", 67)]
    assert patched() == AFTER
    again = check(AFTER)
    assert again.outcome is Outcome.APPLIED and again.present
    assert check(UPSTREAM).outcome is Outcome.UPSTREAM


@pytest.mark.parametrize(
    ("source", "where", "found"),
    [
        (DTYPES.replace("def result_type(", "def promote_types("), f"{DTYPES_PY}:1:", "exactly one def result_type"),
        (DTYPES.replace("def _lattice_result_type(", "def _lattice("), f"{DTYPES_PY}:1:", "exactly one def _lattice"),
        (DTYPES.replace("def result_type(*dtypes)", "def result_type(*args)").replace("in dtypes", "in args"),
         f"{DTYPES_PY}:57:", "another signature"),
        (DTYPES.replace("        *(config.floatx() if arg is None else arg for arg in dtypes),\n    )\n",
                        "        *(config.floatx() if arg is None else arg for arg in dtypes),\n    )\n    pass\n"),
         f"{DTYPES_PY}:70:", "1, not last"),
        (DTYPES.replace("    return _lattice_result_type(", "    return _least_upper_bound("), f"{DTYPES_PY}:67:", "found 0"),
        (DTYPES.replace("        return config.floatx()\n    for", "        return _lattice_result_type()\n    for"),
         f"{DTYPES_PY}:67:", "found 2"),
        (AFTER.replace(LOOKUP, ""), f"{DTYPES_PY}:113:", "lookup absent"),
        (AFTER.replace(MODULE_BLOCK, ""), f"{DTYPES_PY}:", "helpers []"),
        (DTYPES + "\n_forkgen_memoise = None\n", f"{DTYPES_PY}:1:", "an unmarked definition"),
    ],
    ids=["no result_type", "no lattice", "signature", "return not last", "return reshaped", "two returns",
         "lookup only removed", "helpers removed", "name taken"],
)
def test_drift(source: str, where: str, found: str) -> None:
    with pytest.raises(AnchorDrift) as caught:
        check(source)
    assert str(caught.value).startswith(where) and found in str(caught.value), str(caught.value)


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
