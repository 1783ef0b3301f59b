"""The flow of values inside one function (effects.py): where locals are bound, their values
flow-insensitively, and the few flow-sensitive facts the analysis reads (narrowing by `isinstance`,
`is None`, membership; the value a parameter has at a top-level statement; branches the run-time
assumptions rule out)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from .codeindex import Function, ModuleRef, Resolved, Tree, dotted
from .effectvalues import (
    ASSUMED,
    E_,
    EXT,
    Cls,
    Inst,
    Unk,
    V,
    Value_,
    _bound,
    _walk_own,
    _walk_own_stmt,
    elements,
)

#: Per function node and name of its `self`: where each local name is bound (read only once made).
_BINDS: WeakKeyDictionary[ast.AST, dict[str | None, dict[str, list[ast.AST | tuple[ast.Import | ast.ImportFrom, ast.alias]]]]] = WeakKeyDictionary()


class Flow:
    """The part of the walker (effectwalk._W) that types locals."""

    if TYPE_CHECKING:  # given by the walker
        tree: Tree
        fn: Function
        self_name: str | None
        params: set[str]
        types: dict[str, Value_]

        def value(self, node: ast.expr | None) -> Value_: ...
        def atom(self, r: Resolved | None) -> Value_: ...
        def add(self, kind: str, node: ast.AST, what: str) -> None: ...

    def collect(self) -> None:
        """Where each local name is bound: assignments, loops, with, imports, handlers (flow-insensitive)."""
        self.typed: set[str] = set()
        known = _BINDS.setdefault(self.fn.node, {})  # the same for every summary of the function
        if self.self_name in known:
            self.binds = known[self.self_name]
            return
        self.binds = known[self.self_name] = {}
        body = [self.fn.node.body] if isinstance(self.fn.node, ast.Lambda) else self.fn.node.body
        for stmt in body:
            for node in _walk_own_stmt(stmt):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
                    targets = [node.target]
                elif isinstance(node, ast.For):
                    targets = [node.target]
                elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                    targets = [node.optional_vars]
                elif isinstance(node, ast.NamedExpr):
                    targets = [node.target]
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    self.binds.setdefault(node.name, []).append(node)
                elif isinstance(node, ast.Import | ast.ImportFrom):
                    for alias in node.names:
                        self.binds.setdefault(alias.asname or alias.name.split(".")[0], []).append((node, alias))
                for t in targets:
                    for n in _bound(t):
                        if n != self.self_name:
                            self.binds.setdefault(n, []).append(node)


    def reaching(self, target: ast.Assign | ast.Return) -> Value_ | None:
        """`... = n` or `return n` as a top-level statement, `n` a parameter: the value `n` has
        there, following the top-level statements before it in order. Narrowed by `if n is None`,
        `if isinstance(n, T)` (T another package's type) and `if n [not] in X` (X another
        package's values), a branch ending in `raise` or `return` reaching nothing. None where the
        statement is not of that form (the flow-insensitive type is used)."""
        body = self.fn.node.body if not isinstance(self.fn.node, ast.Lambda) else []
        if (not isinstance(target.value, ast.Name) or target not in body or target.value.id not in self.params
                or target.value.id == self.self_name):
            return None
        n = target.value.id

        def evaluate(expr: ast.expr, state: Value_) -> Value_:
            saved, was = self.types.get(n), n in self.typed
            self.typed.add(n)
            self.types[n] = state
            try:
                return self.value(expr)
            finally:
                if saved is None:
                    self.types.pop(n, None)
                else:
                    self.types[n] = saved
                if not was:
                    self.typed.discard(n)

        def narrowed(test: ast.expr, state: Value_) -> tuple[Value_, Value_]:
            """(state where `test` holds, state where it does not)."""
            if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == n and len(test.ops) == 1:
                op, right = test.ops[0], test.comparators[0]
                if isinstance(op, ast.Is | ast.IsNot) and isinstance(right, ast.Constant) and right.value is None:
                    return (E_, state) if isinstance(op, ast.Is) else (state, E_)
                if isinstance(op, ast.In | ast.NotIn) and self.value(right) == E_:
                    return (E_, state) if isinstance(op, ast.In) else (state, E_)
            if (isinstance(test, ast.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2
                    and isinstance(test.args[0], ast.Name) and test.args[0].id == n and self.value(test.args[1]) == E_):
                return E_, state
            return state, state

        def through(stmts: list[ast.stmt], state: Value_) -> Value_ | None:
            for st in stmts:
                if isinstance(st, ast.Raise | ast.Return):
                    return None
                if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and st.targets[0].id == n:
                    state = evaluate(st.value, state)
                elif isinstance(st, ast.If):
                    yes, no = narrowed(st.test, state)
                    a, b = through(st.body, yes), through(st.orelse, no)
                    if a is None and b is None:
                        return None
                    state = (a or V()) | (b or V())
                elif any(isinstance(x, ast.Name) and x.id == n and isinstance(x.ctx, ast.Store) for x in ast.walk(st)):
                    state = state | self.local(n)  # rebinds it somewhere inside: the flow-insensitive type
            return state

        state = through(body[: body.index(target)], self.types.get(n, V()))
        return V() if state is None else state


    def returned(self, node: ast.Return) -> Value_:
        """What a return statement gives (see `reaching` for `return n` at the top level)."""
        if node.value is None:
            return E_
        reached = self.reaching(node)
        return reached if reached is not None else self.value(node.value)


    def narrow(self, root: ast.AST, target: ast.AST) -> None:
        """Inside `if isinstance(name, T):` on the way from `root` to `target`, `name` is a T."""
        def path(node: ast.AST) -> list[tuple[ast.AST, ast.AST]] | None:
            if node is target:
                return []
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                    continue
                rest = path(child)
                if rest is not None:
                    return [(node, child), *rest]
            return None
        for node, child in path(root) or ():
            if not isinstance(node, ast.If) or child not in node.body:
                continue
            t = node.test
            if (isinstance(t, ast.Call) and dotted(t.func) == "isinstance" and len(t.args) == 2
                    and isinstance(t.args[0], ast.Name) and t.args[0].id in self.binds | self.types.keys()):
                kinds = t.args[1].elts if isinstance(t.args[1], ast.Tuple) else [t.args[1]]
                out: set[Any] = set()
                for k in kinds:
                    for atom in self.value(k):
                        if atom == EXT:
                            out.add(EXT)
                        elif isinstance(atom, Cls):
                            out.add(Inst(atom.cls))
                            out |= {Inst(c) for c in self.tree.subclasses_of(atom.cls.key)}
                            out.add(Unk(f"a subclass of {atom.cls.key} outside the tree"))
                        else:
                            out.add(Unk(f"isinstance against {ast.unparse(k)}"))
                self.types[t.args[0].id] = frozenset(out)
                self.typed.add(t.args[0].id)


    def local(self, n: str) -> Value_:
        """The union of what every binding of local `n` gives it (computed when first read)."""
        if n in self.typed:
            return self.types.get(n, V())
        self.typed.add(n)
        out = set(self.types.get(n, V()))
        self.types[n] = frozenset(out)
        for node in self.binds[n]:
            if isinstance(node, tuple):
                imp, alias = node
                if isinstance(imp, ast.ImportFrom) and imp.module and imp.module.split(".")[0] == "keras":
                    r = self.tree.resolve_dotted(imp.module, alias.name) or (ModuleRef(f"{imp.module}.{alias.name}") if f"{imp.module}.{alias.name}" in self.tree.paths else None)
                    out |= self.atom(r)
                elif isinstance(imp, ast.Import) and alias.name.split(".")[0] == "keras":
                    out.add(ModuleRef(alias.name if alias.asname else alias.name.split(".")[0]))
                else:
                    out.add(EXT)
            elif isinstance(node, ast.ExceptHandler):
                out.add(EXT)
            elif isinstance(node, ast.For):
                out |= elements(self.value(node.iter))
            elif isinstance(node, ast.withitem):
                out |= self.value(node.context_expr)
            else:
                assert isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr)  # as `collect` binds
                out |= self.value(node.value)
            self.types[n] = frozenset(out)
        return self.types[n]


    def locals_types(self) -> None:
        """Every local's type, to a fixed point (3 rounds)."""
        for _ in range(3):
            before = dict(self.types)
            self.typed = set()
            for n in list(self.binds):
                self.local(n)
            if self.types == before:
                break


    def bind(self, target: ast.AST, v: Value_) -> None:
        """A comprehension's target (its own scope)."""
        for n in _bound(target):
            if n != self.self_name:
                self.types[n] = self.types.get(n, V()) | v
                self.typed.add(n)


    def live_returns(self, stmts: list[ast.stmt]) -> Iterable[ast.Return]:
        """The return statements of `stmts`, not those of branches the assumptions rule out."""
        for st in stmts:
            if isinstance(st, ast.If):
                dead = self.symbolic(st.test)
                if dead is not True:
                    yield from self.live_returns(st.body)
                if dead is not False:
                    yield from self.live_returns(st.orelse)
            elif isinstance(st, ast.Return):
                yield st
            elif not isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield from (n for n in _walk_own(st) if isinstance(n, ast.Return))


    def narrows(self, test: ast.expr, holds: bool) -> dict[str, Value_]:
        """Locals that are another package's value where `test` holds (`holds`) or fails:
        `isinstance(n, T)` and `type(n) is T` with T another package's type, `n is None`."""
        if isinstance(test, ast.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2 and isinstance(test.args[0], ast.Name):
            if holds and self.value(test.args[1]) == E_:
                return {test.args[0].id: E_}
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is | ast.IsNot):
            left, right = test.left, test.comparators[0]
            yes = holds == isinstance(test.ops[0], ast.Is)
            if isinstance(left, ast.Call) and dotted(left.func) == "type" and len(left.args) == 1 and isinstance(left.args[0], ast.Name):
                if yes and self.value(right) == E_:
                    return {left.args[0].id: E_}
            elif isinstance(left, ast.Name) and isinstance(right, ast.Constant) and right.value is None and yes:
                return {left.id: E_}
        return {}


    def symbolic(self, test: ast.expr) -> bool | None:
        """True where `test` is false under the run-time assumptions (ASSUMED), False where it is
        true, None where the analysis takes both branches."""
        neg = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        inner = test.operand if neg and isinstance(test, ast.UnaryOp) else test
        if isinstance(inner, ast.Call) and dotted(inner.func):
            f = self.tree.resolve_dotted(self.fn.module, dotted(inner.func))
            if isinstance(f, Function) and f.qualname == "any_symbolic_tensors":
                self.add("assumes:eager inputs", test, ast.unparse(test))
                return not neg
        owner = self.fn.qualname.rpartition(".")[0].rpartition(".")[2] + "." + self.fn.qualname.rpartition(".")[2]
        for name, (where, source) in ASSUMED.items():
            if owner == where and ast.unparse(inner) == source:
                self.add(f"assumes:{name}", test, source)
                return not neg
        return None
