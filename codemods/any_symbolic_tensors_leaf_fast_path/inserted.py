"""What `any-symbolic-tensors-leaf-fast-path` puts into keras/src/backend/common/keras_tensor.py.

Parsed by the codemod, never imported. The body of `module_level` goes at module level right
before `def any_symbolic_tensors`. The body of the loop in `loop_body` replaces the `if tree.is_nested(x):`
statement of upstream's inner loop (after its `isinstance(x, KerasTensor)` test, which stays
first): `UPSTREAM` stands for that statement, kept node for node. The comments are the markers.
"""
# ruff: noqa


def module_level():
    # forkgen: any-symbolic-tensors-leaf-fast-path (values that are leaves of every tree)
    # Exact types that no tree implementation Keras uses (optree, dm-tree, torch's
    # pytree) treats as nested. A tuple, not a frozenset: torch.compile guards on it.
    _forkgen_any_symbolic_plain_types = (bool, int, float, str)
    # The classes seen by `any_symbolic_tensors`, mapped to True when an instance was a
    # leaf that `keras.ops.is_tensor` accepted (a backend tensor: a leaf for every
    # instance, as both tests look at the class only), else False (the full test runs).
    _forkgen_any_symbolic_leaf_types = {}


    def _forkgen_any_symbolic_learn(x):
        # Reads `keras.ops.is_tensor` only once its module is loaded (never imports). Not
        # while torch.compile traces: Dynamo splits the graph after a global dict changes.
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():
            return
        is_tensor = getattr(sys.modules.get("keras.src.ops.core"), "is_tensor", None)
        if is_tensor is not None:
            _forkgen_any_symbolic_leaf_types[type(x)] = not tree.is_nested(x) and bool(is_tensor(x))


def loop_body(items):
    for x in items:
        # forkgen: any-symbolic-tensors-leaf-fast-path (no tree.is_nested for certain leaves)
        leaf = _forkgen_any_symbolic_leaf_types.get(type(x))
        if leaf or x is None or type(x) in _forkgen_any_symbolic_plain_types:
            continue
        UPSTREAM
        if leaf is None:
            _forkgen_any_symbolic_learn(x)
