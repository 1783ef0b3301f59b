"""What `torch-tree-one-level-flatten` puts before the one-level flatten of `traverse_children` in
the torch tree's `_dict_to_ordered_dict`.

Parsed by the engine, never imported. The piece is the body of `direct_children`: `structure` is
the argument of the enclosing `_dict_to_ordered_dict`, `torch_tree` the module's
`torch.utils._pytree`. The comment is the marker that tells the piece is forkgen's.
"""
# ruff: noqa


def direct_children(structure):
    # forkgen: torch-tree-one-level-flatten (dynamo cannot trace the flatten's `is not` on two tuples)
    node_def = torch_tree.SUPPORTED_NODES.get(torch_tree._get_node_type(structure))
    if node_def is not None:
        node_children, node_context = node_def.flatten_fn(structure)
        if isinstance(structure, tuple) or all(node_child is not structure for node_child in node_children):
            return node_def.unflatten_fn([_dict_to_ordered_dict(node_child) for node_child in node_children], node_context)
