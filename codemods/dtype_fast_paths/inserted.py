"""What `dtype-fast-paths` inserts into `dtypes.py` and `variables.py` (keras-team/keras#23182).

Parsed by the engine, never imported. Each function's body is one piece (comments above a
function are notes, not inserted). `final_check` replaces the test of upstream's final `if`:
`UPSTREAM` in its header is upstream's own test, kept node for node; the body stays upstream's,
and the marker ends the header line.
"""
# ruff: noqa


# Module level in dtypes.py, right after `ALLOWED_DTYPES = (...)`: the same strings as a
# frozenset, for O(1) membership (the tuple stays, its order is used elsewhere).
def allowed_dtypes_set():
    ALLOWED_DTYPES_SET = frozenset(ALLOWED_DTYPES)  # forkgen: dtype-fast-paths


# First statement of `standardize_dtype`. An exact `str` naming an allowed dtype is what
# upstream returns unchanged (no such string is a key of PYTHON_DTYPES_MAP, has a `name` or
# `__name__`, or contains "torch" / "jax.numpy": the codemod checks the first two on the
# tree). `type(...) is str`, not isinstance: a str subclass may carry a `name` upstream uses.
def fast_path(dtype):
    if type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET:  # forkgen: dtype-fast-paths
        return dtype


# The final membership test of `standardize_dtype`: an exact `str` is in the set exactly
# when it is in the tuple; anything else (possibly unhashable by then: it may come from
# `.name`) still goes through upstream's own tuple test.
def final_check(dtype):
    if not (type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET) and UPSTREAM:  # forkgen: dtype-fast-paths
        UPSTREAM
