"""What `torch-max-pool-channels-last` inserts into `keras/src/backend/torch/nn.py`.

Parsed by the codemod, never imported. Three pieces: `helper`, the function
`_forkgen_max_pool_view` with the marker comment right above it (at module level, right before
`def max_pool`; its docstring is indented here as it reads once at module level); the body of
`pool_inputs` (the two statements that take the place of
`inputs = _transpose_spatial_inputs(inputs)` in `max_pool`); and the body of `pool_outputs`
(the statement inserted right after `outputs = tnn.max_pool2d(...)` in `max_pool`). Other
comments are notes.
"""
# ruff: noqa


# The helper uses only names nn.py binds in 3.15.x: `torch` and `get_device` (the engine
# checks them), and the builtins `type`, `zip` and `reversed` (not rebound there).


def helper():
    # forkgen: torch-max-pool-channels-last (keras#23645: max_pool2d reads a dense NHWC input in place)
    def _forkgen_max_pool_view(inputs, num_spatial_dims, padding):
        """The channels-first view `max_pool` can pool in place of 3.15.1's copy, or None.

    Upstream permutes a channels_last input to channels-first axes and copies the view to the
    default layout. A 4-D CPU tensor laid out densely (canonical strides) has a view whose
    strides are torch's channels_last ones already: max_pool2d reads it without the copy, and
    `max_pool` then copies its (smaller) output to the default layout, which gives 3.15.1's
    tensor. Only for "valid" pooling of float16, float32 and float64 (torch's channels_last
    kernel for bfloat16 writes a NaN of its own, sign bit set), without autograd (which would
    record another graph), outside torch.compile and torch.func transforms, off the "meta"
    device, and only when the view is not contiguous already (a layout both formats fit, such
    as one channel or a 1x1 image, is 3.15.1's copy-free case anyway). Else None: upstream's way.
    """
        if (
            num_spatial_dims != 2
            or type(inputs) is not torch.Tensor
            or inputs.layout != torch.strided
            or inputs.device.type != "cpu"
            or inputs.dtype not in (torch.float32, torch.float64, torch.float16)
            or (inputs.requires_grad and torch.is_grad_enabled())
            or torch.compiler.is_compiling()
            or torch._C._functorch.is_functorch_wrapped_tensor(inputs)
            or padding == "same"
            or get_device() == "meta"
        ):
            return None
        view = torch.permute(inputs, (0, 3, 1, 2))
        if view.is_contiguous():
            return None
        expected = 1
        for size, stride in zip(reversed(inputs.shape), reversed(inputs.stride())):
            if stride != expected:
                return None
            expected *= size
        return view


# In `max_pool`, in place of `inputs = _transpose_spatial_inputs(inputs)` (under its
# `if data_format == "channels_last":`).
def pool_inputs(inputs, num_spatial_dims, padding):
    forkgen_view = _forkgen_max_pool_view(inputs, num_spatial_dims, padding)  # forkgen: torch-max-pool-channels-last
    inputs = _transpose_spatial_inputs(inputs) if forkgen_view is None else forkgen_view


# In `max_pool`, right after `outputs = tnn.max_pool2d(...)` (under `elif num_spatial_dims == 2:`).
# `forkgen_view` is bound whenever `data_format == "channels_last"` (the statements above).
# A clone, not `.contiguous()`: a channels_last output of 1x1 spatial size counts as contiguous
# already, and `.contiguous()` would return it with strides 3.15.1's output does not have.
def pool_outputs(outputs, data_format, forkgen_view):
    if data_format == "channels_last" and forkgen_view is not None:  # forkgen: torch-max-pool-channels-last
        outputs = outputs.clone(memory_format=torch.contiguous_format)
