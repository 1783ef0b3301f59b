"""What `input-spec-single-fast-path` inserts into keras/src/layers/input_spec.py.

Parsed by the codemod, never imported. `fast_path`'s body goes right after the leading
`if not input_spec: return` of `assert_input_compatibility`; `helper`'s function goes right
after `assert_input_compatibility` (its docstring is indented here as it reads once at module
level).
"""
# ruff: noqa


def fast_path(input_spec, inputs, layer_name):
    # forkgen: input-spec-single-fast-path (keras-team/keras#23184)
    # One InputSpec and one input that is not nested: return at once when
    # the checks below would pass. Otherwise they run as they are, and raise.
    if (
        type(input_spec) is InputSpec
        and not isinstance(inputs, dict)
        and not tree.is_nested(inputs)
        and _single_input_spec_passes(input_spec, inputs)
    ):
        return


def helper():
    # forkgen: input-spec-single-fast-path (keras-team/keras#23184)
    def _single_input_spec_passes(spec, x):
        """Whether `assert_input_compatibility(spec, x, ...)` passes, for one
    `InputSpec` and one input `x` that is not nested.

    Answers without flattening anything: the same checks in the same order,
    each one ending in `return False` where `assert_input_compatibility`
    raises, so that the caller then runs those checks and raises exactly
    as they do. An exception from a check itself (`standardize_shape`, an
    out-of-range axis) is the one those checks would raise first.
    """
        if x is None and spec.optional:
            return True
        if not hasattr(x, "shape"):
            return False
        shape = backend.standardize_shape(x.shape)
        ndim = len(shape)
        if spec.ndim is not None and not spec.allow_last_axis_squeeze:
            if ndim != spec.ndim:
                return False
        if spec.max_ndim is not None and ndim > spec.max_ndim:
            return False
        if spec.min_ndim is not None and ndim < spec.min_ndim:
            return False
        if spec.dtype is not None:
            if backend.standardize_dtype(x.dtype) != spec.dtype:
                return False
        if spec.axes:
            for axis, value in spec.axes.items():
                if value is not None and shape[axis] not in {value, None}:
                    return False
        if spec.shape is not None:
            spec_shape = spec.shape
            if spec.allow_last_axis_squeeze:
                # A trailing 1 is dropped from each side on its own (3.15.1).
                if shape and shape[-1] == 1:
                    shape = shape[:-1]
                if spec_shape and spec_shape[-1] == 1:
                    spec_shape = spec_shape[:-1]
            for spec_dim, dim in zip(spec_shape, shape):
                if spec_dim is not None and dim is not None:
                    if spec_dim != dim:
                        return False
        return True
