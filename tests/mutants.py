"""Prove the equivalence suite can fail: build forks with one-line breaks in the inserted code.

Run by `nox -s mutants` (not part of CI: it builds one wheel per mutant). The mutants are
those the patches declare (`MUTANTS` in each package's cases.py). For each
mutant, a copy of this project with one line of the template changed builds a wheel,
which is installed over the current environment's Keras; the equivalence suite must
then fail. The patch's own equivalence file (tests/equivalence/test_patch_<package>.py) runs
first; a mutant it does not catch gets the whole suite (so the verdict is the whole suite's,
sooner). Prints which test caught each mutant; exits 1 if any survived.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The packages' cases.py build their examples on the project's test helpers (`tests.support`):
# importable from the repository root, which a script's own path does not put on sys.path.
sys.path.insert(0, str(ROOT))


def declared_mutants() -> list[tuple[str, str, str, str]]:
    """The mutants the series' packages declare (`MUTANTS` of each package's `cases` module), as
    (name, template file, old, new), in series order, each name prefixed with its patch's."""
    import importlib

    from codemods.engine import examples
    from codemods.series import SERIES_PACKAGES

    found = []
    for package in SERIES_PACKAGES:
        patch = importlib.import_module(package).PATCH
        found += [(f"{patch.name}: {mutant.description}", f"{package.replace('.', '/')}/{mutant.file}", mutant.old, mutant.new)
                  for mutant in examples(package)[1]]
    return found


def own_tests(template_path: str) -> list[str]:
    """The equivalence file of the patch whose package holds `template_path` (none: [])."""
    own = ROOT / "tests" / "equivalence" / f"test_patch_{template_path.split('/')[1]}.py"
    return [str(own.relative_to(ROOT))] if own.exists() else []


def first_of_each_patch(selected: list[tuple[int, tuple[str, str, str, str]]]) -> list[tuple[int, tuple[str, str, str, str]]]:
    """`--one-per-patch`: of the selected mutants, each patch's first."""
    seen: set[str] = set()
    kept = []
    for index, mutant in selected:
        patch = mutant[0].partition(":")[0]
        if patch not in seen:
            seen.add(patch)
            kept.append((index, mutant))
    return kept


#: Every mutant of the series: each patch declares its own (`MUTANTS` in its package's cases.py).
MUTANTS = declared_mutants()

#: pytest-xdist workers for each mutant's equivalence run (FORKGEN_PYTEST_WORKERS, default 2; 0: none).
WORKERS = [] if os.environ.get("FORKGEN_PYTEST_WORKERS", "2") == "0" else ["-n", os.environ.get("FORKGEN_PYTEST_WORKERS", "2")]


def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, text=True, capture_output=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def build_mutant(index: int, template_path: str, old: str, new: str, work: Path, release: list[str]) -> Path:
    copy = work / f"project-{index}"
    for name in ("forkgen", "codemods", "patched_keras/overlay"):
        shutil.copytree(ROOT / name, copy / name)
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    template = copy / template_path
    text = template.read_text()
    assert text.count(old) == 1, f"mutant does not apply: {old!r}"
    template.write_text(text.replace(old, new))
    result = run(
        [sys.executable, "-m", "forkgen", "build", *release, "--out-dir", str(work / f"dist-{index}"), "--local-label", f"mutant.{index}"],
        cwd=copy, env={**os.environ, "PYTHONPATH": str(copy)},
    )
    if result.returncode != 0:
        raise SystemExit(f"building mutant {index} failed:\n{result.stderr[-2000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """`python tests/mutants.py [--distribution D] [--version V] [--one-per-patch] [SUBSTRING ...]`:
    every mutant, or those whose name holds one of the substrings (numbered as in the full list),
    built on the pinned release or on the one named (e.g. `--distribution keras-nightly`: its
    newest); `--one-per-patch` keeps each patch's first of them."""
    release: list[str] = []
    one_per_patch = False
    while argv and argv[0] in ("--distribution", "--version", "--one-per-patch"):
        if argv[0] == "--one-per-patch":
            one_per_patch, argv = True, argv[1:]
            continue
        release += argv[:2]
        argv = argv[2:]
    selected = [(index, mutant) for index, mutant in enumerate(MUTANTS, start=1)
                if not argv or any(part in mutant[0] for part in argv)]
    if one_per_patch:
        selected = first_of_each_patch(selected)
    if not selected:
        raise SystemExit(f"no mutant's name holds any of {argv}")
    survivors = []
    env = {k: v for k, v in os.environ.items() if k != "FORKGEN_WHEEL"}
    if "FORKGEN_UPSTREAM_SRC" not in env:  # the equivalence tests' oracle: the pinned release, unpatched
        fetched = run([sys.executable, "-m", "forkgen", "fetch", *release], cwd=ROOT)
        if fetched.returncode != 0:
            raise SystemExit(f"forkgen fetch failed:\n{fetched.stderr[-2000:]}")
        env["FORKGEN_UPSTREAM_SRC"] = fetched.stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for index, (name, template_path, old, new) in selected:
            wheel = build_mutant(index, template_path, old, new, work, release)
            # keras and keras-nightly both own keras/: the one installed goes first.
            run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "keras", "keras-nightly"])
            installed = run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", str(wheel)])
            if installed.returncode != 0:
                raise SystemExit(installed.stderr)
            for files in (own_tests(template_path), ["tests/equivalence"]):
                if not files:
                    continue
                tests = run(
                    [sys.executable, "-m", "pytest", *files, "-q", "-x", "-p", "no:cacheprovider", *WORKERS,
                     "-W", "ignore::UserWarning", "-W", "ignore::DeprecationWarning"],
                    # No FORKGEN_WHEEL: a mutant is built from other templates on purpose, which the
                    # fail-closed gate (tests/support/gate.py) would refuse before any test ran.
                    cwd=ROOT, env=env,
                )
                failed = re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", tests.stdout, flags=re.MULTILINE)
                caught = tests.returncode != 0 and failed
                if caught:
                    break
            print(f"mutant {index}: {name}: " + (f"caught by {failed[0]}" if caught else "SURVIVED"), flush=True)
            if not caught:
                print("\n".join(tests.stdout.splitlines()[-15:]), flush=True)
            if not caught:
                survivors.append(name)
    print(f"{len(selected) - len(survivors)} of {len(selected)} mutants caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
