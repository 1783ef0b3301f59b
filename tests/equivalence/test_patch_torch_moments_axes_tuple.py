"""Patch torch-moments-axes-tuple on the installed fork (torch backend only).

While dynamo traces, the torch backend's `moments` hands torch a tuple of its axes when they
are a `list` (BatchNormalization's are a `TrackedList`, which dynamo cannot put in a graph).
Eager calls must give what the release under test's own, unpatched `moments` gives
(`upstream.upstream`, tests/equivalence/upstream.py), bit for bit; compiled, a
`BatchNormalization` training call must trace as one graph (upstream's breaks) and compute
what eager computes, within torch's float32 tolerances, moving statistics included.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied

NAME = "torch-moments-axes-tuple"
APPLIED = patch_applied(NAME)
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-moments-axes-tuple"),
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="the patch changes the torch backend only"),
]

if APPLIED and keras.backend.backend() == "torch":
    import torch
    import torch._dynamo

    #: The module the patch rewrote (the torch backend's nn.py).
    nn = upstream.patched_module(NAME, "nn.py")


def images(seed: int = 0) -> Any:
    return torch.tensor(np.random.default_rng(seed).standard_normal((4, 6, 6, 3)).astype("float32"))


def batch_norm() -> Any:
    layer = keras.layers.BatchNormalization(momentum=0.5)
    layer.build((None, 6, 6, 3))
    return layer


def state(layer: Any) -> list[Any]:
    return [v.value.detach().clone() for v in layer.weights]


@pytest.mark.parametrize("axes", [[0, 1, 2], (0, 1, 2), [0, 2], 1, "tracked"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_eager_moments_are_upstream_s(axes: Any, keepdims: bool) -> None:
    x = images(1)
    if axes == "tracked":
        axes = batch_norm()._reduction_axes
    got = nn.moments(x, axes, keepdims=keepdims)
    with upstream.upstream(nn, "moments"):
        expected = nn.moments(x, axes, keepdims=keepdims)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b) and a.dtype == b.dtype and a.shape == b.shape


def test_eager_batch_norm_training_is_upstream_s() -> None:
    ours, theirs = batch_norm(), batch_norm()
    got = ours(images(2), training=True)
    with upstream.upstream(nn, "moments"):
        expected = theirs(images(2), training=True)
    assert torch.equal(got, expected)
    assert all(torch.equal(a, b) for a, b in zip(state(ours), state(theirs), strict=True))


def test_a_compiled_batch_norm_training_call_is_one_graph_and_computes_as_eager() -> None:
    eager_layer, compiled_layer = batch_norm(), batch_norm()
    x = images(3)
    eager = eager_layer(x, training=True)

    def train_call(t: Any) -> Any:
        return compiled_layer(t, training=True)

    torch._dynamo.reset()
    compiled = torch.compile(train_call, fullgraph=True, backend="eager")(x)
    torch.testing.assert_close(compiled, eager)
    for a, b in zip(state(compiled_layer), state(eager_layer), strict=True):
        torch.testing.assert_close(a, b)

    explain_layer = batch_norm()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda t: explain_layer(t, training=True))(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), [b.reason for b in explained.break_reasons]
    with upstream.upstream(nn, "moments"):
        torch._dynamo.reset()
        upstream_explained = torch._dynamo.explain(lambda t: explain_layer(t, training=True))(x)
    torch._dynamo.reset()
    assert upstream_explained.graph_break_count >= 1, "upstream breaks at the TrackedList (what the patch removes)"


@pytest.mark.parametrize("axes", [[0, 2], (1,), 2])
def test_compiled_moments_equal_eager_for_other_axes(axes: Any) -> None:
    x = images(4)

    def stats(t: Any) -> Any:
        return keras.ops.moments(t, axes)

    torch._dynamo.reset()
    compiled = torch.compile(stats, backend="eager")(x)
    torch._dynamo.reset()
    for a, b in zip(compiled, stats(x), strict=True):
        torch.testing.assert_close(a, b)
