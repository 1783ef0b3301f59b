"""Patch torch-compile-dynamic-batch on the installed fork (torch backend only).

While dynamo traces, `reduce_values`'s element count and `reduce_to_samplewise_values`'s int
sample weight are made with `torch.full` instead of `ops.convert_to_tensor` (`torch.as_tensor`),
which fixed the batch size in the graph. The oracle is the release under test's own code
(`upstream.upstream`, tests/equivalence/upstream.py):

- eager calls give upstream's values bit for bit (the branches are not taken);
- compiled, both functions give what eager gives (value, dtype, shape), for a static and a
  symbolic batch size, never in more graphs than upstream's code under the installed torch, and
  a third batch size costs no recompile (upstream's: one each time);
- a model's train step compiled by `jit_compile=True` takes batches of 4, 5 and 6 in no more
  graphs than upstream's code for each, none for the third where upstream's makes one, training
  as upstream's does within torch's float32 tolerances.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import patch_applied, require_dynamo_reading_keras_state

NAME = "torch-compile-dynamic-batch"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-compile-dynamic-batch"),
    pytest.mark.skipif(not TORCH, reason="the patch changes what torch.compile traces only"),
]

if APPLIED and TORCH:
    import torch
    import torch._dynamo

    #: The modules the patch rewrote.
    loss_module = upstream.patched_module(NAME, "losses/loss.py")
    metrics_module = upstream.patched_module(NAME, "metrics/reduction_metrics.py")


@contextmanager
def upstream_code() -> Iterator[None]:
    with ExitStack() as stack:
        stack.enter_context(upstream.upstream(loss_module, "reduce_values"))
        stack.enter_context(upstream.upstream(metrics_module, "reduce_to_samplewise_values"))
        yield


def values(batch: int, dtype: str = "float32", seed: int = 0) -> Any:
    rng = np.random.default_rng(seed + batch)
    return torch.tensor(rng.standard_normal((batch, 3)).astype(dtype))


def reduce(x: Any) -> Any:
    return loss_module.reduce_values(x, reduction="sum_over_batch_size")


def samplewise(x: Any) -> Any:
    return metrics_module.reduce_to_samplewise_values(x, x.shape[0], keras.ops.mean, "float32")


def compiled_graphs(function: Callable[[Any], Any], inputs: list[Any]) -> tuple[list[int], list[Any]]:
    """Graphs dynamo compiles for each input in turn, and the compiled outputs."""
    torch._dynamo.reset()
    made = [0]

    def counting(graph: Any, example_inputs: Any) -> Any:
        made[0] += 1
        return graph.forward

    compiled = torch.compile(function, backend=counting)
    counts, outputs = [], []
    for x in inputs:
        before = made[0]
        outputs.append(compiled(x))
        counts.append(made[0] - before)
    torch._dynamo.reset()
    return counts, outputs


def same(a: Any, b: Any, exact: bool) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y, exact)
        return
    if not isinstance(a, torch.Tensor):
        assert a == b
        return
    assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
    if exact:
        assert torch.equal(a, b)
    else:
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("batch", [1, 4, 7])
def test_eager_calls_are_upstream_s(dtype: str, batch: int) -> None:
    x = values(batch, dtype)
    got = (reduce(x), metrics_module.reduce_to_samplewise_values(x, batch, keras.ops.mean, dtype),
           metrics_module.reduce_to_samplewise_values(x, None, keras.ops.mean, dtype))
    with upstream_code():
        expected = (reduce(x), metrics_module.reduce_to_samplewise_values(x, batch, keras.ops.mean, dtype),
                    metrics_module.reduce_to_samplewise_values(x, None, keras.ops.mean, dtype))
    same(got, expected, exact=True)


@pytest.mark.parametrize("function", [reduce, samplewise], ids=["reduce_values", "reduce_to_samplewise_values"])
def test_compiled_a_new_batch_size_costs_one_recompile_and_gives_eager_values(function: Any) -> None:
    inputs = [values(4), values(5), values(6)]
    counts, outputs = compiled_graphs(function, inputs)
    for x, output in zip(inputs, outputs, strict=True):
        same(output, function(x), exact=False)
    with upstream_code():
        upstream_counts, _ = compiled_graphs(function, inputs)
    # Never more graphs than upstream's code for any call under this torch (a graph break
    # adds one), and the third batch size none, where upstream's code makes one.
    assert all(c <= u for c, u in zip(counts, upstream_counts, strict=True)), (counts, upstream_counts)
    assert counts[2] == 0, counts
    assert upstream_counts[2] >= 1, ("upstream fixes the batch size (what the patch removes)", upstream_counts)


def model() -> Any:
    keras.utils.set_random_seed(5)
    built = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(2)])
    built.compile(optimizer="sgd", loss="mse", jit_compile=True)
    return built


def test_a_compiled_train_step_takes_a_third_batch_size_without_recompiling() -> None:
    require_dynamo_reading_keras_state()
    rng = np.random.default_rng(9)
    batches = [(rng.standard_normal((n, 3)).astype("float32"), rng.standard_normal((n, 2)).astype("float32"))
               for n in (4, 5, 6)]

    def run() -> tuple[list[int], list[float], list[Any]]:
        made = [0]
        real_compile = torch.compile

        def counting(graph: Any, example_inputs: Any) -> Any:
            made[0] += 1
            return graph.forward

        torch._dynamo.reset()
        built = model()
        counts, losses = [], []
        with mock.patch.object(torch, "compile", lambda f: real_compile(f, backend=counting)):
            for x, y in batches:
                before = made[0]
                losses.append(built.train_on_batch(x, y))
                counts.append(made[0] - before)
        torch._dynamo.reset()
        return counts, losses, [np.array(w) for w in built.get_weights()]

    counts, losses, weights = run()
    with upstream_code():
        upstream_counts, upstream_losses, upstream_weights = run()
    # Never more graphs than upstream's code for any batch under this torch, and none for the
    # third batch size where upstream's code makes one (where this torch's dynamo makes the
    # batch size of upstream's graphs dynamic itself, there is nothing for the patch to save).
    assert all(c <= u for c, u in zip(counts, upstream_counts, strict=True)), (counts, upstream_counts)
    if upstream_counts[2] >= 1:
        assert counts[2] == 0, (counts, upstream_counts)
    assert losses == pytest.approx(upstream_losses, rel=1e-5)
    for a, b in zip(weights, upstream_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
