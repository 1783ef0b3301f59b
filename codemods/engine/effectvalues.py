"""The values, effects and rules of the effect analysis (effects.py): abstract values, the run-time
assumptions the analysis may read code under, and what other code may run on Keras objects."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from .codeindex import Class, Function, dotted

#: The functions whose literal first argument names the global state they read or write.
GLOBAL_ACCESS = {"get_global_attribute": "reads", "set_global_attribute": "writes"}
#: A name that reaches Keras's global state other than through those functions.
GLOBAL_STATE_OBJECT = "GLOBAL_STATE_TRACKER"
#: Decorators that return the function itself (or the descriptor Python's own kinds of method
#: are): the decorated function is analysed as it is written.
TRANSPARENT_DECORATORS = frozenset({"property", "staticmethod", "classmethod", "abstractmethod",
                                    "abc.abstractmethod", "keras_export", "cached_property",
                                    "functools.cached_property"})
#: Builtins that run code given by name or text: what they do is not followed.
DYNAMIC_BUILTINS = frozenset({"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "setattr",
                              "delattr"})
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.MatMult: "matmul", ast.Div: "truediv",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift", ast.RShift: "rshift",
           ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor"}
_ORDER = ("__lt__", "__le__", "__gt__", "__ge__")
#: Special methods any code may run on any value: equality and hashing (containers, `in`), truth,
#: iteration, integer conversion, and finalisation.
ALWAYS = ("__del__",)
#: What another package may run on the Keras objects it is given: its array and tensor
#: protocols, conversions, comparisons, item access, text.
EXTERNAL_PROTOCOL = (*ALWAYS, "__eq__", "__ne__", "__hash__", "__bool__", "__len__", "__iter__", "__next__", "__index__", "__torch_function__", "__torch_dispatch__", "__array__", "__array_function__",
                     "__array_ufunc__", "__jax_array__", "__tf_tensor__", "__dlpack__", "__dlpack_device__",
                     "__int__", "__float__", "__complex__", "__getitem__", "__contains__", *_ORDER, "__str__",
                     "__repr__", "__format__", "__abs__", "__round__", "__reversed__", "__copy__", "__deepcopy__",
                     "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")
#: What reaching a function of Keras means for a verdict's reasons: (module.qualname, what).
NOTABLE = {
    "keras.src.ops.operation.Operation.__call__": "calls an Operation or a layer",
    "keras.src.layers.layer.Layer.__call__": "calls a layer",
    "keras.src.layers.layer.Layer.add_loss": "adds a loss",
    "keras.src.layers.layer.Layer.add_weight": "creates a weight",
    "keras.src.backend.common.variables.Variable.__init__": "creates a variable",
}


@dataclass(frozen=True, order=True)
class Effect:
    """One effect: `kind` (see the module's docstring), where it is (`path`:`line`, in
    `function`), and what the code there is."""

    kind: str
    path: str
    line: int
    function: str
    what: str

    def where(self) -> str:
        return f"{self.path}:{self.line}"



def _params(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    a = node.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs,
                            *([a.kwarg] if a.kwarg else []))]


def _walk_own(node: ast.AST) -> tuple[ast.AST, ...]:
    """The nodes of a function body, not those of the defs, lambdas and classes nested in it
    (walked once per node: every summary of a function reads them)."""
    found = _OWN_NODES.get(node)
    if found is None:
        found = _OWN_NODES[node] = tuple(_own_nodes(node))
    return found


_OWN_NODES: WeakKeyDictionary[ast.AST, tuple[ast.AST, ...]] = WeakKeyDictionary()


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            yield from _own_nodes(child)


EXT = "EXT"
#: An abstract value: a frozenset of atoms (EXT, Unk, Inst, Fn, Cls, ModuleRef).
Value_ = frozenset[Any]


class _Interned:
    """One object per value: an atom made again is the object made first, so that the frozensets
    of atoms the analysis hashes and compares by the million meet identical objects (compared at
    once, without calling the dataclass's `__eq__`)."""

    __slots__ = ()
    _pool: ClassVar[dict[tuple[Any, ...], Any]]

    def __init_subclass__(cls) -> None:
        cls._pool = {}

    def __new__(cls, *args: Any) -> Any:
        found = cls._pool.get(args)
        if found is None:
            found = cls._pool[args] = object.__new__(cls)
        return found


@dataclass(frozen=True)
class Unk(_Interned):
    """A value the analysis does not know, and where it came from; `inside`: one held by a builtin
    container in the same abstract value (the container's own methods are not its use)."""

    why: str
    inside: bool = False


@dataclass(frozen=True)
class Inst(_Interned):
    cls: Class


@dataclass(frozen=True)
class Fn(_Interned):
    fn: Function
    self_class: Class | None = None
    #: The enclosing call's names and values, for a nested def or lambda.
    env: tuple[tuple[str, Value_], ...] = ()


@dataclass(frozen=True)
class Cls(_Interned):
    cls: Class


V = frozenset
E_ = V({EXT})
_NO_ARGS = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


#: Branches the analysis takes as not run, each with the run-time fact the patch checks before it
#: relies on a verdict: (method, test that is false while the fact holds). A release that changes
#: the test's code no longer matches, and both branches are analysed again (fail closed).
ASSUMED = {
    # Checked: `global_state.get_global_attribute("uninitialized_variables")` is empty. A variable is
    # created without a value only where it registers itself there, and leaves only when initialised.
    "initialized variables": ("Variable.value", "self._value is None"),
}


#: Fields the analysis takes as holding an instance of exactly one class of the tree, each with the
#: check the patch makes: (class whose MRO holds the field, field, the exact class). Checked at
#: run time: `type(layer.<field>) is <exact class>`.
ASSUMED_FIELDS = {
    "plain dtype policy": ("keras.src.layers.layer.Layer", "_dtype_policy", "keras.src.dtype_policies.dtype_policy.DTypePolicy"),
}


def U(why: str) -> Value_:
    return V({Unk(why)})


def contain(v: Value_) -> Value_:
    """A builtin container holding values `v`."""
    if not any(isinstance(a, Unk) and not a.inside for a in v):
        return E_ | v
    return E_ | frozenset(Unk(a.why, True) if isinstance(a, Unk) else a for a in v)


def elements(v: Value_) -> Value_:
    """What an item of `v` may be, `v` a container (or not)."""
    if not any(isinstance(a, Unk) and a.inside for a in v):
        return v
    return frozenset(Unk(a.why) if isinstance(a, Unk) else a for a in v)


#: The methods of Python's containers and strings: on a value that may be one, reading them is not
#: a use of the unknown values it holds.
CONTAINER_METHODS = frozenset(n for t in (dict, list, tuple, set, str) for n in dir(t) if not n.startswith("__"))


class _Stop(Exception):
    """The first `unknown` effect, where the analysis stops (`Analysis.stop_at_unknown`)."""

    def __init__(self, effect: Effect, trail: tuple[str, ...]) -> None:
        super().__init__(effect.what)
        self.effect, self.trail = effect, trail


def _is_self_target(fnode: tuple[str, str, str, ast.FunctionDef | ast.AsyncFunctionDef], assign: ast.Assign, name: str) -> bool:
    f = fnode[3]
    first = f.args.args[0].arg if f.args.args else None
    return any(isinstance(t, ast.Attribute) and t.attr == name and dotted(t.value) == first for t in assign.targets)


_COMPARE = {ast.Eq: ("__eq__", "__eq__"), ast.NotEq: ("__ne__", "__ne__"), ast.Lt: ("__lt__", "__gt__"),
            ast.LtE: ("__le__", "__ge__"), ast.Gt: ("__gt__", "__lt__"), ast.GtE: ("__ge__", "__le__")}


def _bound(target: ast.AST) -> Iterator[str]:
    """The names an assignment target binds (not those an attribute or subscript target reads)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for e in target.elts:
            yield from _bound(e)
    elif isinstance(target, ast.Starred):
        yield from _bound(target.value)


def _walk_own_stmt(stmt: ast.AST) -> Iterator[ast.AST]:
    yield stmt
    if not isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
        yield from _walk_own(stmt)
