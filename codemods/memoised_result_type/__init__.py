"""Patch `memoised-result-type`: backport of keras-team/keras#23336 (open upstream).

`backend.result_type` (called by most ops, e.g. once per `Dense` matmul) standardizes every
argument and walks the promotion lattice on every call, though its result depends only on
the arguments and `floatx()`. The patch answers repeated calls from a memo (a dict of at most
512 entries) and computes the others with upstream's own expression.

Written from the idea of the PR, not its code, to be exactly equivalent, which the PR's
`lru_cache` over `(type(d), d)` pairs is not:
- the key is floatx plus the exact class and value of every argument; floatx is read on every
  call, so `keras.config.set_floatx` never meets a stale entry (a result is only stored if
  floatx did not change while it was computed);
- only arguments whose standardized dtype is a function of that class and value, and whose
  hashing and equality run no user code, key the memo: exact `str`, `None`, static
  (immutable) types such as `int`/`float`/`np.float32`, and `np.dtype` (numpy, jax),
  `torch.dtype` and `tf.DType` instances. Any other argument (a str subclass, a user object
  whose `name` may change, an unhashable value, a Python class, a jax scalar type) sends the
  call down upstream's path, uncached: no double walk, no chained `TypeError`, no hashing of
  user objects;
- the float8 check stays in front and raises on every call; errors are never memoised;
- results are the same strings, compared by value: like upstream's own `lru_cache`d lattice
  helpers, the memo may return an equal `str` object other than the one the walk would build.
No switch: the result depends on nothing the key leaves out.

Under torch.compile the memo is not used: while Dynamo traces (`torch.compiler.is_compiling()`),
the key is None and the call takes upstream's path. Version 1 memoised there too; Dynamo
cannot follow its `id()` look-ups, split the train step into 29 graphs instead of 5 and hit its
recompile limit on `convert_to_tensor` (a `jit_compile=True` fit compiled about twice as long
and ran its steps about twice as slow as upstream's; Keras's own torch trainer tests took 3x
as long).

"Already upstream" is a `result_type` that calls a function of the module decorated with
`functools.lru_cache`/`cache` (the PR's shape): `upstream_rule`, as no pattern can say that a
call's target is decorated.
"""

from __future__ import annotations

import libcst as cst

from codemods.engine import (
    DTYPES_PY,
    Anchor,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    InsertBefore,
    Sources,
    walk,
)

FUNCTION = "result_type"
LATTICE = "_lattice_result_type"


class MemoisedResultType(DeclaredPatch):
    name = "memoised-result-type"
    #: 2: no memo while torch.compile traces (v1's id() look-ups split Dynamo's graphs).
    version = "2"
    headers = Headers(
        description=(
            "backend.result_type answers repeated calls from a memo keyed on floatx and the class and "
            "value of each argument (only for arguments whose dtype is a function of those)."
        ),
        origin="upstream, https://github.com/keras-team/keras/pull/23336",
        bug="https://github.com/keras-team/keras/issues/23698",
        forwarded="https://github.com/keras-team/keras/pull/23336",
        applied_upstream=None,
        last_update="2026-12-01",
    )
    files = (DTYPES_PY,)
    #: The memo reads floatx through dtypes.py's module-level `config`, which 3.0-3.1 do not import
    #: (they call `backend.floatx()`): a build of 3.0.0 with the memo failed with a NameError.
    since = "3.2.0"
    codemod = "MemoiseResultTypeCommand"
    codemod_version = "1"
    #: The memo and its helpers after `def _lattice_result_type`; the look-up right before
    #: result_type's `return _lattice_result_type(...)`, whose value it computes on a miss.
    edits = (
        Helper(Anchor("", f"def {LATTICE}(___): ___", name=f"def {LATTICE}", description="the memo goes after it"),
               "module_level"),
        InsertBefore(Anchor(FUNCTION, f"return {LATTICE}(___)", name=f"return {LATTICE}(...)",
                            description=f"last statement of {FUNCTION}"), "memo_lookup"),
    )
    #: The key is built from the arguments as `*dtypes`.
    relies_on = (Anchor("", f"def {FUNCTION}(*dtypes): ___", name=f"def {FUNCTION}(*dtypes)", reported=False),)
    details = Details(apply="memoise result_type", present="memo present",
                      upstream="result_type calls a memoised function of the module")

    def upstream_rule(self, sources: Sources) -> str | None:
        """result_type calls a function of the module decorated with lru_cache/cache, and keeps its
        `return _lattice_result_type(...)` (the PR's shape: the uncached fallback)."""
        if len(self.matches(sources, self.edits[1].anchor)) != 1:
            return None
        module = sources.module(DTYPES_PY)
        functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
        decorated = {name for name, f in functions.items()
                     if any(word in module.code_for_node(d.decorator) for d in f.decorators for word in ("lru_cache", "cache"))}
        calls = {n.func.value for n in walk(functions[FUNCTION]) if isinstance(n, cst.Call)
                 and isinstance(n.func, cst.Name) and n.func.value in decorated} if FUNCTION in functions else set()
        return f"result_type calls the memoised {min(calls)}" if calls else None


PATCH = MemoisedResultType()
MemoiseResultTypeCommand = PATCH.command
