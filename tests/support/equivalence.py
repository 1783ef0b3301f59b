"""Comparing two CallSpecs field by field: what "the same CallSpec" means.

Shared by the offline tests (synthetic layer.py on a fake backend) and the
tests run against an installed patched Keras.
"""

from __future__ import annotations

from typing import Any

FIELDS = (
    "user_arguments_dict",
    "arguments_dict",
    "argument_names",
    "tensor_arguments_dict",
    "tensor_arguments_names",
    "nested_tensor_argument_names",
    "first_arg",
    "eager",
)


def same(a: Any, b: Any) -> bool:
    """Identical, or containers made afresh on every call (`*args` tuples and
    `**kwargs` dicts packed by `signature.bind`, nested arguments rebuilt by
    Keras's input conversion) holding identical leaves in the same order."""
    if a is b:
        return True
    if type(a) is not type(b) or not isinstance(a, (tuple, list, dict)) or len(a) != len(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return all(same(x, y) for x, y in zip(a, b, strict=True))


def differences(fast: Any, slow: Any) -> list[str]:
    """Every way `fast` differs from `slow`; empty when they are the same CallSpec.

    Same attributes in the same order; dicts with the same keys in the same
    order and identical values (`is`: tensors and defaults are the very same
    objects; see `same`); lists equal and of the same type; `first_arg` identical; `eager`
    equal. Containers must not be shared between the two.
    """
    found: list[str] = []
    if type(fast) is not type(slow):
        found.append(f"type {type(fast).__name__} != {type(slow).__name__}")
    if list(vars(fast)) != list(vars(slow)):
        found.append(f"attributes {list(vars(fast))} != {list(vars(slow))}")
    for name in FIELDS:
        a, b = getattr(fast, name, None), getattr(slow, name, None)
        if name == "first_arg":
            if not same(a, b):
                found.append(f"first_arg: {a!r} is not {b!r}")
        elif type(a) is not type(b):
            found.append(f"{name}: type {type(a).__name__} != {type(b).__name__}")
        elif isinstance(a, dict):
            if list(a) != list(b):
                found.append(f"{name}: keys {list(a)} != {list(b)}")
            else:
                for key in a:
                    if not same(a[key], b[key]):
                        found.append(f"{name}[{key!r}]: {a[key]!r} is not {b[key]!r}")
            if a is b and a is not None:
                found.append(f"{name}: the same dict object is shared")
        elif isinstance(a, list):
            if len(a) != len(b) or any(x is not y and x != y for x, y in zip(a, b, strict=True)):
                found.append(f"{name}: {a!r} != {b!r}")
            if a is b:
                found.append(f"{name}: the same list object is shared")
        elif a != b:
            found.append(f"{name}: {a!r} != {b!r}")
    return found
