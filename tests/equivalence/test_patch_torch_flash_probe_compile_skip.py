"""Patch torch-flash-probe-compile-skip on the installed fork (torch backend only).

The patch puts an early `return False` first in torch's `_can_use_flash_attention`, taken only
while dynamo traces and only for auto-detection (`raise_error=False`). Eager calls must give what
the release under test's own, unpatched function gives (`upstream.original`, compiled into the
installed nn module, tests/equivalence/upstream.py): the same answer or error, from the same
probe calls, whatever torch's `can_use_flash_attention` says (on this CPU it says False, so the
tests also make it say True). Under `torch.compile`: no graph break at the probe (upstream's
breaks there), compiled `dot_product_attention` equal to eager within torch's float32 tolerances,
and an explicit `flash_attention=True` still raises upstream's error on inputs flash attention
cannot run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-flash-probe-compile-skip"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-flash-probe-compile-skip"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the patch changes the torch backend only"),
]

if APPLIED and keras.backend.backend() == "torch":
    import torch
    import torch._dynamo

    #: The module the patch rewrote (the torch backend's nn.py).
    nn = upstream.patched_module(NAME, "nn.py")


def qkv(seed: int = 0) -> tuple[Any, Any, Any]:
    """Query, key and value as `dot_product_attention` hands them to the probe: (batch, heads,
    sequence, head_dim), float32."""
    rng = np.random.default_rng(seed)
    return tuple(torch.tensor(rng.standard_normal((2, 2, 5, 8)).astype("float32")) for _ in range(3))


@contextmanager
def torch_answers(answer: bool | Exception) -> Iterator[list[tuple[Any, ...]]]:
    """torch's `can_use_flash_attention` answers `answer` (or raises it); yields the calls made."""
    import torch.backends.cuda as cuda

    calls: list[tuple[Any, ...]] = []

    def fake(params: Any, debug: bool) -> bool:
        calls.append((type(params).__name__, debug))
        if isinstance(answer, Exception):
            raise answer
        return answer

    missing = object()
    original = getattr(cuda, "can_use_flash_attention", missing)  # a torch before 2.2 has none
    cuda.can_use_flash_attention = fake
    try:
        yield calls
    finally:
        if original is missing:
            del cuda.can_use_flash_attention
        else:
            cuda.can_use_flash_attention = original


def outcome(probe: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return ("value", probe(*args, **kwargs))
    except Exception as error:  # noqa: BLE001 - compared with upstream's
        return (type(error).__name__, str(error))


@pytest.mark.parametrize("answer", [True, False, RuntimeError("no kernel")], ids=["yes", "no", "raises"])
@pytest.mark.parametrize("raise_error", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_eager_answers_as_upstream(answer: bool | Exception, raise_error: bool, masked: bool) -> None:
    query, key, value = qkv()
    mask = torch.zeros((2, 2, 5, 5)) if masked else None
    reference = upstream.original(nn._can_use_flash_attention)
    with torch_answers(answer) as ours:
        got = outcome(nn._can_use_flash_attention, query, key, value, mask, False, raise_error=raise_error)
    with torch_answers(answer) as theirs:
        expected = outcome(reference, query, key, value, mask, False, raise_error=raise_error)
    assert got == expected
    assert ours == theirs and ours, "the probe must be consulted as upstream consults it"


def test_eager_attention_takes_the_flash_branch_when_torch_says_it_can() -> None:
    """With torch's answer True, eager `dot_product_attention` asks for the flash kernel, as
    upstream does (this CPU has none: both raise the same error, or both compute)."""
    query, key, value = (t.transpose(1, 2) for t in qkv(1))
    with torch_answers(True):
        got = outcome(nn.dot_product_attention, query, key, value)
        with upstream.upstream(nn, "_can_use_flash_attention"):
            expected = outcome(nn.dot_product_attention, query, key, value)
    assert got[0] == expected[0]
    if got[0] == "value":
        assert torch.equal(got[1], expected[1])
    else:
        assert got == expected


def attention(query: Any, key: Any, value: Any) -> Any:
    return keras.ops.dot_product_attention(query, key, value)


def graph_breaks(function: Callable[..., Any], *args: Any) -> list[str]:
    """Why dynamo breaks the graph of `function(*args)` on the installed torch (empty: one graph)."""
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(function)(*args)
    finally:
        torch._dynamo.reset()
    return [str(b.reason) for b in explained.break_reasons] or ["(no reason given)"] * explained.graph_break_count


def upstream_probe_in_a_graph() -> Callable[..., Any]:
    """Upstream's probe alone (the release's own `_can_use_flash_attention`), its answer used."""
    probe = upstream.original(nn._can_use_flash_attention)

    def probed(query: Any, key: Any, value: Any) -> Any:
        # Work in the graph before the probe and after it: a break at the probe splits it (a
        # break before any traced op would leave no graph to count).
        query, key, value = query * 1.0, key * 1.0, value * 1.0
        return query + 1 if probe(query, key, value, None, False) else query - 1

    return probed


def test_compiled_attention_has_no_graph_break_at_the_probe_and_equals_eager() -> None:
    query, key, value = (t.transpose(1, 2) for t in qkv(2))
    eager = attention(query, key, value)
    ours = graph_breaks(attention, query, key, value)
    # What breaks the graph on this torch besides the probe: attention with no probe at all
    # (torch 2.13 and 2.14: nothing; 2.3's dynamo breaks elsewhere in the attention path too).
    with mock.patch.object(nn, "_can_use_flash_attention", lambda *args, **kwargs: False):
        without_probe = graph_breaks(attention, query, key, value)
    assert len(ours) == len(without_probe), (ours, without_probe)
    torch._dynamo.reset()
    compiled = torch.compile(attention, fullgraph=not without_probe, backend="eager")(query, key, value)
    torch.testing.assert_close(compiled, eager)  # float32: rtol 1.3e-6, atol 1e-5, as torch's tests
    torch._dynamo.reset()
    # Upstream breaks at the probe exactly when this torch's dynamo cannot trace the probe
    # (measured on the probe alone: torch 2.13's cannot build SDPAParams; 2.14's can): then the
    # fork has one break fewer per call (or, where this torch's dynamo breaks right after the
    # probe anyway, as 2.3's does, the same count without the probe's reason), else the same graphs.
    probe_breaks = graph_breaks(upstream_probe_in_a_graph(), query, key, value)
    with upstream.upstream(nn, "_can_use_flash_attention"):
        upstream_breaks = graph_breaks(attention, query, key, value)

    def at_the_probe(reasons: list[str]) -> list[str]:
        return [reason for reason in reasons if "SDPAParams" in reason]

    assert not at_the_probe(ours), ours
    if probe_breaks:
        assert len(upstream_breaks) > len(ours) or at_the_probe(upstream_breaks), (upstream_breaks, ours, probe_breaks)
    else:
        assert len(upstream_breaks) <= len(ours), (upstream_breaks, ours)


def test_an_explicit_flash_request_still_raises_while_compiling() -> None:
    """`flash_attention=True` probes with `raise_error=True`: on inputs flash attention cannot run
    (any on this CPU), compiled or not, the error is upstream's."""
    query, key, value = (t.transpose(1, 2) for t in qkv(3))

    def forced(q: Any, k: Any, v: Any) -> Any:
        return keras.ops.dot_product_attention(q, k, v, flash_attention=True)

    with torch_answers(False):
        torch._dynamo.reset()
        got = outcome(torch.compile(forced, backend="eager"), query, key, value)
        with upstream.upstream(nn, "_can_use_flash_attention"):
            torch._dynamo.reset()
            expected = outcome(torch.compile(forced, backend="eager"), query, key, value)
    torch._dynamo.reset()
    assert got == expected
    assert got[0] != "value", got  # upstream's error: RuntimeError, or ImportError where torch has no probe
