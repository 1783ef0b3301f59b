"""What `standardize-dtype-memo` makes of a variables.py and a torch core module shaped like
Keras's (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the
equivalence suite must catch."""

import textwrap

from codemods.engine import (
    NIGHTLY_TORCH_CORE_PY,
    TORCH_CORE_PY,
    VARIABLES_PY,
    Case,
    Mutant,
    piece_text,
)

#: A synthetic variables.py whose `standardize_dtype` has the statements of Keras 3.15.1's (the
#: same text as dtype-fast-paths' `VARIABLES`, codemods/dtype_fast_paths/cases.py, kept here as
#: this patch does not require that one).
VARIABLES = textwrap.dedent(
    '''\
    from keras.src.api_export import keras_export
    from keras.src.backend import config
    from keras.src.backend.common import dtypes


    class Variable:
        pass


    @keras_export(
        ["keras.utils.standardize_dtype", "keras.backend.standardize_dtype"]
    )
    def standardize_dtype(dtype):
        if dtype is None:
            return config.floatx()
        dtype = dtypes.PYTHON_DTYPES_MAP.get(dtype, dtype)
        if hasattr(dtype, "name"):
            dtype = dtype.name
        elif hasattr(dtype, "__name__"):
            dtype = dtype.__name__
        elif hasattr(dtype, "__str__") and (
            "torch" in str(dtype) or "jax.numpy" in str(dtype)
        ):
            dtype = str(dtype).split(".")[-1]

        if dtype not in dtypes.ALLOWED_DTYPES:
            raise ValueError(f"Invalid dtype: {dtype}")
        return dtype


    def standardize_shape(shape):
        return tuple(shape)
    '''
)
#: A torch core module: only its end matters (the registration is appended there).
CORE = textwrap.dedent(
    """\
    import torch


    def convert_to_tensor(x, dtype=None):
        return torch.as_tensor(x)
    """
)
NONE_CHECK = "    if dtype is None:\n"
SHAPE = "\n\ndef standardize_shape(shape):"
LOOKUP = piece_text(__file__, "memo_lookup", "    ")
MEMO = piece_text(__file__, "module_level")
REGISTER = piece_text(__file__, "register")
VARIABLES_AFTER = VARIABLES.replace(NONE_CHECK, LOOKUP + NONE_CHECK, 1).replace(SHAPE, "\n\n" + MEMO + SHAPE, 1)
CORE_AFTER = CORE + "\n\n" + REGISTER
#: 3.0.0-3.5.0: `PYTHON_DTYPES_MAP` of variables.py itself, and no `__name__` branch.
VARIABLES_3_0 = VARIABLES.replace("dtypes.PYTHON_DTYPES_MAP", "PYTHON_DTYPES_MAP").replace(
    '    elif hasattr(dtype, "__name__"):\n        dtype = dtype.__name__\n', "")
#: keras-nightly: its own exact-str fast path first.
VARIABLES_NIGHTLY = VARIABLES.replace(
    "def standardize_dtype(dtype):\n",
    "def standardize_dtype(dtype):\n    if isinstance(dtype, str) and dtype in dtypes.ALLOWED_DTYPES_SET:\n"
    "        return dtype\n", 1)


def tree(variables: str = VARIABLES, core: str = CORE, core_path: str = TORCH_CORE_PY) -> dict[str, str]:
    return {VARIABLES_PY: variables, core_path: core}


CASES = (
    Case("the memo after standardize_dtype, its look-up before `if dtype is None:`, the registration at the end of "
         "torch's core", tree(), tree(VARIABLES_AFTER, CORE_AFTER),
         detail="add the memo, its look-up and the torch registration",
         anchors=(("def standardize_dtype", 13), ("if dtype is None:", 14), ("standardize_dtype's body", 13))),
    Case("3.0.0-3.5.0's body", tree(VARIABLES_3_0),
         tree(VARIABLES_3_0.replace(NONE_CHECK, LOOKUP + NONE_CHECK, 1).replace(SHAPE, "\n\n" + MEMO + SHAPE, 1),
              CORE_AFTER)),
    Case("keras-nightly: its fast path first, torch's core moved", tree(VARIABLES_NIGHTLY, core_path=NIGHTLY_TORCH_CORE_PY),
         tree(VARIABLES_NIGHTLY.replace(NONE_CHECK, LOOKUP + NONE_CHECK, 1)
              .replace(SHAPE, "\n\n" + MEMO + SHAPE, 1), CORE_AFTER, NIGHTLY_TORCH_CORE_PY)),
    *(Case(f"drift: {name}", before, drift=drift) for name, before, drift in (
        ("no `if dtype is None:`", tree(VARIABLES.replace(NONE_CHECK, "    if not dtype:\n")),
         f"{VARIABLES_PY}:13: anchor 'if dtype is None:': expected exactly one `if dtype is None:` in "
         "standardize_dtype; found 0"),
        ("a name from somewhere else", tree(VARIABLES.replace(
            "dtypes.PYTHON_DTYPES_MAP.get(dtype, dtype)", "user_config.DTYPES.get(dtype, dtype)")),
         f"{VARIABLES_PY}:1: anchor 'standardize_dtype's body': expected exactly one"),
        ("another statement after the chain", tree(VARIABLES.replace(
            "    return dtype\n\n\ndef standardize_shape", "    dtype = dtype.lower()\n    return dtype\n\n\n"
            "def standardize_shape")), f"{VARIABLES_PY}:1: anchor 'standardize_dtype's body': expected exactly one"),
        ("the look-up without the memo", tree(VARIABLES_AFTER.replace("\n\n" + MEMO, ""), CORE_AFTER),
         "all pieces present or none"),
        ("the memo without the registration", tree(VARIABLES_AFTER, CORE), "all pieces present or none"),
        ("a memo name taken", tree(VARIABLES + "\n_STANDARDIZE_DTYPE_MEMO = None\n"),
         "anchor '_STANDARDIZE_DTYPE_MEMO': expected names free for module_level (forkgen's helper); found already bound"),
    )),
)

MUTANTS = (
    Mutant("the memo answers subclasses and other classes' objects that compare equal",
           "    if type(dtype) is _STANDARDIZE_DTYPE_MEMO_TYPE:  # forkgen: standardize-dtype-memo\n",
           "    if _STANDARDIZE_DTYPE_MEMO_TYPE is not None:  # forkgen: standardize-dtype-memo\n"),
    Mutant("the registration names a dtype by its str, not by upstream's standardize_dtype",
           "                    names[value] = common_variables.standardize_dtype(value)\n",
           '                    names[value] = str(value).split(".")[-1]\n'),
)
