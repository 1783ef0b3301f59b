"""What `torch-ops-plain-tensor-fast-paths` makes of torch numpy modules shaped like Keras's, how
its helpers decide on a stand-in torch (both run by tests/unit/test_patch_cases.py), and the
breaks of its inserted code the equivalence suite must catch."""

import types
from typing import Any

from codemods.engine import Case, Mutant, piece_text

NIGHTLY_NUMPY_PY = "keras/src/backend/torch/ops/numpy.py"
MATMUL = '''\
def matmul(x1, x2):
    x1 = convert_to_tensor(x1)
    x2 = convert_to_tensor(x2)
    x1_dtype = standardize_dtype(x1.dtype)
    x2_dtype = standardize_dtype(x2.dtype)

    def can_use_int_matmul(x1, x2):
        # A comment, as upstream has them.
        if get_device() != "cuda":
            return False
        if x1_dtype != "int8" or x2_dtype != "int8":
            return False
        return x1.ndim == 2

    if can_use_int_matmul(x1, x2):
        return torch._int_mm(x1, x2)

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
'''
EINSUM = '''\
def einsum(subscripts, *operands, **kwargs):
    operands = [convert_to_tensor(operand) for operand in operands]
    dtypes_to_resolve = list(set(standardize_dtype(x.dtype) for x in operands))
    if len(dtypes_to_resolve) == 1 and dtypes_to_resolve[0] == "int8":
        operands = [cast(operand, "int32") for operand in operands]
        return cast(torch.einsum(subscripts, *operands), "int32")
    return torch.einsum(subscripts, *operands)
'''
MIXED = '''\
    if len(dtypes_to_resolve) > 1:
        operands = [cast(operand, "float32") for operand in operands]
'''
BEFORE = f'''\
import torch

from keras.src.backend import config
from keras.src.backend.common import dtypes
from keras.src.backend.common.variables import standardize_dtype
from keras.src.backend.torch.core import cast
from keras.src.backend.torch.core import convert_to_tensor
from keras.src.backend.torch.core import get_device


def add(x1, x2):
    return torch.add(convert_to_tensor(x1), convert_to_tensor(x2))


{EINSUM}

{MATMUL}

def last(x):
    return x
'''
MATMUL_FAST = piece_text(__file__, "matmul_fast_path", "    ")
EINSUM_FAST = piece_text(__file__, "einsum_fast_path", "    ")
APPENDED = "\n\n" + piece_text(__file__, "module_level")
MATMUL_HEAD, EINSUM_HEAD = "def matmul(x1, x2):\n", "def einsum(subscripts, *operands, **kwargs):\n"
AFTER = (BEFORE.replace(MATMUL_HEAD, MATMUL_HEAD + MATMUL_FAST).replace(EINSUM_HEAD, EINSUM_HEAD + EINSUM_FAST)
         + APPENDED)
NIGHTLY = BEFORE.replace('    return torch.einsum(subscripts, *operands)\n', MIXED + '    return torch.einsum(subscripts, *operands)\n')
NIGHTLY_AFTER = AFTER.replace('    return torch.einsum(subscripts, *operands)\n', MIXED + '    return torch.einsum(subscripts, *operands)\n')
MATMUL_NAME = "def matmul(x1, x2): convert, dtypes, int8 and float16 cases, cast(torch.matmul(x1, x2), result_dtype)"
EINSUM_NAME = "def einsum(subscripts, *operands, **kwargs): convert, one int8 dtype cast, torch.einsum"


def _drift(name: str, old: str, new: str, drift: str) -> Case:
    assert BEFORE.count(old) == 1, old
    return Case(name, BEFORE.replace(old, new), drift=drift)


CASES = (
    Case("a fast path first in matmul and einsum, the helpers at the end", BEFORE, AFTER,
         detail="fast paths at the top of matmul and einsum for plain float tensors",
         anchors=(("matmul: first statement", 24), ("einsum: first statement", 15))),
    Case("keras-nightly's ops/numpy.py, einsum with its mixed-dtype branch", {NIGHTLY_NUMPY_PY: NIGHTLY},
         {NIGHTLY_NUMPY_PY: NIGHTLY_AFTER}),
    _drift("3.13's matmul: dtypes read inside the closure", "    x1_dtype = standardize_dtype(x1.dtype)\n"
           "    x2_dtype = standardize_dtype(x2.dtype)\n\n    def can_use_int_matmul(x1, x2):\n",
           "\n    def can_use_int_matmul(x1, x2):\n        x1_dtype = standardize_dtype(x1.dtype)\n"
           "        x2_dtype = standardize_dtype(x2.dtype)\n", MATMUL_NAME),
    _drift("float16 no longer computed in float32 on cpu", 'if get_device() == "cpu" and compute_dtype == "float16"',
           'if get_device() == "mps" and compute_dtype == "float16"', MATMUL_NAME),
    _drift("a fourth cast", "    x2 = cast(x2, compute_dtype)\n", "    x2 = cast(x2, compute_dtype)\n    x1 = x1 + 0\n",
           MATMUL_NAME),
    _drift("einsum casting a lone float dtype", 'dtypes_to_resolve[0] == "int8"', 'dtypes_to_resolve[0] == "float32"',
           EINSUM_NAME),
    _drift("no einsum", EINSUM_HEAD, "def einsum_(subscripts, *operands, **kwargs):\n", "einsum"),
    Case("a helper name taken", BEFORE + "\n_forkgen_places = None\n", drift="_forkgen_places"),
    _drift("a local named like the fast path's", "    compute_dtype = result_dtype\n",
           "    compute_dtype = fast = result_dtype\n", "fast"),
    Case("half applied", AFTER.replace(APPENDED, "\n"), drift="expected all pieces present or none"),
    Case("an unmarked fast path is not upstream's",
         AFTER.replace("# forkgen: torch-ops-plain-tensor-fast-paths (float32", "# (float32"),
         drift="expected to edit, or edited by forkgen; found an edited form without forkgen's marker"),
)

MUTANTS = (
    Mutant("matmul takes float16 too (CPU computes it in float32)",
           "_FORKGEN_MATMUL_DTYPES = frozenset((torch.float32, torch.bfloat16))",
           "_FORKGEN_MATMUL_DTYPES = frozenset((torch.float32, torch.bfloat16, torch.float16))"),
    Mutant("mixed dtypes taken", "            elif value.dtype is not dtype:\n                return None\n",
           "            elif False:\n                return None\n"),
    Mutant("the fast paths taken while dynamo traces too",
           "            or _forkgen_compiling()\n", ""),
    Mutant("a variable's value read without the guards",
           "                    not isinstance(value, _forkgen_variable)\n"
           "                    or kind.value is not _forkgen_value\n",
           "                    not isinstance(value, _forkgen_variable)\n"),
    # "cuda" (version 3): caught by the stand-in torch (tests/support/torch_current_cuda.py), whose
    # current cuda device the equivalence test changes between calls.
    Mutant('"cuda": the current cuda device remembered',
           '                place = torch.device("cuda", torch.cuda.current_device())\n',
           '                place = _forkgen_places["cuda"] = torch.device("cuda", torch.cuda.current_device())\n'),
    Mutant('"cuda": any cuda device taken (its index not compared with the current one)',
           '                place = torch.device("cuda", torch.cuda.current_device())\n',
           '                place = value.device\n'),
    Mutant('"cuda": the current device asked for a tensor on another device',
           '                if place is not _forkgen_current_cuda or value.device.type != "cuda":\n',
           '                if place is not _forkgen_current_cuda:\n'),
)


#: The synthetic files of the series' whole synthetic tree (tests/support/synthetic.py).
FILES = {"keras/src/backend/torch/numpy.py": BEFORE}


# -- behaviours: the helpers on a stand-in torch whose current cuda device the test sets ---------
# (the `torch_current_cuda` fixture, for Keras's index-less "cuda"). The checkout's `module_level`
# piece is executed with the stand-in; `_forkgen_plain_tensors` must return the arguments
# themselves exactly when torch's `tensor.to(get_device())` would (for "cuda": the tensor is on the
# current cuda device, asked at each call), never for "mps", "xpu", "meta" or a string torch
# rejects, and ask for the current device only when a tensor is on a cuda device.


def executed_helpers(standin: types.ModuleType, torch: Any) -> dict[str, Any]:
    """The module_level piece executed with the stand-in torch and core module."""
    namespace: dict[str, Any] = standin.ops_names(torch)
    exec(piece_text(__file__, "module_level"), namespace)
    return namespace


def the_fast_path_follows_torchs_rule_for_every_device_string(torch_current_cuda: types.ModuleType) -> None:
    standin = torch_current_cuda
    for cuda_built in (True, False):  # a cuda torch, a cpu-only torch
        torch = standin.Torch(cuda_built)
        namespace = executed_helpers(standin, torch)
        assert standin.check_plain_tensors(namespace, torch) > 0
        assert (torch.asked > 0) is cuda_built  # a cpu-only torch is never asked


def cuda_is_the_current_device_at_each_call(torch_current_cuda: types.ModuleType) -> None:
    torch = torch_current_cuda.Torch()
    namespace = executed_helpers(torch_current_cuda, torch)
    plain, dtypes = namespace["_forkgen_plain_tensors"], frozenset((torch.float32,))
    torch.keras_device = "cuda"
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
        torch.keras_device = device
        assert plain((torch.Tensor(f"{device}:0"),), dtypes) is None
        assert namespace["_forkgen_places"][device] is False
    assert torch.asked == 5


BEHAVIOURS = (the_fast_path_follows_torchs_rule_for_every_device_string, cuda_is_the_current_device_at_each_call)
