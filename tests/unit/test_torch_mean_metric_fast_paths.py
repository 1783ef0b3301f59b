"""Patch torch-mean-metric-fast-paths (30): its helpers on a stand-in torch whose current cuda
device the test sets (tests/support/torch_current_cuda.py), for Keras's index-less "cuda".

The checkout's `helpers` piece is executed (on a backend that is not torch's, so it imports
nothing) and given the stand-in's torch, variables and ops; `Mean.update_state`'s fast path must
be taken exactly when torch's `.to(get_device())` would keep both variables and the values where
they are (for "cuda": on the current cuda device, asked at each call), and `Mean.result`'s on a
cuda device must be the sync-free quotient, never reading the count.
"""

from __future__ import annotations

from typing import Any

import pytest

import codemods.torch_mean_metric_fast_paths as package
from codemods.engine import piece_text
from tests.support import torch_current_cuda as standin


def helpers(torch: standin.Torch) -> dict[str, Any]:
    """The helpers piece executed, then given the stand-in's parts."""
    namespace = standin.mean_names(torch)
    exec(piece_text(package.__file__, "helpers"), namespace)
    assert namespace["_forkgen_torch"] is None  # not the torch backend: nothing imported
    return standin.mean_standin(namespace, torch)


@pytest.mark.parametrize("cuda_built", [True, False], ids=["cuda torch", "cpu-only torch"])
def test_the_fast_paths_follow_torchs_rule_for_every_device_string(cuda_built: bool) -> None:
    torch = standin.Torch(cuda_built)
    namespace = helpers(torch)
    assert standin.check_mean_state(namespace, torch) > 0
    assert (torch.asked > 0) is cuda_built  # a cpu-only torch is never asked
    assert torch.synced == 0


def test_cuda_is_the_current_device_at_each_call() -> None:
    torch = standin.Torch()
    namespace = helpers(torch)
    torch.keras_device = "cuda"  # type: ignore[attr-defined]
    metric = type("Mean", (namespace["Metric"],), {})()
    metric._dtype = "float32"
    metric.total = namespace["_forkgen_mean_variable"](torch.nn.Parameter("cuda:1"))
    metric.count = namespace["_forkgen_mean_variable"](torch.nn.Parameter("cuda:1"))
    update, result = namespace["_forkgen_mean_update"], namespace["_forkgen_mean_result"]
    assert update(metric, torch.Tensor("cuda:1"), None) is False and torch.asked == 1
    torch.current = 1  # torch.cuda.set_device(1)
    assert update(metric, torch.Tensor("cuda:1"), None) is True and torch.asked == 2
    assert namespace["ran"][-1][-1] == "cuda"  # the count's `as_tensor` gets the str, as upstream's
    assert update(metric, torch.Tensor("cuda:0"), None) is False
    assert result(metric) == "quotient" and torch.synced == 0
    torch.current = 0
    assert result(metric) is None
    assert namespace["_forkgen_mean_places"]["cuda"] is namespace["_forkgen_mean_current_cuda"]
