"""Patch torch-max-pool-channels-last (after keras-team/keras#23645) on synthetic torch nn modules."""

from __future__ import annotations

import difflib
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import AnchorDrift, Outcome, Sources
from codemods.torch_conv_single_copy import PATCH as CONV_PATCH
from codemods.torch_conv_single_copy import cases as conv_cases
from codemods.torch_max_pool_channels_last import PATCH
from codemods.torch_max_pool_channels_last import cases as synthetic
from codemods.torch_max_pool_channels_last.cases import (
    AFTER,
    BEFORE,
    CALL,
    HELPER,
    NIGHTLY,
    NIGHTLY_NN,
    OUTPUT,
    POOL,
    STATEMENT,
)
from tests.support import torch_strided as standin
from tests.support.synthetic import load_module, patch_files

NN = "keras/src/backend/torch/nn.py"


def check(source: str, path: str = NN) -> Any:
    return PATCH.check(Sources(lambda p: source if p == path else None))


def line_of(source: str, text: str) -> int:
    return source[: source.index(text)].count("\n") + 1


ANCHOR_LINE = line_of(BEFORE, STATEMENT) + 1


def test_only_max_pool_changes_and_only_by_one_statement() -> None:
    diff = list(difflib.ndiff(BEFORE.splitlines(True), AFTER.splitlines(True)))
    assert [line for line in diff if line.startswith("- ")] == ["-         inputs = _transpose_spatial_inputs(inputs)\n"]
    # What is added: two blank lines and the helper, the two statements, the output copy (difflib
    # may align the blank lines either side of the helper).
    added = sorted(line[2:] for line in diff if line.startswith("+ "))
    inserted = "\n\n" + HELPER + CALL.split("\n", 1)[1].rsplit("\n\n", 1)[0] + "\n" + OUTPUT
    assert added == sorted(inserted.splitlines(True))
    # conv, conv_transpose and the other pooling statements keep upstream's code.
    assert AFTER.count("inputs = _transpose_spatial_inputs(inputs)\n") == 2
    assert AFTER.count("tnn.max_pool1d(") == AFTER.count("tnn.max_pool3d(") == 1
    assert HELPER.startswith("# forkgen: torch-max-pool-channels-last (keras#23645")
    assert "def _forkgen_max_pool_view(inputs, num_spatial_dims, padding):\n" in HELPER
    assert "        or (inputs.requires_grad and torch.is_grad_enabled())\n" in HELPER


def test_outcomes() -> None:
    # Beyond cases.py: the lines of the applied and upstream forms, and the file nightly names.
    present = check(AFTER)
    assert present.anchors[0].line == line_of(AFTER, CALL) + 1
    assert present.anchors[1].line == line_of(AFTER, POOL)
    assert check(NIGHTLY).anchors[0].line == ANCHOR_LINE
    moved = check(NIGHTLY, NIGHTLY_NN)
    assert moved.outcome is Outcome.UPSTREAM and moved.anchors[0].path == NIGHTLY_NN
    assert PATCH.since == "3.15.0"


def test_a_tree_without_the_torch_backend_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == NN and "no such file" in str(caught.value)


def test_the_synthetic_tree_file_takes_both_patches_of_nn_py() -> None:
    # One synthetic nn.py for the patches of nn.py: this module extends the conv patch's, and
    # torch-flash-probe-compile-skip's cases add its probe below.
    assert patch_files()[NN].startswith(BEFORE)
    sources = Sources(lambda p: synthetic.FILES.get(p))
    for patch in (CONV_PATCH, PATCH):
        first = patch.check(sources)
        assert first.outcome is Outcome.APPLIED and not first.present
        patch.apply(sources)
    patched = sources.rendered()[NN]
    assert patched.count("# forkgen: torch-max-pool-channels-last") == 3
    assert patched.count("# forkgen: torch-conv-single-copy") == 2
    for patch in (CONV_PATCH, PATCH):
        assert patch.check(Sources(lambda p: patched if p == NN else None)).present
    # The conv patch's own synthetic file still takes it (its max_pool is not this one's).
    assert CONV_PATCH.check(Sources(lambda p: conv_cases.NN_PY if p == NN else None)).outcome is Outcome.APPLIED


# -- behaviour: the synthetic upstream and patched max_pool, side by side, on a numpy stand-in ---


class PoolTensor(standin.Tensor):
    """The conv patch's strided numpy stand-in, with what max_pool's path reads besides."""

    layout = "strided"
    dtype = "float32"
    requires_grad = False
    device = types.SimpleNamespace(type="cpu")

    def clone(self, memory_format: Any) -> PoolTensor:
        return PoolTensor(super().clone(memory_format).array)

    def to(self, device: str) -> PoolTensor:
        return self


class State:
    device = "cpu"
    received: list[PoolTensor] = []


def _max_pool2d(inputs: PoolTensor, kernel_size: tuple[int, int], stride: tuple[int, int], padding: int) -> PoolTensor:
    """Max pooling of an NCHW tensor; the output in the format torch picks for the input:
    channels_last for a channels_last-strided input that is not contiguous, else the default."""
    State.received.append(inputs)
    x = inputs.array
    (kh, kw), (sh, sw) = kernel_size, stride
    oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    values = np.empty((x.shape[0], x.shape[1], oh, ow))
    for i in range(oh):
        for j in range(ow):
            values[:, :, i, j] = x[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw].max(axis=(2, 3))
    last = inputs.is_contiguous(standin.channels_last) and not inputs.is_contiguous()
    fmt = standin.channels_last if last else standin.contiguous_format
    return PoolTensor(standin.strided(values, standin.canonical_strides(values.shape, fmt)).array)


def _load(source: str, name: str) -> types.ModuleType:
    torch = types.ModuleType("torch")
    for key, value in {
        "Tensor": PoolTensor, "strided": "strided", "float32": "float32", "float64": "float64",
        "float16": "float16", "bfloat16": "bfloat16", "contiguous_format": standin.contiguous_format,
        "channels_last": standin.channels_last, "channels_last_3d": standin.channels_last_3d,
        "permute": lambda t, dims: PoolTensor(t.array.transpose(tuple(dims))),
        "is_grad_enabled": standin.is_grad_enabled,
        "compiler": types.SimpleNamespace(is_compiling=lambda: False),
        "_C": types.SimpleNamespace(_functorch=types.SimpleNamespace(is_functorch_wrapped_tensor=lambda t: False)),
        "empty": lambda size, dtype, device: PoolTensor(np.zeros(size)),
    }.items():
        setattr(torch, key, value)
    tnn = types.ModuleType("torch.nn.functional")
    tnn.max_pool2d = _max_pool2d  # type: ignore[attr-defined]
    torch.nn = types.SimpleNamespace(functional=tnn)  # type: ignore[attr-defined]
    backend = types.SimpleNamespace(standardize_data_format=lambda f: f or "channels_last")
    core = types.SimpleNamespace(convert_to_tensor=lambda x: x, get_device=lambda: State.device)
    validation = types.SimpleNamespace(
        standardize_tuple=lambda v, n, name: (v,) * n if isinstance(v, int) else tuple(v))
    modules = {
        "torch": torch, "torch.nn": torch.nn, "torch.nn.functional": tnn, "keras": types.SimpleNamespace(),
        "keras.src": types.SimpleNamespace(backend=backend), "keras.src.backend": backend,
        "keras.src.backend.torch": types.SimpleNamespace(), "keras.src.backend.torch.core": core,
        "keras.src.utils": types.SimpleNamespace(), "keras.src.utils.argument_validation": validation,
    }
    with mock.patch.dict(sys.modules, modules):
        return load_module(source, name)


UPSTREAM_NN = _load(BEFORE, "max_pool_upstream")
PATCHED_NN = _load(AFTER, "max_pool_patched")
LAYOUTS = ["dense", "offset", "sliced channels", "odd size-1 strides"]


def make(shape: tuple[int, ...], layout: str, requires_grad: bool) -> PoolTensor:
    values = (np.arange(int(np.prod(shape))) % 5).astype("float64").reshape(shape)
    if layout == "dense":
        x = PoolTensor(standin.dense(shape).array)
        x.array[...] = values
    elif layout == "offset":
        x = PoolTensor(standin.strided(values, standin.canonical_strides(
            shape, standin.contiguous_format), offset=3).array)
    elif layout == "sliced channels":
        wide = standin.dense((*shape[:-1], 2 * shape[-1]))
        x = PoolTensor(wide.array[..., ::2])
        x.array[...] = values
    else:
        strides = [7 if size == 1 else s for size, s in zip(shape, standin.canonical_strides(
            shape, standin.contiguous_format), strict=True)]
        x = PoolTensor(standin.strided(values, strides).array)
    x.requires_grad = requires_grad
    return x


@contextmanager
def device(name: str) -> Iterator[None]:
    previous, State.device = State.device, name
    try:
        yield
    finally:
        State.device = previous


def pooled(module: types.ModuleType, x: PoolTensor, grad: bool, padding: str, where: str, **kwargs: Any) -> Any:
    State.received.clear()
    standin.State.copied.clear()
    with standin.grad(grad), device(where):
        out = module.max_pool(x, 2, padding=padding, data_format="channels_last", **kwargs)
    (received,) = State.received
    facts = (out.shape, out.stride(), out.array.tobytes())
    return facts, received.shares_memory(x), [t.numel() for t in standin.State.copied]


@settings(max_examples=300, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 2), st.integers(2, 5), st.integers(2, 5), st.integers(1, 3)),
    layout=st.sampled_from(LAYOUTS),
    grad=st.booleans(),
    requires_grad=st.booleans(),
    padding=st.sampled_from(["valid", "same"]),
    where=st.sampled_from(["cpu", "cpu", "meta"]),
    strides=st.sampled_from([None, 1, (1, 2)]),
)
def test_max_pool_gives_upstreams_tensor_and_copies_only_the_output(
    shape: tuple[int, ...], layout: str, grad: bool, requires_grad: bool, padding: str, where: str, strides: Any
) -> None:
    upstream = pooled(UPSTREAM_NN, make(shape, layout, requires_grad), grad, padding, where, strides=strides)
    x = make(shape, layout, requires_grad)
    patched = pooled(PATCHED_NN, x, grad, padding, where, strides=strides)
    assert patched[0] == upstream[0]
    dense = layout in ("dense", "offset") or (layout == "odd size-1 strides" and 1 not in shape)
    eligible = (dense and shape[-1] > 1 and padding == "valid" and where == "cpu"
                and not (grad and requires_grad))
    # The view itself is pooled exactly where the patch applies (or where upstream's copy was none:
    # a view contiguous already); then only the output is copied.
    assert patched[1] is (eligible or upstream[1])
    if eligible:
        assert upstream[2] == [x.numel()] and patched[2] == [int(np.prod(upstream[0][0]))]
    else:
        assert patched[2] == upstream[2]


def test_a_one_by_one_output_gets_upstreams_strides() -> None:
    # A channels_last output of 1x1 spatial size counts as contiguous: `.contiguous()` would keep
    # its strides; the clone gives the default layout's, as 3.15.1's output has.
    for shape in ((2, 2, 2, 3), (1, 3, 2, 4)):
        upstream = pooled(UPSTREAM_NN, make(shape, "dense", False), False, "valid", "cpu", strides=None)
        patched = pooled(PATCHED_NN, make(shape, "dense", False), False, "valid", "cpu", strides=None)
        assert patched[0] == upstream[0] and patched[1]
        assert upstream[0][1] == (shape[-1], 1, 1, 1)


def test_other_data_formats_and_ranks_keep_upstreams_steps() -> None:
    x = make((2, 3, 4, 4), "dense", False)
    State.received.clear()
    with standin.grad(False):
        PATCHED_NN.max_pool(x, 2, data_format="channels_first")
    assert State.received[0] is x
    assert PATCHED_NN._forkgen_max_pool_view(make((2, 4, 3), "dense", False), 1, "valid") is None
    assert PATCHED_NN._forkgen_max_pool_view(make((2, 4, 4, 3), "dense", False), 2, "valid") is not None
