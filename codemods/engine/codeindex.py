"""The modules of a Keras tree, read statically for the effect analysis (`effects.py`).

The tree is given as `{relative path: text}`, parsed with `ast` on first use and never imported
(as `forkgen report` reads it). Names resolve as Python would bind them for one backend: the
module's `if backend() == "<name>":` branches are decided, imports, re-exports and star imports
are followed; classes get their MRO (C3 over the bases found in the tree), and `members_named`
finds every class of the tree that binds a name (the class-hierarchy analysis of values whose
class is not known).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The backends whose `if backend() == "<name>":` branches the resolver can decide.
BACKENDS = ("tensorflow", "jax", "torch", "numpy", "openvino")
#: Special methods that run when an object is made, not when it is used.
CONSTRUCTION = frozenset({"__init__", "__new__", "__init_subclass__", "__class_getitem__", "__set_name__",
                          "__post_init__", "__call__", "__enter__", "__exit__", "__aenter__", "__aexit__"})
def analysed(relative: str) -> bool:
    """Whether the file at `relative` (a path of the tree) is Keras's own code the index reads:
    `keras/src/**/*.py`, tests and test utilities left out."""
    name = relative.rsplit("/", 1)[-1]
    return (relative.startswith("keras/src/") and relative.endswith(".py") and not name.endswith("_test.py")
            and name not in ("test_utils.py", "conftest.py") and not relative.startswith("keras/src/testing/"))


@dataclass(frozen=True)
class Function:
    """A `def` (or `lambda`) of the tree: `qualname` in `module`, at `path`."""

    module: str
    qualname: str
    path: str
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    #: The class whose body defines it (a method), or None.
    defined_in: Class | None = None
    #: The function whose body defines it (a nested def or lambda), or None.
    enclosing: Function | None = None

    @property
    def key(self) -> str:
        return f"{self.module}.{self.qualname}"

    @property
    def decorators(self) -> list[ast.expr]:
        return [] if isinstance(self.node, ast.Lambda) else self.node.decorator_list


@dataclass(frozen=True)
class Class:
    module: str
    name: str
    path: str
    node: ast.ClassDef

    @property
    def key(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class ModuleRef:
    name: str


@dataclass(frozen=True)
class Value:
    """A module-level name bound to a computed value (a call, a comprehension, an operator)."""

    module: str
    name: str
    path: str
    node: ast.expr


@dataclass(frozen=True)
class Literal:
    """A module-level value the analysis knows holds no Keras code (a literal, a container)."""

    node: ast.expr


Resolved = Function | Class | ModuleRef | Literal | Value


@dataclass
class _Module:
    name: str
    path: str
    package: str
    tree: ast.Module
    #: name -> ("import", module, attr or None) | ("def", node) | ("value", node)
    bindings: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    stars: list[str] = field(default_factory=list)
    explicit_all: tuple[object, ...] | None = None


def dotted(node: ast.AST | None) -> str:
    """`a.b.c` of a Name or Attribute chain; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _backend_test(test: ast.expr) -> str | None:
    """The backend `test` names when it is `backend() == "<name>"` (any `*.backend()` spelling)."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.left, ast.Call) and not test.left.args
            and dotted(test.left.func).split(".")[-1] == "backend"
            and isinstance(test.comparators[0], ast.Constant) and isinstance(test.comparators[0].value, str)):
        return test.comparators[0].value
    return None


def module_name(relative: str) -> tuple[str, str]:
    """`(module, package)` of a file path relative to the tree root."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), ".".join(parts[:-1])
    return ".".join(parts), ".".join(parts[:-1])


class Tree:
    """The modules of a tree given as `{relative path: text}`, each parsed on first use, and the
    names they bind for one backend."""

    def __init__(self, files: Mapping[str, str], backend: str = "torch") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
        self.files = files
        self.backend = backend
        self.paths = {module_name(relative)[0]: relative for relative in files if relative.endswith(".py")}
        #: Every package a module of the tree is in (`import a.b.c` binds `a`, whose `b` is `a.b`,
        #: whether or not the tree holds `a/__init__.py`).
        self.packages = {".".join(m.split(".")[:i]) for m in self.paths for i in range(1, m.count(".") + 1)}
        self._modules: dict[str, _Module | None] = {}
        self._members: dict[str, list[tuple[Class, ast.stmt | None]]] = {}
        self._mro: dict[str, list[Class]] = {}
        #: What `resolve` and `method` found, so that a name gives the same object each time (the
        #: analysis compares and hashes them by the million: identical objects compare at once).
        self._resolved: dict[tuple[str, str], Resolved | None] = {}
        self._methods: dict[tuple[str, str, str | None], Resolved | None] = {}
        self._records: dict[ast.AST, Resolved] = {}
        #: The files that do not parse (read as binding nothing), in the order met.
        self.skipped: list[str] = []

    # -- modules and names -------------------------------------------------------------------
    def module(self, name: str) -> _Module | None:
        if name not in self._modules:
            self._modules[name] = None  # a module importing itself back resolves to nothing
            relative = self.paths.get(name)
            if relative is not None:
                try:
                    tree = ast.parse(self.files[relative], relative)
                except (SyntaxError, ValueError):
                    self.skipped.append(relative)
                    return None
                info = _Module(name, relative, module_name(relative)[1], tree)
                self._bind(info, tree.body)
                self._modules[name] = info
        return self._modules[name]

    def _bind(self, info: _Module, body: Iterable[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                named = _backend_test(stmt.test)
                if named is None:
                    self._bind(info, stmt.body)
                    self._bind(info, stmt.orelse)
                else:
                    self._bind(info, stmt.body if named == self.backend else stmt.orelse)
            elif isinstance(stmt, ast.Try):
                self._bind(info, stmt.body)
                for handler in stmt.handlers:
                    self._bind(info, handler.body)
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                info.bindings[stmt.name] = ("def", stmt)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    info.bindings[bound] = ("import", alias.name if alias.asname else bound, None)
            elif isinstance(stmt, ast.ImportFrom):
                source = stmt.module or ""
                if stmt.level:
                    parts = info.package.split(".")
                    source = ".".join([*parts[: len(parts) - stmt.level + 1], *([source] if source else [])])
                for alias in stmt.names:
                    if alias.name == "*":
                        info.stars.append(source)
                    else:
                        info.bindings[alias.asname or alias.name] = ("import", source, alias.name)
            elif isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    if isinstance(target, ast.Name):
                        if target.id == "__all__" and isinstance(stmt.value, ast.List | ast.Tuple):
                            info.explicit_all = tuple(e.value for e in stmt.value.elts if isinstance(e, ast.Constant))
                        info.bindings[target.id] = ("value", stmt.value)

    def resolve(self, module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> Resolved | None:
        """What `name` is in `module`, followed through imports, re-exports and star imports;
        None for a name of another package, or unbound."""
        if not seen:
            if (module, name) not in self._resolved:
                self._resolved[(module, name)] = self._resolve(module, name, frozenset({(module, name)}))
            return self._resolved[(module, name)]
        if (module, name) in seen:
            return None
        return self._resolve(module, name, seen | {(module, name)})

    def _resolve(self, module: str, name: str, seen: frozenset[tuple[str, str]]) -> Resolved | None:
        info = self.module(module)
        if info is None:
            return self.submodule(module, name)
        binding = info.bindings.get(name)
        if binding is None:
            for star in info.stars:
                source = self.module(star)
                if source is None or name.startswith("_") or (source.explicit_all is not None and name not in source.explicit_all):
                    continue
                if (found := self.resolve(star, name, seen)) is not None:
                    return found
            return self.submodule(module, name)
        kind = binding[0]
        if kind == "import":
            _, source, attr = binding
            if attr is None:
                return ModuleRef(source) if source in self.paths or source in self.packages else None
            return self.resolve(source, attr, seen) or self.submodule(source, attr)
        if kind == "def":
            return self._made(binding[1], lambda node: Class(module, node.name, info.path, node)
                              if isinstance(node, ast.ClassDef) else Function(module, node.name, info.path, node))
        value = binding[1]
        if isinstance(value, ast.Name | ast.Attribute) and dotted(value):
            return self.resolve_dotted(module, dotted(value), seen)
        if _is_plain_literal(value):
            return Literal(value)
        return Value(module, name, info.path, value)

    def _made(self, node: Any, make: Callable[[Any], Resolved]) -> Resolved:
        """The one record of a `def` or `class` statement (made on first use)."""
        if node not in self._records:
            self._records[node] = make(node)
        return self._records[node]

    def submodule(self, package: str, name: str) -> ModuleRef | None:
        """The module `package.name` of the tree, if any (an attribute an import of it binds)."""
        full = f"{package}.{name}"
        return ModuleRef(full) if full in self.paths or full in self.packages else None

    def resolve_dotted(self, module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> Resolved | None:
        """`a.b.c` read in `module`: `a` resolved there, then attributes of modules and classes."""
        first, *rest = name.split(".")
        found = self.resolve(module, first, seen)
        for attr in rest:
            if isinstance(found, ModuleRef):
                found = self.resolve(found.name, attr, seen)
            elif isinstance(found, Class):
                member = self.member(found, attr)
                found = self._member_value(member[0], member[1]) if member else None
            else:
                return None
        return found

    def has_external_star(self, module: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether `module` (or a module it star-imports) star-imports another package's names."""
        info = self.module(module)
        if info is None or module in seen:
            return False
        return any(star not in self.paths or self.has_external_star(star, seen | {module}) for star in info.stars)

    def is_external(self, module: str, name: str) -> bool:
        """Whether `name` in `module` is bound by an import of another package, or a builtin."""
        info = self.module(module)
        binding = info.bindings.get(name) if info else None
        if binding is None:
            return name in vars(builtins) and self.resolve(module, name) is None
        return binding[0] == "import" and not binding[1].split(".")[0] == "keras" and binding[1] not in self.paths

    # -- classes -------------------------------------------------------------------------------
    def mro(self, cls: Class) -> list[Class]:
        """C3 linearisation over the bases found in the tree."""
        if cls.key not in self._mro:
            self._mro[cls.key] = [cls]  # a cycle through mis-resolved names stops here
            bases = []
            for base in cls.node.bases:
                found = self.resolve_dotted(cls.module, dotted(base)) if dotted(base) else None
                if isinstance(found, Class) and found.key != cls.key:
                    bases.append(found)
            merged = _c3([*([c.key for c in self.mro(b)] for b in bases), [b.key for b in bases]])
            by_key = {c.key: c for b in bases for c in self.mro(b)}
            self._mro[cls.key] = [cls, *(by_key[k] for k in merged)]
        return self._mro[cls.key]

    def member(self, cls: Class, name: str, after: str | None = None) -> tuple[Class, ast.stmt] | None:
        """The statement binding `name` in the first class of `cls`'s MRO (after the class
        `after`, for `super()`) that binds it."""
        order = self.mro(cls)
        if after is not None:
            keys = [c.key for c in order]
            order = order[keys.index(after) + 1:] if after in keys else []
        for owner in order:
            found = _class_member(owner.node, name)
            if found is not None:
                return owner, found
        return None

    def _member_value(self, owner: Class, stmt: ast.stmt) -> Resolved | None:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            return self._made(stmt, lambda node: Function(owner.module, f"{owner.name}.{node.name}", owner.path, node, owner))
        value = getattr(stmt, "value", None)
        if isinstance(value, ast.Name | ast.Attribute) and dotted(value):
            inner = _class_member(owner.node, dotted(value))
            if inner is not None and inner is not stmt:
                return self._member_value(owner, inner)
            return self.resolve_dotted(owner.module, dotted(value))
        if isinstance(value, ast.expr) and _is_plain_literal(value):
            return Literal(value)
        return None

    def members_named(self, name: str) -> list[tuple[Class, ast.stmt | None]]:
        """Every class of the tree (nested ones too) that binds `name` in its body."""
        if not self._members:
            for module, relative in sorted(self.paths.items()):
                info = self.module(module)
                for node in ast.walk(info.tree) if info else ():
                    if isinstance(node, ast.ClassDef):
                        cls = Class(module, node.name, relative, node)
                        for member in {*_bound_names(node)}:
                            self._members.setdefault(member, []).append((cls, _class_member(node, member)))
        return self._members.get(name, [])

    def external_bases(self, cls: Class) -> list[str]:
        """The bases of `cls`'s MRO that are not classes of the tree (`object` left out), as written."""
        found = []
        for owner in self.mro(cls):
            for base in owner.node.bases:
                name = dotted(base)
                resolved = self.resolve_dotted(owner.module, name) if name else None
                if not isinstance(resolved, Class) and name != "object":
                    found.append(name or ast.unparse(base))
        return found

    def special_method_names(self) -> list[str]:
        """The special methods (`__x__`) some class of the tree defines, construction excluded."""
        names = set()
        for text in self.files.values():
            names.update(re.findall(r"\bdef\s+(__\w+__)\s*\(", text))
        return sorted(names - CONSTRUCTION)

    def subclasses_of(self, base_key: str) -> Iterator[Class]:
        """Every top-level class of the tree whose MRO holds `base_key` (the class itself not)."""
        for module, relative in sorted(self.paths.items()):
            if "class " not in self.files[relative]:
                continue
            info = self.module(module)
            for node in info.tree.body if info else ():
                if isinstance(node, ast.ClassDef):
                    cls = Class(module, node.name, relative, node)
                    if cls.key != base_key and base_key in (c.key for c in self.mro(cls)):
                        yield cls

    def method(self, cls: Class, name: str, after: str | None = None) -> Resolved | None:
        """What `name` is on an instance of exactly `cls` at class level (a method, a property,
        a class attribute), or None when no class of its MRO in the tree binds it."""
        key = (cls.key, name, after)
        if key not in self._methods:
            found = self.member(cls, name, after)
            self._methods[key] = self._member_value(*found) if found else None
        return self._methods[key]


def _is_plain_literal(node: ast.expr | None) -> bool:
    """Constants, and containers of constants only (one holding a name is a `Value`)."""
    if node is None or isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Set | ast.List | ast.Tuple):
        return all(_is_plain_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(_is_plain_literal(e) for e in (*node.keys, *node.values))
    if isinstance(node, ast.JoinedStr):
        return all(isinstance(v, ast.Constant) for v in node.values)
    return (isinstance(node, ast.Call) and dotted(node.func) in ("set", "frozenset", "dict", "tuple", "list")
            and not node.keywords and all(_is_plain_literal(a) for a in node.args))


def _bound_names(node: ast.ClassDef) -> Iterator[str]:
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            yield stmt.name
        elif isinstance(stmt, ast.Assign):
            yield from (t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            yield stmt.target.id


def _class_member(node: ast.ClassDef, name: str) -> ast.stmt | None:
    found: ast.stmt | None = None  # the last binding in the body wins, as at run time
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
            if not any(dotted(d).endswith(".setter") or dotted(d).endswith(".deleter") for d in stmt.decorator_list):
                found = stmt
        elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            found = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            found = stmt
    return found


def _c3(seqs: list[list[str]]) -> list[str]:
    merged: list[str] = []
    seqs = [list(s) for s in seqs if s]
    while seqs:
        head = next((s[0] for s in seqs if not any(s[0] in t[1:] for t in seqs)), None)
        if head is None:  # inconsistent (Python would refuse the class): depth-first order
            return merged + [x for x in dict.fromkeys(x for s in seqs for x in s) if x not in merged]
        merged.append(head)
        seqs = [rest for s in seqs if (rest := [x for x in s if x != head])]
    return merged
