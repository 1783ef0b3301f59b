"""The code the CallSpec patches insert, one template module per CallSpec variant.

The template modules are real Python kept in the project, parsed with libcst and cut into the
engine's pieces (`base_pieces`, `extension_pieces`); they are never imported (the names they use
are bound only in the target module). Each shows the piece in place: the statements after the
`_call_signature` anchor in `Layer.__init__`, the `if` in `Layer.__call__` (its `else` body, the
construction, stands for upstream's), the methods of `class CallSpec`; the module-level
statements before `class Layer`, with the variant's rules spliced in, go before `class CallSpec`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

import libcst as cst

from codemods.engine import PLACEHOLDER

#: The code common to every variant, and the module holding each variant's own rule (V3 and V4
#: classify alike), spliced before `_callspec_fast_plan`.
COMMON_MODULE = "callspec_common.py"
TEMPLATE_MODULES = {"V1": "callspec_v1.py", "V2": "callspec_v2.py", "V3": "callspec_v3.py", "V4": "callspec_v3.py"}
#: The extension's: common code, and each variant's rules (the keywords its constructor pops
#: before binding, what it keeps of them, how it classifies a nested value), spliced before
#: `_callspec_fast_bindings`.
EXTENSION_COMMON_MODULE = "callspec_bound_common.py"
EXTENSION_MODULES = {v: f"callspec_bound_{v.lower()}.py" for v in ("V1", "V2", "V3", "V4")}

Pieces = dict[str, tuple[cst.BaseStatement, ...]]
_UPSTREAM = cst.SimpleStatementLine([cst.Expr(cst.Name(PLACEHOLDER))])


@functools.cache
def _parse(filename: str) -> cst.Module:
    return cst.parse_module(resources.files(__name__).joinpath(filename).read_text(encoding="utf-8"))


def _named(body: Sequence[Any], name: str) -> Any:
    found = [s for s in body if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s.name.value == name]
    if len(found) != 1:
        raise ValueError(f"a CallSpec template must define {name} once")
    return found[0]


def _body(node: Any) -> tuple[cst.BaseStatement, ...]:
    return tuple(cst.ensure_type(node.body, cst.IndentedBlock).body)


def _helpers(common: cst.Module, rules: str, names: tuple[str, ...], before: str) -> tuple[cst.BaseStatement, ...]:
    """The module-level statements before `class Layer`, the variant's `names` from `rules` before
    `before`, two blank lines above the first and above the rules (their module's header stays)."""
    head: list[Any] = list(common.body[: common.body.index(_named(common.body, "Layer"))])
    at = head.index(_named(head, before))
    spliced = [_named(_parse(rules).body, n) for n in names]
    blank = [cst.EmptyLine(), cst.EmptyLine()]
    spliced[0] = spliced[0].with_changes(leading_lines=[*blank, *spliced[0].leading_lines])
    head[0] = head[0].with_changes(leading_lines=[*blank, *head[0].leading_lines])
    return (*head[:at], *spliced, *head[at:])


def _after(body: tuple[cst.BaseStatement, ...], code: str) -> tuple[cst.BaseStatement, ...]:
    """The statements of `body` after the one that is `code`."""
    found = [i for i, s in enumerate(body) if cst.Module([]).code_for_node(s).strip() == code]
    if len(found) != 1:
        raise ValueError(f"a CallSpec template's Layer.__init__ must hold `{code}` once")
    return body[found[0] + 1:]


def _else_upstream(statement: cst.If) -> cst.If:
    """`statement` with its last branch, an `else:`, holding `UPSTREAM` instead of its body."""
    if isinstance(statement.orelse, cst.If):
        return statement.with_changes(orelse=_else_upstream(statement.orelse))
    orelse = cst.ensure_type(statement.orelse, cst.Else)
    block = cst.ensure_type(orelse.body, cst.IndentedBlock)
    return statement.with_changes(orelse=orelse.with_changes(body=block.with_changes(body=[_UPSTREAM])))


@functools.cache
def base_pieces(variant: str) -> Pieces:
    """callspec-fast-path's pieces for `variant`: helpers, eligibility, fast, guard."""
    common = _parse(COMMON_MODULE)
    layer, callspec = _named(common.body, "Layer"), _named(common.body, "CallSpec")
    guard = [s for s in _body(_named(_body(layer), "__call__")) if isinstance(s, cst.If)]
    return {
        "helpers": _helpers(common, TEMPLATE_MODULES[variant], ("_callspec_fast_default_is_plain",), "_callspec_fast_plan"),
        "eligibility": _after(_body(_named(_body(layer), "__init__")), "self._call_signature = inspect.signature(self.call)"),
        "fast": (_named(_body(callspec), "_fast"),),
        "guard": (_else_upstream(cst.ensure_type(guard[0], cst.If)),),
    }


@functools.cache
def extension_pieces(variant: str) -> Pieces:
    """callspec-training-fast-path's pieces for `variant`: helpers, bindings, branch, fast_bound."""
    common = _parse(EXTENSION_COMMON_MODULE)
    layer, callspec = _named(common.body, "Layer"), _named(common.body, "CallSpec")
    rules = ("_callspec_fast_popped_names", "_callspec_fast_kept_arguments", "_callspec_fast_nested_kind")
    guard = cst.ensure_type([s for s in _body(_named(_body(layer), "__call__")) if isinstance(s, cst.If)][0], cst.If)
    upstream = cst.Name(PLACEHOLDER)
    return {
        "helpers": _helpers(common, EXTENSION_MODULES[variant], rules, "_callspec_fast_bindings"),
        "bindings": _after(_body(_named(_body(layer), "__init__")),
                           "self._call_spec_fast_path = self._call_spec_fast_plan is not None"),
        # AddElse: `if UPSTREAM: UPSTREAM`, the branch before upstream's `else`.
        "branch": (_else_upstream(guard.with_changes(test=upstream, body=cst.IndentedBlock([_UPSTREAM]))),),
        "fast_bound": (_named(_body(callspec), "_fast_bound"),),
    }
