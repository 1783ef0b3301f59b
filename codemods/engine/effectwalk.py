"""The walker of the effect analysis (effects.py): one function's statements and expressions, their
effects and values, calls followed into the tree."""

from __future__ import annotations

import ast
import builtins
from typing import TYPE_CHECKING, Any, cast

from .codeindex import Class, Function, Literal, ModuleRef, Resolved, Value, dotted
from .effectflow import Flow

if TYPE_CHECKING:
    from .effects import Analysis

from .effectvalues import (
    _BINARY,
    _COMPARE,
    ASSUMED_FIELDS,
    CONTAINER_METHODS,
    DYNAMIC_BUILTINS,
    E_,
    EXT,
    EXTERNAL_PROTOCOL,
    GLOBAL_ACCESS,
    GLOBAL_STATE_OBJECT,
    NOTABLE,
    TRANSPARENT_DECORATORS,
    Cls,
    Effect,
    Fn,
    Inst,
    U,
    Unk,
    V,
    Value_,
    _params,
    _Stop,
    _walk_own,
    contain,
    elements,
)


class _W(Flow):
    """Walks one function: its effects (or, `typing`, only what it returns)."""

    def __init__(self, a: Analysis, fn: Function, self_class: Class | None, args: dict[str, Value_],
                 env: dict[str, Value_] | None = None, typing: bool = False) -> None:
        self.a, self.tree, self.fn, self.cls = a, a.tree, fn, self_class
        #: Types only: what the function returns, no effects, only the calls a returned value needs.
        self.typing = typing
        self.env = env or {}
        node = fn.node
        names = _params(node)
        is_method = fn.defined_in is not None and not any(dotted(d) == "staticmethod" for d in fn.decorators)
        self.self_name = names[0] if is_method and names and not any(dotted(d) == "classmethod" for d in fn.decorators) else None
        self.local_defs = {c.name: Function(fn.module, f"{fn.qualname}.{c.name}", fn.path, c, None, fn)
                           for c in _walk_own(node) if isinstance(c, ast.FunctionDef)}
        self.found: set[Effect] = set()
        self.returns: set[Any] = set()
        self.collect()
        self.recording = False
        self.params = set(names)
        self.types: dict[str, Value_] = {p: args.get(p, U(f"parameter {p} of {fn.key}")) for p in names if p != self.self_name}
        # defaults of unbound params
        pos = [p.arg for p in (*node.args.posonlyargs, *node.args.args)]
        for p, d in zip(reversed(pos), reversed(node.args.defaults), strict=False):
            if p not in args:
                self.types[p] = self.value(d)
        for kw, kd in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=False):
            if kw.arg not in args and kd is not None:
                self.types[kw.arg] = self.value(kd)
        if node.args.vararg and node.args.vararg.arg not in args:
            self.types[node.args.vararg.arg] = contain(U(f"*{node.args.vararg.arg} of {fn.key}"))
        if node.args.kwarg and node.args.kwarg.arg not in args:
            self.types[node.args.kwarg.arg] = contain(U(f"**{node.args.kwarg.arg} of {fn.key}"))

    def add(self, kind: str, node: ast.AST, what: str) -> None:
        if self.recording:
            effect = Effect(kind, self.fn.path, getattr(node, "lineno", 0), self.fn.key, what)
            if kind == "unknown" and self.a.stop_at_unknown:
                raise _Stop(effect, tuple(self.a.stack))
            self.found.add(effect)

    def go(self) -> None:
        body: list[ast.stmt] = [ast.Return(self.fn.node.body)] if isinstance(self.fn.node, ast.Lambda) else self.fn.node.body
        if self.typing:  # only the returned values, and the locals they read
            for _ in range(3):
                before = (dict(self.types), set(self.returns))
                self.typed = set()
                for node in self.live_returns(body):
                    self.returns |= self.returned(node)
                if (self.types, self.returns) == before:
                    break
            return
        self.locals_types()
        self.recording = True
        # Its bare names are read from its module's globals: a module the verdict relies on too.
        self.add(f"module:{self.fn.module}", self.fn.node, "its globals")
        for stmt in body:
            self.stmt(stmt)

    # statements: evaluate every expression (for effects), skip symbolic branches
    def stmt(self, node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return
        if isinstance(node, ast.If):
            b = self.symbolic(node.test)
            self.value(node.test)
            if b is True:
                for s in node.orelse:
                    self.stmt(s)
                return
            if b is False:
                for s in node.body:
                    self.stmt(s)
                return
            for branch, names in ((node.body, self.narrows(node.test, True)), (node.orelse, self.narrows(node.test, False))):
                saved = {n: self.types.get(n) for n in names}
                self.types.update(names)
                try:
                    for s in branch:
                        self.stmt(s)
                finally:
                    for n, v in saved.items():
                        if v is None:
                            self.types.pop(n, None)
                        else:
                            self.types[n] = v
            return
        if isinstance(node, ast.Return):
            self.returns |= self.returned(node)
            return
        if isinstance(node, ast.With):
            for item in node.items:
                v = self.value(item.context_expr)
                self.special(v, ("__enter__", "__exit__"), node)
            for s in node.body:
                self.stmt(s)
            return
        for _name, field in ast.iter_fields(node):
            items = field if isinstance(field, list) else [field]
            for item in items:
                if isinstance(item, ast.stmt):
                    self.stmt(item)
                elif isinstance(item, ast.expr):
                    self.value(item)
                elif isinstance(item, ast.ExceptHandler):
                    for s in item.body:
                        self.stmt(s)
        if isinstance(node, ast.For):
            self.special(self.value(node.iter), ("__iter__", "__next__"), node)

    def atom(self, r: Resolved | None) -> Value_:
        if isinstance(r, Function):
            return V({Fn(r)})
        if isinstance(r, Class):
            return V({Cls(r)})
        if isinstance(r, ModuleRef):
            return V({r})
        if isinstance(r, Literal):
            return E_
        if isinstance(r, Value):
            return self.a.module_value(r)
        return U(f"{r!r}")

    def name(self, n: str, node: ast.AST) -> Value_:
        if n == self.self_name:
            return V({Inst(self.cls)}) if self.cls else U(f"self of {self.fn.key}, class not known")
        if n in self.binds:
            return self.local(n)
        if n in self.types:
            return self.types[n]
        if n in self.local_defs:
            return V({Fn(self.local_defs[n], self.cls, self.closure())})
        if n in self.env:
            return self.env[n]
        enc = self.fn.enclosing
        while enc is not None:  # a closure: the enclosing function's parameters are not known here
            if n in _params(enc.node):
                return U(f"{n}, a parameter of the enclosing {enc.key}")
            enc = enc.enclosing
        if n == GLOBAL_STATE_OBJECT:
            self.add("unknown", node, "reads the global state directly")
        if self.tree.is_external(self.fn.module, n):
            return E_
        r = self.tree.resolve(self.fn.module, n)
        return self.atom(r) if r is not None else U(f"{n} in {self.fn.module}")

    def value(self, node: ast.expr | None) -> Value_:
        if node is None:
            return E_
        if isinstance(node, ast.Constant | ast.JoinedStr):
            for c in ast.walk(node):
                if isinstance(c, ast.FormattedValue):
                    self.special(self.value(c.value), ("__format__", "__str__", "__repr__"), node)
            return E_
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            out: set[Any] = set(E_)
            for e in node.elts:
                out |= elements(self.value(e.value)) if isinstance(e, ast.Starred) else self.value(e)
            return contain(frozenset(out))
        if isinstance(node, ast.Dict):
            out = set(E_)
            for k, v in zip(node.keys, node.values, strict=True):
                if k is not None:
                    out |= self.value(k)
                out |= self.value(v) if k is not None else elements(self.value(v))
            return contain(frozenset(out))
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for g in node.generators:
                it = self.value(g.iter)
                self.special(it, ("__iter__", "__next__"), node)
                self.bind(g.target, elements(it))
                for cond in g.ifs:
                    self.value(cond)
            elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            out = set(E_)
            for e in elts:
                out |= self.value(e)
            return contain(frozenset(out))
        if isinstance(node, ast.Name):
            return self.name(node.id, node)
        if isinstance(node, ast.Attribute):
            return self.attribute(self.value(node.value), node.attr, node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left), self.value(node.right)
            opname = _BINARY[type(node.op)]
            return E_ | self.special(left, (f"__{opname}__",), node, right) | self.special(right, (f"__r{opname}__",), node, left)
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand)
            self.special(operand, ("__neg__", "__pos__", "__invert__", "__bool__", "__len__"), node)
            return E_
        if isinstance(node, ast.Compare):
            vs = [self.value(node.left), *(self.value(c) for c in node.comparators)]
            for op, left, right in zip(node.ops, vs, vs[1:], strict=False):  # `is` and `is not` run no code
                if isinstance(op, ast.In | ast.NotIn):
                    self.special(right, ("__contains__", "__iter__", "__next__", "__getitem__"), node, left)
                    self.special(left, ("__eq__",), node, right)
                elif not isinstance(op, ast.Is | ast.IsNot):
                    mine, theirs = _COMPARE[type(op)]
                    self.special(left, (mine,), node, right)
                    self.special(right, (theirs,), node, left)
            return E_
        if isinstance(node, ast.BoolOp):
            out = set()
            for v in node.values:
                vv = self.value(v)
                self.special(vv, ("__bool__", "__len__"), node)
                out |= vv
            return frozenset(out)
        if isinstance(node, ast.IfExp):
            b = self.symbolic(node.test)
            self.value(node.test)
            if b is True:
                return self.value(node.orelse)
            if b is False:
                return self.value(node.body)
            return self.value(node.body) | self.value(node.orelse)
        if isinstance(node, ast.Subscript):
            held = self.value(node.value)
            got = self.special(held, ("__getitem__",), node, self.value(node.slice))
            # An item of a container. A function taken out of one by subscript is not followed
            # (where it lands is not known: calling it is an `unknown`); `d.get(k)` is.
            return elements(frozenset(U("a function taken from a container by subscript") if isinstance(a, Fn) else a
                                      for a in held | got)) or E_
        if isinstance(node, ast.Slice):
            for p in (node.lower, node.upper, node.step):
                if p is not None:
                    self.value(p)
            return E_
        if isinstance(node, ast.Starred):
            return self.value(node.value)
        if isinstance(node, ast.Lambda):
            return V({Fn(Function(self.fn.module, f"{self.fn.qualname}.<lambda>", self.fn.path, node, None, self.fn), self.cls, self.closure())})
        if isinstance(node, ast.NamedExpr):
            return self.value(node.value)
        self.add("unknown", node, f"expression {type(node).__name__}")
        return U(type(node).__name__)

    def closure(self) -> tuple[tuple[str, Value_], ...]:
        """This call's names and values, as a nested def or lambda made here sees them."""
        names = {**self.env, **self.types}
        if self.self_name and self.cls:
            names[self.self_name] = V({Inst(self.cls)})
        # A function among them keeps no closure of its own (its free names are then not known).
        return tuple(sorted((k, frozenset(Fn(x.fn, x.self_class) if isinstance(x, Fn) else x for x in v))
                            for k, v in names.items()))

    def special(self, v: Value_, names: tuple[str, ...], node: ast.AST, other: Value_ = E_) -> Value_:
        """Special methods run on the Keras instances among `v`'s atoms; their other parameters
        get `other` (the other operand; another package's values where the syntax has none)."""
        out: set[Any] = set()
        for a in v:
            if isinstance(a, Inst):
                for n in names:
                    m = self.tree.method(a.cls, n)
                    if isinstance(m, Function):
                        params = _params(m.node)[1:]
                        eff, ret = self.a.run(m, a.cls, {p: other for p in params}, typing=self.typing)
                        self.merge(eff)
                        out |= ret
        return frozenset(out)

    def merge(self, eff: frozenset[Effect]) -> None:
        if self.recording:
            self.found |= eff

    def attribute(self, v: Value_, attr: str, node: ast.AST) -> Value_:
        out: set[Any] = set()
        for a in v:
            if a == EXT:
                out.add(EXT)
            elif isinstance(a, Unk):
                if a.inside and attr in CONTAINER_METHODS and EXT in v:
                    continue  # the container's method (given by its EXT atom)
                self.add("unknown", node, f"reads `.{attr}` of a value the analysis does not know ({a.why})")
                out.add(Unk(a.why))
            elif isinstance(a, ModuleRef):
                self.add(f"module:{a.name}", node, attr)
                found = self.tree.resolve(a.name, attr) or self.tree.submodule(a.name, attr)
                if found is None and not self.tree.has_external_star(a.name):
                    continue  # no such name: reading it raises AttributeError
                out |= self.atom(found) if found is not None else E_
            elif isinstance(a, Cls):
                m = self.tree.method(a.cls, attr)
                out |= V({Fn(m)}) if isinstance(m, Function) else (E_ if m is not None else U(f"{a.cls.key}.{attr}"))
            elif isinstance(a, Fn):
                out.add(EXT)
            elif isinstance(a, Inst):
                m = self.tree.method(a.cls, attr)
                if isinstance(m, Function) and any(dotted(d).rpartition(".")[2] in ("property", "cached_property") for d in m.decorators):
                    eff, ret = self.a.run(m, a.cls, {}, typing=self.typing)
                    self.merge(eff)
                    out |= ret
                elif isinstance(m, Function):
                    self.add(f"method:{a.cls.key}.{attr}", node, m.key)
                    out.add(Fn(m, a.cls))
                elif m is not None:
                    out.add(EXT)  # a class-level value
                else:
                    out |= self.assumed_field(a.cls, attr, node) or self.a.field(a.cls, attr)
        return frozenset(out)

    def assumed_field(self, cls: Class, attr: str, node: ast.AST) -> Value_:
        for name, (owner, field, exact) in ASSUMED_FIELDS.items():
            if attr == field and owner in (c.key for c in self.tree.mro(cls)):
                module, _, cname = exact.rpartition(".")
                found = self.tree.resolve(module, cname)
                if isinstance(found, Class):
                    self.add(f"assumes:{name}", node, f"{cls.key}.{attr}")
                    return V({Inst(found)})
        return V()

    def call(self, node: ast.Call) -> Value_:
        argv = [self.value(x.value if isinstance(x, ast.Starred) else x) for x in node.args]
        kwv = {k.arg: self.value(k.value) for k in node.keywords}
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and dotted(func.value.func) == "super":
            owner = self.fn.defined_in
            start = self.cls or owner
            m = self.tree.method(start, func.attr, after=owner.key) if owner and start else None
            if isinstance(m, Function):
                return self.invoke(Fn(m, self.cls), node, argv, kwv)
            if start is not None and all(b.rpartition(".")[2] in ("object", "list", "dict", "set", "tuple", "Exception") for b in self.tree.external_bases(start)):
                return E_
            self.add("unknown", node, f"super().{func.attr}() is not code of the tree")
            return U("super")
        name = dotted(func)
        if name in GLOBAL_ACCESS or name.rpartition(".")[2] in GLOBAL_ACCESS:
            last = name.rpartition(".")[2]
            key = node.args[0] if node.args else None
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                self.add(f"{GLOBAL_ACCESS[last]}:{key.value}", node, name)
                return self.global_value(key.value) if last == "get_global_attribute" else E_
            self.add("unknown", node, f"{name} of a computed key")
            return U("global")
        if name in ("getattr", "hasattr") and self.tree.is_external(self.fn.module, name):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                r = self.attribute(argv[0], cast(str, node.args[1].value), node)  # a constant, a name
                return r | (argv[2] if len(argv) > 2 else V()) if name == "getattr" else E_
            self.add("unknown", node, f"{name}() with a computed name")
            return U("getattr")
        if name in DYNAMIC_BUILTINS and self.tree.is_external(self.fn.module, name):
            self.add("unknown", node, f"calls {name}()")
            return U(name)
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == self.self_name
                and self.cls is not None and self.tree.method(self.cls, func.attr) is None):
            # A callable stored on the instance (an activation): the verdict turns it into a
            # run-time condition, that the attribute is one of the functions it was typed as
            # whose own summary allows the step. Those functions' results are its result.
            if self.recording:
                self.add(f"stored:{self.cls.key}.{func.attr}", node, ast.unparse(func))
            out: set[Any] = set()
            typing, self.typing = self.typing, True
            try:
                for a in self.a.stored_candidates(self.cls, func.attr):
                    out |= self.invoke(a, node, argv, kwv)
            finally:
                self.typing = typing
            return frozenset(out)
        receiver = None
        if isinstance(func, ast.Attribute):
            receiver = self.value(func.value)
            callee = self.attribute(receiver, func.attr, func)
        else:
            callee = self.value(func)
        out = set()
        for a in callee:
            out |= self.invoke(a, node, argv, kwv)
        if EXT in callee and receiver is None and name in vars(builtins) and self.tree.is_external(self.fn.module, name):
            for v in [*argv, *kwv.values()]:  # a builtin (`list`, `zip`, `next`, `max`) gives back what it was given
                out |= v
        elif EXT in callee and receiver is not None:
            out |= elements(receiver)  # a method of another package's value (`d.get`, `l.pop`) gives back what it holds
            assert isinstance(func, ast.Attribute)  # (it has a receiver)
            if func.attr in ("get", "pop", "setdefault") and argv:
                out |= argv[-1]
        return frozenset(out)

    def global_value(self, key: str) -> Value_:
        """What `set_global_attribute(key, ...)` stores anywhere in the tree (its function's parameters unknown)."""
        return self.a.derive(("global", key), lambda: self._global_value(key))

    def _global_value(self, key: str) -> Value_:
        if True:
            out: set[Any] = set(E_)
            for module, rel in self.tree.paths.items():
                if key not in self.tree.files[rel]:
                    continue
                info = self.tree.module(module)
                for fnode in ast.walk(info.tree) if info else ():
                    if not isinstance(fnode, ast.FunctionDef):
                        continue
                    for c in _walk_own(fnode):
                        if (isinstance(c, ast.Call) and dotted(c.func).rpartition(".")[2] == "set_global_attribute"
                                and c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value == key and len(c.args) > 1):
                            owner = None
                            assert info is not None  # (its tree is walked)
                            for cl in ast.walk(info.tree):
                                if isinstance(cl, ast.ClassDef) and fnode in cl.body:
                                    owner = Class(module, cl.name, rel, cl)
                            fn = Function(module, fnode.name, rel, fnode, owner)
                            w = _W(self.a, fn, owner, {}, typing=True)
                            w.narrow(fnode, c)
                            out |= w.value(c.args[1])
            return frozenset(out)

    def invoke(self, a: object, node: ast.Call, argv: list[Value_], kwv: dict[str | None, Value_]) -> Value_:
        if a == EXT:
            values = [*argv, *kwv.values()]
            data = frozenset(E_).union(*(frozenset(x for x in v if not isinstance(x, Fn)) for v in values))
            for v in values if not self.typing else ():  # another package: protocol methods, and it calls the functions it is given
                self.special(v, EXTERNAL_PROTOCOL, node)
                for x in v:
                    if isinstance(x, Fn):
                        params = [p for p in _params(x.fn.node)]
                        if x.self_class is not None and x.fn.defined_in is not None and params:
                            params = params[1:]
                        eff, _ = self.a.run(x.fn, x.self_class, {p: data for p in params}, x.env)
                        self.merge(eff)
            out: set[Any] = set(E_)
            for v in [*argv, *kwv.values()]:
                out |= {x for x in v if isinstance(x, Inst)}
            return frozenset(out)
        if isinstance(a, Unk):
            if self.recording:  # (the message is built only where it is kept)
                self.add("unknown", node, f"calls `{ast.unparse(node.func)[:50]}`, a value the analysis does not know ({a.why})")
            return V({a})
        if isinstance(a, Fn):
            fn = a.fn
            for d in fn.decorators:
                dn = dotted(d.func if isinstance(d, ast.Call) else d)
                if not (dn in TRANSPARENT_DECORATORS or dn.rpartition(".")[2] in TRANSPARENT_DECORATORS or dn.endswith((".setter", "contextmanager", "lru_cache", "functools.cache"))):
                    self.add("unknown", node, f"`{fn.key}` is decorated with @{dn}")
            names = [p.arg for p in (*fn.node.args.posonlyargs, *fn.node.args.args)]
            if a.self_class is not None and fn.defined_in is not None and names and not any(dotted(d) == "staticmethod" for d in fn.decorators):
                names = names[1:]
            args = {}
            for n, v in zip(names, argv, strict=False):
                args[n] = v
            spec = fn.node.args
            if any(isinstance(x, ast.Starred) for x in node.args):
                spread = elements(frozenset().union(*argv))  # where the items of `*xs` land is not known
                for i, n in enumerate(names):
                    if i >= next(j for j, x in enumerate(node.args) if isinstance(x, ast.Starred)):
                        args[n] = spread
                if spec.vararg:
                    args[spec.vararg.arg] = contain(spread)
            elif spec.vararg:
                args[spec.vararg.arg] = contain(frozenset().union(*argv[len(names):]))  # a tuple of the extra ones
            known = {p.arg for p in (*spec.posonlyargs, *spec.args, *spec.kwonlyargs)}
            extra: list[Value_] = []
            for k, v in kwv.items():
                if k is None or k not in known:
                    extra.append(v)
                else:
                    args[k] = v
            if spec.kwarg and None not in kwv:
                args[spec.kwarg.arg] = contain(frozenset().union(*extra))  # a dict of the extra ones
            if fn.key in NOTABLE:
                self.add(f"reaches:{NOTABLE[fn.key]}", node, fn.key)
            eff, ret = self.a.run(fn, a.self_class, args, a.env, typing=self.typing)
            self.merge(eff)
            return ret
        if isinstance(a, Cls):
            for n in ("__new__", "__init__") if not self.typing else ():
                m = self.tree.method(a.cls, n)
                if isinstance(m, Function):
                    self.invoke(Fn(m, a.cls), node, argv, kwv)
            return V({Inst(a.cls)})
        if isinstance(a, Inst):
            m = self.tree.method(a.cls, "__call__")
            if isinstance(m, Function):
                return self.invoke(Fn(m, a.cls), node, argv, kwv)
            self.add("unknown", node, f"calls an instance of {a.cls.key}")
            return U(a.cls.key)
        self.add("unknown", node, f"calls {a!r}")
        return U(repr(a))
