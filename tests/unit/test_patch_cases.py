"""Every patch's declared examples (`CASES` in its package's `cases.py`), in the manner of Fixit's
VALID/INVALID examples: the change it makes, no change on a tree it already patched, the *upstream*
outcome, drift with its diagnostic; its behaviours (`BEHAVIOURS`: the patched synthetic modules
run beside upstream's), each handed the fixtures its parameters name (conftest.py). Also: each
declared mutant still applies to its file.

A case is a `codemods.engine.Case`; the series' packages are found from `codemods.series`, so a
new patch's cases run here without being listed anywhere else.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, TransformSkip, TransformSuccess, transform_module

from codemods.engine import (
    AnchorDrift,
    Behaviour,
    Case,
    DeclaredPatch,
    Mutant,
    Outcome,
    Patch,
    Sources,
    behaviours,
    examples,
    piece_text,
    run_module,
)
from codemods.series import SERIES_PACKAGES

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> list[tuple[str, Patch, Case]]:
    found = []
    for package in SERIES_PACKAGES:
        patch = importlib.import_module(package).PATCH
        found += [(package, patch, case) for case in examples(package)[0]]
    return found


CASES = _declared()
MUTANTS = [(package, mutant) for package in SERIES_PACKAGES for mutant in examples(package)[1]]
BEHAVIOURS = [(package, behaviour) for package in SERIES_PACKAGES for behaviour in behaviours(package)]


def files(patch: Patch, text: str | Mapping[str, str]) -> dict[str, str]:
    return dict(text) if isinstance(text, Mapping) else {patch.files[0]: text}


def sources(given: Mapping[str, str]) -> Sources:
    return Sources(lambda path: given.get(path))


def run_command(patch: Patch, path: str, text: str) -> object:
    """The patch's libcst command alone on one file, as `python -m libcst.tool codemod` runs it."""
    assert isinstance(patch, DeclaredPatch)
    return transform_module(patch.command(CodemodContext(filename=path)), text)


@pytest.mark.parametrize(("package", "patch", "case"), CASES, ids=[f"{p.name}: {c.name}" for _, p, c in CASES])
def test_case(package: str, patch: Patch, case: Case) -> None:
    before = files(patch, case.before)
    if case.drift is not None:
        with pytest.raises(AnchorDrift) as caught:
            patch.check(sources(before))
        message = str(caught.value)
        assert message.startswith(f"{caught.value.path}:{caught.value.line}: ") and caught.value.path in before
        assert case.drift in message, message
        return
    check = patch.check(sources(before))
    if case.detail is not None:
        assert check.detail == case.detail
    if case.anchors is not None:
        assert [(a.name, a.line) for a in check.anchors] == list(case.anchors)
    if case.upstream:
        assert check.outcome is Outcome.UPSTREAM, check
        if isinstance(patch, DeclaredPatch) and len(before) == 1:
            ((path, text),) = before.items()
            assert isinstance(run_command(patch, path, text), TransformSkip)
        return
    assert check.outcome is Outcome.APPLIED and not check.present, check
    tree = sources(before)
    patch.check(tree)
    patch.apply(tree)
    expected = files(patch, case.after or {})
    rendered = tree.rendered()
    assert {path: rendered[path] for path in rendered} == expected
    after = {**before, **expected}
    again = patch.check(sources(after))
    assert again.outcome is Outcome.APPLIED and again.present, again
    if isinstance(patch, DeclaredPatch):
        for path, text in before.items():
            if path not in patch.files:
                continue  # a file the patch only reads (`relies_on`): its command is not run on it
            result = run_command(patch, path, text)
            if path in expected:
                assert isinstance(result, TransformSuccess) and result.code == expected[path]
            assert isinstance(run_command(patch, path, after[path]), TransformSkip)


@pytest.mark.parametrize(("package", "behaviour"), BEHAVIOURS,
                         ids=[f"{p.rpartition('.')[2]}: {b.__name__}" for p, b in BEHAVIOURS])
def test_behaviour(package: str, behaviour: Behaviour, request: pytest.FixtureRequest) -> None:
    """A behaviour runs with the fixtures its parameters name (a stand-in, `monkeypatch`, `tmp_path`)."""
    wanted = inspect.signature(behaviour).parameters
    behaviour(**{name: request.getfixturevalue(name) for name in wanted})


def test_behaviours_are_named_functions_of_their_package() -> None:
    for package, behaviour in BEHAVIOURS:
        assert inspect.isfunction(behaviour) and behaviour.__module__ == f"{package}.cases", (package, behaviour)
    names = [f"{p}.{b.__name__}" for p, b in BEHAVIOURS]
    assert len(names) == len(set(names)), "a behaviour listed twice"


@pytest.mark.parametrize(("package", "mutant"), MUTANTS, ids=[m.description for _, m in MUTANTS])
def test_mutant_applies(package: str, mutant: Mutant) -> None:
    text = (ROOT / package.replace(".", "/") / mutant.file).read_text(encoding="utf-8")
    assert text.count(mutant.old) == 1 and mutant.old != mutant.new
    cst.parse_module(text.replace(mutant.old, mutant.new))


def test_every_declared_patch_has_cases() -> None:
    declared = {importlib.import_module(p).PATCH.name for p in SERIES_PACKAGES
                if isinstance(importlib.import_module(p).PATCH, DeclaredPatch)}
    with_cases = {patch.name for _, patch, _ in CASES}
    assert declared <= with_cases, f"declared patches without cases.py: {sorted(declared - with_cases)}"


def test_piece_text_reindents_a_piece_but_not_its_strings(tmp_path: Path) -> None:
    (tmp_path / "inserted.py").write_text(
        '"""Pieces.\ndef fast(x):\n    not one."""\n\n\ndef fast(x):\n    # marker\n    if x:\n'
        '        return """a\n    b"""\n\n\ndef helpers():\n    _a = 1\n\n\n    def _f():\n'
        '        """Doc\n    continued."""\n        return 2\n', encoding="utf-8")
    cases = str(tmp_path / "cases.py")
    assert piece_text(cases, "fast", "        ") == '        # marker\n        if x:\n            return """a\n    b"""\n'
    assert piece_text(cases, "helpers") == '_a = 1\n\n\ndef _f():\n    """Doc\n    continued."""\n    return 2\n'


def test_piece_text_puts_upstream_s_statements_where_the_piece_keeps_them(tmp_path: Path) -> None:
    (tmp_path / "inserted.py").write_text(
        'def kept(x):\n    if x:  # marker\n        y = 1\n    else:\n        UPSTREAM\n', encoding="utf-8")
    cases = str(tmp_path / "cases.py")
    upstream = "        y = f(\n            x\n        )\n\n        z = y\n"
    assert piece_text(cases, "kept", "        ", upstream=upstream) == (
        "        if x:  # marker\n            y = 1\n        else:\n"
        "            y = f(\n                x\n            )\n\n            z = y\n")
    (tmp_path / "inserted.py").write_text("def kept(x):\n    y = 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no `UPSTREAM` line"):
        piece_text(cases, "kept", upstream=upstream)


def test_run_module_hands_a_stand_in_to_the_module_and_its_functions_only() -> None:
    import sys

    stand_in = type("Torch", (), {"utils": type("Utils", (), {"_pytree": "the stand-in pytree"})})()
    text = ("import torch\nfrom torch.utils import _pytree\nimport json\n"
            "def later():\n    import torch.utils\n    return torch, json.dumps(1)\n")
    module = run_module(text, "m", {"torch": stand_in, "torch.utils": stand_in.utils})
    assert module.torch is stand_in and module._pytree == "the stand-in pytree"
    assert module.later() == (stand_in, "1")  # the real json
    assert sys.modules.get("torch") is not stand_in
    assert run_module("x = 1\n").x == 1


@pytest.mark.parametrize("patch", [importlib.import_module(p).PATCH for p in SERIES_PACKAGES], ids=lambda p: p.name)
def test_a_tree_without_the_patch_s_file_is_drift_that_says_so(patch: Patch) -> None:
    # Every patch alike (no patch's `explain` rewords it): the first file it names, "no such file".
    with pytest.raises(AnchorDrift) as caught:
        patch.check(Sources(lambda path: None))
    assert caught.value.path == patch.files[0] and caught.value.missing_file, str(caught.value)
    assert str(caught.value).startswith(f"{patch.files[0]}:1: ") and "no such file" in str(caught.value)
