"""What `torch-ops-plain-tensor-fast-paths` puts into the torch backend's numpy module.

Parsed by the codemod, never imported. The body of `module_level` goes at the end of the
module (it captures what `convert_to_tensor` and `Variable.value` are at import, from the torch
core module `convert_to_tensor` belongs to: 3.x's `backend/torch/core.py`, keras-nightly's
`backend/torch/ops/core.py`). The bodies of `matmul_fast_path` and `einsum_fast_path` go at the
top of `matmul(x1, x2)` and `einsum(subscripts, *operands, **kwargs)`, above upstream's bodies,
which are left as they are and run whenever a fast path does not return. The comments are the
markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def module_level():
    # forkgen: torch-ops-plain-tensor-fast-paths (what the fast paths of matmul and einsum rely on)
    _forkgen_convert_to_tensor = convert_to_tensor
    _forkgen_core = convert_to_tensor.__globals__
    _forkgen_variable = _forkgen_core["Variable"]
    _forkgen_value = _forkgen_variable.value
    _forkgen_maybe_autocast = _forkgen_variable._maybe_autocast
    _forkgen_places = {}
    _forkgen_current_cuda = object()
    _forkgen_compiling = getattr(getattr(torch, "compiler", None), "is_dynamo_compiling", None) or bool
    _forkgen_tensor = torch.Tensor
    _forkgen_parameter = torch.nn.Parameter
    _forkgen_cpu = torch.device("cpu")
    _FORKGEN_MATMUL_DTYPES = frozenset((torch.float32, torch.bfloat16))
    _FORKGEN_EINSUM_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))


    def _forkgen_place(device):
        """For the str `device` (remembered): True when it is "cpu" (`tensor.to(device)` returns a
    tensor on the cpu itself), the `torch.device` with the index it names (the tensor itself
    when on it), `_forkgen_current_cuda` for "cuda" (the tensor itself when on the current cuda
    device, asked for at each call: it changes), or False: "meta" (convert_to_tensor makes a new
    tensor there), another device torch leaves to the current one ("mps", "xpu": no index), a
    string torch rejects."""
        try:
            place = torch.device(device)
        except Exception:
            place = False
        else:
            if place == _forkgen_cpu:
                place = True
            elif place.type == "meta" or place.index is None:
                place = _forkgen_current_cuda if device == "cuda" else False
        if len(_forkgen_places) < 64:
            _forkgen_places[device] = place
        return place


    def _forkgen_plain_tensors(values, dtypes):
        """The tensors `convert_to_tensor` returns for `values` when, for each, that is the value
    itself (a variable: its `.value`): exact tensors on the current device ("cuda": the current
    cuda device), all of one dtype of `dtypes`, nothing converted; else None."""
        if (
            not values
            or convert_to_tensor is not _forkgen_convert_to_tensor
            or _forkgen_compiling()
            or torch._C._is_torch_function_mode_enabled()
        ):
            return None
        device = _forkgen_core["get_device"]()
        if type(device) is not str:
            return None
        place = _forkgen_places.get(device)
        if place is None:
            place = _forkgen_place(device)
        if place is False:
            return None
        tensors = []
        dtype = None
        for value in values:
            kind = type(value)
            if kind is not _forkgen_tensor and kind is not _forkgen_parameter:
                if (
                    not isinstance(value, _forkgen_variable)
                    or kind.value is not _forkgen_value
                    or kind._maybe_autocast is not _forkgen_maybe_autocast
                    or value._value is None
                ):
                    return None
                value = value.value
                kind = type(value)
                if kind is not _forkgen_tensor and kind is not _forkgen_parameter:
                    return None
            if place is True:
                if not value.is_cpu:
                    return None
            elif value.device != place:
                if place is not _forkgen_current_cuda or value.device.type != "cuda":
                    return None
                # "cuda": `.to("cuda")` keeps a tensor on the current cuda device (now, not remembered).
                place = torch.device("cuda", torch.cuda.current_device())
                if value.device != place:
                    return None
            if dtype is None:
                dtype = value.dtype
                if dtype not in dtypes:
                    return None
            elif value.dtype is not dtype:
                return None
            tensors.append(value)
        return tensors


def matmul_fast_path(x1, x2):
    # forkgen: torch-ops-plain-tensor-fast-paths (float32/bfloat16 tensors as they are: torch.matmul)
    fast = _forkgen_plain_tensors((x1, x2), _FORKGEN_MATMUL_DTYPES)
    if fast is not None:
        return torch.matmul(fast[0], fast[1])


def einsum_fast_path(subscripts, *operands, **kwargs):
    # forkgen: torch-ops-plain-tensor-fast-paths (float tensors of one dtype as they are: torch.einsum)
    fast = _forkgen_plain_tensors(operands, _FORKGEN_EINSUM_DTYPES)
    if fast is not None:
        return torch.einsum(subscripts, *fast)
