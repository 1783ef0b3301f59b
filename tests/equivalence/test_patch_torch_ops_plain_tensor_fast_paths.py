"""Patch torch-ops-plain-tensor-fast-paths on the installed fork (torch backend only).

The patch puts fast paths above the torch backend's `matmul` and `einsum`. Each must return
what the release under test's own, unpatched function (`upstream.original`, compiled from its
sources into the installed numpy module, tests/equivalence/upstream.py) returns for the same
arguments: the same values, dtype, device, shape and requires_grad, the same gradients, the
same exception; for tensors, variables, python scalars, numpy arrays and lists of every dtype
(mixed too), on the cpu and the meta device, inside autocast and stateless scopes, under
another floatx, under a torch function mode, with a monkeypatched `convert_to_tensor`, with a
variable subclass and an uninitialised variable. The fast path must be taken for the plain
cases (a Dense and an EinsumDense layer's op). Keras's index-less "cuda" (a default GPU machine):
the installed helpers, rebound onto a stand-in torch whose current cuda device the test changes
(tests/support/torch_current_cuda.py), take the fast path exactly when torch's `.to("cuda")`
returns each argument itself.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.equivalence import upstream
from tests.equivalence.helpers import compiled, patch_applied
from tests.support import torch_current_cuda as standin

NAME = "torch-ops-plain-tensor-fast-paths"
APPLIED = patch_applied(NAME)
TORCH = keras.backend.backend() == "torch"
pytestmark = [
    pytest.mark.skipif(not APPLIED, reason="this fork does not apply torch-ops-plain-tensor-fast-paths"),
    pytest.mark.skipif(not TORCH, reason="the patch changes the torch backend only"),
]

if APPLIED and TORCH:
    import torch
    from keras.src.backend.common import variables as common_variables
    from keras.src.backend.common.stateless_scope import StatelessScope

    #: The module the patch rewrote (3.x's backend/torch/numpy.py, keras-nightly's ops/numpy.py).
    tnp = upstream.patched_module(NAME, "numpy.py")

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "bool"]


@functools.cache
def oracle(name: str) -> Callable[..., Any]:
    return upstream.original(getattr(tnp, name))


def outcome(function: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return "value", function(*args)
    except Exception as error:  # noqa: BLE001 - the same exception is part of the behaviour
        return "raised", (type(error), str(error))


def same(got: tuple[str, Any], want: tuple[str, Any], values: bool = True) -> None:
    """The same outcome; `values=False`: not the values (upstream converts a meta input to an
    uninitialised `empty_like` tensor)."""
    assert got[0] == want[0], (got, want)
    if got[0] == "raised":
        assert got[1] == want[1]
        return
    a, b = got[1], want[1]
    assert type(a) is type(b)
    assert a.dtype == b.dtype and a.device == b.device and tuple(a.shape) == tuple(b.shape)
    assert a.requires_grad == b.requires_grad
    if values and a.device.type != "meta":
        assert torch.equal(a.detach().cpu(), b.detach().cpu()) or (
            a.is_floating_point() and torch.allclose(a.detach().cpu(), b.detach().cpu(), equal_nan=True, atol=0, rtol=0)
        )


def compare(name: str, *args: Any) -> Any:
    """Patched and upstream's function on the same arguments: the same outcome."""
    want = outcome(oracle(name), *args)
    got = outcome(getattr(tnp, name), *args)
    same(got, want, values=not any(getattr(a, "is_meta", False) for a in args))
    return got


def python_calls(run: Callable[[], Any]) -> set[Any]:
    seen: set[Any] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.add(frame.f_code)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return seen


def dense(units: int = 3, dtype: Any = None) -> Any:
    layer = keras.layers.Dense(units, dtype=dtype)
    layer.build((None, 4))
    return layer


def tensor(dtype: str, shape: tuple[int, ...] = (2, 4), grad: bool = False, device: str = "cpu") -> Any:
    values = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape) / 3 - 1
    t = values.to(getattr(torch, dtype)).to(device)
    if grad and t.is_floating_point():
        t.requires_grad_(True)
    return t


def test_the_patch_is_in_and_the_oracles_are_upstreams() -> None:
    for name in ("matmul", "einsum"):
        function = oracle(name)
        assert not any(n.startswith("_forkgen") for n in function.__code__.co_names)
        assert "_forkgen_plain_tensors" in getattr(tnp, name).__code__.co_names
        assert f"# forkgen: {NAME}" not in upstream.upstream_source(tnp)


def test_the_fast_path_is_taken_for_layers_ops() -> None:
    """A Dense layer's matmul (a tensor and the kernel variable) and an EinsumDense's einsum
    return without upstream's conversions, dtype look-ups and casts."""
    layer = dense()
    einsum_layer = keras.layers.EinsumDense("ab,bc->ac", output_shape=3)
    einsum_layer.build((None, 4))
    x = tensor("float32")
    body = {tnp.convert_to_tensor.__code__, tnp.cast.__code__}
    for run in (lambda: tnp.matmul(x, layer.kernel), lambda: tnp.einsum("ab,bc->ac", x, einsum_layer.kernel),
                lambda: tnp.matmul(x, x.T)):
        assert not body & python_calls(run)
    compare("matmul", x, layer.kernel)
    compare("einsum", "ab,bc->ac", x, einsum_layer.kernel)
    # The detector sees the body when it runs (float16 on the cpu).
    assert tnp.cast.__code__ in python_calls(lambda: tnp.matmul(tensor("float16"), tensor("float16").T))


def test_while_dynamo_traces_the_body_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """While dynamo traces (`torch.compiler.is_dynamo_compiling()` True, stood in for here), matmul
    and einsum run upstream's body, with the same results."""
    layer = dense()
    x = tensor("float32")
    assert tnp._forkgen_compiling() is False
    monkeypatch.setattr(tnp, "_forkgen_compiling", lambda: True)
    for run in (lambda: tnp.matmul(x, layer.kernel), lambda: tnp.einsum("ab,bc->ac", x, layer.kernel)):
        assert tnp.convert_to_tensor.__code__ in python_calls(run)
    compare("matmul", x, layer.kernel)
    compare("einsum", "ab,bc->ac", x, layer.kernel)


@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("b", DTYPES)
def test_matmul_dtypes(a: str, b: str) -> None:
    compare("matmul", tensor(a), tensor(b, (4, 3)))


@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("b", ["float32", "float16", "int8", "bfloat16"])
def test_einsum_dtypes(a: str, b: str) -> None:
    compare("einsum", "ab,bc->ac", tensor(a), tensor(b, (4, 3)))
    compare("einsum", "ab->ba", tensor(a))
    compare("einsum", "ab,bc,cd->ad", tensor(a), tensor(b, (4, 3)), tensor(a, (3, 2)))


def test_shapes_and_errors() -> None:
    for x1, x2 in [((4,), (4,)), ((3, 2, 4), (4, 5)), ((2, 4), (3, 5)), ((), (2,)), ((4,), (4, 2))]:
        compare("matmul", tensor("float32", x1), tensor("float32", x2))
    compare("einsum", "ab,bc->ac", tensor("float32"), tensor("float32", (5, 3)))
    compare("einsum", "ab,bc->ac")
    compare("einsum", "ab->ab", tensor("float32"), tensor("float32"))


def test_scalars_arrays_lists_and_mixed_kinds() -> None:
    t = tensor("float32", (4,))
    for other in (2.0, 3, True, np.ones(4, dtype="float32"), np.ones(4), [1.0, 2.0, 3.0, 4.0],
                  np.ones((4, 2), dtype="float16"), torch.nn.Parameter(tensor("float32", (4, 2)))):
        compare("matmul", t, other)
        compare("matmul", other, t)
        compare("einsum", "i,i->", t, other)
    compare("matmul", np.ones((2, 4), dtype="float32"), np.ones((4, 3), dtype="float32"))


def test_gradients_are_the_same() -> None:
    for name, args in (("matmul", ((2, 4), (4, 3))), ("einsum", ((2, 4), (4, 3)))):
        results = []
        for function in (getattr(tnp, name), oracle(name)):
            a, b = tensor("float32", args[0], grad=True), tensor("float32", args[1], grad=True)
            out = function(a, b) if name == "matmul" else function("ab,bc->ac", a, b)
            out.sum().backward()
            results.append((out.detach(), a.grad, b.grad, out.grad_fn.name()))
        assert all(torch.equal(g, w) for g, w in zip(results[0][:3], results[1][:3], strict=True))
        assert results[0][3] == results[1][3]


def test_variables_in_scopes() -> None:
    layer = dense()
    x = tensor("float32")
    compare("matmul", x, layer.kernel)
    compare("matmul", layer.kernel.value.T, layer.kernel)
    with common_variables.AutocastScope("bfloat16"):
        compare("matmul", tensor("bfloat16"), layer.kernel)
        compare("einsum", "ab,bc->ac", tensor("bfloat16"), layer.kernel)
    with common_variables.AutocastScope("float16"):
        compare("matmul", tensor("float16"), layer.kernel)
    with StatelessScope(state_mapping=[(layer.kernel, torch.ones(4, 3))]):
        assert torch.equal(compare("matmul", x, layer.kernel)[1], x @ torch.ones(4, 3))
    with StatelessScope(state_mapping=[(layer.kernel, torch.ones(4, 3, dtype=torch.float64))]):
        compare("matmul", x, layer.kernel)
    with keras.device("meta"):
        got = compare("matmul", x, layer.kernel)
        assert got[1].device.type == "meta"
        compare("einsum", "ab,bc->ac", tensor("float32", device="meta"), layer.kernel)
    int_kernel = keras.Variable(np.ones((4, 3), dtype="int32"), dtype="int32", trainable=False)
    compare("matmul", x, int_kernel)


def test_meta_tensors_and_devices() -> None:
    meta = tensor("float32", device="meta")
    compare("matmul", meta, tensor("float32", (4, 3)))
    compare("matmul", tensor("float32"), tensor("float32", (4, 3), device="meta"))
    for device in ("cpu", "cpu:0", "CPU", "meta", "nonsense:7"):
        with ExitStack() as stack:
            try:
                stack.enter_context(keras.device(device))
            except Exception:  # noqa: BLE001 - a device torch rejects: keras raises on entering
                continue
            compare("matmul", tensor("float32"), tensor("float32", (4, 3)))
            compare("einsum", "ab,bc->ac", tensor("float32"), tensor("float32", (4, 3)))


def test_floatx_and_policies() -> None:
    previous = keras.config.floatx()
    try:
        for floatx in ("float16", "float64", "bfloat16"):
            keras.config.set_floatx(floatx)
            compare("matmul", tensor("float32"), tensor("float32", (4, 3)))
            compare("matmul", tensor("bool"), tensor("bool", (4, 3)))
            compare("matmul", tensor("float32", (4,)), 2.0)
            compare("einsum", "ab,bc->ac", tensor("float32"), tensor("float32", (4, 3)))
    finally:
        keras.config.set_floatx(previous)
    for policy in ("mixed_bfloat16", "mixed_float16", "bfloat16", "float64"):
        layer = dense(dtype=policy)
        x = tensor(keras.dtype_policies.get(policy).compute_dtype)
        want = outcome(layer, x)
        with upstream.upstream(tnp, "matmul"):
            ref = outcome(layer, x)
        same(want, ref)


def test_function_mode_subclass_and_monkeypatch(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.overrides import TorchFunctionMode

    class Doubling(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            return result * 2 if func is torch.Tensor.to else result

    a, b = tensor("float32"), tensor("float32", (4, 3))
    with Doubling():
        compare("matmul", a, b)
        compare("einsum", "ab,bc->ac", a, b)

    class Sub(torch.Tensor):
        pass

    compare("matmul", a.as_subclass(Sub), b)
    compare("einsum", "ab,bc->ac", a, b.as_subclass(Sub))

    layer = dense()
    calls: list[int] = []

    class Counting(type(layer.kernel)):  # type: ignore[misc]
        def _maybe_autocast(self, value: Any) -> Any:
            calls.append(1)
            return value * 2

    counted = Counting(np.ones((4, 3), dtype="float32"))
    calls.clear()
    compare("matmul", a, counted)
    assert calls, "the subclass's _maybe_autocast ran"

    seen: list[Any] = []
    original = tnp.convert_to_tensor

    def spy(x: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(x)
        return original(x, *args, **kwargs)

    monkeypatch.setattr(tnp, "convert_to_tensor", spy)
    tnp.matmul(a, b)
    tnp.einsum("ab,bc->ac", a, b)
    assert len(seen) == 4


def test_uninitialised_variable_runs_the_body() -> None:
    layer = dense()
    kernel = layer.kernel
    saved = kernel._value
    kernel._value = None
    kernel._initializer = keras.initializers.Constant(2.0)
    try:
        compare("matmul", tensor("float32"), kernel)
    finally:
        kernel._value = saved


def test_a_variable_class_with_its_own_value_is_read_as_often_as_upstream_reads_it() -> None:
    """A subclass's `value` getter may do anything (count, log, compute): the fast path must not
    call it, or a fallback would read it twice where upstream's conversion reads it once. A
    float16 variable beside a float32 tensor is one the fast path gives up on after reading."""
    reads: list[str] = []

    class Counted(type(dense().kernel)):  # type: ignore[misc]
        @property
        def value(self) -> Any:
            reads.append(self.name)
            return super().value

    for dtype in ("float16", "float32"):
        variable = Counted(np.ones((4, 3), dtype=dtype), dtype=dtype, name=f"counted_{dtype}")
        for name, args in (("matmul", (tensor("float32"), variable)),
                           ("einsum", ("ab,bc->ac", tensor("float32"), variable))):
            reads.clear()
            want = outcome(oracle(name), *args)
            upstream_reads = len(reads)
            reads.clear()
            got = outcome(getattr(tnp, name), *args)
            same(got, want)
            assert len(reads) == upstream_reads, (name, dtype, reads)


@settings(max_examples=80, deadline=None)
@given(
    a=st.sampled_from(DTYPES), b=st.sampled_from(DTYPES),
    kind_a=st.sampled_from(["tensor", "parameter", "variable", "numpy", "list"]),
    kind_b=st.sampled_from(["tensor", "parameter", "variable", "numpy", "scalar"]),
    grad=st.booleans(),
    cast=st.sampled_from([None, "float16", "bfloat16"]),
    device=st.sampled_from([None, "cpu", "meta", "cuda"]),
    floatx=st.sampled_from(["float32", "float16", "float64"]),
    op=st.sampled_from(["matmul", "einsum"]),
)
def test_combinations(a: str, b: str, kind_a: str, kind_b: str, grad: bool, cast: str | None, device: str | None,
                      floatx: str, op: str) -> None:
    def make(kind: str, dtype: str, shape: tuple[int, ...]) -> Any:
        t = tensor(dtype, shape, grad=grad)
        if kind == "parameter":
            return torch.nn.Parameter(t, requires_grad=grad and t.is_floating_point())
        if kind == "variable":
            return keras.Variable(t.detach().cpu().numpy() if dtype != "bfloat16" else t.float().detach().numpy(),
                                  dtype=dtype, trainable=grad and dtype.startswith("float"))
        if kind == "numpy":
            return t.detach().float().numpy().astype("float32" if dtype == "bfloat16" else dtype)
        if kind == "list":
            return t.detach().float().tolist()
        return 2.5
    x1, x2 = make(kind_a, a, (2, 4)), make(kind_b, b, (4, 3))
    previous = keras.config.floatx()
    try:
        with ExitStack() as stack:
            keras.config.set_floatx(floatx)
            if cast is not None:
                stack.enter_context(common_variables.AutocastScope(cast))
            if device is not None:
                stack.enter_context(keras.device(device))
            if op == "matmul":
                compare("matmul", x1, x2)
            elif kind_b != "scalar":
                compare("einsum", "ab,bc->ac", x1, x2)
    finally:
        keras.config.set_floatx(previous)


@pytest.mark.parametrize("cuda_built", [True, False], ids=["cuda torch", "cpu-only torch"])
def test_cuda_without_an_index_is_the_current_cuda_device_at_each_call(cuda_built: bool) -> None:
    """The installed `_forkgen_place` and `_forkgen_plain_tensors` on the stand-in torch: for
    "cuda" the fast path is taken exactly when every argument is on the current cuda device,
    asked at each call (the test changes it between calls) and only with a first argument on a
    cuda device; "mps", "xpu", "meta" and rejected strings never take it."""
    fake = standin.Torch(cuda_built)
    namespace = standin.rebind(standin.ops_standin(dict(vars(tnp)), fake), (tnp._forkgen_place, tnp._forkgen_plain_tensors))
    assert standin.check_plain_tensors(namespace, fake) > 0
    assert (fake.asked > 0) is cuda_built


def test_torch_compile_traces_the_fast_path_as_upstreams_body() -> None:
    """Dynamo traces the fast path no worse than upstream's body under this torch: one graph
    wherever upstream's is one graph, never more frames, the same result."""
    layer = dense()
    einsum_layer = keras.layers.EinsumDense("ab,bc->ac", output_shape=3)
    einsum_layer.build((None, 4))

    def step(x: Any) -> Any:
        return tnp.matmul(x, layer.kernel) + tnp.einsum("ab,bc->ac", x, einsum_layer.kernel)

    # Eager first: the layers' other caches filled (dense-kernel-fast-path's per class), only
    # this patch's table of places left empty (as in a process whose first op is compiled).
    step(torch.ones(2, 4))
    patched = compiled(step, torch.ones(2, 4), prepare=tnp._forkgen_places.clear)
    with upstream.upstream(tnp, "matmul"), upstream.upstream(tnp, "einsum"):
        reference = compiled(step, torch.ones(2, 4), prepare=tnp._forkgen_places.clear)
    patched.no_worse_than(reference)
    assert torch.equal(patched.result, reference.result)
