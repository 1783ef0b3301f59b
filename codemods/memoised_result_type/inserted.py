"""What `memoised-result-type` inserts into `keras/src/backend/common/dtypes.py`.

Parsed by the codemod, never imported. Each function's body is one piece (comments above a
function are notes, not inserted). `UPSTREAM_VALUE` stands for the value of upstream's own
`return _lattice_result_type(...)` of `result_type`, kept node for node; that statement stays.
"""
# ruff: noqa


# Module level, right after `def _lattice_result_type`. The memo maps a key (floatx, then the
# class and value of every argument) to the result. Only arguments whose standardized dtype is
# a function of their class and value, with side-effect-free hashing and equality, key it: an
# exact str, None (floatx is in the key), a static (immutable) type such as `int`, `float` or
# `np.float32`, and the dtype objects of numpy/jax (`np.dtype`), torch (`torch.dtype`) and
# TensorFlow (`tf.DType`). Anything else (str subclasses, user objects whose `name` may change,
# unhashable values, Python classes) takes upstream's path, uncached, every time.
def module_level():
    _FORKGEN_RESULT_TYPES = {}  # forkgen: memoised-result-type
    _FORKGEN_KEY_CLASSES = {id(str): str, id(type(None)): type(None)}  # forkgen: memoised-result-type


    # forkgen: memoised-result-type
    def _forkgen_key_class(cls):
        """Whether `cls` is numpy's, torch's or TensorFlow's dtype class (remembered if so)."""
        import sys

        numpy = sys.modules.get("numpy")
        torch = sys.modules.get("torch")
        tf_dtypes = sys.modules.get("tensorflow.python.framework.dtypes")
        if (
            (numpy is not None and type(numpy.dtype) is not type and type(cls) is type(numpy.dtype))
            or (torch is not None and cls is getattr(torch, "dtype", None))
            or (tf_dtypes is not None and cls is getattr(tf_dtypes, "DType", None))
        ):
            _FORKGEN_KEY_CLASSES[id(cls)] = cls
            return True
        return False


    # forkgen: memoised-result-type
    def _forkgen_result_type_key(dtypes):
        """The memo key of `result_type(*dtypes)`, or None when an argument cannot key it."""
        import sys

        # None while torch.compile traces: Dynamo cannot follow the memo's id() look-ups and
        # would split the graph there, so traced code takes upstream's path.
        torch = sys.modules.get("torch")
        if torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():
            return None
        key = [config.floatx()]
        for dtype in dtypes:
            cls = type(dtype)
            if _FORKGEN_KEY_CLASSES.get(id(cls)) is not cls:
                if cls is type:
                    if dtype.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE: a mutable class
                        return None
                elif not _forkgen_key_class(cls):
                    return None
            key.append(cls)
            key.append(dtype)
        return tuple(key)


    # forkgen: memoised-result-type
    def _forkgen_memoise(key, result):
        """Remember `result` for `key` (at most 512 entries), unless floatx changed meanwhile."""
        if config.floatx() == key[0]:
            if len(_FORKGEN_RESULT_TYPES) >= 512:
                _FORKGEN_RESULT_TYPES.clear()
            _FORKGEN_RESULT_TYPES[key] = result
        return result


# In `result_type`, right before upstream's final `return _lattice_result_type(...)` (after
# the float8 check, which still runs, and raises, on every call).
def memo_lookup(dtypes):
    if (memo_key := _forkgen_result_type_key(dtypes)) is not None:  # forkgen: memoised-result-type
        memoised = _FORKGEN_RESULT_TYPES.get(memo_key)
        if memoised is None:
            memoised = _forkgen_memoise(memo_key, UPSTREAM_VALUE)
        return memoised
