"""A stand-in for torch's pytree (`torch.utils._pytree`), for the synthetic torch tree modules of
the torch tree patches' cases (codemods/torch_tree_*/cases.py and loss-wrapper-tensor-fast-path's),
whose `from torch.utils import _pytree as torch_tree` gets `torch_tree` from here when a behaviour
executes them (the fixture `torch_pytree`, tests/unit/conftest.py; `run_module`).

`torch_tree` is a small pure-Python pytree with torch's rules (registered node types; namedtuples
are nodes; `None` and unregistered types, dict subclasses included, are leaves; a `TreeSpec`
counts nodes and leaves), which counts its flattens, so the upstream and patched modules can be
executed side by side offline. Its functions are not torch's: there the patches' import-time
gates are off. Test infrastructure, like tests/support/torch_current_cuda.py: the cases are
handed it, never import it or name it.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class NodeDef:
    flatten_fn: Callable[[Any], tuple[list[Any], Any]]
    unflatten_fn: Callable[[Iterable[Any], Any], Any]


@dataclass
class TreeSpec:
    type: Any
    context: Any
    children: list[TreeSpec] = field(default_factory=list)
    leaf: bool = False

    @property
    def num_nodes(self) -> int:
        return 1 if self.leaf else 1 + sum(c.num_nodes for c in self.children)

    @property
    def num_leaves(self) -> int:
        return 1 if self.leaf else sum(c.num_leaves for c in self.children)


def _is_namedtuple_class(cls: type) -> bool:
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


class _PyTree:
    """The parts of `torch.utils._pytree` the module uses, with torch's leaf rules."""

    def __init__(self) -> None:
        self.flattens = 0
        self.SUPPORTED_NODES: dict[Any, NodeDef] = {}
        self.register(list, lambda x: (list(x), None), lambda c, _: list(c))
        self.register(tuple, lambda x: (list(x), None), lambda c, _: tuple(c))
        self.register(dict, lambda x: (list(x.values()), list(x)), lambda c, k: dict(zip(k, c, strict=True)))
        self.register(
            OrderedDict, lambda x: (list(x.values()), list(x)), lambda c, k: OrderedDict(zip(k, c, strict=True))
        )
        self.register(
            defaultdict,
            lambda x: (list(x.values()), (x.default_factory, list(x))),
            lambda c, k: defaultdict(k[0], zip(k[1], c, strict=True)),
        )
        self.register(namedtuple, lambda x: (list(x), type(x)), lambda c, t: t(*c))

    def register(self, cls: Any, flatten_fn: Any, unflatten_fn: Any) -> None:
        self.SUPPORTED_NODES[cls] = NodeDef(flatten_fn, unflatten_fn)

    def _get_node_type(self, tree: Any) -> Any:
        return namedtuple if _is_namedtuple_class(type(tree)) else type(tree)

    def tree_flatten(self, tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeSpec]:
        self.flattens += 1
        leaves: list[Any] = []

        def helper(node: Any) -> TreeSpec:
            if (is_leaf is not None and is_leaf(node)) or self._get_node_type(node) not in self.SUPPORTED_NODES:
                leaves.append(node)
                return TreeSpec(None, None, leaf=True)
            node_type = self._get_node_type(node)
            children, context = self.SUPPORTED_NODES[node_type].flatten_fn(node)
            return TreeSpec(node_type, context, [helper(child) for child in children])

        spec = helper(tree)
        return leaves, spec

    def tree_unflatten(self, leaves: Iterable[Any], spec: TreeSpec) -> Any:
        values = list(leaves)
        if len(values) != spec.num_leaves:
            raise ValueError(f"treespec expects {spec.num_leaves} leaves, got {len(values)}")
        position = 0

        def build(node: TreeSpec) -> Any:
            nonlocal position
            if node.leaf:
                position += 1
                return values[position - 1]
            return self.SUPPORTED_NODES[node.type].unflatten_fn([build(c) for c in node.children], node.context)

        return build(spec)

    def tree_map(self, func: Callable[..., Any], tree: Any, *rests: Any) -> Any:
        # Only what the synthetic map_structure needs: one structure, or several of the same shape.
        leaves, spec = self.tree_flatten(tree)
        others = [self.tree_flatten(rest)[0] for rest in rests]
        return self.tree_unflatten(map(func, leaves, *others), spec)


torch_tree = _PyTree()
