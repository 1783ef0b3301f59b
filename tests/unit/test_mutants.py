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


def test_one_per_patch_keeps_each_patch_s_first_mutant_and_each_has_its_own_tests() -> None:
    module = load_mutants()
    selected = list(enumerate(MUTANTS, start=1))
    kept = module.first_of_each_patch(selected)
    patches = [mutant[0].partition(":")[0] for _, mutant in kept]
    assert len(patches) == len(set(patches)) == len({m[0].partition(":")[0] for m in MUTANTS})
    assert all(kept[i][0] < kept[i + 1][0] for i in range(len(kept) - 1))  # in series order
    for index, mutant in kept:  # each is the first of its patch
        assert not any(m[0].partition(":")[0] == mutant[0].partition(":")[0] for _, m in selected[: index - 1])
    # every patch but the CallSpec ones (proven by the field matrix) has an equivalence file of its own
    without = {mutant[0].partition(":")[0] for _, mutant in kept if not module.own_tests(mutant[1])}
    assert without <= {"callspec-fast-path", "callspec-training-fast-path"}, without
    for _, mutant in kept:
        assert all((ROOT / path).is_file() for path in module.own_tests(mutant[1]))
