"""Names code binds and reads (`names_of`) and the modules it imports (`imports_of`)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable

import libcst as cst
from libcst.helpers import get_full_name_for_node_or_raise

from codemods.engine.patch import TREE_CACHES
from codemods.engine.pattern import _LAYOUT, _fields
from codemods.engine.tree import walk

# -- names --------------------------------------------------------------------------------------

#: The fields of a node type that bind names ("bind"), bind and read them ("both"), or read
#: them ("use"); a field left out holds no name (`a.b`: only `a` is read). Other types: read.
_ROLES: dict[type[cst.CSTNode], tuple[tuple[str, str], ...]] = {
    cst.Attribute: (("value", "use"),),
    cst.Arg: (("value", "use"),),
    cst.AssignTarget: (("target", "bind"),),
    cst.AnnAssign: (("target", "bind"), ("annotation", "use"), ("value", "use")),
    cst.AugAssign: (("target", "both"), ("value", "use")),
    cst.For: (("target", "bind"), ("iter", "use"), ("body", "use"), ("orelse", "use")),
    cst.CompFor: (("target", "bind"), ("iter", "use"), ("ifs", "use"), ("inner_for_in", "use")),
    cst.NamedExpr: (("target", "bind"), ("value", "use")),
    cst.AsName: (("name", "bind"),),
    cst.FunctionDef: (("decorators", "use"), ("name", "bind"), ("params", "use"), ("returns", "use"), ("body", "use")),
    cst.ClassDef: (("decorators", "use"), ("name", "bind"), ("bases", "use"), ("keywords", "use"), ("body", "use")),
    cst.Param: (("name", "bind"), ("annotation", "use"), ("default", "use")),
    cst.NameItem: (("name", "bind"),),
    cst.ImportFrom: (("names", "use"),),
}


#: `names_of` of the nodes asked about last, by (id, into_defs), with the node (nodes are
#: immutable, and a module's unchanged statements stay the same nodes when a patch edits it).
_NAMES: dict[tuple[int, bool], tuple[cst.CSTNode, frozenset[str], frozenset[str]]] = {}
_NAMES_KEPT = 4096
TREE_CACHES.append(_NAMES)


def names_of(nodes: Iterable[cst.CSTNode], into_defs: bool = True) -> tuple[set[str], set[str]]:
    """(names read, names bound) in `nodes`, by a simple walk: a name bound anywhere in them
    counts as bound everywhere in them. Without `into_defs`, a def or class binds its name only."""
    used: set[str] = set()
    bound: set[str] = set()
    for node in nodes:
        key = (id(node), into_defs)
        known = _NAMES.get(key)
        if known is None or known[0] is not node:
            node_used, node_bound = _names_of(node, into_defs)
            known = (node, frozenset(node_used), frozenset(node_bound))
            _NAMES[key] = known
            while len(_NAMES) > _NAMES_KEPT:
                del _NAMES[next(iter(_NAMES))]
        used |= known[1]
        bound |= known[2]
    return used, bound


def _names_of(node: cst.CSTNode, into_defs: bool) -> tuple[set[str], set[str]]:
    """`names_of` one node."""
    used: set[str] = set()
    bound: set[str] = set()

    def visit(node: cst.CSTNode, role: str) -> None:
        if isinstance(node, cst.Name):
            if role != "use":
                bound.add(node.value)
            if role != "bind":
                used.add(node.value)
            return
        if role != "use":
            if isinstance(node, (cst.Tuple, cst.List, cst.StarredElement, cst.Element)):
                for child in _subnodes(node):
                    visit(child, role)
                return
            role = "use"  # `a.b = ...`, `a[i] = ...` read `a`
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and not into_defs:
            bound.add(node.name.value)
            return
        if isinstance(node, cst.Lambda):
            # Its parameters are its own: what its body reads of the enclosing scope, its defaults.
            params = [q for q in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params,
                                  node.params.star_arg, node.params.star_kwarg) if isinstance(q, cst.Param)]
            used.update(_names_of(node.body, into_defs)[0] - {q.name.value for q in params})
            for q in params:
                if q.default is not None:
                    visit(q.default, "use")
            return
        if isinstance(node, cst.ImportAlias):
            target: cst.BaseExpression = node.asname.name if node.asname else node.name
            while isinstance(target, cst.Attribute):
                target = target.value
            visit(target, "bind")
            return
        roles = _ROLES.get(type(node))
        if roles is None:
            for child in _subnodes(node):
                visit(child, "use")
            return
        for name, child_role in roles:
            value = getattr(node, name)
            for child in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(child, cst.CSTNode):
                    visit(child, child_role)

    visit(node, "use")
    return used, bound


_SUBNODE_TYPES: dict[type, bool] = {}


def imports_of(nodes: Iterable[cst.CSTNode]) -> list[tuple[int, str]]:
    """The modules the import statements in `nodes` name, at any depth, in order: (the dots of a
    relative import, 0 for an absolute one; the dotted name, "" for `from . import x`)."""
    found: list[tuple[int, str]] = []
    for node in (n for root in nodes for n in walk(root)):
        if isinstance(node, cst.Import):
            found += [(0, get_full_name_for_node_or_raise(alias.name)) for alias in node.names]
        elif isinstance(node, cst.ImportFrom):
            module = "" if node.module is None else get_full_name_for_node_or_raise(node.module)
            found.append((len(node.relative), module))
    return found


def _subnodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of `node` but layout (which holds no name), in no particular order: what
    `names_of` needs of `node.children`, without the libcst visitor that builds those."""
    found = []
    for f in _fields(type(node)):
        value = getattr(node, f.name)
        for child in value if isinstance(value, (list, tuple)) else (value,):
            kind = type(child)
            if kind not in _SUBNODE_TYPES:
                _SUBNODE_TYPES[kind] = issubclass(kind, cst.CSTNode) and not issubclass(kind, _LAYOUT)
            if _SUBNODE_TYPES[kind]:
                found.append(child)
    return found


_BUILTINS = frozenset(dir(builtins))
