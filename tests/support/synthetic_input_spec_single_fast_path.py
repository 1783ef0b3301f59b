"""The synthetic keras/src/layers/input_spec.py that patch input-spec-single-fast-path anchors on.

Shaped like Keras 3.4.0-3.15.1's `assert_input_compatibility`: the same statements and checks
(the patch pins their normalised shape), written with messages of our own, which the patch
ignores. It runs against `tests.support.fake_backend`-like objects: the unit test of the patch
injects `backend` and `tree` to execute it.
"""

from __future__ import annotations

import textwrap

INPUT_SPEC_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/layers/input_spec.py."""

    from tests.support.fake_backend import backend
    from tests.support.fake_backend import tree


    class InputSpec:
        def __init__(
            self,
            dtype=None,
            shape=None,
            ndim=None,
            max_ndim=None,
            min_ndim=None,
            axes=None,
            allow_last_axis_squeeze=False,
            name=None,
            optional=False,
        ):
            self.dtype = dtype
            self.shape = shape
            self.ndim = len(shape) if shape is not None else ndim
            self.max_ndim = max_ndim
            self.min_ndim = min_ndim
            self.axes = axes or {}
            self.allow_last_axis_squeeze = allow_last_axis_squeeze
            self.name = name
            self.optional = optional


    def assert_input_compatibility(input_spec, inputs, layer_name):
        """Raises ValueError when `inputs` do not match `input_spec`."""
        if not input_spec:
            return

        input_spec = tree.flatten(input_spec)
        if isinstance(inputs, dict):
            # Named specs take the dict's entries in their order.
            names = [spec.name for spec in input_spec]
            if all(names):
                list_inputs = []
                for name in names:
                    if name not in inputs:
                        raise ValueError(f"{layer_name}: no input {name!r}")
                    list_inputs.append(inputs[name])
                inputs = list_inputs

        inputs = tree.flatten(inputs)
        if len(inputs) != len(input_spec):
            spec_names = [spec.name for spec in input_spec if spec is not None]
            if len(spec_names) == len(input_spec) and all(spec_names):
                raise ValueError(f"{layer_name}: expected inputs {spec_names}")
            raise ValueError(f"{layer_name}: expected {len(input_spec)} inputs")
        for input_index, (x, spec) in enumerate(zip(inputs, input_spec)):
            if spec is None:
                continue
            if x is None and spec.optional:
                continue

            if not hasattr(x, "shape"):
                raise ValueError(f"{layer_name}: input {x!r} has no shape")

            shape = backend.standardize_shape(x.shape)
            ndim = len(shape)
            if spec.ndim is not None and not spec.allow_last_axis_squeeze:
                if ndim != spec.ndim:
                    raise ValueError(f"{layer_name}[{input_index}]: ndim {ndim}")
            if spec.max_ndim is not None:
                if ndim is not None and ndim > spec.max_ndim:
                    raise ValueError(f"{layer_name}[{input_index}]: max_ndim")
            if spec.min_ndim is not None:
                if ndim is not None and ndim < spec.min_ndim:
                    raise ValueError(f"{layer_name}[{input_index}]: min_ndim")
            if spec.dtype is not None:
                dtype = backend.standardize_dtype(x.dtype)
                if dtype != spec.dtype:
                    raise ValueError(f"{layer_name}[{input_index}]: dtype {dtype}")

            if spec.axes:
                for axis, value in spec.axes.items():
                    if value is not None and shape[axis] not in {
                        value,
                        None,
                    }:
                        raise ValueError(f"{layer_name}[{input_index}]: axis {axis}")
            if spec.shape is not None:
                spec_shape = spec.shape
                if spec.allow_last_axis_squeeze:
                    if shape and shape[-1] == 1:
                        shape = shape[:-1]
                    if spec_shape and spec_shape[-1] == 1:
                        spec_shape = spec_shape[:-1]
                for spec_dim, dim in zip(spec_shape, shape):
                    if spec_dim is not None and dim is not None:
                        if spec_dim != dim:
                            raise ValueError(f"{layer_name}[{input_index}]: shape {shape}")
    '''
)

#: Relative path -> text, merged into the synthetic source trees (tests/support/synthetic.py).
FILES: dict[str, str] = {"keras/src/layers/input_spec.py": INPUT_SPEC_PY}
