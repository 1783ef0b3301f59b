"""Static analysis of upstream's ``keras/src/layers/layer.py``: where the patch goes.

Finds every anchor the codemods rely on, each with an expected match count of
exactly one, classifies the CallSpec variant, checks that the names the
inserted code uses are bound in the module, and tells which pieces of the patch
are already present. Anything unexpected raises :class:`AnchorDrift`, which
names the file, the line, the anchor, what was expected and what was found.

Pure: source text in, facts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from libcst.metadata import (
    ExpressionContext,
    ExpressionContextProvider,
    GlobalScope,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    ScopeProvider,
)

from codemods import templates
from codemods.templates import CALL_SIGNATURE_STATEMENT, Template

#: Where the anchors live, relative to the root of an unpacked Keras sdist.
LAYER_PY = "keras/src/layers/layer.py"

#: The attributes every CallSpec variant sets in `__init__`, and `_fast` sets too.
CALLSPEC_ATTRIBUTES = frozenset(
    {
        "user_arguments_dict",
        "arguments_dict",
        "argument_names",
        "tensor_arguments_dict",
        "tensor_arguments_names",
        "nested_tensor_argument_names",
        "first_arg",
        "eager",
    }
)

#: The patch's pieces, in the order the codemods insert them.
PIECES = ("eligibility", "fast_constructor", "guard")


class AnchorDrift(Exception):
    """Upstream code the patch depends on is missing, duplicated or reshaped."""

    def __init__(
        self, path: str, line: int, anchor: str, expected: str, found: str
    ) -> None:
        self.path = path
        self.line = line
        self.anchor = anchor
        self.expected = expected
        self.found = found
        super().__init__(
            f"{path}:{line}: anchor '{anchor}': expected {expected}; found {found}"
        )


@dataclass(frozen=True)
class AnchorReport:
    """One anchor, as `forkgen analyze` prints it."""

    name: str
    line: int
    description: str


@dataclass(frozen=True)
class Analysis:
    """The result of analysing one `layer.py`."""

    path: str
    variant: str
    anchors: tuple[AnchorReport, ...]
    #: Piece name -> True when the module already carries it (from `PIECES`).
    applied: dict[str, bool]
    required_names: tuple[str, ...]
    # The nodes the codemods rewrite (identity within the analysed module).
    call_signature_statement: cst.SimpleStatementLine = field(repr=False)
    callspec_class: cst.ClassDef = field(repr=False)
    construction_statement: cst.SimpleStatementLine = field(repr=False)

    @property
    def fully_applied(self) -> bool:
        return all(self.applied.values())

    @property
    def untouched(self) -> bool:
        return not any(self.applied.values())


@dataclass(frozen=True)
class _Fingerprint:
    """One statement shape a CallSpec variant's `__init__` contains exactly once."""

    description: str
    matcher: m.BaseMatcherNode


def _self_attr(name: str) -> m.Attribute:
    return m.Attribute(value=m.Name("self"), attr=m.Name(name))


def _call(func: str, *args: m.Arg) -> m.Call:
    if "." in func:
        owner, attr = func.split(".")
        return m.Call(func=m.Attribute(value=m.Name(owner), attr=m.Name(attr)), args=list(args))
    return m.Call(func=m.Name(func), args=list(args))


_POSITIONAL = m.Arg(keyword=None, star="")

# The statements that make V4 (Keras 3.10.0-3.15.1, master, nightly) what it is.
# Each is matched by shape (names, operators, constants), not text.
_V4_FINGERPRINT = (
    _Fingerprint(
        "call_args = {... kwargs.pop(context_arg) for context_arg in call_context_args ...}",
        m.Assign(
            targets=[m.AssignTarget(target=m.Name("call_args"))],
            value=m.DictComp(
                value=_call("kwargs.pop", m.Arg(m.Name())),
                for_in=m.CompFor(iter=m.Name("call_context_args")),
            ),
        ),
    ),
    _Fingerprint(
        "bound_args = signature.bind(*args, **kwargs)",
        m.Assign(
            targets=[m.AssignTarget(target=m.Name("bound_args"))],
            value=_call(
                "signature.bind",
                m.Arg(m.Name("args"), star="*"),
                m.Arg(m.Name("kwargs"), star="**"),
            ),
        ),
    ),
    _Fingerprint(
        "self.user_arguments_dict = {**call_args, **bound_args.arguments}",
        m.Assign(
            targets=[m.AssignTarget(target=_self_attr("user_arguments_dict"))],
            value=m.Dict(
                elements=[
                    m.StarredDictElement(m.Name("call_args")),
                    m.StarredDictElement(
                        m.Attribute(value=m.Name("bound_args"), attr=m.Name("arguments"))
                    ),
                ]
            ),
        ),
    ),
    _Fingerprint("bound_args.apply_defaults()", _call("bound_args.apply_defaults")),
    _Fingerprint(
        "for name, value in bound_args.arguments.items(): ...",
        m.For(
            target=m.Tuple([m.Element(m.Name("name")), m.Element(m.Name("value"))]),
            iter=m.Call(
                func=m.Attribute(
                    value=m.Attribute(value=m.Name("bound_args"), attr=m.Name("arguments")),
                    attr=m.Name("items"),
                )
            ),
        ),
    ),
    _Fingerprint(
        "if is_backend_tensor_or_symbolic(value): (a tensor argument)",
        m.If(test=_call("is_backend_tensor_or_symbolic", m.Arg(m.Name("value"), keyword=None))),
    ),
    _Fingerprint(
        "elif tree.is_nested(value) and len(value) > 0: (a non-empty nested argument)",
        m.If(
            test=m.BooleanOperation(
                left=_call("tree.is_nested", m.Arg(m.Name("value"))),
                operator=m.And(),
                right=m.Comparison(
                    left=_call("len", m.Arg(m.Name("value"))),
                    comparisons=[m.ComparisonTarget(m.GreaterThan(), m.Integer("0"))],
                ),
            )
        ),
    ),
    _Fingerprint(
        "if all(is_backend_tensor_or_symbolic(x, allow_none=True) for x in flat_values)",
        m.If(
            test=m.Call(
                func=m.Name("all"),
                args=[
                    m.Arg(
                        m.GeneratorExp(
                            elt=_call(
                                "is_backend_tensor_or_symbolic",
                                m.Arg(m.Name(), keyword=None),
                                m.Arg(m.Name("True"), keyword=m.Name("allow_none")),
                            )
                        )
                    )
                ],
            )
        ),
    ),
    _Fingerprint(
        "elif any(is_backend_tensor_or_symbolic(x) ...): raise ValueError(...)",
        m.If(
            test=m.Call(
                func=m.Name("any"),
                args=[
                    m.Arg(
                        m.GeneratorExp(
                            elt=_call("is_backend_tensor_or_symbolic", m.Arg(m.Name(), keyword=None))
                        )
                    )
                ],
            ),
            body=m.IndentedBlock(
                body=[m.SimpleStatementLine(body=[m.Raise(exc=m.Call(func=m.Name("ValueError")))])]
            ),
        ),
    ),
    _Fingerprint(
        "self.first_arg = arg_dict[arg_names[0]]",
        m.Assign(
            targets=[m.AssignTarget(target=_self_attr("first_arg"))],
            value=m.Subscript(
                value=m.Name("arg_dict"),
                slice=[
                    m.SubscriptElement(
                        m.Index(
                            m.Subscript(
                                value=m.Name("arg_names"),
                                slice=[m.SubscriptElement(m.Index(m.Integer("0")))],
                            )
                        )
                    )
                ],
            ),
        ),
    ),
)

#: The `CallSpec.__init__` parameters of each variant, and its fingerprint.
_VARIANTS: dict[str, tuple[tuple[str, ...], tuple[_Fingerprint, ...]]] = {
    "V4": (("self", "signature", "call_context_args", "args", "kwargs"), _V4_FINGERPRINT),
}
#: Pre-3.10 variants: recognised by their constructor, not yet supported.
_KNOWN_UNSUPPORTED = {("self", "signature", "args", "kwargs"): "V1-V3 (Keras 3.0-3.9)"}


class _Analyzer:
    def __init__(self, module: cst.Module, path: str) -> None:
        self.path = path
        self.wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        self.module = module
        self.positions = self.wrapper.resolve(PositionProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)
        self.contexts = self.wrapper.resolve(ExpressionContextProvider)
        self.scopes = self.wrapper.resolve(ScopeProvider)
        self.anchors: list[AnchorReport] = []

    # -- helpers ------------------------------------------------------------
    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def lines(self, nodes: Sequence[cst.CSTNode]) -> str:
        return ", ".join(str(self.line(n)) for n in nodes)

    def drift(self, node: cst.CSTNode | int | None, anchor: str, expected: str, found: str) -> AnchorDrift:
        if isinstance(node, cst.CSTNode):
            line = self.line(node)
        else:
            line = node if node is not None else 1
        return AnchorDrift(self.path, line, anchor, expected, found)

    def code(self, node: cst.CSTNode) -> str:
        text = " ".join(self.module.code_for_node(node).split())
        return text if len(text) <= 100 else text[:97] + "..."

    def enclosing_statement(self, node: cst.CSTNode) -> cst.CSTNode:
        current = node
        while not isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            current = self.parents[current]
        return current

    def owner(self, statement: cst.CSTNode) -> cst.CSTNode:
        """The compound statement (or module) whose block holds `statement`."""
        parent = self.parents[statement]
        if isinstance(parent, cst.Module):
            return parent
        return self.parents[parent]

    def qualname(self, node: cst.CSTNode) -> str:
        names: list[str] = []
        current = node
        while not isinstance(current, cst.Module):
            if isinstance(current, (cst.ClassDef, cst.FunctionDef)):
                names.append(current.name.value)
            current = self.parents[current]
        return ".".join(reversed(names)) or "<module>"

    def top_class(self, name: str) -> cst.ClassDef:
        anchor = f"class {name}"
        found = m.findall(self.wrapper, m.ClassDef(name=m.Name(name)))
        if not found:
            raise self.drift(None, anchor, f"exactly one `class {name}` at module level", "none")
        if len(found) > 1:
            raise self.drift(found[1], anchor, f"exactly one `class {name}`", f"{len(found)} (lines {self.lines(found)})")
        cls = cst.ensure_type(found[0], cst.ClassDef)
        if cls not in self.module.body:
            raise self.drift(cls, anchor, f"`class {name}` at module level", f"it nested in {self.qualname(self.parents[cls])}")
        return cls

    def method(self, cls: cst.ClassDef, name: str) -> cst.FunctionDef:
        anchor = f"{cls.name.value}.{name}"
        body = cst.ensure_type(cls.body, cst.IndentedBlock).body
        found = [s for s in body if m.matches(s, m.FunctionDef(name=m.Name(name)))]
        if len(found) != 1:
            raise self.drift(found[1] if found else cls, anchor, f"exactly one `def {name}` in class {cls.name.value}", f"{len(found)}")
        return cst.ensure_type(found[0], cst.FunctionDef)

    def report(self, node: cst.CSTNode, name: str, description: str) -> None:
        self.anchors.append(AnchorReport(name, self.line(node), description))

    # -- anchors --------------------------------------------------------------
    def call_signature_statement(self, layer: cst.ClassDef) -> cst.SimpleStatementLine:
        anchor = "call_signature"
        init = self.method(layer, "__init__")
        expected = "exactly one `self._call_signature = inspect.signature(self.call)` in Layer.__init__"
        stores = [
            node
            for node in m.findall(self.wrapper, m.Attribute(attr=m.Name("_call_signature")))
            if self.contexts.get(node) is ExpressionContext.STORE
        ]
        if not stores:
            raise self.drift(init, anchor, expected, "no assignment to `_call_signature`")
        statements = [self.enclosing_statement(n) for n in stores]
        if len(stores) > 1:
            where = ", ".join(f"line {self.line(s)} in {self.qualname(s)}" for s in statements)
            raise self.drift(statements[1], anchor, expected, f"{len(stores)} assignments ({where})")
        statement = statements[0]
        if not m.matches(statement, CALL_SIGNATURE_STATEMENT):
            raise self.drift(statement, anchor, expected, f"`{self.code(statement)}`")
        owner = self.owner(statement)
        if owner is not init:
            where = self.qualname(statement)
            if isinstance(owner, cst.FunctionDef) or owner is self.module or owner is layer:
                found = f"it in {where}"
            else:
                found = f"it nested in `{type(owner).__name__.lower()}` inside {where}"
            raise self.drift(statement, anchor, "it directly in the body of Layer.__init__", found)
        self.report(statement, anchor, "self._call_signature = inspect.signature(self.call) in Layer.__init__")
        return cst.ensure_type(statement, cst.SimpleStatementLine)

    def variant(self, callspec: cst.ClassDef) -> tuple[str, cst.FunctionDef]:
        init = self.method(callspec, "__init__")
        body = cst.ensure_type(callspec.body, cst.IndentedBlock).body
        for member in body:
            if m.matches(member, m.FunctionDef(name=m.Name("__init__") | m.Name("_fast"))):
                continue
            if m.matches(member, m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())])):
                continue  # docstring
            raise self.drift(member, "class CallSpec", "only `__init__` (and a docstring) in class CallSpec", f"`{self.code(member)}`")
        params = init.params
        names = tuple(p.name.value for p in [*params.posonly_params, *params.params])
        if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params or params.star_kwarg:
            raise self.drift(init, "CallSpec.__init__", "positional parameters only", f"`{self.code(init.params)}`")
        if any(p.default is not None for p in [*params.posonly_params, *params.params]):
            raise self.drift(init, "CallSpec.__init__", "parameters without defaults", f"`{self.code(init.params)}`")
        if names in _KNOWN_UNSUPPORTED:
            raise self.drift(
                init,
                "CallSpec.__init__",
                "CallSpec variant V4 (Keras >= 3.10, parameters (self, signature, call_context_args, args, kwargs))",
                f"variant {_KNOWN_UNSUPPORTED[names]}, which this forkgen version does not support",
            )
        matches = [v for v, (expected_names, _) in _VARIANTS.items() if expected_names == names]
        if not matches:
            known = "; ".join(f"{v}: ({', '.join(p)})" for v, (p, _) in _VARIANTS.items())
            raise self.drift(init, "CallSpec.__init__", f"the parameters of a known variant ({known})", f"({', '.join(names)})")
        variant = matches[0]
        self.check_attributes(init)
        for fingerprint in _VARIANTS[variant][1]:
            found = m.findall(init, fingerprint.matcher)
            if len(found) != 1:
                what = "none" if not found else f"{len(found)} (lines {self.lines(found)})"
                raise self.drift(
                    init,
                    "CallSpec.__init__",
                    f"exactly one `{fingerprint.description}` (variant {variant})",
                    what,
                )
        self.report(callspec, "callspec_class", f"class CallSpec, variant {variant}")
        return variant, init

    def check_attributes(self, init: cst.FunctionDef) -> None:
        assigned: dict[str, cst.CSTNode] = {}
        for node in m.findall(init, m.Attribute(value=m.Name("self"))):
            if self.contexts.get(node) is ExpressionContext.STORE:
                assigned.setdefault(cst.ensure_type(node, cst.Attribute).attr.value, node)
        missing = sorted(CALLSPEC_ATTRIBUTES - assigned.keys())
        extra = sorted(assigned.keys() - CALLSPEC_ATTRIBUTES)
        if missing or extra:
            parts = []
            if extra:
                parts.append("extra " + ", ".join(f"`{a}` (line {self.line(assigned[a])})" for a in extra))
            if missing:
                parts.append("missing " + ", ".join(f"`{a}`" for a in missing))
            raise self.drift(
                assigned[extra[0]] if extra else init,
                "CallSpec.__init__",
                f"exactly the {len(CALLSPEC_ATTRIBUTES)} attributes {', '.join(sorted(CALLSPEC_ATTRIBUTES))}",
                "; ".join(parts),
            )

    def construction_statement(self, layer: cst.ClassDef) -> cst.SimpleStatementLine:
        anchor = "callspec_construction"
        call = self.method(layer, "__call__")
        expected_params = m.Parameters(
            params=[m.Param(m.Name("self"))],
            star_arg=m.Param(m.Name("args")),
            star_kwarg=m.Param(m.Name("kwargs")),
            kwonly_params=[],
            posonly_params=[],
        )
        if not m.matches(call.params, expected_params):
            raise self.drift(call, "Layer.__call__", "parameters (self, *args, **kwargs)", f"({self.code(call.params)})")
        expected = "exactly one `call_spec = CallSpec(self._call_signature, self._call_context_args, args, kwargs)` in Layer.__call__"
        constructions = m.findall(call, m.Call(func=m.Name("CallSpec")))
        if len(constructions) != 1:
            what = "none" if not constructions else f"{len(constructions)} (lines {self.lines(constructions)})"
            raise self.drift(constructions[1] if constructions else call, anchor, expected, what)
        statement = self.enclosing_statement(constructions[0])
        shape = m.SimpleStatementLine(
            body=[
                m.Assign(
                    targets=[m.AssignTarget(target=m.Name("call_spec"))],
                    value=m.Call(
                        func=m.Name("CallSpec"),
                        args=[
                            m.Arg(_self_attr("_call_signature"), keyword=None, star=""),
                            m.Arg(_self_attr("_call_context_args"), keyword=None, star=""),
                            m.Arg(m.Name("args"), keyword=None, star=""),
                            m.Arg(m.Name("kwargs"), keyword=None, star=""),
                        ],
                    ),
                )
            ]
        )
        if not m.matches(statement, shape):
            raise self.drift(statement, anchor, expected, f"`{self.code(statement)}`")
        self.report(statement, anchor, "call_spec = CallSpec(...) in Layer.__call__")
        return cst.ensure_type(statement, cst.SimpleStatementLine)

    def check_names(self, template: Template) -> None:
        scope = self.scopes[self.module]
        assert isinstance(scope, GlobalScope)
        missing = sorted(n for n in template.required_names if n not in scope.assignments)
        if missing:
            raise self.drift(
                None,
                "module names",
                "module-level bindings for " + ", ".join(sorted(template.required_names)),
                "no binding for " + ", ".join(missing),
            )
        tensor_check = [
            s for s in self.module.body if m.matches(s, m.FunctionDef(name=m.Name("is_backend_tensor_or_symbolic")))
        ]
        for fn in tensor_check:
            params = cst.ensure_type(fn, cst.FunctionDef).params
            if "allow_none" not in {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]}:
                raise self.drift(fn, "is_backend_tensor_or_symbolic", "a parameter `allow_none` (Keras >= 3.4)", f"({self.code(params)})")

    # -- already applied? -----------------------------------------------------
    def applied(self, template: Template, signature_stmt: cst.SimpleStatementLine,
                callspec: cst.ClassDef, construction: cst.SimpleStatementLine) -> dict[str, bool]:
        scope = self.scopes[self.module]
        assert isinstance(scope, GlobalScope)
        bound = {n for n in template.defined_names if n in scope.assignments}

        init_block = cst.ensure_type(self.parents[signature_stmt], cst.IndentedBlock)
        following = list(init_block.body)
        index = following.index(signature_stmt)
        piece = template.eligibility_piece
        after = following[index + 1 : index + 1 + len(piece)]
        eligibility = len(after) == len(piece) and all(a.deep_equals(b) for a, b in zip(after, piece))
        module_piece = bound == set(template.defined_names)
        if eligibility != module_piece or (bound and not module_piece):
            raise self.drift(
                signature_stmt,
                "eligibility",
                "either no trace of the eligibility piece or all of it, as this forkgen version writes it",
                f"module names {sorted(bound) or 'none'} bound, the precomputation "
                + ("present" if eligibility else "absent")
                + " (patched by another forkgen version, or edited by hand?)",
            )
        markers = m.findall(self.module, m.Attribute(attr=m.Name("_call_spec_fast_plan") | m.Name("_call_spec_fast_path")))
        if markers and not eligibility:
            raise self.drift(markers[0], "eligibility", "no `_call_spec_fast_*` attribute in unpatched code", f"line {self.line(markers[0])}")

        fast_methods = [
            s for s in cst.ensure_type(callspec.body, cst.IndentedBlock).body
            if m.matches(s, m.FunctionDef(name=m.Name("_fast")))
        ]
        fast = bool(fast_methods)
        if fast and not fast_methods[0].deep_equals(template.fast_piece):
            raise self.drift(fast_methods[0], "fast_constructor", "`CallSpec._fast` as this forkgen version writes it", "a different `_fast`")

        guard = False
        block = self.parents[construction]
        parent = self.parents[block]
        if isinstance(parent, cst.Else):
            owner = self.parents[parent]
            if isinstance(owner, cst.If) and owner.test.deep_equals(template.guard_piece.test):
                guard = len(cst.ensure_type(block, cst.IndentedBlock).body) == 1
            elif m.findall(owner, m.Attribute(attr=m.Name("_call_spec_fast_path"))):
                raise self.drift(owner, "guard", "the guard as this forkgen version writes it", f"`{self.code(cst.ensure_type(owner, cst.If).test)}`")
        return {"eligibility": eligibility, "fast_constructor": fast, "guard": guard}


def analyze_module(module: cst.Module, path: str = LAYER_PY) -> Analysis:
    """Locate every anchor in `module` (the parsed `layer.py`) or raise AnchorDrift."""
    analyzer = _Analyzer(module, path)
    layer = analyzer.top_class("Layer")
    callspec = analyzer.top_class("CallSpec")
    analyzer.report(layer, "layer_class", "class Layer")
    signature_stmt = analyzer.call_signature_statement(layer)
    variant, _ = analyzer.variant(callspec)
    construction = analyzer.construction_statement(layer)
    template = templates.load(variant)
    analyzer.check_names(template)
    applied = analyzer.applied(template, signature_stmt, callspec, construction)
    return Analysis(
        path=path,
        variant=variant,
        anchors=tuple(sorted(analyzer.anchors, key=lambda a: a.line)),
        applied=applied,
        required_names=tuple(sorted(template.required_names)),
        call_signature_statement=signature_stmt,
        callspec_class=callspec,
        construction_statement=construction,
    )


def analyze_source(source: str, path: str = LAYER_PY) -> Analysis:
    """Parse `source` and analyse it; a syntax error is reported as drift too."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise AnchorDrift(path, error.raw_line, "module", "valid Python", f"a syntax error: {error.message}") from None
    return analyze_module(module, path)
