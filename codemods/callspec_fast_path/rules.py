"""The eligibility rules of the code the CallSpec patches insert, read from a `call()` signature
written in source: whether `layer(x)` gets a plan (`_callspec_fast_plan`), whether the layer gets
a binding plan (`_callspec_fast_bindings`), whether a default is plain (the variant's
`_callspec_fast_default_is_plain`), and why not. Their one home: `forkgen report` gives its
verdicts with them, and tests/installed/test_report_crosscheck.py holds them against the inserted
code itself on every layer of an installed fork.

A default that is not a literal is assumed plain (not a tensor, not nested).
"""

from __future__ import annotations

import ast

# The parameter kinds and `Parameter` are the engine's: the records of the interface the report
# reads (`codemods.engine.CallRules`, which `CALL_RULES` in source.py offers).
from codemods.engine import (
    KEYWORD_ONLY,
    POSITIONAL_ONLY,
    POSITIONAL_OR_KEYWORD,
    VAR_KEYWORD,
    VAR_POSITIONAL,
    Parameter,
)

_POSITIONAL = (POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD)


def call_parameters(fn: ast.FunctionDef, variant: str) -> list[Parameter]:
    """The parameters `inspect.signature(layer.call)` shows: the def's, without the first."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    spec: list[tuple[str, str, ast.expr | None]] = [
        (arg.arg, POSITIONAL_ONLY if i < len(a.posonlyargs) else POSITIONAL_OR_KEYWORD, defaults[i])
        for i, arg in enumerate(positional)
    ]
    spec += [(a.vararg.arg, VAR_POSITIONAL, None)] if a.vararg else []
    spec += [(arg.arg, KEYWORD_ONLY, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    spec += [(a.kwarg.arg, VAR_KEYWORD, None)] if a.kwarg else []
    return [
        Parameter(name, kind, None if node is None else ast.unparse(node), *classify_default(node, variant))
        for name, kind, node in (spec[1:] if positional else spec)
    ]


def _leaves(value: object) -> list[object]:
    # `tree.flatten`: lists, tuples and dicts (over their values) are nested; str/bytes are leaves.
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def classify_default(node: ast.expr | None, variant: str) -> tuple[bool, str | None, bool]:
    """`(plain, why_not, assumed)` of a default expression, by the variant's
    `_callspec_fast_default_is_plain`. A literal is never a tensor, so only the nested rule
    can make it not plain; a non-literal is assumed plain; no default is not plain."""
    if node is None:
        return False, None, False
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return True, None, True
    if not isinstance(value, list | tuple | dict):
        return True, None, False
    leaves = _leaves(value)
    if variant == "V1":  # no length test: `all()` over no leaves is true, `()` is a tensor argument
        tensor_like = not leaves
    elif variant == "V2":
        tensor_like = len(value) > 0 and not leaves
    else:  # V3, V4: None counts with the tensors
        tensor_like = len(value) > 0 and all(leaf is None for leaf in leaves)
    if not tensor_like:
        return True, None, False
    why = "empty nested value" if not value else "nested value of only None" if leaves else "nested value without leaves"
    return False, f"{why}, {variant}", False


def _param_reason(p: Parameter) -> str:
    if p.default is None:
        return f"parameter `{p.name}` has no default"
    return f"default of `{p.name}` is not plain ({p.why})"


def _refusal(p: Parameter) -> str | None:
    if p.kind in (VAR_POSITIONAL, VAR_KEYWORD):
        return f"call() takes {'*' if p.kind == VAR_POSITIONAL else '**'}{p.name}"
    if p.name == "training" and p.kind == POSITIONAL_ONLY:
        return "positional-only `training`"
    return None


def plan_reason(params: list[Parameter]) -> str | None:
    """Why `_callspec_fast_plan` returns None (`layer(x)` not eligible); None when it does not."""
    if not params:
        return "call() takes no argument"
    if params[0].kind not in _POSITIONAL:
        return _refusal(params[0]) or f"first parameter `{params[0].name}` is keyword-only"
    for p in params:  # in the template's order: `training` first, then *args/**kwargs, then defaults
        reason = _refusal(p) or (None if p is params[0] or p.plain else _param_reason(p))
        if reason:
            return reason
    return None


def bindings_reason(params: list[Parameter]) -> str | None:
    """Why `_callspec_fast_bindings` returns None (no call but `layer(x)` may be fast); None
    when the layer gets a binding plan: every call that binds is then fast."""
    if not params:
        return "call() takes no argument"
    if any(p.name == "training" and p.kind == POSITIONAL_ONLY for p in params):
        return "positional-only `training`"
    return None


def unbound_reason(params: list[Parameter], n: int, keywords: frozenset[str] = frozenset()) -> str | None:
    """Why `layer(x1, ..., xn, **keywords)` does not bind (it raises upstream as on the fork,
    so it is never fast); None when it binds."""
    positional = [p for p in params if p.kind in _POSITIONAL]
    for name in sorted(keywords):  # a keyword call() does not take is popped or goes to **kwargs
        taker = next((p for p in params if p.name == name), None)
        if taker is None or taker not in positional:
            continue
        took_positional = positional.index(taker) < n
        if taker.kind == POSITIONAL_ONLY:
            # Beside a positional argument, the keyword goes to **kwargs; alone, bind refuses it.
            if not (took_positional and any(p.kind == VAR_KEYWORD for p in params)):
                return f"`{name}` is positional-only"
        elif took_positional:
            return f"`{name}` would take both a positional argument and a keyword"
    if n > len(positional) and all(p.kind != VAR_POSITIONAL for p in params):
        count = f"only {len(positional)} parameter{'s take' if len(positional) != 1 else ' takes'}" if positional else "no parameter takes"
        return f"{count} a positional argument"
    for p in params[n:] if n <= len(positional) else [p for p in params if p.kind not in _POSITIONAL]:
        if p.kind in (VAR_POSITIONAL, VAR_KEYWORD) or p.default is not None or p.name in keywords:
            continue
        if p.kind in _POSITIONAL and positional.index(p) < n:
            continue
        return f"parameter `{p.name}` has no default"
    return None


