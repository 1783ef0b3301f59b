"""Patch `torch-ops-plain-tensor-fast-paths` (ours, forkgen issue 26): the torch backend's
`matmul` and `einsum` call torch at once for arguments that are already what they need.

Upstream's `matmul(x1, x2)` (3.14.0-3.15.1, keras-nightly) converts both arguments, standardizes
both dtypes, builds the `can_use_int_matmul` closure, asks `result_type`, reads the device three
times and `cast`s three times (each through `to_torch_dtype` and `standardize_dtype`) around one
`torch.matmul`; `einsum` converts each operand and standardizes each dtype into a set. On the
fork (torch 2.13 CPU) the backend `matmul` of a (2, 4) tensor and a Dense kernel took about 11 us
against 3 us for `torch.matmul`; a Dense layer calls it once, EinsumDense calls `einsum` once.
A fast path first in each function returns the torch call on the converted arguments when
nothing else would change them; upstream's body, unchanged below it, runs otherwise.

Why the result is identical. `_forkgen_plain_tensors(values, dtypes)` returns the list of what
`convert_to_tensor(value)` returns for each value, in order, only when that is the value itself
(a variable: its `.value`): (1) `convert_to_tensor` of this module is the one captured at import
(a monkeypatched one runs the body); (2) dynamo is not tracing the call and no torch function
mode is enabled; (3) `get_device()` of
the core module (the one `convert_to_tensor` calls) is a str that names one non-meta device
(`torch.device(device)` is cpu, or has an index), remembered as that `torch.device`, or is
exactly "cuda" (a default GPU machine's, version 3), remembered as a marker
(`_forkgen_current_cuda`) for which the place is the current cuda device,
`torch.device("cuda", torch.cuda.current_device())`, asked at the call once the first value is
found on a cuda device and never remembered (`torch.cuda.set_device` and `with
torch.cuda.device(i)` change it, per thread); (4) each value is an exact `torch.Tensor` or
`torch.nn.Parameter` whose `.device` equals that place, after a core `Variable` is replaced by
its `.value`. For such a tensor upstream's `convert_to_tensor(x)`
(dtype None) takes the tensor branch and, unless `x.device` equals the str (3.15.1's test is
always true) or whatever the fork's device patches skip, calls `x.to(device)`, which returns
`x` itself: no function mode, an exact type (Parameter disables `__torch_function__`), the same
device ("the tensor is returned" when dtype and device already match); `is_meta` is False on a
non-meta device, so `empty_like` is not reached. For "cuda", aten's `to` fills the missing
index in with `ensure_has_index`, the device guard's current device, which is what
`torch.cuda.current_device()` reads (`c10::cuda::current_device`, the calling thread's), so
`x.to("cuda")` returns `x` exactly when `x.device` is the place asked for in the same call;
on a CPU-only torch no value is on a cuda device, so nothing of CUDA is called (upstream's
body then raises its own error). For a variable, `convert_to_tensor(v)` is
`x = v.value` and then the same tensor branch. The values are read in argument order, each only
once every earlier one is known to convert to itself (no side effect, no exception), as upstream
converts them. A variable is read only when its class's `value` is the core `Variable.value`
and its `_maybe_autocast` the one captured at import and `_value` is not None: then the getter
runs no initializer and no user override, and a read has no side effect (stateless-scope and
autocast look-ups, a cast, `torch.empty` on "meta"), so a fallback that reads it again in the
body gets the same value. (5) All tensors have one dtype of the op's set.
`matmul`, float32 or bfloat16 `d`: `x1_dtype == x2_dtype == str(d)`; `can_use_int_matmul`
returns False (not "cuda", or not int8); not int8 (and on "cuda" the body's
`"int" in compute_dtype` test is False for a float dtype), so `result_dtype = result_type(d, d)`, which
is `d` (one strong dtype, not 64-bit); `compute_dtype` is `d`: not bool, not float16, no "int";
`cast(x, d)` returns `x` for a tensor of dtype `d`, both arguments and the result of
`torch.matmul`, which is of dtype `d`: the body returns `torch.matmul(x1, x2)` of the converted
arguments, which the fast path returns (the same call, so the same exception for mismatched
shapes, the same autograd graph). float16 is left out (CPU computes it in float32), and so are
float64 (`result_type` gives float32 on torch), ints, bool and mixed dtypes.
`einsum`, any float dtype `d` for every operand, at least one: the dtype set is `{str(d)}`, not
`"int8"`, and keras-nightly's mixed-dtype branch needs two dtypes: the body returns
`torch.einsum(subscripts, *operands)` of the converted operands (`kwargs` is unused by both).
Skipped side effects: only the `result_type` memo of `memoised-result-type` is not filled.

Not guarded, because no code does it: the core module's `Variable`, `get_device` internals
or `torch` rebound after import (its `get_device` is called as it is now); a variable's
`value` set on the instance. The "meta" test in `_forkgen_place` only names that case: a
"meta" str has no index, so the index test alone returns False for it, and no tensor is on an
indexed meta device (`torch.empty(2, device="meta:0").device` is `meta`), so "meta:0" falls
back at the device comparison. Without it the outcome is the same, so it has no mutant (`nox -s
mutants` found the one it had uncaught, 2026-12-05).

Under `torch.compile` the fast paths stand aside (version 2): while dynamo traces,
`torch.compiler.is_dynamo_compiling()` (bound once as `_forkgen_compiling`; `bool`, whose call is
False, where torch has none) is True and the body runs, so the graph is upstream's on every
torch. Dynamo before torch 2.5 cannot trace the function-mode test (torch 2.3.0: 5 frames
against upstream's 3 for a matmul and an einsum; 2.4.0: 7 against 5), and a traced graph gains
nothing from the shorter path. In eager code the test is one more call, about 0.02 us (a 4-layer Dense MLP's `model(x)` and
`train_on_batch`: no change beyond the noise of interleaved runs, 2026-12-07).

"cuda" (version 3, forkgen issue 41): the cpu path is unchanged (the marker is tested only in
the branch a value on another place than the remembered one reaches, which a cpu value never
does); measured on torch 2.13 CPU, one process, before/after
helpers side by side, 31 interleaved rounds on a loaded 2-core machine: backend `matmul` of a
(2, 4) float32 tensor and a Dense kernel 5.83 -> 5.90 us, of it and its transpose 5.05 -> 4.94 us
(medians: noise, 2026-12-07). The stand-in torch of tests/support/torch_current_cuda.py
(tests/unit and tests/equivalence) changes the current cuda device between calls.

Left out: `add`, `multiply` and `subtract` (keras-nightly converts them to one dtype through
`convert_to_tensors_of_same_dtype`, reading a variable's `dtype`: another proof), the
activations (one conversion each), `mean` and layer normalization (shared code, float32 compute
dtypes), index-less devices other than "cuda" ("mps", "xpu": their current device is not asked
for; upstream's body runs).

Applies from Keras 3.14.0 (`since`): `matmul` reads both dtypes before its closure there (the
body the fast path mirrors); 3.1.0-3.13.2 have another closure. No switch: no state but the
device memo.
"""

from __future__ import annotations

from codemods.engine import Anchor, Append, DeclaredPatch, Details, Headers, Prepend

NUMPY_PY = "keras/src/backend/torch/numpy.py"
NIGHTLY_NUMPY_PY = "keras/src/backend/torch/ops/numpy.py"
FAST = "    fast = __\n    if fast is not None: ___\n"
#: Upstream's matmul, 3.14.0-3.15.1 and keras-nightly.
MATMUL = """
def matmul(x1, x2):
{}    x1 = convert_to_tensor(x1)
    x2 = convert_to_tensor(x2)
    x1_dtype = standardize_dtype(x1.dtype)
    x2_dtype = standardize_dtype(x2.dtype)
    def can_use_int_matmul(x1, x2):
        if get_device() != "cuda":
            return False
        if x1_dtype != "int8" or x2_dtype != "int8":
            return False
        ___
    if can_use_int_matmul(x1, x2): ___
    if x1_dtype == "int8" and x2_dtype == "int8":
        result_dtype = "int32"
    else:
        result_dtype = dtypes.result_type(x1.dtype, x2.dtype)
    compute_dtype = result_dtype
    if compute_dtype == "bool":
        compute_dtype = config.floatx()
    if get_device() == "cpu" and compute_dtype == "float16":
        compute_dtype = "float32"
    if get_device() == "cuda" and "int" in compute_dtype:
        compute_dtype = config.floatx()
    x1 = cast(x1, compute_dtype)
    x2 = cast(x2, compute_dtype)
    return cast(torch.matmul(x1, x2), result_dtype)
"""
#: Upstream's einsum, 3.1.0-3.15.1; keras-nightly adds a branch for two or more dtypes.
EINSUM = """
def einsum(subscripts, *operands, **kwargs):
{}    operands = [convert_to_tensor(operand) for operand in operands]
    dtypes_to_resolve = list(set(standardize_dtype(x.dtype) for x in operands))
    if len(dtypes_to_resolve) == 1 and dtypes_to_resolve[0] == "int8": ___
{}    return torch.einsum(subscripts, *operands)
"""
MIXED = "    if len(dtypes_to_resolve) > 1: ___\n"
MATMUL_NAME = "def matmul(x1, x2): convert, dtypes, int8 and float16 cases, cast(torch.matmul(x1, x2), result_dtype)"
EINSUM_NAME = "def einsum(subscripts, *operands, **kwargs): convert, one int8 dtype cast, torch.einsum"


class TorchOpsPlainTensorFastPaths(DeclaredPatch):
    name = "torch-ops-plain-tensor-fast-paths"
    version = "3"
    headers = Headers(
        description="torch matmul and einsum call torch.matmul/torch.einsum at once for exact tensors (or "
        "variables' values) on the current device (\"cuda\": the current cuda device), of one float dtype "
        "the body would not cast.",
        origin="ours", bug="forkgen issue 26", forwarded="not-needed", applied_upstream=None,
        last_update="2026-12-07",
    )
    files = (NUMPY_PY,)
    moved = {NUMPY_PY: NIGHTLY_NUMPY_PY}
    since = "3.14.0"
    edits = (
        Prepend("matmul", "matmul_fast_path", label="matmul: first statement",
                description="a fast path returns torch.matmul above the unchanged body"),
        Prepend("einsum", "einsum_fast_path", label="einsum: first statement",
                description="a fast path returns torch.einsum above the unchanged body"),
        Append("module_level"),
    )
    #: The bodies the fast paths mirror (below forkgen's fast path, once in).
    relies_on = (
        Anchor("", MATMUL.format(""), alternatives=(MATMUL.format(FAST),), name=MATMUL_NAME, reported=False),
        Anchor("", EINSUM.format("", ""), name=EINSUM_NAME, reported=False,
               alternatives=tuple(EINSUM.format(f, m) for f, m in ((FAST, ""), ("", MIXED), (FAST, MIXED)))),
    )
    unshadowed_builtins = True
    details = Details(apply="fast paths at the top of matmul and einsum for plain float tensors",
                      present="matmul and einsum have the fast paths (forkgen)", upstream="")


PATCH = TorchOpsPlainTensorFastPaths()
TorchOpsPlainTensorFastPathsCommand = PATCH.command
