"""Patch `dtype-fast-paths`: backport of keras-team/keras#23182 (merged, in keras-nightly).

`standardize_dtype` runs on every dtype Keras handles; for a canonical string such as "float32"
3.15.1 does a dict lookup, two `hasattr`, two `str()` tests and a scan of the 18-string
`ALLOWED_DTYPES` tuple, only to return its argument. The patch adds `ALLOWED_DTYPES_SET =
frozenset(ALLOWED_DTYPES)` to dtypes.py, a first statement returning an exact `str` in the set,
and asks the set first in the final membership test. Only the speed part is carried, exactly:
- not nightly's `dtype.name.lower()` nor its `"mlx" in str(dtype)` (#23410: behaviour changes);
- the fast path tests `type(dtype) is str`, not nightly's `isinstance(dtype, str)`: a str
  subclass (e.g. a `(str, Enum)` member) keeps upstream's path, which may use its `.name`;
- the final test asks the set only for an exact `str` (set and tuple membership agree there)
  and else still runs upstream's tuple test (the value may come from `.name`, unhashable).
The fast path returns what upstream's body would by that body's shape (relied on) and the two
constants (`verify`; `ALLOWED_DTYPES` taken to be constant, as upstream's set does).
"""

from __future__ import annotations

import ast

from codemods import engine
from codemods.engine import (
    DTYPES_PY,
    VARIABLES_PY,
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    Prepend,
    Sources,
)

FUNCTION, TUPLE, FINAL = "standardize_dtype", "ALLOWED_DTYPES = (...)", "if dtype not in dtypes.ALLOWED_DTYPES"
#: Upstream's `standardize_dtype` (3.2.0-3.15.1), our fast path first once applied.
BODY = """def standardize_dtype(dtype):{}
    if dtype is None: ___
    dtype = dtypes.PYTHON_DTYPES_MAP.get(dtype, dtype)
    if __: ___
    elif __: ___
    elif __: ___
    if __: ___
    return dtype"""
#: Our fast path, applied; and standardize-dtype-memo's look-up after it (a return of its own
#: for a registered dtype object, before `if dtype is None:`).
FAST = "\n    if type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET: return dtype"
MEMO = "\n    if type(dtype) is _STANDARDIZE_DTYPE_MEMO_TYPE: ___"
#: keras-nightly (#23182 as merged): an `isinstance` fast path first, a set-only final test.
NIGHTLY = (Anchor("", f"def {FUNCTION}(dtype):\n    if isinstance(dtype, str) and dtype in dtypes.ALLOWED_DTYPES_SET: "
                  "return dtype\n    ___", path=VARIABLES_PY, name=f"def {FUNCTION}",
                  description="first statement (fast path: theirs)"),
           Anchor(FUNCTION, "if dtype not in dtypes.ALLOWED_DTYPES_SET: ___", path=VARIABLES_PY, name=FINAL,
                  description=f"in {FUNCTION} (theirs)"))
#: What a test of the if/elif chain may hold (names: `dtype` and these builtins): `verify` evaluates it.
SAFE = (ast.BoolOp, ast.boolop, ast.UnaryOp, ast.Not, ast.Compare, ast.In, ast.NotIn, ast.Call, ast.Name, ast.Load, ast.Constant)
BUILTINS, NAMES = {"hasattr": hasattr, "str": str}, ("dtype", "hasattr", "str")
TYPES = ("bool", "int", "float", "str", "complex")  # the builtin types PYTHON_DTYPES_MAP may have as keys


class DtypeFastPaths(DeclaredPatch):
    name = "dtype-fast-paths"
    version = "1"
    headers = Headers(
        description="standardize_dtype returns an exact canonical dtype str at once, and tests membership in "
        "ALLOWED_DTYPES through a frozenset (speed part of #23182 only).",
        origin="upstream, https://github.com/keras-team/keras/pull/23182",
        bug="https://github.com/keras-team/keras/issues/23272",
        forwarded="https://github.com/keras-team/keras/pull/23182",
        applied_upstream="keras-nightly 3.16.0.dev2026102704", last_update="2026-12-01",
    )
    files = (DTYPES_PY, VARIABLES_PY)
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    since = "3.2.0"  # 3.0.0-3.1.1 keep `ALLOWED_DTYPES` in variables.py
    #: The set after the tuple, the fast path, the set asked first (`{state}`: the piece's).
    edits = (
        Helper(Anchor("", "ALLOWED_DTYPES = __", name=TUPLE, description="module level (ALLOWED_DTYPES_SET: {state})"),
               "allowed_dtypes_set", label="ALLOWED_DTYPES_SET", blank_lines=0),
        Prepend(FUNCTION, "fast_path", label=f"def {FUNCTION}", description="first statement (fast path: {state})",
                path=VARIABLES_PY),
        engine.ReplaceExpression(Anchor(FUNCTION, "dtype not in dtypes.ALLOWED_DTYPES", expression=True, path=VARIABLES_PY,
                                 name=FINAL, description=f"in {FUNCTION} ({{state}})"), "final_check"),
    )
    relies_on = (Anchor("", "PYTHON_DTYPES_MAP = __", reported=False),
                 Anchor("", BODY.format(""), alternatives=(BODY.format(FAST), BODY.format(FAST + MEMO)),
                        path=VARIABLES_PY, name=f"{FUNCTION}'s body", reported=False))
    upstream_patterns = (
        Anchor("", "ALLOWED_DTYPES = __", name=TUPLE, description="module level (ALLOWED_DTYPES_SET: theirs)"),
        Anchor("", "ALLOWED_DTYPES_SET = frozenset(ALLOWED_DTYPES)", reported=False), *NIGHTLY)
    upstream_shapes = (("the str fast path is upstream's", NIGHTLY),)  # variables.py alone (its command)
    report_paths = True
    details = Details("add ALLOWED_DTYPES_SET, the fast path and the set test", "set, fast path and final test present",
                      "ALLOWED_DTYPES_SET and the str fast path are upstream's")

    def verify(self, sources: Sources, analysis: engine.Analysis) -> None:
        # Semantic: upstream's body returns every allowed string unchanged. So the tuple is a literal of
        # strings, none a key of PYTHON_DTYPES_MAP (builtin types and strings) or true for a test of the chain.
        if not sources.exists(DTYPES_PY):
            return  # the command alone on variables.py
        values = {t.id: s.value for s in sources.ast(DTYPES_PY).body if isinstance(s, ast.Assign)
                  for t in s.targets if isinstance(t, ast.Name)}
        elements, mapping = getattr(values[TUPLE[:14]], "elts", [values[TUPLE[:14]]]), values["PYTHON_DTYPES_MAP"]
        allowed = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        keys = [k or mapping for k in mapping.keys] if isinstance(mapping, ast.Dict) else [mapping]
        for odd, anchor, expected in (
            ([e for e in elements if getattr(e, "value", None) not in allowed], TUPLE, "a tuple of string literals"),
            ([k for k in keys if getattr(k, "id", None) not in TYPES and (
                not isinstance(v := getattr(k, "value", None), str) or v in allowed)],
             "PYTHON_DTYPES_MAP", "builtin type and string keys, no allowed dtype string among them"),
        ):
            if odd:
                raise AnchorDrift(DTYPES_PY, odd[0].lineno, anchor, expected, ast.unparse(odd[0])[:60])
        if not sources.exists(VARIABLES_PY):
            return  # the command alone on dtypes.py
        body = next(s.body for s in sources.ast(VARIABLES_PY).body if isinstance(s, ast.FunctionDef) and s.name == FUNCTION)
        chain = f"{FUNCTION} if/elif chain"  # relied on: the chain, the final test, `return dtype`
        for test in (n.test for n in ast.walk(body[-3]) if isinstance(n, ast.If)):
            found = ast.unparse(test)[:60]
            try:  # a test of `hasattr`, `str`, `in`, `and`/`or`/`not` on `dtype` and strings, for each string
                if not all(isinstance(n, SAFE) and getattr(n, "id", "str") in NAMES for n in ast.walk(test)):
                    raise TypeError
                code = compile(ast.Expression(test), "<test>", "eval")
                taken = [s for s in allowed if eval(code, {"__builtins__": {}, **BUILTINS}, {"dtype": s})]
            except Exception:  # noqa: BLE001 - another shape of test
                raise AnchorDrift(VARIABLES_PY, test.lineno, chain, "hasattr/str/in tests", found) from None
            if taken:
                raise AnchorDrift(VARIABLES_PY, test.lineno, chain, "no test true for an allowed dtype string",
                                  f"{found} for {taken[0]!r}")


PATCH = DtypeFastPaths()
DtypeFastPathsCommand = PATCH.command
