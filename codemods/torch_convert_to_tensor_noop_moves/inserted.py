"""What `torch-convert-to-tensor-noop-moves` inserts into the torch backend's `core.py`.

Parsed by the codemod, never imported. Three pieces, each the body of a function:
`module_level` (`_FORKGEN_TORCH_DEVICES`, `_forkgen_compiling`, `_forkgen_torch_device` and
`_forkgen_on_current_cuda`, inserted right before `def convert_to_tensor`), `device_move` (around `x = x.to(device)`, which `UPSTREAM` stands for,
kept node for node) and `dtype_move` (in place of `x = x.to(to_torch_dtype(dtype))`: upstream's
argument, `to_torch_dtype(dtype)`, still evaluated first, on every call). Comments above a
function here are notes, not inserted.

Each `.to()` is skipped only where torch would return `x` itself (aten's `to_will_alias`: same
dtype, same device after `ensure_has_index`, no copy, memory format preserved): for a plain
`torch.Tensor` or `torch.nn.Parameter` (a subclass may override `.to` or `__torch_function__`),
with no torch-function mode active (a mode sees every `.to()` call, and every `.device` /
`.dtype` read, so those are not read either while one is active), and not while dynamo traces
the function (`torch.compiler.is_dynamo_compiling()`, which dynamo answers True as it traces and which
is False in eager code): dynamo before torch 2.5 cannot trace the mode test (a graph break at
each call), so a traced call records upstream's moves, on every torch. The index-less "cuda"
(exactly that string) is the current cuda device, asked at each call; every other index-less
device ("mps", "xpu", ...) always takes the call.
"""
# ruff: noqa


# Module level, right before `def convert_to_tensor`: the table of parsed devices and the
# helpers, each with its marker comment above it. The docstring's lines are written as inserted
# (at module level).
def module_level():
    # forkgen: torch-convert-to-tensor-noop-moves
    _FORKGEN_TORCH_DEVICES = {}


    # forkgen: torch-convert-to-tensor-noop-moves
    _forkgen_compiling = getattr(getattr(torch, "compiler", None), "is_dynamo_compiling", None) or bool


    # forkgen: torch-convert-to-tensor-noop-moves
    def _forkgen_torch_device(device):
        """What a tensor's `.device` equals exactly when `x.to(device)` returns `x` itself, for
    the str `device` (remembered): `torch.device(device)` when it names one device (cpu, or
    an index is given); else `device`, which no `torch.device` equals (an index-less device
    is the current one of its kind, torch decides at the call: for "cuda" exactly,
    `_forkgen_on_current_cuda` asks; a string torch rejects makes `.to()` raise as before)."""
        try:
            parsed = torch.device(device)
        except Exception:
            return device
        if parsed.type != "cpu" and parsed.index is None:
            parsed = device
        if len(_FORKGEN_TORCH_DEVICES) < 64:
            _FORKGEN_TORCH_DEVICES[device] = parsed
        return parsed


    # forkgen: torch-convert-to-tensor-noop-moves
    def _forkgen_on_current_cuda(x, device):
        """Whether `x.to(device)` keeps `x`'s device though the str `device` names none by itself:
    for the index-less "cuda" exactly (any other: False), when `x` is on the current cuda
    device, which torch gives "cuda" (aten's `ensure_has_index`), asked at each call
    (`torch.cuda.set_device` and `torch.cuda.device(...)` change it). CUDA is asked only about
    a tensor on cuda (one exists only once CUDA is initialised): never on a torch without CUDA."""
        if device != "cuda":
            return False
        found = x.device
        return found.type == "cuda" and found.index == torch.cuda.current_device()


# In the tensor branch of `convert_to_tensor`, in place of `x = x.to(device)` (the move of a
# tensor that is not on the meta device).
def device_move(x, device):
    # forkgen: torch-convert-to-tensor-noop-moves (`.to()` only where it may not return `x` itself)
    if (
        (type(x) is not torch.Tensor and type(x) is not torch.nn.Parameter)
        or type(device) is not str
        or _forkgen_compiling()
        or torch._C._is_torch_function_mode_enabled()
        or (
            x.device != (_FORKGEN_TORCH_DEVICES.get(device) or _forkgen_torch_device(device))
            and not _forkgen_on_current_cuda(x, device)
        )
    ):
        UPSTREAM


# In the tensor branch of `convert_to_tensor`, in place of `x = x.to(to_torch_dtype(dtype))`
# (under `if dtype is not None:`). torch dtypes are singletons: `is` is their equality.
def dtype_move(x, dtype):
    _forkgen_dtype = to_torch_dtype(dtype)  # forkgen: torch-convert-to-tensor-noop-moves
    if (
        (type(x) is not torch.Tensor and type(x) is not torch.nn.Parameter)
        or _forkgen_compiling()
        or torch._C._is_torch_function_mode_enabled()
        or x.dtype is not _forkgen_dtype
    ):
        x = x.to(_forkgen_dtype)
