"""Static analysis of upstream's ``keras/src/layers/layer.py``: where the patch goes.

Finds every anchor the codemods rely on, each with an expected match count of
exactly one, classifies the CallSpec variant, checks that the names the
inserted code uses are bound in the module, and tells which pieces of the patch
are already present. Anything unexpected raises :class:`AnchorDrift`, which
names the file, the line, the anchor, what was expected and what was found.

Pure: source text in, facts out. Whole-module scans (counting every write to
`_call_signature`, module bindings, line numbers) use the `ast` module, which is
fast; the shapes that decide what the codemods rewrite are matched with
`libcst.matchers` on the few small subtrees involved (Layer.__init__,
Layer.__call__, CallSpec), so that analysing Keras's 2,000-line layer.py takes
a fraction of a second.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import libcst as cst
import libcst.matchers as m

from codemods.callspec_fast_path import templates
from codemods.callspec_fast_path.templates import (
    BASE_FLAG_STATEMENT,
    CALL_SIGNATURE_STATEMENT,
    ExtensionTemplate,
    Template,
)
from codemods.patchlib import AnchorDrift, AnchorReport, statements, subtree_nodes

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
PIECES = ("eligibility", "fast_constructor", "guard", "extension")
#: The pieces of the base patch (`layer(x)`); "extension" builds on them and is optional.
BASE_PIECES = PIECES[:3]


@dataclass(frozen=True)
class Analysis:
    """The result of analysing one `layer.py`."""

    path: str
    variant: str
    anchors: tuple[AnchorReport, ...]
    #: Piece name -> True when the module already carries it (every one of `PIECES`).
    applied: dict[str, bool]
    required_names: tuple[str, ...]
    # The nodes the codemods rewrite (identity within the analysed module).
    call_signature_statement: cst.SimpleStatementLine = field(repr=False)
    callspec_class: cst.ClassDef = field(repr=False)
    construction_statement: cst.SimpleStatementLine = field(repr=False)
    layer_class: cst.ClassDef = field(repr=False)
    layer_init: cst.FunctionDef = field(repr=False)
    layer_call: cst.FunctionDef = field(repr=False)
    #: The base's `self._call_spec_fast_path = ...` in Layer.__init__, when present.
    base_flag_statement: cst.SimpleStatementLine | None = field(default=None, repr=False)
    #: The base's guard (the `if` around the construction) in Layer.__call__, when present.
    guard_statement: cst.If | None = field(default=None, repr=False)

    @property
    def fully_applied(self) -> bool:
        """Every piece, the extension included, is present."""
        return all(self.applied.values())

    def has_pieces(self, extension: bool) -> bool:
        """The base patch is present, and the extension is exactly when `extension`."""
        return all(self.applied[p] for p in BASE_PIECES) and self.applied["extension"] is extension

    @property
    def untouched(self) -> bool:
        return not any(self.applied.values())


@dataclass(frozen=True)
class _Fingerprint:
    """One statement shape a CallSpec variant's `__init__` contains exactly once."""

    description: str
    #: A node matcher (`m.If(...)`, `m.Call(...)`: not `m.OneOf`).
    matcher: m.BaseMatcherNode
    #: How many times the statement appears in `__init__`.
    count: int = 1


def _self_attr(name: str) -> m.Attribute:
    return m.Attribute(value=m.Name("self"), attr=m.Name(name))


def _call(func: str, *args: m.Arg) -> m.Call:
    if "." in func:
        owner, attr = func.split(".")
        return m.Call(func=m.Attribute(value=m.Name(owner), attr=m.Name(attr)), args=list(args))
    return m.Call(func=m.Name(func), args=list(args))


def _all_tensors(allow_none: bool) -> m.If:
    """`if all(is_backend_tensor_or_symbolic(x[, allow_none=True]) for x in ...)`."""
    args = [m.Arg(m.Name(), keyword=None)]
    if allow_none:
        args.append(m.Arg(m.Name("True"), keyword=m.Name("allow_none")))
    return m.If(test=m.Call(func=m.Name("all"), args=[m.Arg(m.GeneratorExp(elt=_call("is_backend_tensor_or_symbolic", *args)))]))


_BIND = m.Assign(
    targets=[m.AssignTarget(target=m.Name("bound_args"))],
    value=_call("signature.bind", m.Arg(m.Name("args"), star="*"), m.Arg(m.Name("kwargs"), star="**")),
)
_NESTED_WITH_LEN = _Fingerprint(
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
)
# Keras 3.0.0: any nested value, even an empty one, is classified (git tag v3.1.0
# has this too, but the 3.1.0 sdist already carries the `len(value) > 0` test).
_NESTED_WITHOUT_LEN = _Fingerprint(
    "elif tree.is_nested(value): (any nested argument, even empty)",
    m.If(test=_call("tree.is_nested", m.Arg(m.Name("value")))),
)
_ALL_TENSORS_OR_NONE = _Fingerprint(
    "if all(is_backend_tensor_or_symbolic(x, allow_none=True) for x in flat_values)", _all_tensors(True)
)
_ALL_TENSORS = _Fingerprint("if all(is_backend_tensor_or_symbolic(x) for x in flat_values)", _all_tensors(False))

# What every variant's loop has, whatever its version.
_LOOP = (
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
        "elif any(is_backend_tensor_or_symbolic(x) ...): raise ValueError(...)",
        m.If(
            test=m.Call(
                func=m.Name("any"),
                args=[m.Arg(m.GeneratorExp(elt=_call("is_backend_tensor_or_symbolic", m.Arg(m.Name(), keyword=None))))],
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

# Keras 3.0-3.9: `training` is popped when call() does not take it, then bound
# in either branch; user_arguments_dict holds only what was bound.
_V1_TO_V3_BINDING = (
    _Fingerprint(
        'if "training" in kwargs and "training" not in signature.parameters: kwargs.pop("training")',
        m.If(
            test=m.BooleanOperation(
                left=m.Comparison(
                    left=m.SimpleString(), comparisons=[m.ComparisonTarget(m.In(), m.Name("kwargs"))]
                ),
                operator=m.And(),
                right=m.Comparison(
                    left=m.SimpleString(),
                    comparisons=[
                        m.ComparisonTarget(
                            m.NotIn(), m.Attribute(value=m.Name("signature"), attr=m.Name("parameters"))
                        )
                    ],
                ),
            )
        ),
    ),
    _Fingerprint("bound_args = signature.bind(*args, **kwargs) (in both branches)", _BIND, count=2),
    _Fingerprint(
        "self.user_arguments_dict = {k: v for k, v in bound_args.arguments.items()}",
        m.Assign(targets=[m.AssignTarget(target=_self_attr("user_arguments_dict"))], value=m.DictComp()),
    ),
)

# Keras 3.10+: every registered context argument the call() does not accept is
# popped and kept in user_arguments_dict.
_V4_BINDING = (
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
    _Fingerprint("bound_args = signature.bind(*args, **kwargs)", _BIND),
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
)


@dataclass(frozen=True)
class _Variant:
    name: str
    releases: str
    #: Parameters of `CallSpec.__init__`.
    parameters: tuple[str, ...]
    #: The arguments of the construction in `Layer.__call__`, after `self._call_signature`.
    construction: tuple[m.Name | m.Attribute, ...]
    fingerprint: tuple[_Fingerprint, ...]
    #: Whether `is_backend_tensor_or_symbolic` must take `allow_none` (Keras >= 3.4).
    allow_none: bool


_OLD_PARAMETERS = ("self", "signature", "args", "kwargs")
_OLD_CONSTRUCTION = (m.Name("args"), m.Name("kwargs"))
_VARIANTS = (
    _Variant("V1", "3.0.0", _OLD_PARAMETERS, _OLD_CONSTRUCTION,
             (*_V1_TO_V3_BINDING, *_LOOP, _NESTED_WITHOUT_LEN, _ALL_TENSORS), allow_none=False),
    _Variant("V2", "3.1.0-3.3.3", _OLD_PARAMETERS, _OLD_CONSTRUCTION,
             (*_V1_TO_V3_BINDING, *_LOOP, _NESTED_WITH_LEN, _ALL_TENSORS), allow_none=False),
    _Variant("V3", "3.4.0-3.9.2", _OLD_PARAMETERS, _OLD_CONSTRUCTION,
             (*_V1_TO_V3_BINDING, *_LOOP, _NESTED_WITH_LEN, _ALL_TENSORS_OR_NONE), allow_none=True),
    _Variant("V4", "3.10.0-3.15.1, master, nightly",
             ("self", "signature", "call_context_args", "args", "kwargs"),
             (_self_attr("_call_context_args"), m.Name("args"), m.Name("kwargs")),
             (*_V4_BINDING, *_LOOP, _NESTED_WITH_LEN, _ALL_TENSORS_OR_NONE), allow_none=True),
)
VARIANTS = {v.name: v for v in _VARIANTS}


_WATCHED_ATTRIBUTES = frozenset(
    {"_call_signature", "_call_spec_fast_plan", "_call_spec_fast_path", "_call_spec_fast_bindings"}
)


@dataclass(frozen=True)
class _Found:
    """An ast node found by `_scan`, with the statement holding it and where that is."""

    node: ast.AST
    statement: ast.stmt
    #: The node whose body holds `statement` (a def, class, if, ... or the module).
    block_owner: ast.AST
    qualname: str


def _attribute(found: _Found) -> str:
    """The attribute name of a write found by `_scan` over `_WATCHED_ATTRIBUTES`."""
    return str(getattr(found.node, "attr", ""))


def _scan(root: ast.AST, predicate: Callable[[ast.AST], bool]) -> list[_Found]:
    """Every node below `root` satisfying `predicate`, in one pass."""
    found: list[_Found] = []
    stack: list[tuple[ast.AST, ast.stmt | None, ast.AST, tuple[str, ...]]] = [(root, None, root, ())]
    while stack:
        node, statement, owner, names = stack.pop()
        if predicate(node) and statement is not None:
            found.append(_Found(node, statement, owner, ".".join(names) or "<module>"))
        child_names = names
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            child_names = (*names, node.name)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                stack.append((child, child, node, child_names))
            else:
                stack.append((child, statement, owner, child_names))
    return sorted(found, key=lambda f: (getattr(f.node, "lineno", 0), getattr(f.node, "col_offset", 0)))


class _Analyzer:
    def __init__(
        self, module: cst.Module, path: str, source: str | None = None, tree: ast.Module | None = None
    ) -> None:
        self.path = path
        self.module = module
        self.source = source if source is not None else module.code
        try:
            self.tree = tree if tree is not None else ast.parse(self.source)
        except SyntaxError as error:
            raise AnchorDrift(path, error.lineno or 1, "module", "valid Python", f"a syntax error: {error.msg}") from None
        # One pass over the whole module for the attribute writes that matter
        # (where `_call_signature` is set, and traces of an earlier patch).
        self.writes = _scan(
            self.tree,
            lambda n: isinstance(n, ast.Attribute)
            and isinstance(n.ctx, (ast.Store, ast.Del))
            and n.attr in _WATCHED_ATTRIBUTES,
        )
        self.anchors: list[AnchorReport] = []
        # Set by `applied`: the base's flag statement and guard, when present.
        self.base_flag: cst.SimpleStatementLine | None = None
        self.guard_node: cst.If | None = None

    # -- helpers ------------------------------------------------------------
    def drift(self, node: ast.AST | None, anchor: str, expected: str, found: str) -> AnchorDrift:
        line = getattr(node, "lineno", 1) if node is not None else 1
        return AnchorDrift(self.path, line, anchor, expected, found)

    def code(self, node: ast.AST) -> str:
        text = " ".join((ast.get_source_segment(self.source, node) or "").split())
        return text if len(text) <= 100 else text[:97] + "..."

    def lines(self, nodes: list[ast.AST]) -> str:
        return ", ".join(str(getattr(n, "lineno", "?")) for n in nodes)

    def report(self, node: ast.AST, name: str, description: str) -> None:
        self.anchors.append(AnchorReport(name, getattr(node, "lineno", 1), description))

    def top_class(self, name: str) -> tuple[ast.ClassDef, cst.ClassDef]:
        anchor = f"class {name}"
        top = [n for n in self.tree.body if isinstance(n, ast.ClassDef) and n.name == name]
        if len(top) == 1:
            return top[0], self.cst_class(name)
        found = _scan(self.tree, lambda n: isinstance(n, ast.ClassDef) and n.name == name)
        if not found:
            raise self.drift(None, anchor, f"exactly one `class {name}` at module level", "none")
        if len(found) > 1:
            nodes = sorted((f.statement for f in found), key=lambda n: n.lineno)
            raise self.drift(nodes[1], anchor, f"exactly one `class {name}`", f"{len(found)} (lines {self.lines(list(nodes))})")
        raise self.drift(found[0].statement, anchor, f"`class {name}` at module level", f"it in {found[0].qualname}")

    def cst_class(self, name: str) -> cst.ClassDef:
        nodes = [s for s in self.module.body if m.matches(s, m.ClassDef(name=m.Name(name)))]
        return cst.ensure_type(nodes[0], cst.ClassDef)

    def method(self, owner: tuple[ast.ClassDef, cst.ClassDef], name: str) -> tuple[ast.FunctionDef, cst.FunctionDef]:
        cls_ast, cls = owner
        anchor = f"{cls_ast.name}.{name}"
        found = [s for s in cls_ast.body if isinstance(s, ast.FunctionDef) and s.name == name]
        if len(found) != 1:
            raise self.drift(found[1] if found else cls_ast, anchor, f"exactly one `def {name}` in class {cls_ast.name}", f"{len(found)}")
        body = cst.ensure_type(cls.body, cst.IndentedBlock).body
        nodes = [s for s in body if m.matches(s, m.FunctionDef(name=m.Name(name)))]
        return found[0], cst.ensure_type(nodes[0], cst.FunctionDef)

    def self_stores(self, root: ast.AST) -> Iterator[ast.Attribute]:
        """Every `self.<attr> = / += / del` below `root`."""
        for node in ast.walk(root):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, (ast.Store, ast.Del))
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                yield node

    # -- anchors --------------------------------------------------------------
    def call_signature_statement(
        self, init: tuple[ast.FunctionDef, cst.FunctionDef]
    ) -> cst.SimpleStatementLine:
        anchor = "call_signature"
        init_ast, init_cst = init
        expected = "exactly one `self._call_signature = inspect.signature(self.call)` in Layer.__init__"
        stores = [w for w in self.writes if _attribute(w) == "_call_signature"]
        if not stores:
            raise self.drift(init_ast, anchor, expected, "no assignment to `_call_signature`")
        if len(stores) > 1:
            where = ", ".join(f"line {w.statement.lineno} in {w.qualname}" for w in stores)
            raise self.drift(stores[1].statement, anchor, expected, f"{len(stores)} assignments ({where})")
        write = stores[0]
        statement = write.statement
        if statement not in init_ast.body:
            if isinstance(write.block_owner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                found = f"it in {write.qualname}"
            else:
                found = f"it nested in `{type(write.block_owner).__name__.lower()}` inside {write.qualname}"
            raise self.drift(statement, anchor, "it directly in the body of Layer.__init__", found)
        writes = m.SimpleStatementLine(
            body=[m.ZeroOrMore(), m.Assign(targets=[m.ZeroOrMore(), m.AssignTarget(_self_attr("_call_signature")), m.ZeroOrMore()]), m.ZeroOrMore()]
        )
        body = cst.ensure_type(init_cst.body, cst.IndentedBlock).body
        nodes = [s for s in body if m.matches(s, writes)]
        if len(nodes) != 1 or not m.matches(nodes[0], CALL_SIGNATURE_STATEMENT):
            raise self.drift(statement, anchor, expected, f"`{self.code(statement)}`")
        self.report(statement, anchor, "self._call_signature = inspect.signature(self.call) in Layer.__init__")
        return cst.ensure_type(nodes[0], cst.SimpleStatementLine)

    def variant(self, callspec: tuple[ast.ClassDef, cst.ClassDef]) -> str:
        """Classify CallSpec by its `__init__`: parameters, the 8 attributes, and
        the statements that make each variant what it is (`_VARIANTS`)."""
        cls_ast, _ = callspec
        init_ast, init = self.method(callspec, "__init__")
        for member in cls_ast.body:
            if isinstance(member, ast.FunctionDef) and member.name in ("__init__", "_fast", "_fast_bound"):
                continue
            if isinstance(member, ast.Expr) and isinstance(member.value, ast.Constant) and isinstance(member.value.value, str):
                continue  # docstring
            raise self.drift(member, "class CallSpec", "only `__init__` (and a docstring) in class CallSpec", f"`{self.code(member)}`")
        args = init_ast.args
        names = tuple(a.arg for a in [*args.posonlyargs, *args.args])
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
            raise self.drift(init_ast, "CallSpec.__init__", "positional parameters without defaults", f"({self.code(args)})")
        candidates = [v for v in _VARIANTS if v.parameters == names]
        if not candidates:
            known = "; ".join(f"{v.name} ({v.releases}): ({', '.join(v.parameters)})" for v in _VARIANTS)
            raise self.drift(init_ast, "CallSpec.__init__", f"the parameters of a known variant: {known}", f"({', '.join(names)})")
        self.check_attributes(init_ast)
        # A node matcher (`m.If(...)`) only matches nodes of the class it is named after:
        # each fingerprint is tried on those alone.
        nodes: dict[str, list[cst.CSTNode]] = {}
        for node in subtree_nodes(init):
            nodes.setdefault(type(node).__name__, []).append(node)
        mismatches: list[tuple[int, _Variant, _Fingerprint, int]] = []
        for candidate in candidates:
            failed = []
            for fingerprint in candidate.fingerprint:
                kind = type(fingerprint.matcher).__name__
                found = sum(1 for n in nodes.get(kind, ()) if m.matches(n, fingerprint.matcher))
                if found != fingerprint.count:
                    failed.append((fingerprint, found))
            if not failed:
                variant = candidate.name
                break
            mismatches.append((len(failed), candidate, *failed[0]))
        else:
            # Report against the closest variant: the one with fewest mismatches.
            _, closest, fingerprint, found = min(mismatches, key=lambda item: item[0])
            times = "exactly once" if fingerprint.count == 1 else f"{fingerprint.count} times"
            raise self.drift(
                init_ast,
                "CallSpec.__init__",
                f"`{fingerprint.description}` {times} (the closest known variant, {closest.name}, Keras {closest.releases})",
                "none" if not found else f"{found}",
            )
        self.report(cls_ast, "callspec_class", f"class CallSpec, variant {variant}")
        return variant

    def check_attributes(self, init_ast: ast.FunctionDef) -> None:
        assigned: dict[str, ast.Attribute] = {}
        for node in self.self_stores(init_ast):
            assigned.setdefault(node.attr, node)
        missing = sorted(CALLSPEC_ATTRIBUTES - assigned.keys())
        extra = sorted(assigned.keys() - CALLSPEC_ATTRIBUTES)
        if missing or extra:
            parts = []
            if extra:
                parts.append("extra " + ", ".join(f"`{a}` (line {assigned[a].lineno})" for a in extra))
            if missing:
                parts.append("missing " + ", ".join(f"`{a}`" for a in missing))
            raise self.drift(
                assigned[extra[0]] if extra else init_ast,
                "CallSpec.__init__",
                f"exactly the {len(CALLSPEC_ATTRIBUTES)} attributes {', '.join(sorted(CALLSPEC_ATTRIBUTES))}",
                "; ".join(parts),
            )

    def construction_statement(
        self, call: tuple[ast.FunctionDef, cst.FunctionDef], variant: _Variant
    ) -> cst.SimpleStatementLine:
        anchor = "callspec_construction"
        call_ast, call_cst = call
        expected_params = m.Parameters(
            params=[m.Param(m.Name("self"))],
            star_arg=m.Param(m.Name("args")),
            star_kwarg=m.Param(m.Name("kwargs")),
            kwonly_params=[],
            posonly_params=[],
        )
        if not m.matches(call_cst.params, expected_params):
            raise self.drift(call_ast, "Layer.__call__", "parameters (self, *args, **kwargs)", f"({self.code(call_ast.args)})")
        arguments = "self._call_signature, self._call_context_args, args, kwargs" if variant.name == "V4" else "self._call_signature, args, kwargs"
        expected = f"exactly one `call_spec = CallSpec({arguments})` in Layer.__call__ (variant {variant.name})"
        constructions = _scan(
            call_ast,
            lambda n: isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "CallSpec",
        )
        if len(constructions) != 1:
            nodes = sorted((w.node for w in constructions), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
            what = "none" if not nodes else f"{len(nodes)} (lines {self.lines(nodes)})"
            raise self.drift(nodes[1] if nodes else call_ast, anchor, expected, what)
        statement = constructions[0].statement
        shape = m.SimpleStatementLine(
            body=[
                m.Assign(
                    targets=[m.AssignTarget(target=m.Name("call_spec"))],
                    value=m.Call(
                        func=m.Name("CallSpec"),
                        args=[
                            m.Arg(_self_attr("_call_signature"), keyword=None, star=""),
                            *(m.Arg(a, keyword=None, star="") for a in variant.construction),
                        ],
                    ),
                )
            ]
        )
        shaped = [n for n in statements(call_cst) if m.matches(n, shape)]
        if len(shaped) != 1:
            raise self.drift(statement, anchor, expected, f"`{self.code(statement)}`")
        self.report(statement, anchor, "call_spec = CallSpec(...) in Layer.__call__")
        return cst.ensure_type(shaped[0], cst.SimpleStatementLine)

    def module_bindings(self) -> set[str]:
        """Names bound at module level (also inside top-level if/try blocks)."""
        bound: set[str] = set()
        pending: list[ast.stmt] = list(self.tree.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    bound.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for field_name in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, field_name, []):
                        if isinstance(child, ast.ExceptHandler):
                            pending.extend(child.body)
                        else:
                            pending.append(child)
        return bound

    def check_names(self, template: Template, bound: set[str], variant: _Variant) -> None:
        missing = sorted(template.required_names - bound)
        if missing:
            raise self.drift(
                None,
                "module names",
                "module-level bindings for " + ", ".join(sorted(template.required_names)),
                "no binding for " + ", ".join(missing),
            )
        for fn in self.tree.body if variant.allow_none else ():
            if isinstance(fn, ast.FunctionDef) and fn.name == "is_backend_tensor_or_symbolic":
                params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
                if "allow_none" not in params:
                    raise self.drift(fn, "is_backend_tensor_or_symbolic", "a parameter `allow_none` (Keras >= 3.4)", f"({self.code(fn.args)})")

    def check_extension_names(self, extension: ExtensionTemplate, bound: set[str]) -> None:
        missing = sorted(extension.required_names - bound)
        if missing:
            raise self.drift(
                None,
                "module names",
                "module-level bindings (or base-patch names) for " + ", ".join(sorted(extension.required_names)),
                "no binding for " + ", ".join(missing),
            )

    # -- already applied? -----------------------------------------------------
    def applied(
        self,
        template: Template,
        extension: ExtensionTemplate,
        bound: set[str],
        init: cst.FunctionDef,
        signature_stmt: cst.SimpleStatementLine,
        callspec: cst.ClassDef,
        call: cst.FunctionDef,
        construction: cst.SimpleStatementLine,
        construction_line: int,
    ) -> dict[str, bool]:
        present = template.defined_names & bound
        body = list(cst.ensure_type(init.body, cst.IndentedBlock).body)
        index = body.index(signature_stmt)
        piece = template.eligibility_piece
        after = body[index + 1 : index + 1 + len(piece)]
        eligibility = len(after) == len(piece) and all(a.deep_equals(b) for a, b in zip(after, piece, strict=True))
        if (eligibility or present) and not (eligibility and present == template.defined_names):
            raise self.drift(
                None,
                "eligibility",
                "either no trace of the eligibility piece or all of it, as this forkgen version writes it",
                f"module names {sorted(present) or 'none'} bound, the precomputation "
                + ("present" if eligibility else "absent")
                + " (patched by another forkgen version, or edited by hand?)",
            )
        markers = [w for w in self.writes if _attribute(w) != "_call_signature"]
        if markers and not eligibility:
            raise self.drift(markers[0].statement, "eligibility", "no `_call_spec_fast_*` attribute in unpatched code", f"one in {markers[0].qualname}")

        members = cst.ensure_type(callspec.body, cst.IndentedBlock).body
        fast_methods = [s for s in members if m.matches(s, m.FunctionDef(name=m.Name("_fast")))]
        fast = bool(fast_methods)
        if fast and not fast_methods[0].deep_equals(template.fast_piece):
            raise self.drift(None, "fast_constructor", "`CallSpec._fast` as this forkgen version writes it", "a different `_fast`")

        guard, branch = self.guard(template, extension, call, construction, construction_line)
        flag = cst.ensure_type(after[-1], cst.SimpleStatementLine) if eligibility else None

        # The extension: all of its four pieces or none, and only on top of the base.
        ext_names = extension.defined_names & bound
        ext_after = body[index + 1 + len(piece) : index + 1 + len(piece) + len(extension.bindings_piece)] if eligibility else []
        ext_bindings = len(ext_after) == len(extension.bindings_piece) and all(
            a.deep_equals(b) for a, b in zip(ext_after, extension.bindings_piece, strict=True)
        )
        bound_methods = [s for s in members if m.matches(s, m.FunctionDef(name=m.Name("_fast_bound")))]
        if bound_methods and not bound_methods[0].deep_equals(extension.fast_bound_piece):
            raise self.drift(None, "extension", "`CallSpec._fast_bound` as this forkgen version writes it", "a different `_fast_bound`")
        traces = {
            "module names": ext_names == extension.defined_names,
            "bindings in Layer.__init__": ext_bindings,
            "CallSpec._fast_bound": bool(bound_methods),
            "branch in Layer.__call__": branch,
        }
        ext = all(traces.values())
        if (ext_names or any(traces.values())) and not ext:
            traced = ", ".join(k for k, v in traces.items() if v) or "some of its module names"
            raise self.drift(
                None,
                "extension",
                "either no trace of the extension or all of it, as this forkgen version writes it",
                f"only {traced} (patched by another forkgen version, or edited by hand?)",
            )
        if ext and not (eligibility and fast and guard is not None):
            raise self.drift(None, "extension", "the extension only on top of the base patch", "the extension without the base")
        self.base_flag = flag
        self.guard_node = guard
        return {"eligibility": eligibility, "fast_constructor": fast, "guard": guard is not None, "extension": ext}

    def guard(
        self,
        template: Template,
        extension: ExtensionTemplate,
        call: cst.FunctionDef,
        construction: cst.SimpleStatementLine,
        construction_line: int,
    ) -> tuple[cst.If | None, bool]:
        """The base's guard around the construction, if any, and whether the
        extension's `elif` sits between it and upstream's `else`."""
        ifs = [cst.ensure_type(n, cst.If) for n in statements(call) if isinstance(n, cst.If)]
        for if_node in ifs:
            if not isinstance(if_node.orelse, cst.Else):
                continue
            block = cst.ensure_type(if_node.orelse.body, cst.IndentedBlock)
            if not any(statement is construction for statement in block.body):
                continue
            only = len(block.body) == 1
            if only and if_node.test.deep_equals(template.guard_piece.test):
                return if_node, False
            if only and if_node.test.deep_equals(extension.branch_piece.test):
                parents = [p for p in ifs if p.orelse is if_node]
                if len(parents) == 1 and parents[0].test.deep_equals(template.guard_piece.test):
                    return parents[0], True
                raise AnchorDrift(self.path, construction_line, "extension", "the extension's branch as the elif of the base's guard", "it elsewhere")
            if m.findall(if_node.test, m.Attribute(attr=m.Name("_call_spec_fast_path"))):
                raise AnchorDrift(self.path, construction_line, "guard", "the guard as this forkgen version writes it", "a different guard")
        return None, False


def analyze_module(
    module: cst.Module, path: str = LAYER_PY, source: str | None = None, tree: ast.Module | None = None
) -> Analysis:
    """Locate every anchor in `module` (the parsed `layer.py`) or raise AnchorDrift.

    `source`, when given, must be `module.code` (saves rendering it again), and `tree`, when
    given, `ast.parse(source)` (saves parsing it again).
    """
    analyzer = _Analyzer(module, path, source, tree)
    layer = analyzer.top_class("Layer")
    callspec = analyzer.top_class("CallSpec")
    analyzer.report(layer[0], "layer_class", "class Layer")
    init = analyzer.method(layer, "__init__")
    call = analyzer.method(layer, "__call__")
    signature_stmt = analyzer.call_signature_statement(init)
    variant = analyzer.variant(callspec)
    construction = analyzer.construction_statement(call, VARIANTS[variant])
    template = templates.load(variant)
    extension = templates.load_extension(variant)
    bound = analyzer.module_bindings()
    analyzer.check_names(template, bound, VARIANTS[variant])
    analyzer.check_extension_names(extension, bound | template.defined_names)
    construction_line = next(a.line for a in analyzer.anchors if a.name == "callspec_construction")
    applied = analyzer.applied(
        template, extension, bound, init[1], signature_stmt, callspec[1], call[1], construction, construction_line
    )
    return Analysis(
        path=path,
        variant=variant,
        anchors=tuple(sorted(analyzer.anchors, key=lambda a: a.line)),
        applied=applied,
        required_names=tuple(sorted(template.required_names)),
        call_signature_statement=signature_stmt,
        callspec_class=callspec[1],
        construction_statement=construction,
        layer_class=layer[1],
        layer_init=init[1],
        layer_call=call[1],
        base_flag_statement=analyzer.base_flag,
        guard_statement=analyzer.guard_node,
    )


def relocate(analysis: Analysis, module: cst.Module, applied_piece: str | None = None) -> Analysis:
    """The same analysis, with its nodes looked up again in `module`.

    `module` must be the analysed module after one of the patch's codemods ran
    on it (named by `applied_piece`): the anchors are known to be there, so
    finding them again needs no whole-module scan.
    """

    def top(name: str) -> cst.ClassDef:
        return cst.ensure_type(
            next(s for s in module.body if m.matches(s, m.ClassDef(name=m.Name(name)))), cst.ClassDef
        )

    def method(cls: cst.ClassDef, name: str) -> cst.FunctionDef:
        body = cst.ensure_type(cls.body, cst.IndentedBlock).body
        return cst.ensure_type(next(s for s in body if m.matches(s, m.FunctionDef(name=m.Name(name)))), cst.FunctionDef)

    layer = top("Layer")
    init = method(layer, "__init__")
    call = method(layer, "__call__")
    init_body = cst.ensure_type(init.body, cst.IndentedBlock).body
    signature = next(s for s in init_body if m.matches(s, CALL_SIGNATURE_STATEMENT))
    construction: list[cst.CSTNode] = [analysis.construction_statement]
    if call is not analysis.layer_call:  # else the codemod left `__call__` alone: same node, same statement
        shape = m.SimpleStatementLine(body=[m.Assign(value=m.Call(func=m.Name("CallSpec")))])
        construction = [n for n in statements(call) if m.matches(n, shape)]
    applied = dict(analysis.applied)
    if applied_piece is not None:
        applied[applied_piece] = True
    flag = analysis.base_flag_statement
    if applied["eligibility"] and init is not analysis.layer_init:
        flag = cst.ensure_type(next(s for s in init_body if m.matches(s, BASE_FLAG_STATEMENT)), cst.SimpleStatementLine)
    guard = analysis.guard_statement
    if applied["guard"] and call is not analysis.layer_call:
        test = templates.load(analysis.variant).guard_piece.test
        guard = next(
            cst.ensure_type(n, cst.If) for n in statements(call) if isinstance(n, cst.If) and n.test.deep_equals(test)
        )
    return replace(
        analysis,
        applied=applied,
        base_flag_statement=flag,
        guard_statement=guard,
        call_signature_statement=cst.ensure_type(signature, cst.SimpleStatementLine),
        callspec_class=top("CallSpec"),
        construction_statement=cst.ensure_type(construction[0], cst.SimpleStatementLine),
        layer_class=layer,
        layer_init=init,
        layer_call=call,
    )


def parse_and_analyze(source: str, path: str = LAYER_PY) -> tuple[cst.Module, Analysis]:
    """Parse `source` and analyse it; a syntax error is reported as drift too.

    The last few results are kept (libcst trees are immutable), so that the
    analyze and apply stages of one run parse and analyse `layer.py` once.
    """
    key = (path, source)
    if key in _ANALYSED:
        return _ANALYSED[key]
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise AnchorDrift(path, error.raw_line, "module", "valid Python", f"a syntax error: {error.message}") from None
    result = module, analyze_module(module, path, source)
    if len(_ANALYSED) >= 4:
        _ANALYSED.pop(next(iter(_ANALYSED)))
    _ANALYSED[key] = result
    return result


_ANALYSED: dict[tuple[str, str], tuple[cst.Module, Analysis]] = {}


def analyze_source(source: str, path: str = LAYER_PY) -> Analysis:
    """Parse `source` and analyse it; a syntax error is reported as drift too."""
    return parse_and_analyze(source, path)[1]
