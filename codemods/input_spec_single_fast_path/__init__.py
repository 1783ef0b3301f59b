"""Patch `input-spec-single-fast-path`: backport of the fast path of keras-team/keras#23184
("single-InputSpec fast path in assert_input_compatibility"), without its behaviour changes.

`Layer.__call__` checks its first argument against `input_spec` on every call; for the usual
single `InputSpec` and single tensor, `assert_input_compatibility` still flattens both with
`tree.flatten` before one round of checks (about 5.5 us of which ~1.7 us is saved on torch).
The patch returns early, after the leading `if not input_spec: return`, when the spec is one
`InputSpec` (exactly that class), the input is neither nested nor a dict, and
`_single_input_spec_passes` (appended after the function) finds that the checks pass.

Not carried (keras-nightly has them, spec section 10/13): the ValueError for an out-of-range
`axes` key (3.15.1 raises IndexError) and nightly's removal of the trailing-1 squeeze under
`allow_last_axis_squeeze`. The helper mirrors 3.15.1's checks in order, and every failing case
falls through to upstream's unchanged body, so which inputs pass, which exceptions are raised
and their messages stay exactly 3.15.1's. The analysis pins the checks it mirrors (a
normalised fingerprint of the function, identical in 3.4.0-3.15.1, `normalised_shape`): other
checks are drift. No kill switch: nothing depends on runtime state.
"""

from __future__ import annotations

import ast
import hashlib

from codemods.engine import (
    Analysis,
    Anchor,
    AnchorDrift,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    InsertAfter,
    Sources,
)

INPUT_SPEC_PY = "keras/src/layers/input_spec.py"
FUNCTION = "assert_input_compatibility"
HELPER = "_single_input_spec_passes"
#: The normalised shape (`normalised_shape`) of `assert_input_compatibility`'s body in Keras
#: 3.4.0-3.15.1 (identical in all of them): the checks `_single_input_spec_passes` mirrors.
UPSTREAM_SHAPE = "5708a30f888e6faf"
DEF = f"def {FUNCTION}(___): ___"
#: keras-nightly's shared per-spec checker (its form of #23184), with or without the squeeze.
NIGHTLY = "upstream has the fast path (_check_input_spec)"
SQUEEZE = Anchor("_check_input_spec", "__ = __[__:__]", 0, alternatives=("__ = __[__:__:__]",))


def _nightly(detail: str, *squeeze: Anchor) -> tuple[str, tuple[Anchor, ...]]:
    return detail, (Anchor("", DEF, name="_check_input_spec", description=detail),
                    Anchor("", "def _check_input_spec(___): ___", reported=False), *squeeze)


class InputSpecSingleFastPath(DeclaredPatch):
    name = "input-spec-single-fast-path"
    version = "1"
    headers = Headers(
        description="assert_input_compatibility returns early, without tree.flatten, for a single InputSpec and a "
        "single unnested input that pass its checks; every other case runs the unchanged checks.",
        origin="upstream, https://github.com/keras-team/keras/pull/23184",
        bug="https://github.com/keras-team/keras/issues/23275", forwarded="https://github.com/keras-team/keras/pull/23184",
        applied_upstream="keras-nightly 3.16.0.dev2026102704 (with behaviour changes not carried here)",
        last_update="2026-12-01",
    )
    files = (INPUT_SPEC_PY,)
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    # 3.4.0 is the first release whose checks skip a None input for an optional spec and take
    # the shape the fast path mirrors (3.0.0-3.3.3 check every input for a shape first).
    since = "3.4.0"
    codemod = "InputSpecSingleFastPathCommand"
    edits = (
        InsertAfter(Anchor(FUNCTION, "if not input_spec: return", description=f"in {FUNCTION}"), "fast_path", blank_lines=1),
        Helper(Anchor("", DEF, reported=False), "helper"),
    )
    relies_on = (Anchor("", DEF, name=f"{FUNCTION} checks", description="the 3.4.0-3.15.1 checks, mirrored by the fast path"),)
    upstream_shapes = (
        _nightly(f"{NIGHTLY}; with nightly's squeeze semantics (allow_last_axis_squeeze no longer strips 1s)", SQUEEZE),
        _nightly(NIGHTLY),
    )
    details = Details("single InputSpec, unnested input: return early when the checks pass", "present", NIGHTLY)

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        """The rule no pattern says (semantic): the checks are those the helper mirrors, as pinned."""
        function = next(s for s in sources.ast(INPUT_SPEC_PY).body if isinstance(s, ast.FunctionDef) and s.name == FUNCTION)
        shape = normalised_shape(function)
        if shape != UPSTREAM_SHAPE:
            raise AnchorDrift(INPUT_SPEC_PY, function.lineno, f"{FUNCTION} checks",
                              f"the checks of Keras 3.4.0-3.15.1, which {HELPER} mirrors (shape {UPSTREAM_SHAPE})",
                              f"other checks (shape {shape})")


def _shape(node: object) -> object:
    """A comparable, Python-version-independent rendering of an `ast` subtree."""
    if isinstance(node, ast.AST):
        return (type(node).__name__, tuple((name, _shape(value)) for name, value in ast.iter_fields(node)
                                           if name not in ("ctx", "kind", "type_comment") and value not in (None, [])))
    return tuple(_shape(v) for v in node) if isinstance(node, list) else repr(node)


def _normalised(statements: list[ast.stmt]) -> list[object]:
    """`statements` rendered without docstrings, a raise as "raise" and an `if` that can only end
    in a raise (it ends with one, nothing leaves early) as its test."""
    rendered: list[object] = []
    for s in statements:
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            continue  # docstring
        if isinstance(s, ast.Raise):
            rendered.append("raise")
        elif isinstance(s, ast.If) and not s.orelse and isinstance(s.body[-1], ast.Raise) and not any(
                isinstance(n, (ast.Return, ast.Continue, ast.Break, ast.Yield)) for b in s.body for n in ast.walk(b)):
            rendered.append(("if-raise", _shape(s.test)))
        elif isinstance(s, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            rendered.append((type(s).__name__, *(
                (name, tuple(_normalised(v)) if isinstance(v, list) and isinstance(v[0], ast.stmt) else _shape(v))
                for name, v in ast.iter_fields(s) if name != "type_comment" and v is not None and v != [])))
        else:
            rendered.append(_shape(s))
    return rendered


def normalised_shape(function: ast.FunctionDef) -> str:
    """The fingerprint of `function`'s body without docstrings, error messages, the bodies of
    branches that can only raise, and forkgen's fast path (an `if` testing `_single_input_spec_passes`)."""
    body = [s for s in function.body
            if not (isinstance(s, ast.If) and any(isinstance(n, ast.Name) and n.id == HELPER for n in ast.walk(s.test)))]
    return hashlib.sha256(repr(_normalised(body)).encode()).hexdigest()[:16]


PATCH = InputSpecSingleFastPath()
InputSpecSingleFastPathCommand = PATCH.command
