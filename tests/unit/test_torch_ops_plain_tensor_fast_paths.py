"""Patch torch-ops-plain-tensor-fast-paths (27): its helpers on a stand-in torch whose current cuda
device the test sets (tests/support/torch_current_cuda.py), for Keras's index-less "cuda".

The checkout's `module_level` piece is executed with the stand-in; `_forkgen_plain_tensors` must
return the arguments themselves exactly when torch's `tensor.to(get_device())` would (for "cuda":
the tensor is on the current cuda device, asked at each call), never for "mps", "xpu", "meta" or
a string torch rejects, and ask for the current device only when a tensor is on a cuda device.
"""

from __future__ import annotations

from typing import Any

import pytest

import codemods.torch_ops_plain_tensor_fast_paths as package
from codemods.engine import piece_text
from tests.support import torch_current_cuda as standin


def helpers(torch: standin.Torch) -> dict[str, Any]:
    """The module_level piece executed with the stand-in torch and core module."""
    namespace = standin.ops_names(torch)
    exec(piece_text(package.__file__, "module_level"), namespace)
    return namespace


@pytest.mark.parametrize("cuda_built", [True, False], ids=["cuda torch", "cpu-only torch"])
def test_the_fast_path_follows_torchs_rule_for_every_device_string(cuda_built: bool) -> None:
    torch = standin.Torch(cuda_built)
    namespace = helpers(torch)
    assert standin.check_plain_tensors(namespace, torch) > 0
    assert (torch.asked > 0) is cuda_built  # a cpu-only torch is never asked


def test_cuda_is_the_current_device_at_each_call() -> None:
    torch = standin.Torch()
    namespace = helpers(torch)
    plain, dtypes = namespace["_forkgen_plain_tensors"], frozenset((torch.float32,))
    torch.keras_device = "cuda"  # type: ignore[attr-defined]
    on_0, on_1 = (torch.Tensor("cuda:0"), torch.nn.Parameter("cuda:0")), (torch.Tensor("cuda:1"), torch.Tensor("cuda:1"))
    assert plain(on_0, dtypes) == list(on_0) and torch.asked == 1
    assert plain(on_1, dtypes) is None and torch.asked == 2
    torch.current = 1  # torch.cuda.set_device(1)
    assert plain(on_0, dtypes) is None and torch.asked == 3
    assert plain(on_1, dtypes) == list(on_1) and torch.asked == 4
    assert plain((on_1[0], on_0[0]), dtypes) is None and torch.asked == 5
    assert plain((torch.Tensor("cpu"), on_1[0]), dtypes) is None and torch.asked == 5
    # The memo keeps only what does not change: "cuda" stands for "ask".
    assert namespace["_forkgen_places"]["cuda"] is namespace["_forkgen_current_cuda"]
    for device in ("mps", "xpu", "meta"):
        torch.keras_device = device  # type: ignore[attr-defined]
        assert plain((torch.Tensor(f"{device}:0"),), dtypes) is None
        assert namespace["_forkgen_places"][device] is False
    assert torch.asked == 5
