"""Verify stage: run the suites that prove a fork wheel, and judge them.

The suites (below): the equivalence suite against the unpatched release as its oracle; Keras's
own tests, upstream wheel vs fork; whole-model parity. The judgement of two runs of one suite:

Both runs write JUnit XML (pytest --junitxml). A test that passes upstream and does
not pass patched is a regression; tests that fail in both runs are listed with their
reasons, never dropped.

A regression can be confirmed by reruns: the suspects (`suspects`) run again, alone, with
the patched wheel, each rerun writing its own JUnit file. A suspect that passes in every
rerun is reported as flaky (a crashed test worker, a test whose tolerance random numbers
can exceed), with the failure it had; one that fails in any rerun, or that no rerun ran,
stays a regression.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import venv
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from forkgen import requirements
from forkgen.cmd import log, run, tail
from forkgen.errors import UsageError, VerificationError

OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass(frozen=True)
class Result:
    outcome: str
    message: str = ""


@dataclass
class Comparison:
    label: str
    upstream: dict[str, int]
    patched: dict[str, int]
    regressions: list[dict[str, str]] = field(default_factory=list)
    failing_in_both: list[dict[str, str]] = field(default_factory=list)
    fixed_by_patch: list[str] = field(default_factory=list)
    flaky: list[dict[str, str]] = field(default_factory=list)
    #: What the upstream run covered, when not the whole suite (the fork-first order of `run_upstream`).
    baseline: str = ""


def junit_key(classname: str, name: str) -> str:
    """The key of a test case: `classname::name`, the classname cut to its importable part.

    Tests run from an installed wheel are named after their path from the rootdir, through
    the virtual environment; the part after `site-packages.` is the same in every environment.
    """
    _, marker, importable = classname.rpartition("site-packages.")
    return f"{importable if marker else classname}::{name}"


def read_junit(path: Path) -> dict[str, Result]:
    """Outcome of every test case in a JUnit XML file, keyed `classname::name`."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        raise UsageError(f"cannot read test results {path}: {error}") from None
    results: dict[str, Result] = {}
    for case in root.iter("testcase"):
        key = junit_key(case.get("classname", ""), case.get("name", ""))
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = "failed" if tag == "failure" else tag
                text = child.get("message") or (child.text or "")
                message = " ".join(text.split())[:300]
                break
        # A test can be reported twice (e.g. failed, then errored in teardown): keep the worst.
        previous = results.get(key)
        if previous is None or OUTCOMES.index(outcome) in (1, 2):
            results[key] = Result(outcome, message)
    return results


def compare(
    label: str, upstream: dict[str, Result], patched: dict[str, Result], reruns: Sequence[dict[str, Result]] = ()
) -> Comparison:
    """Regressions are tests passing upstream that fail, error or vanish patched.

    With `reruns` (results of rerunning the suspects with the patched wheel), a regression
    that passed in every rerun moves to `flaky`; one that failed in any, or that no rerun
    ran, stays a regression, its rerun outcomes added to the message.
    """
    comparison = Comparison(
        label=label,
        upstream=dict(Counter(r.outcome for r in upstream.values())),
        patched=dict(Counter(r.outcome for r in patched.values())),
    )
    for key, before in sorted(upstream.items()):
        after = patched.get(key, Result("missing", "not run with the patched wheel"))
        if before.outcome == "passed" and after.outcome not in ("passed", "skipped"):
            comparison.regressions.append({"test": key, "outcome": after.outcome, "message": after.message})
        elif before.outcome in ("failed", "error"):
            if after.outcome in ("failed", "error"):
                comparison.failing_in_both.append({"test": key, "upstream": before.message, "patched": after.message})
            elif after.outcome == "passed":
                comparison.fixed_by_patch.append(key)
    for key, after in sorted(patched.items()):
        if key not in upstream and after.outcome in ("failed", "error"):
            comparison.regressions.append({"test": key, "outcome": after.outcome, "message": "only in the patched run: " + after.message})
    if reruns:
        confirmed = []
        for item in comparison.regressions:
            outcomes = [run[item["test"]].outcome for run in reruns if item["test"] in run]
            summary = f"reruns with the patched wheel: {', '.join(outcomes) if outcomes else 'not run'}"
            if len(outcomes) == len(reruns) and all(o == "passed" for o in outcomes):
                comparison.flaky.append({**item, "reruns": summary})
            else:
                confirmed.append({**item, "message": f"{item['message']} ({summary})"})
        comparison.regressions = confirmed
    return comparison


def suspects(comparison: Comparison) -> list[str]:
    """The tests to rerun to confirm the regressions, by key."""
    return [item["test"] for item in comparison.regressions]


def render(comparison: Comparison) -> str:
    lines = [f"upstream suite, {comparison.label}:", f"  {'':10}" + "".join(f"{o:>9}" for o in OUTCOMES)]
    for name, counts in (("upstream", comparison.upstream), ("patched", comparison.patched)):
        lines.append(f"  {name:10}" + "".join(f"{counts.get(o, 0):>9}" for o in OUTCOMES))
    if comparison.baseline:
        lines.append(f"  upstream ran {comparison.baseline}")
    lines.append(f"  failing upstream too ({len(comparison.failing_in_both)}):")
    for item in comparison.failing_in_both:
        lines.append(f"    {item['test']}: {item['upstream'] or '(no message)'}")
    if comparison.fixed_by_patch:
        lines.append(f"  failing upstream, passing patched ({len(comparison.fixed_by_patch)}): " + ", ".join(comparison.fixed_by_patch))
    if comparison.flaky:
        lines.append(f"  flaky, not regressions ({len(comparison.flaky)}): failed in the full patched run, passed in every rerun:")
        for item in comparison.flaky:
            lines.append(f"    {item['test']}: {item['outcome']}: {item['message']} ({item['reruns']})")
    lines.append(f"  regressions: {len(comparison.regressions) or 'none'}")
    for item in comparison.regressions:
        lines.append(f"    {item['test']}: {item['outcome']}: {item['message']}")
    return "\n".join(lines)


def compare_files(
    label: str,
    upstream: Path,
    patched: Path,
    report: Path | None = None,
    reruns: Sequence[Path] = (),
    suspects_file: Path | None = None,
) -> Comparison:
    """Compare two JUnit files; write the JSON report; raise VerificationError on a regression.

    With `suspects_file`, the first pass of a confirmed comparison: write the keys of the
    would-be regressions there (one a line; an empty file when there are none) and judge
    nothing. With `reruns`, the JUnit files of the suspects' reruns confirm or clear them.
    """
    comparison = compare(label, read_junit(upstream), read_junit(patched), [read_junit(path) for path in reruns])
    if suspects_file is not None:  # the table comes with the judgement
        keys = suspects(comparison)
        suspects_file.parent.mkdir(parents=True, exist_ok=True)
        suspects_file.write_text("".join(f"{key}\n" for key in keys), encoding="utf-8")
        print(f"{comparison.label}: {len(keys)} suspect(s) (pass upstream, fail patched) written to {suspects_file}")
        for item in comparison.regressions:
            print(f"  {item['test']}: {item['outcome']}: {item['message']}")
        return comparison
    if not comparison.upstream:
        print(render(comparison))
        raise UsageError(f"{upstream} holds no test results", hint="did pytest collect anything?")
    return judge(comparison, report)


def judge(comparison: Comparison, report: Path | None = None) -> Comparison:
    """Print the comparison, write its JSON report; raise VerificationError on a regression."""
    print(render(comparison))
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(asdict(comparison), indent=2) + "\n", encoding="utf-8")
    if comparison.regressions:
        raise VerificationError(
            f"{len(comparison.regressions)} test(s) pass with upstream Keras and fail with the patched wheel ({comparison.label})",
            hint="the patch changes behaviour: see the regressions above",
        )
    return comparison


# -- Running the suites -----------------------------------------------------------------------
#
# Every verification run goes through here: `forkgen verify` (what the nox sessions call) and
# the verify stage of `forkgen rebase`. Each makes its own environment, installs, runs pytest
# (the equivalence suite, Keras's own tests, the parity models) and judges.


@dataclass(frozen=True)
class Environment:
    """A virtual environment of a verification run."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / ("Scripts" if os.name == "nt" else "bin") / "python"

    def install(self, *requirements: str, options: Sequence[str] = (), what: str = "") -> None:
        result = run(
            [self.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *options, *requirements],
            capture=True,
        )
        if result.returncode != 0:
            raise VerificationError(
                f"could not install {what or ' '.join(requirements)} into {self.root}:\n{tail(result.stdout, 8)}",
                hint="this is the environment, not the patch: check the requirement specs "
                "(FORKGEN_TORCH_SPEC, FORKGEN_JAX_SPEC, FORKGEN_TENSORFLOW_SPEC) and your package index",
            )

    def uninstall(self, distribution: str) -> None:
        result = run([self.python, "-m", "pip", "uninstall", "-y", "-q", distribution], capture=True)
        if result.returncode != 0:
            raise VerificationError(f"could not uninstall {distribution} from {self.root}:\n{tail(result.stdout, 8)}")

    def has_file(self, package: str, relative: str) -> bool:
        """Whether the installed top-level `package` holds `relative`, found without importing
        it (importing keras would need its backend installed and chosen)."""
        probe = ("import importlib.util, pathlib, sys; spec = importlib.util.find_spec(sys.argv[1]); "
                 "sys.exit(0 if spec and spec.submodule_search_locations and "
                 "(pathlib.Path(list(spec.submodule_search_locations)[0]) / sys.argv[2]).is_file() else 1)")
        return run([self.python, "-c", probe, package, relative], capture=True).returncode == 0


def environment(root: Path, requirements: Sequence[str], what: str) -> Environment:
    """A fresh virtual environment at `root` with `requirements` installed."""
    log(f"creating {root} for {what}: {' '.join(requirements)}")
    shutil.rmtree(root, ignore_errors=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    env = Environment(root)
    env.install(*requirements, what=what)
    return env


@dataclass(frozen=True)
class Release:
    """What the fork wheel was built from, from its provenance."""

    distribution: str
    version: str
    sdist_sha256: str | None

    @property
    def requirement(self) -> str:
        # `===` excludes local versions: the fork itself would satisfy `==`.
        return f"{self.distribution}==={self.version}"

    def __str__(self) -> str:
        return f"{self.distribution} {self.version}"


def release_of(wheel: Path) -> Release:
    from forkgen.provenance import read_wheel

    upstream = read_wheel(wheel).get("upstream", {})
    return Release(str(upstream.get("distribution")), str(upstream.get("version")), upstream.get("sdist_sha256"))


@dataclass(frozen=True)
class SuiteResult:
    """One suite that passed: its name and pytest's (or the comparison's) summary."""

    name: str
    summary: str


def _junit_counts(path: Path) -> str:
    counts = Counter(r.outcome for r in read_junit(path).values())
    return ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o]) or "no tests"


@dataclass(frozen=True)
class _Problem:
    module: str
    test: str
    message: str


def _equivalence_problems(path: Path) -> tuple[list[_Problem], list[_Problem]]:
    """(collection errors, failing tests) of an equivalence run's JUnit file."""
    collection: list[_Problem] = []
    failing: list[_Problem] = []
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        problem = next((case.find(tag) for tag in ("failure", "error") if case.find(tag) is not None), None)
        if problem is None:
            continue
        text, message = problem.text or "", problem.get("message") or ""
        if not case.get("classname") and message == "collection failure":
            # The import error is the last `E` line of the traceback.
            errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
            collection.append(_Problem(case.get("name", ""), "", errors[-1] if errors else " ".join(text.split())[:300]))
        else:
            failing.append(_Problem(case.get("classname", ""), case.get("name", ""), " ".join((message or text).split())[:300]))
    return collection, failing


def _patch_of(module: str) -> str:
    """The patch a test module proves: test_patch_<name>.py proves <name>; the others the
    CallSpec fast path and the series as a whole."""
    stem = module.rpartition(".")[2]
    if stem.startswith("test_patch_"):
        return stem[len("test_patch_"):].replace("_", "-")
    return "callspec-fast-path (and the series)"


def judge_equivalence(junit: Path, returncode: int, label: str, output: str = "") -> SuiteResult:
    """Judge an equivalence run: pass, or a VerificationError that says what failed: a test
    module that does not import on this release (not the patch's doing), or the patch and the
    test whose behaviour differs from the unpatched release."""
    if returncode == 0:
        return SuiteResult("equivalence", _junit_counts(junit))
    if not junit.is_file():
        raise VerificationError(
            f"the equivalence suite did not run ({label}, pytest exit {returncode}):\n{tail(output, 6)}",
            hint="the suite stopped before any test (a gate refused, or pytest could not start): see the output above",
        )
    collection, failing = _equivalence_problems(junit)
    if collection:
        listed = "; ".join(f"{p.module}: {p.message}" for p in collection)
        raise VerificationError(
            f"the equivalence suite cannot import {len(collection)} test module(s) on {label}: {listed}",
            hint="a test module fails to import on this release, which says nothing of the patch: make it find the "
            "code as the patch does (tests/equivalence/upstream.py: patched_module, original)",
        )
    if not failing:
        raise VerificationError(f"the equivalence suite failed ({label}, pytest exit {returncode}) without a failing test:\n{tail(output, 6)}")
    by_patch: dict[str, list[_Problem]] = {}
    for problem in failing:
        by_patch.setdefault(_patch_of(problem.module), []).append(problem)
    listed = "; ".join(
        f"patch {patch}: {len(items)} test(s), e.g. {items[0].module}::{items[0].test}: {items[0].message}"
        for patch, items in by_patch.items()
    )
    raise VerificationError(
        f"{len(failing)} equivalence test(s) fail with the fork ({label}): {listed}",
        hint="the patch behaves differently from the unpatched release here (the tests compare with it): "
        "leave the patch out of this release (--without-patch) or fix it",
    )


def run_equivalence(
    wheel: Path, backend: str, *, project: Path, upstream_src: Path, work: Path, reports: Path,
    pytest_args: Sequence[str] = (), torch_spec: str | None = None,
) -> SuiteResult:
    """The equivalence suite (tests/equivalence of `project`) against `wheel` on `backend`, its
    oracle the unpatched tree `upstream_src` of the same release."""
    tests = project / "tests" / "equivalence"
    if not tests.is_dir():
        raise UsageError(f"{tests} not found", hint="run it from the forkgen checkout")
    release = release_of(wheel)
    env = environment(work / f"equivalence-{backend}", [str(wheel), *requirements.backend(backend, torch_spec), *requirements.EQUIVALENCE],
                      f"the equivalence suite on {backend}")
    reports.mkdir(parents=True, exist_ok=True)
    junit = reports / f"equivalence-{backend}.xml"
    junit.unlink(missing_ok=True)
    log(f"equivalence suite: {wheel.name} on {backend}, against the unpatched {release} in {upstream_src}")
    # pytest-xdist workers (FORKGEN_PYTEST_WORKERS) unless the caller chose: the suite is ~1,900 tests.
    chosen = any(a.startswith(("-n", "--numprocesses", "-pno:xdist")) or a == "no:xdist" for a in pytest_args)
    workers = [] if chosen else ["-n", requirements.pytest_workers()]
    result = run(
        [env.python, "-m", "pytest", str(tests), "-q", "-p", "no:cacheprovider", *workers, "--continue-on-collection-errors",
         "--hypothesis-show-statistics", "-W", "ignore::UserWarning", "-W", "ignore::DeprecationWarning",
         f"--junitxml={junit}", *pytest_args],
        cwd=project,
        env={
            "KERAS_BACKEND": backend,
            "FORKGEN_WHEEL": str(wheel),  # the suite fails closed unless this very wheel is installed
            "FORKGEN_UPSTREAM_SRC": str(upstream_src),
            "FORKGEN_HYPOTHESIS_PROFILE": os.environ.get("FORKGEN_HYPOTHESIS_PROFILE", "equivalence"),
        },
    )
    return judge_equivalence(junit, result.returncode, f"{release} on {backend}")


def plugin_path(upstream_dir: Path, work: Path) -> str:
    """PYTHONPATH for Keras's own tests: the plugin's directory and a copy of forkgen's own
    package, whose gate and test keys the plugin uses (the test environment holds Keras and its
    test requirements, not forkgen; forkgen's modules the plugin imports need only the standard
    library)."""
    import forkgen

    lib = work / "plugin-lib"
    shutil.rmtree(lib, ignore_errors=True)
    shutil.copytree(Path(forkgen.__file__).parent, lib / "forkgen", ignore=shutil.ignore_patterns("__pycache__"))
    return os.pathsep.join([str(upstream_dir), str(lib)])


def run_upstream(
    wheel: Path, backend: str, *, project: Path, work: Path, reports: Path, tests: bool | None = None,
    pytest_args: Sequence[str] = (), torch_spec: str | None = None,
) -> list[SuiteResult]:
    """Keras's own tests (where the release ships them, or as `tests` says) and whole-model
    parity, upstream wheel and fork in one environment, fork first (upstream runs only the tests
    the fork did not pass); judged test by test (a suspect regression is rerun alone with the
    fork UPSTREAM_RERUNS times) and array by array."""
    from forkgen.provenance import require_current

    release = release_of(wheel)
    require_current(wheel)
    upstream_dir = project / "tests" / "upstream"
    parity_script = project / "tests" / "parity" / "models.py"
    env = environment(work / f"upstream-{backend}",
                      [*requirements.backend(backend, torch_spec), *requirements.UNDECLARED, release.requirement],
                      f"{release} and the fork on {backend}")
    ships = env.has_file("keras", "src/layers/layer_test.py")
    run_tests = ships if tests is None else tests
    if run_tests and not ships:
        raise UsageError(f"{release} ships no tests of its own (the wheel has no keras/src/**/*_test.py)")
    if run_tests:
        env.install(*requirements.UPSTREAM_TESTS, release.requirement, what="Keras's test requirements")
    else:
        log(f"{release} ships no tests of its own: parity only")
    reports.mkdir(parents=True, exist_ok=True)
    targets = requirements.UPSTREAM_TARGETS[backend]
    scratch = work / f"upstream-{backend}-cwd"  # nothing of the checkout on sys.path but the plugin
    scratch.mkdir(parents=True, exist_ok=True)
    base = {"KERAS_BACKEND": backend, "PYTHONPATH": plugin_path(upstream_dir, work)}
    expect = {"upstream": {"FORKGEN_EXPECT_UPSTREAM": release.version}, "patched": {"FORKGEN_WHEEL": str(wheel)}}

    keras_pytest: list[str | Path] = [env.python, "-m", "pytest", "-c", str(upstream_dir / "pytest.ini"), "--rootdir", str(upstream_dir),
                    "-q", "--pyargs", *targets, *pytest_args]

    def install_fork() -> None:
        env.install(str(wheel), options=["--force-reinstall", "--no-deps"], what=wheel.name)

    def pytest(workers: str, junit: Path, extra: dict[str, str], what: str) -> None:
        junit.unlink(missing_ok=True)
        code = run([*keras_pytest, "-n", workers, f"--junitxml={junit}"], cwd=scratch, env={**base, **extra}).returncode
        if not junit.is_file():
            raise VerificationError(
                f"Keras's own tests did not run with {what} on {backend} (pytest exit {code}, no results written)",
                hint="pytest stopped before any test (a gate refused, or pytest could not start): see its output above",
            )

    def parity(kind: str) -> None:
        # The whole series on (the fork) and off (upstream): the same models, bit for bit.
        out = reports / f"parity-{backend}-{kind}.npz"
        if run([env.python, str(parity_script), "--out", str(out)], cwd=scratch, env=base).returncode != 0:
            raise VerificationError(f"the parity models did not run with the {kind} {release} on {backend}",
                                    hint="see the traceback above")

    # Fork first: upstream's collection and parity, the fork's whole run and parity, then upstream
    # again on just the tests the fork did not pass (a test the fork passes cannot be a regression):
    # the same judgement as two whole runs, in about half the time.
    collected_file = reports / f"upstream-tests-{backend}-collected.txt"
    if run_tests:
        log(f"Keras's own tests collected with the upstream wheel: {' '.join(targets)}")
        collected_file.unlink(missing_ok=True)
        code = run([*keras_pytest, "--co"], cwd=scratch, capture=True,
                   env={**base, **expect["upstream"], "FORKGEN_COLLECTED": str(collected_file)})
        if code.returncode != 0 or not collected_file.is_file():
            raise VerificationError(
                f"Keras's own tests could not be collected with the upstream {release} on {backend} "
                f"(pytest exit {code.returncode}):\n{tail(code.stdout, 8)}",
                hint="pytest could not collect upstream's tests: this is the environment or the targets, not the patch",
            )
    parity("upstream")
    install_fork()
    patched_xml = reports / f"upstream-tests-{backend}-patched.xml"
    if run_tests:
        log(f"Keras's own tests with the fork: {' '.join(targets)}")
        pytest(requirements.pytest_workers(), patched_xml, expect["patched"], f"the patched {release}")
    parity("patched")
    compared = run([env.python, str(parity_script), "--compare", str(reports / f"parity-{backend}-upstream.npz"),
                    str(reports / f"parity-{backend}-patched.npz")], cwd=scratch, capture=True)
    print(compared.stdout, end="", file=sys.stderr)
    if compared.returncode != 0:
        raise VerificationError(
            f"whole-model parity fails on {backend}: the fork of {release} computes other numbers than the unpatched "
            f"release:\n{tail(compared.stdout, 8)}",
            hint="some patch changes what a model computes: build with --without-patch to find which",
        )
    results = [SuiteResult("parity", tail(compared.stdout, 1).rpartition(": ")[2])]
    if not run_tests:
        return results
    label = f"{backend}: {' '.join(targets)}"
    collected = [key for key in collected_file.read_text(encoding="utf-8").split("\n") if key]
    patched = read_junit(patched_xml)
    baseline = baseline_tests(collected, patched)
    upstream: dict[str, Result] = {}
    if baseline:
        listing = reports / f"upstream-tests-{backend}-baseline.txt"
        listing.write_text("".join(f"{key}\n" for key in baseline), encoding="utf-8")
        # The fork's files out first: keras-nightly is another distribution than the fork's `keras`.
        env.uninstall("keras")
        env.install(release.requirement, options=["--force-reinstall", "--no-deps"], what=f"the upstream {release}")
        log(f"Keras's own tests with the upstream wheel: the {len(baseline)} the fork did not pass")
        upstream_xml = reports / f"upstream-tests-{backend}-upstream.xml"
        pytest(requirements.pytest_workers(), upstream_xml, {**expect["upstream"], "FORKGEN_RERUN_TESTS": str(listing)},
               f"the upstream {release}")
        upstream = read_junit(upstream_xml)
    first = compare(label, upstream, patched)
    reruns: list[dict[str, Result]] = []
    if first.regressions:
        listing = reports / f"upstream-tests-{backend}-suspects.txt"
        listing.write_text("".join(f"{key}\n" for key in suspects(first)), encoding="utf-8")
        install_fork()
        for attempt in range(1, requirements.UPSTREAM_RERUNS + 1):
            log(f"rerun {attempt} of {requirements.UPSTREAM_RERUNS} of {len(first.regressions)} suspect(s) with the fork")
            rerun = reports / f"upstream-tests-{backend}-rerun{attempt}.xml"
            try:
                pytest("1", rerun, {**expect["patched"], "FORKGEN_RERUN_TESTS": str(listing)}, "the suspects' rerun")
            except VerificationError as error:  # a rerun that wrote nothing confirms nothing
                log(error.message)
                continue
            reruns.append(read_junit(rerun))
    judged = compare(label, upstream, patched, reruns)
    judged.baseline = f"the {len(baseline)} of the {len(collected)} tests it collects that the fork did not pass"
    judge(judged, reports / f"upstream-tests-{backend}.json")
    return [*results, SuiteResult("upstream tests", f"{judged.patched.get('passed', 0)} passed with the fork, "
                                  f"regressions none, flaky {len(judged.flaky)}")]


def baseline_tests(collected: Sequence[str], patched: dict[str, Result]) -> list[str]:
    """The tests upstream must run for the comparison: those it collects that the fork's run
    did not pass (failed, errored, or vanished; a skip is never a regression)."""
    return [key for key in collected if patched.get(key, Result("missing")).outcome not in ("passed", "skipped")]


def verify_release(
    wheel: Path, *, project: Path, upstream_src: Path, work: Path, reports: Path, backends: Sequence[str] = ("torch",),
    suites: Sequence[str] = ("equivalence", "upstream"), tests: bool | None = None, pytest_args: Sequence[str] = (),
    torch_spec: str | None = None,
) -> list[SuiteResult]:
    """Every suite of `suites` on every backend of `backends`: the equivalence suite, then
    Keras's own tests where the release ships them and whole-model parity (`upstream`)."""
    results: list[SuiteResult] = []
    for backend in backends:
        if backend not in requirements.BACKENDS:
            raise UsageError(f"unknown backend {backend!r}", hint=f"choose one of {', '.join(requirements.BACKENDS)}")
        if "equivalence" in suites:
            results.append(run_equivalence(wheel, backend, project=project, upstream_src=upstream_src, work=work,
                                           reports=reports, pytest_args=pytest_args, torch_spec=torch_spec))
        if "upstream" in suites:
            results += run_upstream(wheel, backend, project=project, work=work, reports=reports, tests=tests,
                                    pytest_args=pytest_args, torch_spec=torch_spec)
    return results
