"""What `torch-conv-single-copy` inserts into `keras/src/backend/torch/nn.py`.

Parsed by the codemod, never imported. Two pieces: `helper`, the function
`_forkgen_transpose_conv_inputs` with the marker comment right above it (at module level, right
after `def _maybe_convert_to_channels_last`; its docstring is indented here as it reads once at
module level), and `conv_inputs`, the statement that takes the place of
`inputs = _transpose_spatial_inputs(inputs)` in `conv`. Other comments are notes.
"""
# ruff: noqa


# The helper uses only names nn.py binds in 3.15.x: `torch`, `_get_channels_last_memory_format`
# and `_transpose_spatial_inputs` (the engine checks them, and that the builtins it calls are not
# rebound there).


def helper():
    # forkgen: torch-conv-single-copy (keras#23199: one channels-last copy instead of two)
    def _forkgen_transpose_conv_inputs(inputs):
        """`_transpose_spatial_inputs(inputs)` for `conv`, which converts the result to
    channels_last memory right after (`_maybe_convert_to_channels_last`).

    Upstream copies the permuted view of a 4-D/5-D input to the default layout, and that
    conversion copies it again. When the view is not contiguous already and its shape leaves
    no doubt about the layout (more than one channel and a spatial size above 1), the tensor
    those two copies give has the canonical channels_last strides, which the view of a densely
    laid out input has already: it is returned as it is, or, while autograd records (conv
    keeps its input for the backward pass, and upstream's copy never shared the caller's
    memory), copied once. Any other such view is copied once, straight into those strides.
    Everything else goes upstream's way.
    """
        memory_format = _get_channels_last_memory_format(inputs.ndim)
        if memory_format is not None:
            view = torch.permute(inputs, (0, inputs.ndim - 1, *range(1, inputs.ndim - 1)))
            sizes = view.shape
            if not view.is_contiguous() and sizes[1] != 1 and any(size != 1 for size in sizes[2:]):
                dense = True
                expected = 1
                for size, stride in zip(reversed(inputs.shape), reversed(inputs.stride())):
                    dense = dense and stride == expected
                    expected *= size
                if dense and not torch.is_grad_enabled():
                    return view
                return view.clone(memory_format=memory_format)
        return _transpose_spatial_inputs(inputs)


# In `conv`, in place of `inputs = _transpose_spatial_inputs(inputs)` (under its first
# `if data_format == "channels_last":`). The conversion that follows stays.
def conv_inputs(inputs):
    inputs = _forkgen_transpose_conv_inputs(inputs)  # forkgen: torch-conv-single-copy
