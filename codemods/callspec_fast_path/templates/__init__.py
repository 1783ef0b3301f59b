"""The code forkgen inserts, one template module per CallSpec variant.

The template modules are real Python kept in the project, parsed with libcst
and spliced into upstream's ``layer.py`` by the codemods; they are never
imported (the names they use are bound only in the target module).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import libcst as cst
import libcst.matchers as m
from libcst.metadata import (
    BuiltinAssignment,
    GlobalScope,
    MetadataWrapper,
    ScopeProvider,
)

from codemods.patchlib import subtree_nodes

#: The code common to every variant.
COMMON_MODULE = "callspec_common.py"
#: The module holding each variant's own rule (V3 and V4 classify alike).
TEMPLATE_MODULES = {
    "V1": "callspec_v1.py",
    "V2": "callspec_v2.py",
    "V3": "callspec_v3.py",
    "V4": "callspec_v3.py",
}
#: The function each variant module defines; spliced before `_callspec_fast_plan`.
VARIANT_FUNCTION = "_callspec_fast_default_is_plain"

#: Matches the anchor statement `self._call_signature = inspect.signature(self.call)`.
CALL_SIGNATURE_STATEMENT = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[
                m.AssignTarget(
                    target=m.Attribute(
                        value=m.Name("self"), attr=m.Name("_call_signature")
                    )
                )
            ],
            value=m.Call(
                func=m.Attribute(value=m.Name("inspect"), attr=m.Name("signature")),
                args=[
                    m.Arg(
                        value=m.Attribute(value=m.Name("self"), attr=m.Name("call")),
                        keyword=None,
                        star="",
                    )
                ],
            ),
        )
    ]
)


#: The base's last statement in `Layer.__init__`, after which the extension's go.
BASE_FLAG_STATEMENT = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[
                m.AssignTarget(
                    target=m.Attribute(value=m.Name("self"), attr=m.Name("_call_spec_fast_path"))
                )
            ],
            value=m.Comparison(
                left=m.Attribute(value=m.Name("self"), attr=m.Name("_call_spec_fast_plan"))
            ),
        )
    ]
)


@dataclass(frozen=True)
class Template:
    """The pieces of one variant's template, as libcst nodes ready to splice."""

    variant: str
    #: Top-level statements inserted before `class CallSpec`.
    module_piece: tuple[cst.BaseStatement, ...]
    #: Statements inserted right after the `_call_signature` anchor.
    eligibility_piece: tuple[cst.BaseStatement, ...]
    #: The `if` wrapping the upstream `CallSpec(...)` construction.
    guard_piece: cst.If
    #: The `_fast` classmethod appended to `class CallSpec`.
    fast_piece: cst.FunctionDef
    #: Names the module piece binds at module level.
    defined_names: frozenset[str]
    #: Names the pieces use that the target module must bind.
    required_names: frozenset[str]


def _class(module: cst.Module, name: str) -> cst.ClassDef:
    found = [s for s in module.body if m.matches(s, m.ClassDef(name=m.Name(name)))]
    if len(found) != 1:
        raise ValueError(f"template must define exactly one class {name}")
    return cst.ensure_type(found[0], cst.ClassDef)


def _method(cls: cst.ClassDef, name: str) -> cst.FunctionDef:
    body = cst.ensure_type(cls.body, cst.IndentedBlock).body
    found = [s for s in body if m.matches(s, m.FunctionDef(name=m.Name(name)))]
    if len(found) != 1:
        raise ValueError(f"template class {cls.name.value} must define {name}")
    return cst.ensure_type(found[0], cst.FunctionDef)


def _body(fn: cst.FunctionDef) -> list[cst.BaseStatement]:
    return list(cst.ensure_type(fn.body, cst.IndentedBlock).body)


def _bound_names(statements: tuple[cst.BaseStatement, ...]) -> frozenset[str]:
    names: set[str] = set()
    for statement in statements:
        if isinstance(statement, (cst.ClassDef, cst.FunctionDef)):
            names.add(statement.name.value)
            continue
        for small in cst.ensure_type(statement, cst.SimpleStatementLine).body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    names.add(cst.ensure_type(target.target, cst.Name).value)
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    bound = alias.asname.name if alias.asname else alias.name
                    names.add(cst.ensure_type(bound, cst.Name).value)
    return frozenset(names)


def _free_names(
    wrapper: MetadataWrapper, pieces: Sequence[cst.CSTNode], defined: frozenset[str]
) -> frozenset[str]:
    """Global names the pieces read, minus builtins and what the pieces define."""
    inside = {id(node) for piece in pieces for node in subtree_nodes(piece)}
    names: set[str] = set()
    for scope in set(wrapper.resolve(ScopeProvider).values()):
        if scope is None:
            continue
        for access in scope.accesses:
            node = access.node
            if not isinstance(node, cst.Name) or id(node) not in inside:
                continue
            referents = access.referents
            if any(isinstance(r, BuiltinAssignment) for r in referents):
                continue
            if all(isinstance(r.scope, GlobalScope) for r in referents):
                names.add(node.value)
    return frozenset(names - defined)


def _parse(filename: str) -> MetadataWrapper:
    source = resources.files(__name__).joinpath(filename).read_text(encoding="utf-8")
    return MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)


@functools.cache
def load(variant: str) -> Template:
    """Parse the common template and the module of `variant` into the four pieces."""
    wrapper = _parse(COMMON_MODULE)
    module = wrapper.module
    variant_wrapper = _parse(TEMPLATE_MODULES[variant])
    rule = [
        s for s in variant_wrapper.module.body if m.matches(s, m.FunctionDef(name=m.Name(VARIANT_FUNCTION)))
    ]
    if len(rule) != 1:
        raise ValueError(f"{TEMPLATE_MODULES[variant]} must define {VARIANT_FUNCTION} once")
    layer = _class(module, "Layer")
    callspec = _class(module, "CallSpec")

    common_piece = list(module.body[: module.body.index(layer)])
    plan = [i for i, s in enumerate(common_piece) if m.matches(s, m.FunctionDef(name=m.Name("_callspec_fast_plan")))]
    if len(plan) != 1:
        raise ValueError("the common template must define _callspec_fast_plan once")
    module_piece = (*common_piece[: plan[0]], rule[0], *common_piece[plan[0] :])

    init_body = _body(_method(layer, "__init__"))
    anchors = [i for i, s in enumerate(init_body) if m.matches(s, CALL_SIGNATURE_STATEMENT)]
    if len(anchors) != 1:
        raise ValueError("template Layer.__init__ must contain the anchor once")
    eligibility_piece = tuple(init_body[anchors[0] + 1 :])

    call_body = _body(_method(layer, "__call__"))
    guards = [s for s in call_body if isinstance(s, cst.If)]
    if len(guards) != 1:
        raise ValueError("template Layer.__call__ must contain one if")
    guard_piece = cst.ensure_type(guards[0], cst.If)

    fast_piece = _method(callspec, "_fast")

    defined = _bound_names(module_piece)
    pieces: list[cst.CSTNode] = [*common_piece, *eligibility_piece, guard_piece.test, guard_piece.body, fast_piece]
    required = _free_names(wrapper, pieces, defined) | _free_names(variant_wrapper, rule, defined)
    # Two blank lines between upstream's previous definition and the block,
    # and before the variant's rule (its own module's header is not spliced).
    blank = (cst.EmptyLine(), cst.EmptyLine())
    module_piece = tuple(
        s.with_changes(leading_lines=[*blank, *s.leading_lines]) if i == 0 or s is rule[0] else s
        for i, s in enumerate(module_piece)
    )
    return Template(
        variant=variant,
        module_piece=module_piece,
        eligibility_piece=eligibility_piece,
        guard_piece=guard_piece,
        fast_piece=fast_piece,
        defined_names=defined,
        required_names=required,
    )


#: The extension's code common to every variant (every call that binds).
EXTENSION_COMMON_MODULE = "callspec_bound_common.py"
#: The module holding each variant's rules: the keywords its constructor pops before binding,
#: what it keeps of them, how it classifies a nested value.
EXTENSION_MODULES = {
    "V1": "callspec_bound_v1.py",
    "V2": "callspec_bound_v2.py",
    "V3": "callspec_bound_v3.py",
    "V4": "callspec_bound_v4.py",
}
#: The functions each extension variant module defines; spliced before `_callspec_fast_bindings`.
EXTENSION_VARIANT_FUNCTIONS = (
    "_callspec_fast_popped_names",
    "_callspec_fast_kept_arguments",
    "_callspec_fast_nested_kind",
)


@dataclass(frozen=True)
class ExtensionTemplate:
    """The pieces of the extension, for one variant, as libcst nodes ready to splice."""

    variant: str
    #: Top-level statements inserted before `class CallSpec`, after the base's.
    module_piece: tuple[cst.BaseStatement, ...]
    #: Statements inserted right after the base's last statement in `Layer.__init__`.
    bindings_piece: tuple[cst.BaseStatement, ...]
    #: The `elif` added to the base's guard, before upstream's `else`.
    branch_piece: cst.If
    #: The `_fast_bound` classmethod appended to `class CallSpec`.
    fast_bound_piece: cst.FunctionDef
    defined_names: frozenset[str]
    #: Names the pieces use that the target module (or the base patch) must bind.
    required_names: frozenset[str]


@functools.cache
def load_extension(variant: str) -> ExtensionTemplate:
    """Parse the extension's common template and the module of `variant` into its four pieces."""
    base = load(variant)
    wrapper = _parse(EXTENSION_COMMON_MODULE)
    module = wrapper.module
    variant_wrapper = _parse(EXTENSION_MODULES[variant])
    rules = [
        s
        for s in variant_wrapper.module.body
        if m.matches(s, m.FunctionDef(name=m.OneOf(*(m.Name(n) for n in EXTENSION_VARIANT_FUNCTIONS))))
    ]
    if len(rules) != len(EXTENSION_VARIANT_FUNCTIONS):
        raise ValueError(f"{EXTENSION_MODULES[variant]} must define {', '.join(EXTENSION_VARIANT_FUNCTIONS)} once each")
    layer = _class(module, "Layer")
    callspec = _class(module, "CallSpec")
    common_piece = list(module.body[: module.body.index(layer)])
    bindable = [
        i for i, s in enumerate(common_piece) if m.matches(s, m.FunctionDef(name=m.Name("_callspec_fast_bindings")))
    ]
    if len(bindable) != 1:
        raise ValueError("the extension template must define _callspec_fast_bindings once")
    module_piece = (*common_piece[: bindable[0]], *rules, *common_piece[bindable[0] :])

    # Layer.__init__ repeats, for context, the base's statements up to its flag;
    # the extension's statements follow it.
    init_body = _body(_method(layer, "__init__"))
    flag = [i for i, s in enumerate(init_body) if m.matches(s, BASE_FLAG_STATEMENT)]
    if len(flag) != 1 or not m.matches(base.eligibility_piece[-1], BASE_FLAG_STATEMENT):
        raise ValueError("the base and the extension's Layer.__init__ must set _call_spec_fast_path from the plan once")
    prefix = flag[0] + 1
    bindings_piece = tuple(init_body[prefix:])

    call_body = _body(_method(layer, "__call__"))
    guards = [s for s in call_body if isinstance(s, cst.If)]
    if len(guards) != 1 or not isinstance(guards[0].orelse, cst.If):
        raise ValueError("the extension's Layer.__call__ must contain one if with one elif")
    branch_piece = guards[0].orelse

    fast_bound_piece = _method(callspec, "_fast_bound")
    defined = _bound_names(module_piece)
    pieces: list[cst.CSTNode] = [*common_piece, *bindings_piece, branch_piece.test, branch_piece.body, fast_bound_piece]
    required = _free_names(wrapper, pieces, defined) | _free_names(variant_wrapper, rules, defined)
    blank = (cst.EmptyLine(), cst.EmptyLine())
    module_piece = tuple(
        s.with_changes(leading_lines=[*blank, *s.leading_lines]) if i == 0 or s is rules[0] else s
        for i, s in enumerate(module_piece)
    )
    return ExtensionTemplate(
        variant=variant,
        module_piece=module_piece,
        bindings_piece=bindings_piece,
        branch_piece=branch_piece,
        fast_bound_piece=fast_bound_piece,
        defined_names=defined,
        required_names=required,
    )
