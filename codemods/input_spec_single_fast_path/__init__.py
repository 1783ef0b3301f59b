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
normalised fingerprint of the function, identical in 3.4.0-3.15.1): other checks are drift.
No kill switch: nothing depends on runtime state.
"""

from __future__ import annotations

import ast
import hashlib

import libcst as cst

from codemods.engine import Analysis, Anchor, DeclaredPatch, Details, Helper, InsertAfter, lines
from codemods.patchlib import AnchorDrift, Headers, Sources, marker

INPUT_SPEC_PY = "keras/src/layers/input_spec.py"
FUNCTION = "assert_input_compatibility"
HELPER = "_single_input_spec_passes"
EMPTY_RETURN = "if not input_spec: return"
#: The normalised shape (`normalised_shape`) of `assert_input_compatibility`'s body in Keras
#: 3.4.0-3.15.1 (identical in all of them): the checks `_single_input_spec_passes` mirrors.
UPSTREAM_SHAPE = "5708a30f888e6faf"
DEF = f"def {FUNCTION}(___): ___"
#: The inserted `if`: `type(input_spec) is InputSpec and ... and _single_input_spec_passes(...)`.
FAST_PATH = f"if type(input_spec) is InputSpec and __ and __ and {HELPER}(___): ___"
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
    # 3.4.0 is the first release whose checks skip a None input for an optional spec and take
    # the shape the fast path mirrors (3.0.0-3.3.3 check every input for a shape first).
    since = "3.4.0"
    codemod = "InputSpecSingleFastPathCommand"
    edits = (
        InsertAfter(Anchor(FUNCTION, EMPTY_RETURN, description=f"in {FUNCTION}"), "fast_path", blank_lines=1),
        Helper(Anchor("", DEF, reported=False), "helper"),
    )
    relies_on = (Anchor("", DEF, name=f"{FUNCTION} checks", description="the 3.4.0-3.15.1 checks, mirrored by the fast path"),)
    upstream_shapes = (
        _nightly(f"{NIGHTLY}; with nightly's squeeze semantics (allow_last_axis_squeeze no longer strips 1s)", SQUEEZE),
        _nightly(NIGHTLY),
    )
    details = Details("single InputSpec, unnested input: return early when the checks pass", "present", NIGHTLY)

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        self.explain(sources, None)

    def explain(self, sources: Sources, drift: AnchorDrift | None) -> None:
        """The checks as before the engine: one leading `if not input_spec: return`, forkgen's
        pieces both or neither, the checks the helper mirrors, the names it reads imported."""
        found = self.matches(sources, Anchor("", DEF))
        if len(found) != 1:
            return  # the engine's drift
        (function, line), module = found[0], sources.module(INPUT_SPEC_PY)
        body = cst.ensure_type(cst.ensure_type(function, cst.FunctionDef).body, cst.IndentedBlock).body
        at = lines(module, body)
        tests = [at[id(s)] for s in body if Anchor("", "if not input_spec: ___").compiled.match(s) is not None]
        empty = tests[0] if tests else line
        empties = [i for i, s in enumerate(body) if self.edits[0].anchor.compiled.match(s) is not None]
        if len(empties) != 1:
            raise AnchorDrift(INPUT_SPEC_PY, empty, EMPTY_RETURN, f"exactly one `{EMPTY_RETURN}` at the top of {FUNCTION}",
                              f"{len(empties)}")
        ours = [s for s in body if Anchor("", FAST_PATH).compiled.match(s) is not None]
        helpers = [n for n, _ in self.matches(sources, Anchor("", f"def {HELPER}(___): ___"))]
        present = len(ours) == 1 and len(helpers) == 1 and list(body[empties[0] + 1:][:1]) == ours[:1] and all(
            marker(self.name) in module.code_for_node(n) for n in (*ours, *helpers))
        if not (present or not ours and not helpers):
            raise AnchorDrift(INPUT_SPEC_PY, empty, "fast path",
                              f"no fast path, or forkgen's right after `{EMPTY_RETURN}` and {HELPER}",
                              f"{len(ours)} fast path(s) `if type(input_spec) is InputSpec ...`, {len(helpers)} {HELPER}")
        tree = sources.ast(INPUT_SPEC_PY)
        shape = normalised_shape(next(s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == FUNCTION))
        if shape != UPSTREAM_SHAPE:
            raise AnchorDrift(INPUT_SPEC_PY, line, f"{FUNCTION} checks",
                              f"the checks of Keras 3.4.0-3.15.1, which {HELPER} mirrors (shape {UPSTREAM_SHAPE})",
                              f"other checks (shape {shape})")
        for name in ("tree", "backend", "InputSpec"):
            if not any(isinstance(s, ast.ClassDef) and s.name == name or isinstance(s, (ast.Import, ast.ImportFrom))
                       and any((a.asname or a.name.split(".")[0]) == name for a in s.names) for s in tree.body):
                raise AnchorDrift(INPUT_SPEC_PY, 1, name, f"`{name}` bound at module level", "none")


# -- the normalised shape of upstream's checks --------------------------------------------------


def _only_raises(body: list[ast.stmt]) -> bool:
    """A branch that can only end in a raise: its last statement raises, nothing leaves early."""
    if not body or not isinstance(body[-1], ast.Raise):
        return False
    return not any(isinstance(n, (ast.Return, ast.Continue, ast.Break, ast.Yield)) for s in body for n in ast.walk(s))


def _shape(node: object) -> object:
    """A comparable, Python-version-independent rendering of an `ast` subtree."""
    if isinstance(node, ast.AST):
        return (type(node).__name__, tuple((name, _shape(value)) for name, value in ast.iter_fields(node)
                                           if name not in ("ctx", "kind", "type_comment") and value not in (None, [])))
    return tuple(_shape(v) for v in node) if isinstance(node, list) else repr(node)


def _normalised(statements: list[ast.stmt]) -> list[object]:
    rendered: list[object] = []
    for statement in statements:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # docstring
        if isinstance(statement, ast.Raise):
            rendered.append("raise")
        elif isinstance(statement, ast.If) and not statement.orelse and _only_raises(statement.body):
            rendered.append(("if-raise", _shape(statement.test)))
        elif isinstance(statement, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            parts: list[object] = [type(statement).__name__]
            for name, value in ast.iter_fields(statement):
                if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                    parts.append((name, tuple(_normalised(value))))
                elif name not in ("type_comment",) and value is not None and value != []:
                    parts.append((name, _shape(value)))
            rendered.append(tuple(parts))
        else:
            rendered.append(_shape(statement))
    return rendered


def normalised_shape(function: ast.FunctionDef) -> str:
    """The fingerprint of `function`'s body without docstrings, error messages, the bodies of
    branches that can only raise, and forkgen's fast path (an `if` testing `_single_input_spec_passes`)."""
    body = [s for s in function.body
            if not (isinstance(s, ast.If) and any(isinstance(n, ast.Name) and n.id == HELPER for n in ast.walk(s.test)))]
    return hashlib.sha256(repr(_normalised(body)).encode()).hexdigest()[:16]


PATCH = InputSpecSingleFastPath()
InputSpecSingleFastPathCommand = PATCH.command
