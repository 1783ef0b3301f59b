"""Patch dense-kernel-fast-path on the installed fork: `Dense.kernel` and `EinsumDense.kernel`
answer as upstream's.

The fast path returns `_kernel` at once for a built layer that is not quantized and has no
LoRA, when the property's calibration-flag look-ups would find a bool or nothing. Compared here,
on every backend, against the release under test's own, unpatched property (compiled from its
sources into the installed module, `tests/equivalence/upstream.py`): the very object (or the
same values, or the same error) for unbuilt, plain, LoRA and int4/int8-quantized layers, flags
set to bools and to other values, flags that are class attributes running code, a class with
its own `__getattr__`, and on torch a flag among a layer's buffers; and, on torch, a model with
both layers under `torch.compile`: one graph wherever upstream's property gives one
(`fullgraph=True`) under the installed torch, and never more frames.
"""

from __future__ import annotations

import inspect
from typing import Any

import keras
import numpy as np
import pytest

from tests.equivalence import upstream
from tests.equivalence.helpers import catch, compiled, patch_applied

NAME = "dense-kernel-fast-path"
APPLIED = patch_applied(NAME)
pytestmark = pytest.mark.skipif(not APPLIED, reason="this fork does not apply dense-kernel-fast-path")

if APPLIED:
    dense = upstream.patched_module(NAME, "core/dense.py")
    einsum_dense = upstream.patched_module(NAME, "core/einsum_dense.py")
    CLASSES = {"Dense": dense.Dense, "EinsumDense": einsum_dense.EinsumDense}
else:
    CLASSES = {}


def make(name: str, cls: type | None = None, build: bool = True) -> Any:
    cls = cls or CLASSES[name]
    layer = cls(3) if name == "Dense" else cls("ab,bc->ac", output_shape=3)
    if build:
        layer.build((2, 4))
    return layer


def same(layer: Any, base: type) -> None:
    """`layer.kernel` is upstream's: the very object, or equal values, or the same error."""
    fork = catch(lambda: layer.kernel)
    with upstream.upstream(base, "kernel"):
        theirs = catch(lambda: layer.kernel)
    assert fork[0] == theirs[0], (fork, theirs)
    if fork[0] == "error" or fork[1] is None or theirs[1] is None:
        assert fork == theirs
    elif fork[1] is not theirs[1]:
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(fork[1]), keras.ops.convert_to_numpy(theirs[1]))
        assert keras.backend.standardize_dtype(fork[1].dtype) == keras.backend.standardize_dtype(theirs[1].dtype)


@pytest.fixture(params=sorted(CLASSES))
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_fast_path_is_there_and_taken(name: str) -> None:
    layer = make(name)
    assert "forkgen: dense-kernel-fast-path" in inspect.getsource(CLASSES[name].kernel.fget)
    module = dense if name == "Dense" else einsum_dense
    assert module._kernel_flags_unset(layer)
    assert layer.kernel is layer._kernel


def test_plain_unbuilt_lora_and_quantized_layers(name: str) -> None:
    base = CLASSES[name]
    same(make(name, build=False), base)
    same(make(name), base)
    lora = make(name)
    lora.enable_lora(2)
    # LoRA starts with `lora_kernel_b` zero (the kernel's values unchanged): make it count.
    lora.lora_kernel_b.assign(keras.ops.ones(lora.lora_kernel_b.shape) * 0.5)
    same(lora, base)
    with upstream.upstream(base, "kernel"):
        assert not np.array_equal(keras.ops.convert_to_numpy(lora.kernel), keras.ops.convert_to_numpy(lora._kernel))
    for mode in ("int8", "int4"):
        quantized = make(name)
        try:
            quantized.quantize(mode)
        except Exception as error:  # noqa: BLE001 - a mode this release or backend does not quantize
            pytest.skip(f"quantize({mode!r}): {error}")
        same(quantized, base)


class Truth:
    """A flag value whose truth test runs code: it counts, and may raise."""

    def __init__(self, raises: bool) -> None:
        self.raises, self.tested = raises, 0

    def __bool__(self) -> bool:
        self.tested += 1
        if self.raises:
            raise RuntimeError("no truth value")
        return False


@pytest.mark.parametrize("value", [True, False, None, 0, 1, [1], "yes", "truth", "raising"])
def test_calibration_flags_set_on_the_instance(name: str, value: Any) -> None:
    for flag in ("is_gptq_calibrated", "is_awq_calibrated"):
        layer = make(name)
        flag_value = Truth(value == "raising") if value in ("truth", "raising") else value
        setattr(layer, flag, flag_value)
        same(layer, CLASSES[name])
        if isinstance(flag_value, Truth):  # tested once by the fork's read, once by upstream's
            assert flag_value.tested == 2


def test_reads_that_raise_raise_in_upstreams_order(name: str) -> None:
    # Upstream reads the flags before `lora_enabled`: a flag whose truth test raises is the
    # error, even on a layer that has no `lora_enabled`.
    layer = make(name)
    layer.is_awq_calibrated = Truth(raises=True)
    del layer.lora_enabled
    same(layer, CLASSES[name])
    assert catch(lambda: layer.kernel)[1][0] is RuntimeError


def test_a_flag_that_runs_code_is_read_as_upstream_reads_it(name: str) -> None:
    reads: list[str] = []

    class Counted(CLASSES[name]):  # type: ignore[misc,valid-type]
        @property
        def is_gptq_calibrated(self) -> bool:
            reads.append("gptq")
            return False

    layer = make(name, Counted)
    fork_kernel = layer.kernel
    fork_reads = len(reads)
    with upstream.upstream(CLASSES[name], "kernel"):
        assert layer.kernel is fork_kernel
    assert fork_reads == len(reads) - fork_reads == 1


def test_a_class_with_its_own_getattr(name: str) -> None:
    seen: list[str] = []

    class Looking(CLASSES[name]):  # type: ignore[misc,valid-type]
        def __getattr__(self, attr: str) -> Any:
            seen.append(attr)
            return super().__getattr__(attr) if hasattr(super(), "__getattr__") else object.__getattribute__(self, attr)

    layer = make(name, Looking)
    seen.clear()
    fork = catch(lambda: layer.kernel)
    looked = len(seen)
    with upstream.upstream(CLASSES[name], "kernel"):
        assert catch(lambda: layer.kernel) == fork
    assert looked and seen[:looked] == seen[looked:]


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch's Module.__getattr__")
def test_a_flag_among_the_buffers(name: str) -> None:
    import torch

    layer = make(name)
    layer.register_buffer("is_awq_calibrated", torch.ones(3))
    same(layer, CLASSES[name])  # upstream's bool() of a 3-element tensor raises
    other = make(name)
    other.register_buffer("is_gptq_calibrated", torch.ones(()))
    same(other, CLASSES[name])


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile: torch backend only")
def test_a_compiled_model_compiles_as_with_upstreams_property() -> None:
    """The model compiles no worse than with upstream's properties under this torch (one graph
    wherever theirs is one graph, never more frames), and computes what eager computes."""
    import torch

    inputs = keras.Input((8, 16))
    x = keras.layers.MultiHeadAttention(2, 8)(inputs, inputs)
    model = keras.Model(inputs, keras.layers.Dense(4)(x))
    data = torch.randn(2, 8, 16)
    expected = model(data)
    fork = compiled(model, data)
    with upstream.upstream(dense.Dense, "kernel"), upstream.upstream(einsum_dense.EinsumDense, "kernel"):
        theirs = compiled(model, data)
    fork.no_worse_than(theirs)
    torch.testing.assert_close(fork.result, expected, rtol=0, atol=0)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile")
def test_a_compiled_call_does_not_remember_the_class() -> None:
    """While torch.compile traces, the per-class answer is computed but not stored: a traced
    store is a write dynamo replays after every compiled call, and its guard on the class
    missing at trace time recompiles the next call."""
    import torch
    import torch._dynamo

    layer = keras.layers.Dense(3)
    layer.build((None, 4))
    x = torch.ones(2, 4)
    saved = dict(dense._KERNEL_PLAIN_CLASSES)
    dense._KERNEL_PLAIN_CLASSES.clear()
    torch._dynamo.reset()
    try:
        got = torch.compile(lambda t: layer(t), backend="eager")(x)
        remembered = dict(dense._KERNEL_PLAIN_CLASSES)
    finally:
        torch._dynamo.reset()
        dense._KERNEL_PLAIN_CLASSES.update(saved)
    assert remembered == {}
    assert torch.equal(got, layer(x))
