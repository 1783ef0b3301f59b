"""The import rule of codemods/ and forkgen/ (issue 42, docs/architecture.md): a patch imports the
engine's face (`codemods.engine`) and the patches it `requires`, nothing else; the engine imports
only itself; forkgen/ knows the series, never one patch. Checked by parsing every file (imports
inside functions included), so a patch that reaches into another fails here, not at a rebase."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from codemods import series

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {importlib.import_module(p).PATCH.name.replace("-", "_"): importlib.import_module(p).PATCH
            for p in series.SERIES_PACKAGES}
#: What forkgen/ and the series' own modules may import from codemods/.
TOOL_IMPORTS = {"codemods", "codemods.engine", "codemods.series", "codemods.stamp_version"}


def imports(path: Path) -> set[str]:
    """Every module `path` imports from codemods/ or tests/ (`from a import b` as `a`; relative ones
    resolved against the file's package)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *([base] if base else [])])
            found.add(base)
    return {name for name in found if name.split(".")[0] in ("codemods", "tests")}


def code_files(folder: str) -> list[Path]:
    """The tool's own modules: not the code patches insert into Keras (parsed, never imported)."""
    return sorted(p for p in (ROOT / folder).rglob("*.py")
                  if not p.name.startswith("inserted") and "templates" not in p.parts[:-1][-1:])


def offences(path: Path) -> set[str]:
    parts = path.relative_to(ROOT).parts
    found = imports(path)
    if parts[0] == "forkgen" or parts[1] in ("__init__.py", "series.py", "stamp_version.py"):
        return found - TOOL_IMPORTS
    if parts[1] == "engine":
        return {name for name in found if not name.startswith("codemods.engine")}
    own = parts[1]
    allowed = ("codemods.engine", f"codemods.{own}",
               *(f"codemods.{name.replace('-', '_')}" for name in PACKAGES[own].requires))
    return {name for name in found if name != "codemods" and not any(name == a or name.startswith(a + ".") for a in allowed)}


@pytest.mark.parametrize("path", code_files("codemods") + code_files("forkgen"), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_the_engine_and_required_patches_only(path: Path) -> None:
    found = offences(path)
    assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}, which the import rule does not allow"


def test_from_codemods_import_names_only_the_engine() -> None:
    """`from codemods import X` in a patch names the engine, or a package the patch requires."""
    for path in code_files("codemods"):
        own = path.relative_to(ROOT).parts[1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "codemods" and own in PACKAGES:
                required = {n.replace("-", "_") for n in PACKAGES[own].requires}
                assert {a.name for a in node.names} <= {"engine", *required}, path


def test_every_patch_package_is_named_after_its_patch() -> None:
    """What `applied_piece` and the import rule rely on: `codemods.<name with underscores>`."""
    for package in series.SERIES_PACKAGES:
        assert package == f"codemods.{importlib.import_module(package).PATCH.name.replace('-', '_')}"


def test_the_rule_catches_a_patch_importing_another(tmp_path: Path) -> None:
    """The check itself can fail: a module of a patch importing a patch it does not require."""
    own = next(name for name, patch in PACKAGES.items() if not patch.requires)
    other = next(name for name in PACKAGES if name != own)
    probe = ROOT / "codemods" / own / "_probe_import_rule.py"
    probe.write_text(f"from codemods.{other} import PATCH\nfrom codemods.engine import Anchor\n", encoding="utf-8")
    try:
        assert offences(probe) == {f"codemods.{other}"}
    finally:
        probe.unlink()
