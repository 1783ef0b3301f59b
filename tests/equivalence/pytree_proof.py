"""Which torch pytree sources the torch-tree patches' gates were proven on, and whether the
installed torch has them: the expectation of those gates, computed from the installed torch.

The gates (`_FORKGEN_NODE_TYPE_IS_TYPE`, `_FORKGEN_FLAT_FAST_PATHS`) turn their fast paths on
only when the sha256 of the source of each torch function the fast path relies on is the one the
proof read. The digests are read from the checkout's codemod (`codemods/<patch>/inserted.py`,
parsed, never imported: the test environment has no libcst); the installed torch's sources are
hashed here. A test then asserts the gate is on exactly when they agree: a gate that is off on the
torch it was proven on, or on with another, fails, whatever torch's version string says.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_DIGEST = re.compile(r"[0-9a-f]{64}")


def proven_digests(package: str) -> dict[str, str]:
    """The `(name, sha256)` pairs in the gate of `codemods/<package>/inserted.py`: a function of
    torch's `_pytree` by name (a string), or `TreeSpec.unflatten` (the name `unflatten`)."""
    tree = ast.parse((ROOT / "codemods" / package / "inserted.py").read_text(encoding="utf-8"))
    digests: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Tuple) and len(node.elts) == 2):
            continue
        first, second = node.elts
        if not (isinstance(second, ast.Constant) and isinstance(second.value, str) and _DIGEST.fullmatch(second.value)):
            continue
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            digests[first.value] = second.value
        elif isinstance(first, ast.Name):
            digests[first.id] = second.value
    if not digests:
        raise AssertionError(f"no source digests found in codemods/{package}/inserted.py")
    return digests


def source_digest(function: Any) -> str | None:
    """sha256 of `function`'s source, None when it has none that inspect can read."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def installed_digests(torch_tree: Any, names: list[str]) -> dict[str, str | None]:
    """The installed `_pytree`'s digests of `names` (`unflatten`: `TreeSpec.unflatten`)."""
    namespace = vars(torch_tree)
    spec = namespace.get("TreeSpec")
    found: dict[str, str | None] = {}
    for name in names:
        if name == "unflatten":
            function = vars(spec).get("unflatten") if isinstance(spec, type) else None
        else:
            function = namespace.get(name)
        found[name] = source_digest(function) if function is not None else None
    return found


def has_proven_sources(torch_tree: Any, package: str) -> bool:
    """Whether the installed torch's `_pytree` has the sources the gate of `package` was proven on."""
    proof = proven_digests(package)
    return installed_digests(torch_tree, sorted(proof)) == proof


def deregister_pytree_node(torch_tree: Any, cls: type) -> None:
    """Undo `torch_tree.register_pytree_node(cls, ...)`: torch's `_deregister_pytree_node` where
    the installed torch has it (2.4 on), else the Python registry's entries taken out by hand
    (what `is_nested`, `flatten` and `map_structure` consult; the C++ pytree's, where optree
    registered it too, stays: no test here reads it)."""
    remove = getattr(torch_tree, "_deregister_pytree_node", None)
    if remove is not None:
        remove(cls)
        return
    torch_tree.SUPPORTED_NODES.pop(cls)
    getattr(torch_tree, "SUPPORTED_SERIALIZED_TYPES", {}).pop(cls, None)
