"""Patch standardize-dtype-memo on the installed fork: `standardize_dtype` answers as upstream's.

The patch answers a `torch.dtype` object from a memo the torch backend fills at its import with
upstream's own `standardize_dtype`. Compared here, on every backend, against the release under
test's own, unpatched `standardize_dtype` (compiled from its sources into the installed module,
`tests/equivalence/upstream.py`), over every `torch.dtype` object of the `torch` namespace (when
torch is importable: names upstream gives and the errors it raises), lookalikes that hash and
compare like a torch dtype, numpy dtypes, strings, None and invalid inputs, each asked twice;
and, on torch, under `torch.compile` with `fullgraph=True` (the memo must not break a graph).
"""

from __future__ import annotations

import functools
from typing import Any

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import catch, patch_applied

NAME = "standardize-dtype-memo"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply standardize-dtype-memo")

if APPLIED:
    #: The module the patch rewrote (keras/src/backend/common/variables.py).
    variables = upstream.patched_module(NAME, "common/variables.py")


@functools.cache
def _upstream_standardize_dtype() -> Any:
    return upstream.original(variables.standardize_dtype)


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


class Lookalike:
    """Hashes and compares like a torch dtype, names another dtype: never the memo's."""

    def __init__(self, like: Any, name: str) -> None:
        self.like, self.name = like, name

    def __hash__(self) -> int:
        return hash(self.like)

    def __eq__(self, other: object) -> bool:
        return other is self.like or other is self

    def __repr__(self) -> str:
        return f"Lookalike({self.like!r}, {self.name!r})"


def pool() -> list[Any]:
    found: list[Any] = [None, "float32", "int8", "int", "nope", float, int, bool, np.float32, np.dtype("float16"),
                        np.dtype(">f4"), ["int8"], 1.5, keras.ops.ones((1,)).dtype]
    torch = torch_or_none()
    if torch is not None:
        found += [v for v in vars(torch).values() if type(v) is torch.dtype]
        found += [Lookalike(torch.float32, "int8"), Lookalike(torch.int64, "float16"), Lookalike(torch.quint8, "bool")]
    return found


def outcome(dtype: Any, function: Any) -> tuple[str, Any]:
    """`function(dtype)`'s result with its type, or its error (`helpers.catch`)."""
    return catch(lambda: (type(result := function(dtype)), result))


def test_the_memo_is_registered_on_torch_only() -> None:
    torch = torch_or_none()
    if keras.backend.backend() == "torch":
        assert variables._STANDARDIZE_DTYPE_MEMO_TYPE is torch.dtype
        assert variables._STANDARDIZE_DTYPE_MEMO[torch.float32] == "float32"
        assert variables._STANDARDIZE_DTYPE_MEMO[torch.bfloat16] == "bfloat16"
        # A dtype upstream rejects is left out of the memo.
        assert torch.quint8 not in variables._STANDARDIZE_DTYPE_MEMO
    else:
        assert variables._STANDARDIZE_DTYPE_MEMO_TYPE is None
        assert not variables._STANDARDIZE_DTYPE_MEMO


def test_every_memo_entry_is_upstreams_name() -> None:
    for dtype, name in variables._STANDARDIZE_DTYPE_MEMO.items():
        assert outcome(dtype, _upstream_standardize_dtype()) == ("ok", (str, name)), dtype


@pytest.mark.parametrize("dtype", pool(), ids=repr)
def test_standardize_dtype_answers_as_upstream(dtype: Any) -> None:
    expected = outcome(dtype, _upstream_standardize_dtype())
    assert outcome(dtype, variables.standardize_dtype) == expected
    assert outcome(dtype, keras.backend.standardize_dtype) == expected  # asked again


def test_tensor_dtypes_of_ops_answer_as_upstream() -> None:
    for name in ("float32", "float16", "bfloat16", "int8", "int32", "int64", "uint8", "bool", "float64"):
        dtype = keras.ops.ones((2,), dtype=name).dtype
        assert outcome(dtype, variables.standardize_dtype) == outcome(dtype, _upstream_standardize_dtype()), name


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile: torch backend only")
def test_the_memo_keeps_a_compiled_graph_whole() -> None:
    import torch

    def step(x: Any) -> Any:
        name = variables.standardize_dtype(x.dtype)
        return keras.ops.cast(x, "float16" if name == "float32" else "float32") * 2

    compiled = torch.compile(step, fullgraph=True, backend="eager")
    x = torch.arange(6, dtype=torch.float32)
    torch.testing.assert_close(compiled(x), step(x), rtol=0, atol=0)
    assert compiled(x).dtype == torch.float16
