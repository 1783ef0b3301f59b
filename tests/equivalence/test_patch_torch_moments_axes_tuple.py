"""Patch torch-moments-axes-tuple on the installed fork (torch backend only).

While dynamo traces, the torch backend's `moments` hands torch a tuple of its axes when they
are a `list` (BatchNormalization's are a `TrackedList`, which dynamo cannot put in a graph).
Eager calls must give what the release under test's own, unpatched `moments` gives
(`upstream.upstream`, tests/equivalence/upstream.py), bit for bit; compiled, a
`BatchNormalization` training call must compute what eager computes, within torch's float32
tolerances, moving statistics included, and compile no worse than upstream's `moments` handed a
tuple of axes (one graph wherever that is one graph under the installed torch), and `moments`
of the TrackedList must compile in fewer frames than upstream's (which breaks at it).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import Compiled, compiled, patch_applied

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


def test_a_compiled_batch_norm_training_call_computes_as_eager() -> None:
    eager_layer, compiled_layer = batch_norm(), batch_norm()
    x = images(3)
    eager = eager_layer(x, training=True)

    def train_call(t: Any) -> Any:
        return compiled_layer(t, training=True)

    torch._dynamo.reset()
    compiled_result = torch.compile(train_call, backend="eager")(x)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled_result, eager)
    for a, b in zip(state(compiled_layer), state(eager_layer), strict=True):
        torch.testing.assert_close(a, b)


def _compiled_training_call(tuple_axes: bool = False) -> Compiled:
    layer = batch_norm()
    if tuple_axes:
        layer._reduction_axes = tuple(layer._reduction_axes)
        assert type(layer._reduction_axes) is tuple
    return compiled(lambda t: layer(t, training=True), images(3))


def test_a_compiled_batch_norm_training_call_breaks_no_more_than_with_tuple_axes() -> None:
    """The patch makes the TrackedList of axes compile as a tuple does: the fork's training call
    compiles no worse than upstream's `moments` handed a tuple (one graph wherever that is one
    graph under this torch, never more frames), and, where this torch's dynamo compiles the
    tuple's call in fewer frames than upstream's TrackedList call, in fewer frames than that."""
    fork = _compiled_training_call()
    with upstream.upstream(nn, "moments"):
        theirs = _compiled_training_call()
        with_tuple = _compiled_training_call(tuple_axes=True)
    fork.no_worse_than(with_tuple)
    fork.no_worse_than(theirs)
    assert not theirs.fullgraph, "upstream breaks at the TrackedList (what the patch removes)"
    if with_tuple.frames < theirs.frames:
        assert fork.frames < theirs.frames, (fork.frames, theirs.frames)


def test_compiled_moments_of_tracked_axes_break_less_than_upstreams() -> None:
    axes = batch_norm()._reduction_axes
    x = images(3)
    fork = compiled(lambda t: nn.moments(t, axes), x)
    with upstream.upstream(nn, "moments"):
        theirs = compiled(lambda t: nn.moments(t, axes), x)
        with_tuple = compiled(lambda t: nn.moments(t, tuple(axes)), x)
    fork.no_worse_than(with_tuple)
    assert not theirs.fullgraph, "upstream breaks at the TrackedList (what the patch removes)"
    assert fork.frames < theirs.frames, (fork.frames, theirs.frames)
    for a, b in zip(fork.result, nn.moments(x, axes), strict=True):
        torch.testing.assert_close(a, b)


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
