"""What `memoised-result-type` makes of dtypes.py modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant, piece_text

#: A synthetic dtypes.py shaped like Keras 3.15.1's where the patch anchors (`_lattice_result_type`
#: and the end of `result_type`), with a small promotion rule of our own that reads `floatx()`:
#: the same text as dtype-fast-paths' `DTYPES` (codemods/dtype_fast_paths/cases.py, whose `load`
#: runs it in tests/unit/test_memoised_result_type.py), kept here as this patch does not require that one.
DTYPES = textwrap.dedent(
    '''\
    import functools

    from keras.src.api_export import keras_export
    from keras.src.backend import config
    from keras.src.backend.common.variables import standardize_dtype

    FLOAT8_TYPES = ("float8_e4m3fn", "float8_e5m2")

    # All supported dtypes in Keras
    ALLOWED_DTYPES = (
        "float16",
        "float32",
        "float64",
        "int8",
        "int32",
        "int64",
        "uint8",
        "bfloat16",
        "bool",
        "string",
        "float8_e4m3fn",
        "float8_e5m2",
        "complex64",
    )
    PYTHON_DTYPES_MAP = {
        bool: "bool",
        int: "int32",
        float: "float32",
        str: "string",
        # special case for string value
        "int": "int32",
        complex: "complex64",
    }


    @functools.lru_cache(512)
    def _least_upper_bound(*nodes):
        """The widest of `nodes` (a toy rule: by position in ALLOWED_DTYPES)."""
        return max(nodes, key=ALLOWED_DTYPES.index)


    def _lattice_result_type(*args):
        dtypes = [standardize_dtype(arg) for arg in args]
        weak = [arg is int or arg is float for arg in args]
        if all(weak):
            return "int32" if all(d.startswith("int") for d in dtypes) else config.floatx()
        strong = [d for d, w in zip(dtypes, weak) if not w]
        out_dtype = _least_upper_bound(*strong)
        if any(w and d.startswith("float") for d, w in zip(dtypes, weak)) and not out_dtype.startswith(
            ("float", "bfloat", "complex")
        ):
            out_dtype = config.floatx()
        return out_dtype


    @keras_export("keras.backend.result_type")
    def result_type(*dtypes):
        """Returns the type from applying the Keras type promotion rules."""
        if len(dtypes) == 0:
            return config.floatx()
        for dtype in dtypes:
            if dtype in FLOAT8_TYPES:
                raise ValueError(
                    "There is no implicit conversions from float8 dtypes to others."
                    f" You must cast it internally. Received: {dtypes}"
                )
        return _lattice_result_type(
            *(config.floatx() if arg is None else arg for arg in dtypes),
        )
    '''
)

ANCHOR = '@keras_export("keras.backend.result_type")\n'
FINAL = "        return _lattice_result_type(\n"
#: What the patch puts after `def _lattice_result_type`, and before the final return of `result_type`.
MODULE_BLOCK = piece_text(__file__, "module_level") + "\n\n"
#: `UPSTREAM_VALUE`: the value of upstream's `return _lattice_result_type(...)`, as codegen re-indents it.
VALUE = "_lattice_result_type(\n                *(config.floatx() if arg is None else arg for arg in dtypes),\n            )"
LOOKUP = piece_text(__file__, "memo_lookup", "    ").replace("UPSTREAM_VALUE", VALUE, 1)
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
