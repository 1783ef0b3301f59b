"""Patch `standardize-dtype-memo` (ours, not upstream): `standardize_dtype` answers a
`torch.dtype` object from a memo filled once, at the torch backend's import, by upstream's own
`standardize_dtype`.

Every eager layer call on torch standardizes its input's dtype (the conversion gate of
`Layer.__call__`), and ops, losses and metrics standardize more: an MLP training step makes 18
such calls, a `predict` batch 6 (measured on the fork, 3.15.1). For a `torch.dtype`, upstream's
body finds no `PYTHON_DTYPES_MAP` entry, fails two `hasattr` tests and builds `str(dtype)` twice
before splitting it: about 0.4 us hot, 1.4 us inside a layer call (the fork's `Dense(4)(x)`, one
process, interleaved: 4% of the call).

The patch adds to variables.py a memo (`_STANDARDIZE_DTYPE_MEMO`, dtype object -> name) and the
class whose objects it holds (`_STANDARDIZE_DTYPE_MEMO_TYPE`, None until a backend registers
one), and, in `standardize_dtype` right before `if dtype is None:`, returns the memo's name for
an argument whose exact type is that class. The torch backend's core module, at the end of its
import, calls upstream's `standardize_dtype` on every `torch.dtype` object of the `torch`
namespace, keeps the names it returns (an object it rejects is left out) and registers
`torch.dtype`.

Why the answer is upstream's:
- upstream's body computes the name of a non-None argument from the argument alone: a look-up in
  the `PYTHON_DTYPES_MAP` constant, `hasattr` and `str` of the argument, a test against the
  `ALLOWED_DTYPES` constant (relied on: the body's shape, from `if dtype is None:` to `return
  dtype`). A `torch.dtype` object is immutable, so it gets the same name on every call, the one
  registration recorded, computed by the same function;
- `torch.dtype` objects hash and compare by identity (`object`'s), so the memo answers only for
  the very objects it recorded; `type(dtype) is torch.dtype` is exact (no subclass);
- an object upstream rejects is not in the memo and keeps raising from upstream's path; None and
  every other argument take upstream's path.
The name returned is an equal `str`, not necessarily the object upstream would have built (as
for memoised-result-type). No switch: the memo holds fixed names of immutable objects, filled
once; no other backend registers a class, so their calls take upstream's path.
"""

from __future__ import annotations

from codemods.engine import (
    TORCH_CORE_MOVED,
    TORCH_CORE_PY,
    VARIABLES_PY,
    Anchor,
    Append,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    InsertBefore,
)

FUNCTION = "standardize_dtype"
#: Upstream's body from `if dtype is None:` on (3.0.0-3.15.1 and keras-nightly; before it, the
#: exact-str fast path of dtype-fast-paths or nightly's, and this patch's look-up).
BODY = """def standardize_dtype(dtype):
    ___
    if dtype is None: ___
    dtype = {}PYTHON_DTYPES_MAP.get(dtype, dtype)
    if hasattr(dtype, "name"): ___{}
    if __: ___
    return dtype"""
#: The chain's `elif`s: `__str__` (3.0.0-3.5.0), then `__name__` too (3.6.0 on).
ELIFS = ("\n    elif __: ___", "\n    elif __: ___\n    elif __: ___")


class StandardizeDtypeMemo(DeclaredPatch):
    name = "standardize-dtype-memo"
    version = "1"
    headers = Headers(
        description="standardize_dtype answers a torch.dtype object from a memo that the torch backend fills "
        "once, at its import, with upstream's own standardize_dtype.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-05",
    )
    files = (VARIABLES_PY, TORCH_CORE_PY)
    moved = TORCH_CORE_MOVED
    #: The memo after `def standardize_dtype`, the look-up before `if dtype is None:`, the
    #: registration at the end of the torch backend's core module.
    edits = (
        Helper(Anchor("", f"def {FUNCTION}(___): ___", name=f"def {FUNCTION}", description="the memo goes after it"),
               "module_level", label="the memo"),
        InsertBefore(Anchor(FUNCTION, "if dtype is None: ___", name="if dtype is None:",
                            description=f"in {FUNCTION}: the memo's look-up goes above it"),
                     "memo_lookup", label="the look-up"),
        Append("register", label="the registration", path=TORCH_CORE_PY),
    )
    #: Upstream's body computes a non-None argument's name from the argument and module constants.
    relies_on = (
        Anchor("", BODY.format("dtypes.", ELIFS[1]), alternatives=tuple(
            BODY.format(module, elifs) for module in ("dtypes.", "") for elifs in ELIFS)[1:], name=f"{FUNCTION}'s body",
               description="the name of a non-None dtype: from the dtype and module constants"),
    )
    details = Details(apply="add the memo, its look-up and the torch registration",
                      present="standardize_dtype has the memo (forkgen)", upstream="")


PATCH = StandardizeDtypeMemo()
StandardizeDtypeMemoCommand = PATCH.command
