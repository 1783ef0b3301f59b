"""Which CallSpec variant a `keras/src/layers/layer.py` has: the CallSpec patches' domain rule.

Keras changed `CallSpec.__init__` four times (V1-V4, docs/keras-releases.md); the inserted code
differs per variant, so the patches classify the tree first (`classify`) and then locate and edit
through the engine with that variant's pieces. A CallSpec that is none of the four (another
parameter, a ninth attribute, a changed statement of the classification loop) is drift, reported
against the closest known variant. Lines are the engine's (`engine.lines`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from codemods.engine import AnchorDrift, lines, walk

#: Where the anchors live, relative to the root of an unpacked Keras sdist.

#: The attributes every CallSpec variant sets in `__init__`, and `_fast` sets too.
CALLSPEC_ATTRIBUTES = frozenset({
    "user_arguments_dict", "arguments_dict", "argument_names", "tensor_arguments_dict",
    "tensor_arguments_names", "nested_tensor_argument_names", "first_arg", "eager",
})


@dataclass(frozen=True)
class _Fingerprint:
    """One statement shape a variant's `__init__` contains `count` times (a node matcher)."""

    description: str
    matcher: m.BaseMatcherNode
    count: int = 1


def _call(func: str, *args: m.Arg) -> m.Call:
    owner, _, attr = func.rpartition(".")
    target = m.Attribute(value=m.Name(owner), attr=m.Name(attr)) if owner else m.Name(func)
    return m.Call(func=target, args=list(args))


def _self_attr(name: str) -> m.Attribute:
    return m.Attribute(value=m.Name("self"), attr=m.Name(name))


def _all_tensors(allow_none: bool) -> m.If:
    args = [m.Arg(m.Name(), keyword=None)] + ([m.Arg(m.Name("True"), keyword=m.Name("allow_none"))] if allow_none else [])
    return m.If(test=_call("all", m.Arg(m.GeneratorExp(elt=_call("is_backend_tensor_or_symbolic", *args)))))


_BIND = m.Assign(targets=[m.AssignTarget(m.Name("bound_args"))],
                 value=_call("signature.bind", m.Arg(m.Name("args"), star="*"), m.Arg(m.Name("kwargs"), star="**")))
_NESTED_WITH_LEN = _Fingerprint(
    "elif tree.is_nested(value) and len(value) > 0: (a non-empty nested argument)",
    m.If(test=m.BooleanOperation(
        left=_call("tree.is_nested", m.Arg(m.Name("value"))), operator=m.And(),
        right=m.Comparison(left=_call("len", m.Arg(m.Name("value"))),
                           comparisons=[m.ComparisonTarget(m.GreaterThan(), m.Integer("0"))]))))
# Keras 3.0.0: any nested value, even an empty one, is classified.
_NESTED_WITHOUT_LEN = _Fingerprint("elif tree.is_nested(value): (any nested argument, even empty)",
                                   m.If(test=_call("tree.is_nested", m.Arg(m.Name("value")))))
_ALL_TENSORS_OR_NONE = _Fingerprint(
    "if all(is_backend_tensor_or_symbolic(x, allow_none=True) for x in flat_values)", _all_tensors(True))
_ALL_TENSORS = _Fingerprint("if all(is_backend_tensor_or_symbolic(x) for x in flat_values)", _all_tensors(False))
_ARG0 = m.Subscript(value=m.Name("arg_names"), slice=[m.SubscriptElement(m.Index(m.Integer("0")))])
# What every variant's loop has.
_LOOP = (
    _Fingerprint("bound_args.apply_defaults()", _call("bound_args.apply_defaults")),
    _Fingerprint("for name, value in bound_args.arguments.items(): ...", m.For(
        target=m.Tuple([m.Element(m.Name("name")), m.Element(m.Name("value"))]),
        iter=m.Call(func=m.Attribute(value=m.Attribute(value=m.Name("bound_args"), attr=m.Name("arguments")),
                                     attr=m.Name("items"))))),
    _Fingerprint("if is_backend_tensor_or_symbolic(value): (a tensor argument)",
                 m.If(test=_call("is_backend_tensor_or_symbolic", m.Arg(m.Name("value"), keyword=None)))),
    _Fingerprint("elif any(is_backend_tensor_or_symbolic(x) ...): raise ValueError(...)", m.If(
        test=_call("any", m.Arg(m.GeneratorExp(elt=_call("is_backend_tensor_or_symbolic", m.Arg(m.Name(), keyword=None))))),
        body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Raise(exc=m.Call(func=m.Name("ValueError")))])]))),
    _Fingerprint("self.first_arg = arg_dict[arg_names[0]]", m.Assign(
        targets=[m.AssignTarget(_self_attr("first_arg"))],
        value=m.Subscript(value=m.Name("arg_dict"), slice=[m.SubscriptElement(m.Index(_ARG0))]))),
)
# Keras 3.0-3.9: `training` popped when call() does not take it, then bound in either branch.
_V1_TO_V3_BINDING = (
    _Fingerprint('if "training" in kwargs and "training" not in signature.parameters: kwargs.pop("training")', m.If(
        test=m.BooleanOperation(
            left=m.Comparison(left=m.SimpleString(), comparisons=[m.ComparisonTarget(m.In(), m.Name("kwargs"))]),
            operator=m.And(),
            right=m.Comparison(left=m.SimpleString(), comparisons=[m.ComparisonTarget(
                m.NotIn(), m.Attribute(value=m.Name("signature"), attr=m.Name("parameters")))])))),
    _Fingerprint("bound_args = signature.bind(*args, **kwargs) (in both branches)", _BIND, count=2),
    _Fingerprint("self.user_arguments_dict = {k: v for k, v in bound_args.arguments.items()}",
                 m.Assign(targets=[m.AssignTarget(_self_attr("user_arguments_dict"))], value=m.DictComp())),
)
# Keras 3.10+: every registered context argument call() does not accept is popped and kept.
_V4_BINDING = (
    _Fingerprint("call_args = {... kwargs.pop(context_arg) for context_arg in call_context_args ...}", m.Assign(
        targets=[m.AssignTarget(m.Name("call_args"))],
        value=m.DictComp(value=_call("kwargs.pop", m.Arg(m.Name())), for_in=m.CompFor(iter=m.Name("call_context_args"))))),
    _Fingerprint("bound_args = signature.bind(*args, **kwargs)", _BIND),
    _Fingerprint("self.user_arguments_dict = {**call_args, **bound_args.arguments}", m.Assign(
        targets=[m.AssignTarget(_self_attr("user_arguments_dict"))],
        value=m.Dict(elements=[m.StarredDictElement(m.Name("call_args")), m.StarredDictElement(
            m.Attribute(value=m.Name("bound_args"), attr=m.Name("arguments")))]))),
)


@dataclass(frozen=True)
class Variant:
    name: str
    releases: str
    #: Parameters of `CallSpec.__init__`.
    parameters: tuple[str, ...]
    #: The arguments of the construction in `Layer.__call__`.
    construction: str
    fingerprint: tuple[_Fingerprint, ...]
    #: Whether `is_backend_tensor_or_symbolic` must take `allow_none` (Keras >= 3.4).
    allow_none: bool


_OLD = ("self", "signature", "args", "kwargs")
_OLD_CONSTRUCTION = "self._call_signature, args, kwargs"
VARIANTS = {v.name: v for v in (
    Variant("V1", "3.0.0", _OLD, _OLD_CONSTRUCTION,
            (*_V1_TO_V3_BINDING, *_LOOP, _NESTED_WITHOUT_LEN, _ALL_TENSORS), allow_none=False),
    Variant("V2", "3.1.0-3.3.3", _OLD, _OLD_CONSTRUCTION,
            (*_V1_TO_V3_BINDING, *_LOOP, _NESTED_WITH_LEN, _ALL_TENSORS), allow_none=False),
    Variant("V3", "3.4.0-3.9.2", _OLD, _OLD_CONSTRUCTION,
            (*_V1_TO_V3_BINDING, *_LOOP, _NESTED_WITH_LEN, _ALL_TENSORS_OR_NONE), allow_none=True),
    Variant("V4", "3.10.0-3.15.1, master, nightly", ("self", "signature", "call_context_args", "args", "kwargs"),
            "self._call_signature, self._call_context_args, args, kwargs",
            (*_V4_BINDING, *_LOOP, _NESTED_WITH_LEN, _ALL_TENSORS_OR_NONE), allow_none=True),
)}


def _code(node: cst.CSTNode) -> str:
    text = " ".join(cst.Module([]).code_for_node(node).split())
    return text if len(text) <= 100 else text[:97] + "..."


def _top(module: cst.Module, path: str, name: str) -> cst.ClassDef:
    found = [s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == name]
    if len(found) != 1:
        at = lines(module, found)
        raise AnchorDrift(path, at[id(found[1])] if found else 1, f"class {name}",
                          f"exactly one `class {name}` at module level",
                          f"{len(found)} (lines {', '.join(str(at[id(f)]) for f in found)})" if found else "none")
    return found[0]


def _members(node: cst.ClassDef | cst.FunctionDef) -> list[cst.BaseStatement]:
    return list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []


def _stores(node: cst.CSTNode) -> list[cst.Attribute]:
    """Every `self.<attr>` written (assigned, augmented, annotated, deleted) below `node`."""
    targets = [t for n in walk(node) for t in (
        [a.target for a in n.targets] if isinstance(n, cst.Assign) else
        [n.target] if isinstance(n, (cst.AnnAssign, cst.AugAssign, cst.Del)) else [])]
    return [a for t in targets for a in walk(t) if isinstance(a, cst.Attribute) and m.matches(a, _self_attr_any)]


_self_attr_any = m.Attribute(value=m.Name("self"))
_SIGNATURE = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(_self_attr("_call_signature"))])])


def classify(module: cst.Module, path: str, text: str) -> Variant:
    """The CallSpec variant of `module` (`layer.py`, `text` its source), or AnchorDrift."""
    writes = [t.start() for t in re.finditer(r"\._call_signature\s*(=(?!=)|\+=)", text)]
    if len(writes) > 1:
        line = text.count("\n", 0, writes[1]) + 1
        raise AnchorDrift(path, line, "call_signature", "exactly one assignment to `_call_signature` in layer.py",
                          f"{len(writes)}")
    layer = _top(module, path, "Layer")
    init_of_layer = [s for s in _members(layer) if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"]
    if writes and init_of_layer and not any(m.matches(s, _SIGNATURE) for s in _members(init_of_layer[0])):
        line = text.count("\n", 0, writes[0]) + 1
        raise AnchorDrift(path, line, "call_signature", "it directly in the body of Layer.__init__",
                          "it nested in another statement or in another function")
    callspec = _top(module, path, "CallSpec")
    members = _members(callspec)
    inits = [s for s in members if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"]
    others = [s for s in members if not (isinstance(s, cst.FunctionDef) and s.name.value in ("__init__", "_fast", "_fast_bound")
                                         or m.matches(s, m.SimpleStatementLine([m.Expr(m.SimpleString())])))]
    at = lines(module, [callspec, *inits, *others])
    if len(inits) != 1:
        raise AnchorDrift(path, at[id(inits[1])] if inits else at[id(callspec)], "CallSpec.__init__",
                          "exactly one `def __init__` in class CallSpec", f"{len(inits)}")
    if others:
        raise AnchorDrift(path, at[id(others[0])], "class CallSpec", "only `__init__` (and a docstring) in class CallSpec",
                          f"`{_code(others[0])}`")
    init = inits[0]
    line = at[id(init)]
    params = init.params
    names = tuple(p.name.value for p in [*params.posonly_params, *params.params])
    if not isinstance(params.star_arg, cst.MaybeSentinel) or params.star_kwarg or params.kwonly_params \
            or any(p.default for p in [*params.posonly_params, *params.params]):
        raise AnchorDrift(path, line, "CallSpec.__init__", "positional parameters without defaults", f"({_code(params)})")
    candidates = [v for v in VARIANTS.values() if v.parameters == names]
    if not candidates:
        known = "; ".join(f"{v.name} ({v.releases}): ({', '.join(v.parameters)})" for v in VARIANTS.values())
        raise AnchorDrift(path, line, "CallSpec.__init__", f"the parameters of a known variant: {known}",
                          f"({', '.join(names)})")
    stores = _stores(init)
    assigned = {a.attr.value: a for a in reversed(stores)}
    missing, extra = sorted(CALLSPEC_ATTRIBUTES - assigned.keys()), sorted(assigned.keys() - CALLSPEC_ATTRIBUTES)
    if missing or extra:
        where = lines(module, [assigned[a] for a in extra])
        parts = (["extra " + ", ".join(f"`{a}` (line {where[id(assigned[a])]})" for a in extra)] if extra else []) \
            + (["missing " + ", ".join(f"`{a}`" for a in missing)] if missing else [])
        raise AnchorDrift(path, where[id(assigned[extra[0]])] if extra else line, "CallSpec.__init__",
                          f"exactly the {len(CALLSPEC_ATTRIBUTES)} attributes {', '.join(sorted(CALLSPEC_ATTRIBUTES))}",
                          "; ".join(parts))
    nodes: dict[str, list[cst.CSTNode]] = {}
    for node in walk(init):
        nodes.setdefault(type(node).__name__, []).append(node)
    mismatches = []
    for candidate in candidates:
        failed = [(f, n) for f in candidate.fingerprint
                  if (n := sum(1 for x in nodes.get(type(f.matcher).__name__, ()) if m.matches(x, f.matcher))) != f.count]
        if not failed:
            _allow_none(module, path, candidate)
            return candidate
        mismatches.append((len(failed), candidate, *failed[0]))
    _, closest, fingerprint, found = min(mismatches, key=lambda item: item[0])
    times = "exactly once" if fingerprint.count == 1 else f"{fingerprint.count} times"
    raise AnchorDrift(path, line, "CallSpec.__init__",
                      f"`{fingerprint.description}` {times} (the closest known variant, {closest.name}, Keras {closest.releases})",
                      "none" if not found else f"{found}")


def _allow_none(module: cst.Module, path: str, variant: Variant) -> None:
    """V3 and V4 call `is_backend_tensor_or_symbolic(x, allow_none=True)`: when layer.py defines it,
    it must take `allow_none`."""
    for fn in module.body if variant.allow_none else ():
        if isinstance(fn, cst.FunctionDef) and fn.name.value == "is_backend_tensor_or_symbolic":
            params = fn.params
            if "allow_none" not in {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]}:
                raise AnchorDrift(path, lines(module, [fn])[id(fn)], "is_backend_tensor_or_symbolic",
                                  "a parameter `allow_none` (Keras >= 3.4)", f"({_code(params)})")
