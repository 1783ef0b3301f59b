"""The mutants of tests/mutants.py still apply to the templates they break.

`nox -s mutants` is not part of CI (it builds one wheel per mutant); a template edited
without its mutant would only be found there, by an assertion half-way through a long run.
Here every mutant is checked cheaply: its line occurs exactly once in its template, the
replacement differs, and the mutated template still parses.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_mutants() -> ModuleType:
    spec = importlib.util.spec_from_file_location("forkgen_mutants", ROOT / "tests" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MUTANTS = load_mutants().MUTANTS


def test_mutant_names_are_unique() -> None:
    names = [mutant[0] for mutant in MUTANTS]
    assert len(names) == len(set(names)), sorted(name for name in names if names.count(name) > 1)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[mutant[0] for mutant in MUTANTS])
def test_mutant_applies_once_and_parses(mutant: tuple[str, ...]) -> None:
    name, path, old, new = mutant[:4]
    text = (ROOT / path).read_text()
    assert text.count(old) == 1, f"{name}: {old!r} occurs {text.count(old)} times in {path}"
    assert new != old, name
    ast.parse(text.replace(old, new), filename=path)


def test_the_script_runs_as_nox_runs_it() -> None:
    # `python tests/mutants.py` in a fresh interpreter (nox's mutants session): its own directory on
    # sys.path, not the repository's, yet it must import every package's cases.py (which use
    # `tests.support`). A name no mutant has stops it before anything is fetched or built.
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "tests/mutants.py", "no such mutant"], cwd=ROOT, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 1 and "no mutant's name holds any of ['no such mutant']" in result.stderr, result.stderr
