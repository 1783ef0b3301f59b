"""`forkgen report`: every Keras `Layer` subclass, its `call()` signature and its fast-path verdicts.

Static: the tree is parsed with `ast`, never imported. Base classes are resolved through each
module's imports (aliases, attribute bases such as `layers.Layer`, re-exports through package
`__init__` modules, relative and star imports), `call` through a C3 linearisation of the bases
found inside Keras (others, such as `object` or backend classes, are ignored). The eligibility
rules, and what the tree carries of the code they describe, are those of the patch of the series
that declares them (`codemods.engine.CallRules`, found by `codemods.series.call_rules`): this
module names no patch (the CallSpec patches declare them today). A default that is not a literal
is assumed plain (not a tensor, not nested), and the report lists it. With the extension, every
call that binds is fast; a shape that does not bind (it raises, upstream and on the fork alike)
is reported slow, with why.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codemods import series
from codemods.engine import (
    KEYWORD_ONLY,
    LAYER_PY,
    POSITIONAL_ONLY,
    POSITIONAL_OR_KEYWORD,
    VAR_KEYWORD,
    VAR_POSITIONAL,
    AnchorDrift,
    CallRules,
    CodeClass,
    CodeTree,
    Parameter,
    analysed,
    switching,
)
from codemods.stamp_version import VERSION_PY, read_version
from forkgen.errors import ForkgenError, UpstreamDriftError
from forkgen.patch import require_keras_tree

#: The class every reported class derives from (and which is not reported itself).
LAYER_CLASS = "keras.src.layers.layer.Layer"
_V4_TRAINING_NOTE = "fast while `training` is a call-context argument (the default)"
_EXTENSION_ABSENT = "extension not in this tree"
_POSITIONAL = (POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class Verdict:
    """Whether one call shape takes the fast path in this tree; if not, why."""

    fast: bool
    eligible: bool  # by this forkgen's rules, whether or not the code is in the tree
    reason: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class LayerReport:
    """One `Layer` subclass. `shapes` maps "layer(x)" (one tensor), "layer(x, training=b)",
    "keywords" (any call with other keywords that binds), "nested" (`layer([a, b])`, a dict
    or None for the tensor) to a Verdict, "positional" to {"n": Verdict} for n >= 2.
    `arities`: the n for which `layer(x1, ..., xn)` is fast once patched."""

    module: str
    name: str
    line: int
    call_defined_in: str | None
    signature: str
    parameters: tuple[Parameter, ...]
    shapes: dict[str, Any]
    arities: list[int] | None  # None when `call` is unresolved


@dataclass(frozen=True)
class Report:
    """The report over one tree."""

    source: str
    keras_version: str | None
    variant: str
    applied: dict[str, bool]
    #: The pieces of `applied` that together are the base patch (the rules' `base_pieces`).
    base_pieces: tuple[str, ...]
    layers: tuple[LayerReport, ...]
    skipped_files: tuple[str, ...] = ()

    @property
    def base_patched(self) -> bool:
        return all(self.applied[piece] for piece in self.base_pieces)

    @property
    def extension_patched(self) -> bool:
        return self.applied["extension"]

    def to_json(self) -> dict[str, Any]:
        """The document `forkgen report --json` prints."""
        return {"ok": True, **_document(self)}

    def to_text(self) -> str:
        """The human-readable report: a header, one line per layer, a summary line."""
        return _text(self)


# -- class resolution -----------------------------------------------------------------------------
#: The backend whose `if backend() == "<name>":` branches decide what a module binds. A layer's
#: `call()` and its bases are the same on every backend (only `Layer`'s own base, which defines no
#: `call`, differs), so the report, which is about call signatures, reads the tree as torch's.
INDEX_BACKEND = "torch"


def _call_statement(node: ast.ClassDef) -> ast.stmt | None:
    found: ast.stmt | None = None  # the last binding of `call` in the class body wins
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value else []
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == "call" or any(
            isinstance(t, ast.Name) and t.id == "call" for t in targets
        ):
            found = stmt
    return found


def format_signature(params: list[Parameter]) -> str:
    """The signature as `inspect.Signature` prints it (defaults as written in the source)."""
    out: list[str] = []
    for i, p in enumerate(params):
        if p.kind == KEYWORD_ONLY and not any(q.kind in (VAR_POSITIONAL, KEYWORD_ONLY) for q in params[:i]):
            out.append("*")
        star = {VAR_POSITIONAL: "*", VAR_KEYWORD: "**"}.get(p.kind, "")
        out.append(f"{star}{p.name}" + ("" if p.default is None else f"={p.default}"))
        if p.kind == POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind != POSITIONAL_ONLY):
            out.append("/")
    return f"({', '.join(out)})"


# -- the report ----------------------------------------------------------------------------------
def _verdict(reason: str | None, present: bool, absent: str, note: str | None = None) -> Verdict:
    if reason is not None:
        return Verdict(False, False, reason)
    return Verdict(present, True, None if present else absent, note)


def layer_report(
    tree: CodeTree, cls: CodeClass, rules: CallRules, variant: str, base: bool, extension: bool
) -> LayerReport:
    """The report of one class of `tree` (a tree of CallSpec `variant`), by `rules`."""
    node = cls.node
    owner_cls = next((c for c in tree.mro(cls) if _call_statement(c.node) is not None), None)
    owner = None if owner_cls is None else owner_cls.key
    stmt = None if owner_cls is None else _call_statement(owner_cls.node)
    if not isinstance(stmt, ast.FunctionDef) or stmt.decorator_list:
        why = (
            "no call() found" if stmt is None
            else "async def call" if isinstance(stmt, ast.AsyncFunctionDef)
            else f"call() is decorated with @{ast.unparse(stmt.decorator_list[0])}" if isinstance(stmt, ast.FunctionDef)
            else f"call = {ast.unparse(getattr(stmt, 'value', stmt))}"
        )
        slow = Verdict(False, False, f"unresolved ({why})")
        shapes: dict[str, Any] = {
            "layer(x)": slow, "layer(x, training=b)": slow, "keywords": slow, "nested": slow, "positional": {"2": slow},
        }
        return LayerReport(cls.module, node.name, node.lineno, owner, f"unresolved ({why})", (), shapes, None)
    params = rules.call_parameters(stmt, variant)
    bound = rules.bindings_reason(params)

    def any_call(unbound: str | None, note: str | None = None) -> Verdict:
        return _verdict(bound or unbound, extension, _EXTENSION_ABSENT, note)

    # `layer(x)`: the base's plan when it has one, else the extension's bindings.
    plan = rules.plan_reason(params)
    single = rules.unbound_reason(params, 1)
    if plan is None:
        first = _verdict(None, base, "not patched")
    elif single is None and bound is None:
        first = any_call(None)
    else:
        first = Verdict(False, False, single or plan)
    context_note = _V4_TRAINING_NOTE if variant == "V4" and all(p.name != "training" for p in params) else None
    positional = [p for p in params if p.kind in _POSITIONAL]
    top = max(2, len(positional))
    shapes = {
        "layer(x)": first,
        "layer(x, training=b)": any_call(rules.unbound_reason(params, 1, frozenset({"training"})), context_note),
        "keywords": any_call(None),
        "nested": any_call(single),
        "positional": {str(n): any_call(rules.unbound_reason(params, n)) for n in range(2, top + 1)},
    }
    arities = [n for n in range(1, top + 1) if rules.unbound_reason(params, n) is None] if bound is None else []
    return LayerReport(cls.module, node.name, node.lineno, owner, format_signature(params), tuple(params), shapes, arities)


def build_report(files: Mapping[str, str], source: str = "") -> Report:
    """The report over a tree given as `{relative path: text}` (pure; `read_tree` reads one)."""
    try:
        rules = series.call_rules()
    except series.DeclarationError as error:
        raise ForkgenError(f"forkgen report: {error}", hint="a patch of codemods/series.py declares them "
                           "(`Patch.call_rules`); a series without it has no layer report") from None
    try:
        analysis = rules.analyze_source(files[LAYER_PY], LAYER_PY)
    except AnchorDrift as error:
        raise UpstreamDriftError(f"upstream drift: {error}") from None
    try:
        version: str | None = read_version(files[VERSION_PY])
    except Exception:  # noqa: BLE001 - the version is informative only
        version = None
    tree = CodeTree(files, INDEX_BACKEND)
    applied = dict(analysis.applied)
    base = all(applied[piece] for piece in rules.base_pieces)
    classes = sorted(tree.subclasses_of(LAYER_CLASS), key=lambda c: (c.module, c.name))
    layers = tuple(layer_report(tree, c, rules, analysis.variant, base, applied["extension"]) for c in classes)
    return Report(source, version, analysis.variant, applied, rules.base_pieces, layers, tuple(sorted(tree.skipped)))


def read_tree(root: Path) -> dict[str, str]:
    """`{relative path: text}` of `root/keras/src/**/*.py`, tests and test utilities left out, the
    fork's run-time switches taken out (`switching.unswitch`)."""
    require_keras_tree(root)
    if not (root / LAYER_PY).is_file():
        raise UpstreamDriftError(
            f"upstream drift: {root}: no {LAYER_PY}",
            hint="SRC must be the root of an unpacked Keras 3 sdist, or a site-packages directory where keras is installed",
        )
    paths = sorted((root / "keras" / "src").rglob("*.py"))
    relatives = ((p, p.relative_to(root).as_posix()) for p in paths)
    # A module the fork switched is read as the series left it (its upstream copies are not code
    # the report is about).
    return {rel: switching.unswitch(p.read_bytes().decode("utf-8", errors="replace"))
            for p, rel in relatives if analysed(rel)}


def report(root: Path) -> Report:
    """`forkgen report SRC`: read the tree at `root` and report on it."""
    return build_report(read_tree(root), str(root))


# -- output ----------------------------------------------------------------------------------------
def _all_verdicts(row: LayerReport, shape: str) -> list[Verdict]:
    value = row.shapes[shape]
    return list(value.values()) if isinstance(value, dict) else [value]


def summary(result: Report) -> dict[str, Any]:
    """Counts of layers, and of those where each shape is fast (and eligible, once patched);
    "positional" counts the layers fast for some call with two or more positional tensors."""
    counts: dict[str, Any] = {
        "layers": len(result.layers),
        "private": sum(row.name.startswith("_") for row in result.layers),
        "unresolved": sum(row.arities is None for row in result.layers),
    }
    for shape in ("layer(x)", "layer(x, training=b)", "keywords", "positional"):
        verdicts = [_all_verdicts(row, shape) for row in result.layers]
        counts[shape] = {key: sum(any(getattr(v, key) for v in vs) for vs in verdicts) for key in ("fast", "eligible")}
    return counts


def _document(result: Report) -> dict[str, Any]:
    layers = [
        {
            "module": row.module,
            "class": row.name,
            "line": row.line,
            "private": row.name.startswith("_"),
            **{k: v for k, v in asdict(row).items() if k not in ("module", "name", "line")},
            "assumed_plain": [p.name for p in row.parameters if p.assumed],
        }
        for row in result.layers
    ]
    return {
        "source": result.source,
        "keras_version": result.keras_version,
        "variant": result.variant,
        "patched": {"base": result.base_patched, "extension": result.extension_patched, "pieces": result.applied},
        "layers": layers,
        "skipped_files": list(result.skipped_files),
        "summary": summary(result),
    }


def _word(v: Verdict) -> str:
    return ("fast" if v.fast else "slow") + (f" ({v.reason})" if v.reason else "") + (f" [{v.note}]" if v.note else "")


def _arities_text(verdicts: dict[str, Verdict]) -> str:
    runs: list[tuple[int, int, str]] = []  # consecutive arities with the same verdict: "2-8 fast"
    for n, v in sorted((int(n), v) for n, v in verdicts.items()):
        if runs and runs[-1][2] == _word(v) and runs[-1][1] == n - 1:
            runs[-1] = (runs[-1][0], n, runs[-1][2])
        else:
            runs.append((n, n, _word(v)))
    return ", ".join(f"{a}{'' if a == b else f'-{b}'} {word}" for a, b, word in runs)


def _text(result: Report) -> str:
    base, extension = ("present" if p else "absent" for p in (result.base_patched, result.extension_patched))
    lines = [
        f"keras {result.keras_version or '(version unknown)'} at {result.source}: CallSpec variant {result.variant}",
        f"base patch: {base}; extension: {extension}",
    ]
    for row in result.layers:
        s = row.shapes
        lines.append(
            f"{row.module}.{row.name}{' [private]' if row.name.startswith('_') else ''}  {row.signature}"
            + ("" if row.call_defined_in in (None, f"{row.module}.{row.name}") else f"  [call from {row.call_defined_in}]")
            + f"  layer(x): {_word(s['layer(x)'])}  training: {_word(s['layer(x, training=b)'])}"
            f"  keywords: {_word(s['keywords'])}  nested: {_word(s['nested'])}  positional: {_arities_text(s['positional'])}"
        )
    c = summary(result)
    lines.append(
        f"{c['layers']} layers ({c['private']} private, {c['unresolved']} unresolved): "
        + ", ".join(f"{shape} fast {c[k]['fast']} (eligible {c[k]['eligible']})" for k, shape in (
            ("layer(x)", "layer(x)"), ("layer(x, training=b)", "layer(x, training=b)"), ("keywords", "keywords"),
            ("positional", ">=2 positionals")))
    )
    lines += [f"skipped (does not parse): {skipped}" for skipped in result.skipped_files]
    return "\n".join(lines)
