"""What the code of a Keras tree may read of the state `Layer.__call__`'s steps set up (issue 43).

The analysis is static: the tree is parsed with `ast` (as `forkgen report` reads it), never
imported. For a class and one backend it gives the *effects* of its `call()` and of everything
that call reaches in Keras's own code (`Effect.kind`):

- `reads:<key>` / `writes:<key>`: a `get_global_attribute("<key>")` / `set_global_attribute` of
  Keras's global state. Every step of `Layer.__call__` the fast lane could skip provides its state
  through such a key (verdicts.STEPS), so what a class may observe of a step is derived from the
  code, never listed per class: creating a variable reads `name_scope_stack` through
  `current_path()`, `Variable.value` reads `autocast_scope`.
- `stored:<class>.<attr>`: `self.<attr>(...)` where `<attr>` is no member of the class: a callable
  stored on the instance (an activation). The verdict makes it a run-time condition: the attribute
  is one of the functions it was typed as whose own summary allows the step.
- `unknown`: what the analysis does not follow (a value it cannot type that is called, read or
  operated on; a computed global key; `getattr` with a computed name; a decorator it does not
  know; `eval` and its kin). It blocks every step: the analysis fails closed.
- `assumes:<name>`: a branch or a field the analysis read under a run-time fact (ASSUMED,
  ASSUMED_FIELDS, and `any_symbolic_tensors(...)` false for eager inputs) that the patch checks.
- `method:<class>.<name>`, `module:<module>`: a plain method read on an instance and a module
  whose names were read; the patch checks that no instance attribute shadows the first and that
  the second's functions are those of import time.
- `reaches:<what>`: informative (NOTABLE: calls a layer, creates a variable, adds a loss).

Values are abstract (a frozenset of atoms): EXT (a value of another package or a builtin; a
container is its elements' atoms plus EXT), Inst(c) (an instance of exactly class c of the tree),
Fn (a function with its self class and closure), Cls, ModuleRef, Unk (not known, with where it
came from: using it is an `unknown` effect). Summaries are keyed by (function, self class, the
arguments' values, closure) and give (effects, returned value); recursion is solved by fixpoint.
`self.<field>` is typed from the assignments in the class's MRO (and from code elsewhere whose
receiver is typed as the class), a global-state key from every `set_global_attribute` of it, a
module-level value from its definition. Another package calls the functions it is given with the
other arguments' values, and runs the protocol methods (EXTERNAL_PROTOCOL) of the Keras objects it
is given; what it returns is its own value plus the Keras objects given to it.

The soundness assumptions, each checked at run time by the patch or stated in docs/patches.md:
other packages touch Keras objects only through their special methods and call only the functions
they are given; instance attributes are written by Keras code whose receiver the analysis types
(a user who sets `layer._kernel = ...` from outside is not seen); module-level functions are the
objects of import time; no instance attribute shadows a plain method reached on `self`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from .codeindex import Class, Function, Tree, Value, dotted
from .effectvalues import (
    _NO_ARGS,
    E_,
    EXT,
    Effect,
    Fn,
    Inst,
    Unk,
    V,
    Value_,
    _is_self_target,
    _params,
    _Stop,
)
from .effectwalk import _W

#: `<expr>.<name> = value` in a function of the tree: (the class whose body defines the function,
#: or None; (module, qualname, path, function); the assignment).
_Outside = tuple[Class | None, tuple[str, str, str, ast.FunctionDef | ast.AsyncFunctionDef], ast.Assign]


class Analysis:
    def __init__(self, tree: Tree, stop_at_unknown: bool = True) -> None:
        self.tree = tree
        #: Stop a summary at its first `unknown` (it blocks every step: the rest would not change
        #: the verdict, and following what the analysis cannot type is what costs time).
        self.stop_at_unknown = stop_at_unknown
        #: The functions being analysed, outermost first (where an `unknown` was reached from).
        self.stack: list[str] = []
        #: For each `unknown` a summary stopped at, the functions it was reached through.
        self.trails: dict[Effect, tuple[str, ...]] = {}
        self.memo: dict[tuple[Any, ...], tuple[frozenset[Effect], Value_]] = {}
        self.active: set[tuple[Any, ...]] = set()
        self.derived: dict[tuple[Any, ...], Value_] = {}
        self._outside: dict[str, list[_Outside]] | None = None
        self.derived_done: set[tuple[Any, ...]] = set()
        self.derived_active: set[tuple[Any, ...]] = set()
        self.partial: set[tuple[Any, ...]] = set()
        self.done: set[tuple[Any, ...]] = set()
        self.grew = False

    def run(self, fn: Function, self_class: Class | None, args: dict[str, Value_], env: tuple[tuple[str, Value_], ...] = (),
            typing: bool = False) -> tuple[frozenset[Effect], Value_]:
        key = (fn.path, fn.node.lineno, fn.node.col_offset, self_class.key if self_class else None, typing,
               frozenset(args.items()), env)
        if key in self.done:
            return self.memo[key]
        if key in self.active:
            self.partial.add(key)
            return self.memo.get(key, (frozenset(), frozenset()))
        self.active.add(key)
        self.stack.append(fn.key)
        try:
            w = _W(self, fn, self_class, args, dict(env), typing)
            w.go()
        finally:
            self.active.discard(key)
            self.stack.pop()
        result = (frozenset(w.found), frozenset(w.returns) or V({EXT}))
        if key in self.partial and self.memo.get(key) != result:
            self.grew = True
        self.memo[key] = result
        self.done.add(key)
        return result

    def derive(self, key: tuple[Any, ...], compute: Callable[[], Value_]) -> Value_:
        """A value typed once per round (fields, global state, module values); a cycle reads the
        previous round's value and, if it grew, the round is run again."""
        if key in self.derived_done:
            return self.derived[key]
        if key in self.derived_active:
            self.partial.add(key)
            return self.derived.get(key, V())
        self.derived_active.add(key)
        try:
            result = compute()
        finally:
            self.derived_active.discard(key)
        if key in self.partial and self.derived.get(key) != result:
            self.grew = True
        self.derived[key] = result
        self.derived_done.add(key)
        return result

    def module_value(self, r: Value) -> Value_:
        """A module-level value, typed from its definition; one the code mutates in place
        (`X[k] = v`, `X.update(...)`, ...) may also hold what a user put there."""
        def compute() -> Value_:
            fn = Function(r.module, f"<module {r.name}>", r.path, ast.copy_location(ast.Lambda(args=_NO_ARGS, body=r.node), r.node))
            w = _W(self, fn, None, {}, typing=True)
            out = set(w.value(r.node))
            if re.search(rf"\b{re.escape(r.name)}(\[[^\]\n]*\]\s*=[^=]|\.(update|append|add|setdefault|extend|insert)\()", self.tree.files[r.path]):
                out.add(Unk(f"module-level {r.name} of {r.module}, mutated in place"))
            return frozenset(out)
        return self.derive(("module", r.module, r.name), compute)

    def outside_assignments(self) -> dict[str, list[_Outside]]:
        """Every `<expr>.<name> = value` of the tree, by name: code outside a class that sets an
        attribute of its instances (`variable.regularizer = ...`) types it too."""
        if self._outside is None:
            self._outside = {}
            for module, rel in self.tree.paths.items():
                info = self.tree.module(module)
                if info is None:
                    continue
                for top in info.tree.body:
                    owners = [(Class(module, top.name, rel, top), f) for f in top.body] if isinstance(top, ast.ClassDef) else [(None, top)]
                    for owner, f in owners:
                        if not isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                            continue
                        q = f"{owner.name}.{f.name}" if owner else f.name
                        for node in ast.walk(f):
                            if isinstance(node, ast.Assign):
                                for t in node.targets:
                                    if isinstance(t, ast.Attribute):
                                        self._outside.setdefault(t.attr, []).append((owner, (module, q, rel, f), node))
        return self._outside

    def stored_candidates(self, cls: Class, attr: str) -> list[Fn]:
        return stored_candidates(self, cls, attr)

    def field(self, cls: Class, name: str) -> Value_:
        """What `self.<name> = ...` assigns in the methods of `cls`'s MRO (their parameters unknown)."""
        return self.derive(("field", cls.key, name), lambda: self._field(cls, name))

    def _field(self, cls: Class, name: str) -> Value_:
        if True:
            found: set[Any] = set()
            for owner in self.tree.mro(cls):
                for stmt in owner.node.body:
                    if not isinstance(stmt, ast.FunctionDef):
                        continue
                    for node in ast.walk(stmt):
                        if isinstance(node, ast.Assign):
                            for t in node.targets:
                                if isinstance(t, ast.Attribute) and t.attr == name and dotted(t.value) == (stmt.args.args[0].arg if stmt.args.args else "self"):
                                    fn = Function(owner.module, f"{owner.name}.{stmt.name}", owner.path, stmt, owner)
                                    w = _W(self, fn, cls, {}, typing=True)
                                    w.narrow(stmt, node)
                                    reaching = w.reaching(node)
                                    found |= reaching if reaching is not None else w.value(node.value)
            mro_nodes = {id(c.node) for c in self.tree.mro(cls)}
            for fowner, fnode, assign in self.outside_assignments().get(name, ()):
                if fowner is not None and id(fowner.node) in mro_nodes and _is_self_target(fnode, assign, name):
                    continue  # the class's own `self.<name> = ...`, typed above
                if fnode[0].startswith("keras.src.backend.") and fnode[0].split(".")[3] not in ("common", self.tree.backend):
                    continue  # another backend's code
                fn = Function(fnode[0], fnode[1], fnode[2], fnode[3], fowner)
                w = _W(self, fn, fowner, {}, typing=True)
                w.narrow(fnode[3], assign)
                receivers = frozenset().union(*(w.value(t.value) for t in assign.targets if isinstance(t, ast.Attribute) and t.attr == name))
                # Only where the receiver is typed as instances of the class (or of its subclasses)
                # and nothing else: a receiver typed as a wide union is not taken to be one.
                if receivers and all(isinstance(r, Inst) and cls.key in (c.key for c in self.tree.mro(r.cls)) for r in receivers):
                    found |= w.value(assign.value)
            if found:
                return frozenset(found)
            getattr_ = self.tree.method(cls, "__getattr__")
            if isinstance(getattr_, Function):
                return self.run(getattr_, cls, {}, typing=True)[1]
            if [b for b in self.tree.external_bases(cls) if b.rpartition(".")[2] != "object"]:
                return E_  # another package's base class defines it
            return V()  # never assigned by the class: reading it raises AttributeError


def stored_candidates(analysis: Analysis, cls: Class, attr: str) -> list[Fn]:
    """The module-level functions a stored callable is typed as (closures and methods excluded:
    the run-time check compares the attribute with module-level objects)."""
    return sorted((a for a in analysis.field(cls, attr) if isinstance(a, Fn) and a.fn.enclosing is None
                   and a.fn.defined_in is None and not a.env), key=lambda a: a.fn.key)


def summary(analysis: Analysis, fn: Function, cls: Class | None = None) -> frozenset[Effect]:
    """The effects of `fn` (a method of `cls`, or a module-level function) called with values of
    another package, to a fixed point. Summaries already final are kept across calls."""
    params = _params(fn.node)[1:] if cls is not None else _params(fn.node)
    done, derived_done = set(analysis.done), set(analysis.derived_done)
    while True:
        analysis.grew, analysis.partial = False, set()
        try:
            result = analysis.run(fn, cls, {p: E_ for p in params})[0]
        except _Stop as stop:
            # What was computed since may rest on a cycle's value that was never finished.
            analysis.done, analysis.derived_done = done, derived_done
            analysis.active.clear()
            analysis.derived_active.clear()
            analysis.stack.clear()
            analysis.trails[stop.effect] = stop.trail
            return frozenset({stop.effect})
        if not analysis.grew:
            return result
        # A cycle's value grew: compute again what this summary computed. What was final before
        # it began (summaries that reached their own fixed point) rests on no value of this one.
        analysis.done, analysis.derived_done = set(done), set(derived_done)


def of_class(analysis: Analysis, cls: Class) -> frozenset[Effect]:
    """The effects of `cls`'s `call()` (as its MRO resolves it) on an instance of exactly `cls`."""
    call = analysis.tree.method(cls, "call")
    if not isinstance(call, Function):  # no `def call` to summarise: an AttributeError, as reading its `.node` gives
        raise AttributeError(f"{cls.key}.call is not a function of the tree: {call!r}")
    return summary(analysis, call, cls)
