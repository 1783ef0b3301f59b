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
