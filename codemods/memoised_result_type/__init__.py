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
"""

from __future__ import annotations

from libcst.codemod import CodemodContext

from codemods.memoised_result_type.memoise import (
    DTYPES_PY,
    NAME,
    Analysis,
    MemoiseResultTypeCommand,
    analyze,
    anchors,
    present,
)
from codemods.patchlib import Check, Headers, Outcome, Patch, Sources


def _analysis(sources: Sources) -> Analysis:
    return sources.analysed(NAME, DTYPES_PY, analyze)


class MemoisedResultType(Patch):
    name = NAME
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
    codemods = (MemoiseResultTypeCommand,)

    def check(self, sources: Sources) -> Check:
        analysis = _analysis(sources)
        found = anchors(analysis)
        if analysis.upstream is not None and not analysis.lookup:
            return Check(Outcome.UPSTREAM, f"result_type calls the memoised {analysis.upstream}", found)
        if present(analysis):
            return Check(Outcome.APPLIED, "memo present", found, True)
        return Check(Outcome.APPLIED, "memoise result_type", found)

    def apply(self, sources: Sources) -> None:
        command = MemoiseResultTypeCommand(CodemodContext(filename=DTYPES_PY), _analysis(sources))
        sources.replace(DTYPES_PY, command.transform_module(sources.module(DTYPES_PY)))


PATCH = MemoisedResultType()
__all__ = ["PATCH", "MemoiseResultTypeCommand"]
