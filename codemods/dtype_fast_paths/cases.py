"""What `dtype-fast-paths` makes of dtypes.py / variables.py shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from codemods.engine import Case, Mutant
from tests.support.synthetic_dtype_fast_paths import DTYPES, DTYPES_PY, VARIABLES, VARIABLES_PY

MARK = "  # forkgen: dtype-fast-paths"
SET_LINE = "ALLOWED_DTYPES_SET = frozenset(ALLOWED_DTYPES)"
FAST = "    if type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET:"
FINAL = "    if dtype not in dtypes.ALLOWED_DTYPES:\n"
OUR_FINAL = (
    "    if not (type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET) and dtype not in dtypes.ALLOWED_DTYPES:"
)
DTYPES_AFTER = DTYPES.replace("\nPYTHON_DTYPES_MAP = {", f"\n{SET_LINE}{MARK}\nPYTHON_DTYPES_MAP = {{", 1)
VARIABLES_AFTER = VARIABLES.replace(
    "def standardize_dtype(dtype):\n", f"def standardize_dtype(dtype):\n{FAST}{MARK}\n        return dtype\n", 1
).replace(FINAL, f"{OUR_FINAL}{MARK}\n", 1)
# keras-nightly's shape (#23182 as merged, with the MLX additions this patch does not carry).
DTYPES_NIGHTLY = DTYPES.replace("\nPYTHON_DTYPES_MAP = {", f"\n{SET_LINE}\nPYTHON_DTYPES_MAP = {{", 1)
VARIABLES_NIGHTLY = VARIABLES.replace(
    "def standardize_dtype(dtype):\n",
    "def standardize_dtype(dtype):\n    if isinstance(dtype, str) and dtype in dtypes.ALLOWED_DTYPES_SET:\n"
    "        return dtype\n", 1,
).replace(FINAL, "    if dtype not in dtypes.ALLOWED_DTYPES_SET:\n", 1).replace("dtype.name\n", "dtype.name.lower()\n", 1)
CHAIN = ('    elif hasattr(dtype, "__str__") and (\n        "torch" in str(dtype) or "jax.numpy" in str(dtype)\n'
         "    ):\n")


def tree(dtypes: str = DTYPES, variables: str = VARIABLES) -> dict[str, str]:
    return {DTYPES_PY: dtypes, VARIABLES_PY: variables}


CASES = (
    Case("the set after the tuple, the fast path first, the set asked first in the final test", tree(),
         tree(DTYPES_AFTER, VARIABLES_AFTER), detail="add ALLOWED_DTYPES_SET, the fast path and the set test",
         anchors=(("ALLOWED_DTYPES = (...)", 10), ("def standardize_dtype", 13),
                  ("if dtype not in dtypes.ALLOWED_DTYPES", 26))),
    Case("keras-nightly (#23182 as merged)", tree(DTYPES_NIGHTLY, VARIABLES_NIGHTLY), upstream=True,
         detail="ALLOWED_DTYPES_SET and the str fast path are upstream's",
         anchors=(("ALLOWED_DTYPES = (...)", 10), ("def standardize_dtype", 13),
                  ("if dtype not in dtypes.ALLOWED_DTYPES", 28))),
    Case("keras-nightly's variables.py alone (its command run on it)", {VARIABLES_PY: VARIABLES_NIGHTLY}, upstream=True),
    *(Case(f"drift: {name}", tree(dtypes, variables), drift=drift) for name, dtypes, variables, drift in (
        ("tuple gone", DTYPES.replace("ALLOWED_DTYPES = (", "SUPPORTED_DTYPES = ("), VARIABLES,
         f"{DTYPES_PY}:1: anchor 'ALLOWED_DTYPES = (...)': expected exactly one `ALLOWED_DTYPES = (...)` at module "
         "level; found 0"),
        ("tuple twice", DTYPES + "ALLOWED_DTYPES = ()\n", VARIABLES, f"{DTYPES_PY}:10: anchor 'ALLOWED_DTYPES = (...)'"
         ": expected exactly one `ALLOWED_DTYPES = (...)` at module level; found 2"),
        ("tuple not literal", DTYPES.replace('    "float16",\n', "    FLOAT16,\n"), VARIABLES,
         f"{DTYPES_PY}:11: anchor 'ALLOWED_DTYPES = (...)': expected a tuple of string literals; found FLOAT16"),
        ("allowed str mapped", DTYPES.replace('"int": "int32"', '"float32": "float16"'), VARIABLES,
         f"{DTYPES_PY}:31: anchor 'PYTHON_DTYPES_MAP': expected builtin type and string keys, no allowed dtype "
         "string among them; found 'float32'"),
        ("odd map key", DTYPES.replace("bool: ", "SOME_NAME: "), VARIABLES, f"{DTYPES_PY}:26: anchor "
         "'PYTHON_DTYPES_MAP': expected builtin type and string keys, no allowed dtype string among them; found SOME_NAME"),
        ("final test gone", DTYPES, VARIABLES.replace(FINAL, "    if dtype not in dtypes.ALLOWED:\n"),
         f"{VARIABLES_PY}:13: anchor 'if dtype not in dtypes.ALLOWED_DTYPES': expected exactly one "
         "`if dtype not in dtypes.ALLOWED_DTYPES` in standardize_dtype; found 0"),
        ("chain true for a dtype", DTYPES, VARIABLES.replace('"jax.numpy" in', '"float" in'),
         f"{VARIABLES_PY}:21: anchor 'standardize_dtype if/elif chain': expected no test true for an allowed dtype "
         "string; found hasattr(dtype, '__str__') and ('torch' in str(dtype) or 'flo for 'float16'"),
        ("unknown chain test", DTYPES, VARIABLES.replace('"jax.numpy" in str(dtype)', "dtype.isalpha()"),
         f"{VARIABLES_PY}:21: anchor 'standardize_dtype if/elif chain': expected hasattr/str/in tests; found "
         "hasattr(dtype, '__str__') and ('torch' in str(dtype) or dtyp"),
        ("else branch", DTYPES, VARIABLES.replace(CHAIN, "    else:\n"), f"{VARIABLES_PY}:1: anchor "
         "'standardize_dtype's body': expected exactly one `standardize_dtype's body` at module level; found 0"),
        ("extra statement", DTYPES, VARIABLES.replace("    return dtype\n\n\ndef standardize_shape",
                                                      "    dtype = dtype.lower()\n    return dtype\n\n\ndef standardize_shape"),
         f"{VARIABLES_PY}:1: anchor 'standardize_dtype's body': expected exactly one"),
        ("half upstream", DTYPES_NIGHTLY, VARIABLES, f"{VARIABLES_PY}:13: anchor 'dtype-fast-paths': expected all "
         "pieces upstream's or none; found ALLOWED_DTYPES_SET upstream's, def standardize_dtype, "),
        ("half ours", DTYPES_AFTER, VARIABLES, f"{VARIABLES_PY}:13: anchor 'dtype-fast-paths': expected all pieces "
         "present or none; found ALLOWED_DTYPES_SET forkgen's, def standardize_dtype, "),
    )),
)

MUTANTS = (
    Mutant("the fast path accepts str subclasses",
           "    if type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET:  # forkgen: dtype-fast-paths\n",
           "    if isinstance(dtype, str) and dtype in dtypes.ALLOWED_DTYPES_SET:  # forkgen: dtype-fast-paths\n"),
)
