"""What `memoised-result-type` makes of dtypes.py modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant
from tests.support import synthetic_dtype_fast_paths as synthetic

DTYPES = synthetic.DTYPES

ANCHOR = '@keras_export("keras.backend.result_type")\n'
FINAL = "        return _lattice_result_type(\n"
#: What the patch puts after `def _lattice_result_type` (pinned: a change is a new version).
MODULE_BLOCK = '_FORKGEN_RESULT_TYPES = {}  # forkgen: memoised-result-type\n_FORKGEN_KEY_CLASSES = {id(str): str, id(type(None)): type(None)}  # forkgen: memoised-result-type\n\n\n# forkgen: memoised-result-type\ndef _forkgen_key_class(cls):\n    """Whether `cls` is numpy\'s, torch\'s or TensorFlow\'s dtype class (remembered if so)."""\n    import sys\n\n    numpy = sys.modules.get("numpy")\n    torch = sys.modules.get("torch")\n    tf_dtypes = sys.modules.get("tensorflow.python.framework.dtypes")\n    if (\n        (numpy is not None and type(numpy.dtype) is not type and type(cls) is type(numpy.dtype))\n        or (torch is not None and cls is getattr(torch, "dtype", None))\n        or (tf_dtypes is not None and cls is getattr(tf_dtypes, "DType", None))\n    ):\n        _FORKGEN_KEY_CLASSES[id(cls)] = cls\n        return True\n    return False\n\n\n# forkgen: memoised-result-type\ndef _forkgen_result_type_key(dtypes):\n    """The memo key of `result_type(*dtypes)`, or None when an argument cannot key it."""\n    import sys\n\n    # None while torch.compile traces: Dynamo cannot follow the memo\'s id() look-ups and\n    # would split the graph there, so traced code takes upstream\'s path.\n    torch = sys.modules.get("torch")\n    if torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():\n        return None\n    key = [config.floatx()]\n    for dtype in dtypes:\n        cls = type(dtype)\n        if _FORKGEN_KEY_CLASSES.get(id(cls)) is not cls:\n            if cls is type:\n                if dtype.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE: a mutable class\n                    return None\n            elif not _forkgen_key_class(cls):\n                return None\n        key.append(cls)\n        key.append(dtype)\n    return tuple(key)\n\n\n# forkgen: memoised-result-type\ndef _forkgen_memoise(key, result):\n    """Remember `result` for `key` (at most 512 entries), unless floatx changed meanwhile."""\n    if config.floatx() == key[0]:\n        if len(_FORKGEN_RESULT_TYPES) >= 512:\n            _FORKGEN_RESULT_TYPES.clear()\n        _FORKGEN_RESULT_TYPES[key] = result\n    return result\n\n\n'
LOOKUP = textwrap.indent(
    textwrap.dedent(
        """\
        if (memo_key := _forkgen_result_type_key(dtypes)) is not None:  # forkgen: memoised-result-type
            memoised = _FORKGEN_RESULT_TYPES.get(memo_key)
            if memoised is None:
                memoised = _forkgen_memoise(memo_key, _lattice_result_type(
                    *(config.floatx() if arg is None else arg for arg in dtypes),
                ))
            return memoised
        """
    ),
    "    ",
)
AFTER = DTYPES.replace(ANCHOR, MODULE_BLOCK + ANCHOR, 1).replace(
    "    return _lattice_result_type(\n", LOOKUP + "    return _lattice_result_type(\n", 1
)
# The upstream PR's shape (#23336, if merged as proposed): an lru_cache'd helper called from
# result_type, with an uncached fallback for unhashable arguments.
UPSTREAM = DTYPES.replace(ANCHOR, textwrap.dedent(
    """\
    @functools.lru_cache(maxsize=512)
    def _result_type_cached(tagged, floatx):
        return _lattice_result_type(*(floatx if d is None else d for _, d in tagged))


    """
) + ANCHOR, 1).replace(
    "    return _lattice_result_type(\n",
    "    try:\n        return _result_type_cached(tuple((type(d), d) for d in dtypes), config.floatx())\n"
    "    except TypeError:\n        pass\n    return _lattice_result_type(\n",
    1,
)


CASES = (
    Case("the memo after _lattice_result_type, the look-up before the return", DTYPES, AFTER,
         detail="memoise result_type",
         anchors=(("def _lattice_result_type", 42), ("return _lattice_result_type(...)", 67))),
    Case("the upstream PR's shape: result_type calls an lru_cache'd helper", UPSTREAM, upstream=True),
    *(Case(f"drift: {name}", text, drift=drift) for name, text, drift in (
        ("no result_type", DTYPES.replace("def result_type(", "def promote_types("),
         ":1: anchor 'result_type': expected exactly one def result_type"),
        ("no lattice", DTYPES.replace("def _lattice_result_type(", "def _lattice("),
         ":1: anchor 'def _lattice_result_type': expected exactly one `def _lattice_result_type` at module level; found 0"),
        ("another signature", DTYPES.replace("def result_type(*dtypes)", "def result_type(*args)")
         .replace("in dtypes", "in args"), ":67: anchor 'dtypes': expected bound where memo_lookup goes (in result_type or at module level); found not bound"),
        ("the return reshaped", DTYPES.replace("    return _lattice_result_type(", "    return _least_upper_bound("),
         ":57: anchor 'return _lattice_result_type(...)': expected exactly one"),
        ("two returns", DTYPES.replace("        return config.floatx()\n    for", "        return _lattice_result_type()\n    for"),
         ":60: anchor 'return _lattice_result_type(...)': expected exactly one `return _lattice_result_type(...)` in "
         "result_type; found 2"),
        ("the look-up removed", AFTER.replace(LOOKUP, ""), "all pieces present or none"),
        ("the helpers removed", AFTER.replace(MODULE_BLOCK, ""), "all pieces present or none"),
        ("a helper's name taken", DTYPES + "\n_forkgen_memoise = None\n",
         "anchor '_forkgen_memoise': expected names free for module_level (forkgen's helper); found already bound"),
    )),
)

MUTANTS = (
    Mutant("the memo key ignores floatx", "        key = [config.floatx()]\n", '        key = ["float32"]\n'),
    Mutant("the memo used while torch.compile traces (version 1)",
           '        if torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():\n',
           "        if False:\n"),
)
