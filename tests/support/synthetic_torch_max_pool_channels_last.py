"""The synthetic file `torch-max-pool-channels-last` anchors on.

`torch-conv-single-copy` anchors on the same file (`keras/src/backend/torch/nn.py`) and its
synthetic module (`synthetic_torch_conv_single_copy`) defines it with a one-line pooling op. This
module EXTENDS that file rather than defining a second one (`patch_files()` merges the FILES of
the patches' modules, later ones winning): `NN_PY` is that module's text with a `max_pool` shaped
like Keras 3.15.x's (written for these tests; only the anchored statements follow Keras: the
rank, the channels_last copy, the "same"/other padding branch, the "meta" device stand-in, the
per-rank pooling calls, `.to(device)` and the permutation back) and the imports and the
padding helper it uses. So both patches find their anchors in the one synthetic tree.
"""

from __future__ import annotations

import textwrap

from tests.support import synthetic_torch_conv_single_copy as conv
from tests.support.synthetic import replace_once

IMPORTS = textwrap.dedent(
    """\
    import torch
    import torch.nn.functional as tnn

    from keras.src import backend
    from keras.src.backend.torch.core import convert_to_tensor
    from keras.src.backend.torch.core import get_device
    from keras.src.utils.argument_validation import standardize_tuple
    """
)

PADDING = textwrap.dedent(
    '''\
    def _apply_same_padding(inputs, kernel_size, strides, data_format, operation_type):
        """Pads `inputs` for "same" pooling (the stand-in pads nothing)."""
        return inputs, [0] * len(kernel_size)


    def _transpose_spatial_inputs(inputs):
    '''
)

MAX_POOL = textwrap.dedent(
    '''\
    def max_pool(
        inputs,
        pool_size,
        strides=None,
        padding="valid",
        data_format=None,
    ):
        """Max pooling over 1, 2 or 3 spatial axes."""
        inputs = convert_to_tensor(inputs)
        num_spatial_dims = inputs.ndim - 2
        pool_size = standardize_tuple(pool_size, num_spatial_dims, "pool_size")
        if strides is None:
            strides = pool_size
        else:
            strides = standardize_tuple(strides, num_spatial_dims, "strides")

        data_format = backend.standardize_data_format(data_format)
        if data_format == "channels_last":
            inputs = _transpose_spatial_inputs(inputs)

        if padding == "same":
            # Torch pools without "same" padding: pad the input first.
            inputs, padding = _apply_same_padding(
                inputs, pool_size, strides, data_format, "pooling"
            )
        else:
            padding = 0

        device = get_device()
        # A real stand-in on the symbolic device.
        if device == "meta":
            inputs = torch.empty(size=inputs.shape, dtype=inputs.dtype, device="cpu")

        if num_spatial_dims == 1:
            outputs = tnn.max_pool1d(
                inputs, kernel_size=pool_size, stride=strides, padding=padding
            )
        elif num_spatial_dims == 2:
            outputs = tnn.max_pool2d(
                inputs, kernel_size=pool_size, stride=strides, padding=padding
            )
        elif num_spatial_dims == 3:
            outputs = tnn.max_pool3d(
                inputs, kernel_size=pool_size, stride=strides, padding=padding
            )
        else:
            raise ValueError(f"Expected 3, 4 or 5 dimensions, got shape {inputs.shape}.")

        outputs = outputs.to(device)
        if data_format == "channels_last":
            outputs = _transpose_spatial_outputs(outputs)
        return outputs
    '''
)

#: The conv patch's synthetic nn.py, with this patch's `max_pool` in place of its one-liner.
NN_PY = replace_once(
    replace_once(
        replace_once(conv.NN_PY, "import torch\nimport torch.nn.functional as tnn\n", IMPORTS),
        "def _transpose_spatial_inputs(inputs):\n", PADDING,
    ),
    textwrap.dedent(
        """\
        def max_pool(inputs, data_format=None):
            if data_format == "channels_last":
                inputs = _transpose_spatial_inputs(inputs)
            return tnn.max_pool(inputs)
        """
    ),
    MAX_POOL,
)

#: The same paths as the conv patch's module: its nn.py, extended.
FILES: dict[str, str] = {**conv.FILES, "keras/src/backend/torch/nn.py": NN_PY}
