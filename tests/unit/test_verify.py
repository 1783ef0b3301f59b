"""Comparing the upstream and patched runs of Keras's own tests (JUnit XML)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from forkgen import cli, provenance, verify
from forkgen.errors import EXIT_VERIFY, VerificationError
from forkgen.verify import compare, junit_key, read_junit
from tests.unit import test_gate as gate_cases


def junit(path: Path, cases: dict[str, str]) -> Path:
    """A pytest-style JUnit file: name -> passed | failed | error | skipped."""
    body = []
    for name, outcome in cases.items():
        classname, _, test = name.rpartition("::")
        inner = {
            "passed": "",
            "failed": '<failure message="AssertionError: boom">trace</failure>',
            "error": '<error message="collection failed: No module named grain">trace</error>',
            "skipped": '<skipped type="pytest.skip" message="needs a GPU"/>',
        }[outcome]
        body.append(f'<testcase classname="{classname}" name="{test}" time="0.1">{inner}</testcase>')
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{"".join(body)}</testsuite></testsuites>')
    return path


UPSTREAM = {"m.T::a": "passed", "m.T::b": "failed", "m.T::c": "skipped", "m.T::d": "error", "m.T::e": "passed"}


def test_counts_and_failures_in_both(tmp_path: Path) -> None:
    up = read_junit(junit(tmp_path / "up.xml", UPSTREAM))
    patched = read_junit(junit(tmp_path / "p.xml", UPSTREAM))
    comparison = compare("torch", up, patched)
    assert comparison.upstream == comparison.patched == {"passed": 2, "failed": 1, "skipped": 1, "error": 1}
    assert comparison.regressions == []
    assert [(f["test"], f["upstream"]) for f in comparison.failing_in_both] == [
        ("m.T::b", "AssertionError: boom"),
        ("m.T::d", "collection failed: No module named grain"),
    ]


@pytest.mark.parametrize("change", [{"m.T::a": "failed"}, {"m.T::e": "error"}, {"m.T::new": "failed"}])
def test_a_test_passing_upstream_and_failing_patched_is_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str]
) -> None:
    up = junit(tmp_path / "up.xml", UPSTREAM)
    patched = junit(tmp_path / "p.xml", {**UPSTREAM, **change})
    code = cli.main(["compare-tests", str(up), str(patched), "--label", "torch", "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert code == EXIT_VERIFY
    assert "regressions: 1" in out and "error: 1 test(s) pass with upstream Keras" in err
    assert json.loads((tmp_path / "r.json").read_text())["regressions"][0]["test"] == next(iter(change))


def test_a_vanished_test_is_a_regression(tmp_path: Path) -> None:
    up = read_junit(junit(tmp_path / "up.xml", UPSTREAM))
    patched = read_junit(junit(tmp_path / "p.xml", {k: v for k, v in UPSTREAM.items() if k != "m.T::a"}))
    assert [r["outcome"] for r in compare("x", up, patched).regressions] == ["missing"]


def test_no_regression_exits_zero_and_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    up = junit(tmp_path / "up.xml", UPSTREAM)
    code = cli.main(["compare-tests", str(up), str(up), "--label", "numpy"])
    out = capsys.readouterr().out
    assert code == 0
    assert "upstream suite, numpy:" in out and "failing upstream too (2):" in out and "regressions: none" in out


def test_a_suspect_passing_every_rerun_is_flaky_not_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    up = junit(tmp_path / "up.xml", UPSTREAM)
    patched = junit(tmp_path / "p.xml", {**UPSTREAM, "m.T::a": "failed"})
    reruns = [junit(tmp_path / f"r{i}.xml", {"m.T::a": "passed"}) for i in (1, 2)]
    args = ["compare-tests", str(up), str(patched), "--json", str(tmp_path / "r.json")]
    code = cli.main([*args, "--rerun", str(reruns[0]), "--rerun", str(reruns[1])])
    out = capsys.readouterr().out
    assert code == 0
    assert "flaky, not regressions (1)" in out and "m.T::a: failed: AssertionError: boom" in out
    assert "regressions: none" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["regressions"] == [] and report["flaky"][0]["reruns"] == "reruns with the patched wheel: passed, passed"


@pytest.mark.parametrize(
    "reruns",
    [
        [{"m.T::a": "passed"}, {"m.T::a": "failed"}],  # fails again once: confirmed
        [{"m.T::a": "passed"}, {"m.T::other": "passed"}],  # one rerun did not run it
        [{}],  # no rerun ran it
        [{"m.T::a": "skipped"}],  # skipped is not a pass
    ],
)
def test_a_suspect_failing_or_missing_in_a_rerun_stays_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reruns: list[dict[str, str]]
) -> None:
    up = junit(tmp_path / "up.xml", UPSTREAM)
    patched = junit(tmp_path / "p.xml", {**UPSTREAM, "m.T::a": "failed"})
    files = [junit(tmp_path / f"r{i}.xml", cases) for i, cases in enumerate(reruns)]
    code = cli.main(["compare-tests", str(up), str(patched), *(a for f in files for a in ("--rerun", str(f))), "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == EXIT_VERIFY
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["flaky"] == [] and [r["test"] for r in report["regressions"]] == ["m.T::a"]
    assert "reruns with the patched wheel: " in report["regressions"][0]["message"] and "regressions: 1" in out


def test_suspects_are_written_and_judged_later(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    up = junit(tmp_path / "up.xml", UPSTREAM)
    patched = junit(tmp_path / "p.xml", {**UPSTREAM, "m.T::a": "failed", "m.T::new": "error"})
    suspects = tmp_path / "out" / "suspects.txt"
    assert cli.main(["compare-tests", str(up), str(patched), "--suspects", str(suspects)]) == 0
    assert suspects.read_text().splitlines() == ["m.T::a", "m.T::new"]
    out = capsys.readouterr().out
    assert "2 suspect(s) (pass upstream, fail patched) written" in out and "m.T::new: error:" in out and "regressions" not in out
    assert cli.main(["compare-tests", str(up), str(up), "--suspects", str(suspects)]) == 0
    assert suspects.read_text() == ""


def test_suspects_and_reruns_do_not_go_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    up = junit(tmp_path / "up.xml", UPSTREAM)
    code = cli.main(["compare-tests", str(up), str(up), "--suspects", str(tmp_path / "s"), "--rerun", str(up)])
    assert code == 2 and "do not go together" in capsys.readouterr().err


def test_the_key_keeps_the_importable_part_of_an_installed_test() -> None:
    assert junit_key("...venv.lib.python3.11.site-packages.keras.src.layers.layer_test.LayerTest", "test_a") == (
        "keras.src.layers.layer_test.LayerTest::test_a"
    )
    assert junit_key("m.T", "test_b[x-y]") == "m.T::test_b[x-y]"


# -- the equivalence suite's judgement: what failed, said as it is -----------------------------


def pytest_junit(tmp_path: Path, files: dict[str, str]) -> tuple[Path, int]:
    """Run real pytest on a small synthetic suite laid out as tests/equivalence/; its JUnit file
    and exit code."""
    suite = tmp_path / "suite"
    for name, text in {"tests/__init__.py": "", "tests/equivalence/__init__.py": "", **files}.items():
        (suite / name).parent.mkdir(parents=True, exist_ok=True)
        (suite / name).write_text(text)
    junit = tmp_path / "equivalence.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--continue-on-collection-errors",
         "--rootdir", str(suite), "-c", os.devnull, f"--junitxml={junit}", "tests/equivalence"],
        cwd=suite, capture_output=True, text=True,
    )
    return junit, result.returncode


def test_a_passing_equivalence_run_gives_its_counts(tmp_path: Path) -> None:
    junit, code = pytest_junit(tmp_path, {"tests/equivalence/test_patch_dtype_fast_paths.py": "def test_a():\n    pass\n"})
    assert verify.judge_equivalence(junit, code, "keras 3.15.1 on torch") == verify.SuiteResult("equivalence", "1 passed")


def test_a_test_module_that_does_not_import_is_reported_as_such_not_as_the_patch(tmp_path: Path) -> None:
    junit, code = pytest_junit(tmp_path, {
        "tests/equivalence/test_patch_torch_variable_value_fast_path.py": "from keras_moved_away import core\n",
        "tests/equivalence/test_patch_dtype_fast_paths.py": "def test_a():\n    pass\n",
    })
    with pytest.raises(VerificationError) as caught:
        verify.judge_equivalence(junit, code, "keras-nightly 3.16.0.dev2026102704 on torch")
    message = caught.value.message
    assert message.startswith("the equivalence suite cannot import 1 test module(s) on keras-nightly 3.16.0.dev2026102704 on torch")
    assert "tests.equivalence.test_patch_torch_variable_value_fast_path" in message
    assert "No module named 'keras_moved_away'" in message
    assert "says nothing of the patch" in caught.value.hint and "slow path" not in caught.value.hint


def test_a_behavioural_difference_names_the_patch_and_the_test(tmp_path: Path) -> None:
    junit, code = pytest_junit(tmp_path, {
        "tests/equivalence/test_patch_memoised_result_type.py": (
            "def test_same_results():\n    assert 'float32' == 'float64', 'fork and upstream differ'\n"
            "def test_fine():\n    pass\n"),
        "tests/equivalence/test_models.py": "def test_model():\n    raise ValueError('outputs differ')\n",
    })
    with pytest.raises(VerificationError) as caught:
        verify.judge_equivalence(junit, code, "keras 3.15.1 on torch")
    message = caught.value.message
    assert message.startswith("2 equivalence test(s) fail with the fork (keras 3.15.1 on torch): ")
    assert "patch memoised-result-type: 1 test(s), e.g. tests.equivalence.test_patch_memoised_result_type::test_same_results" in message
    assert "fork and upstream differ" in message
    assert "patch callspec-fast-path (and the series): 1 test(s), e.g. tests.equivalence.test_models::test_model" in message
    assert "behaves differently from the unpatched release" in caught.value.hint


def test_a_run_that_wrote_no_results_says_it_did_not_run(tmp_path: Path) -> None:
    with pytest.raises(VerificationError, match="the equivalence suite did not run .*pytest exit 9"):
        verify.judge_equivalence(tmp_path / "missing.xml", 9, "keras 3.15.1 on torch", "equivalence: refusing to test: ...")


def test_verify_passes_what_follows_the_double_dash_to_pytest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    wheel = tmp_path / "keras-3.15.1+fast.x-py3-none-any.whl"
    wheel.write_bytes(b"")
    seen: dict[str, object] = {}

    def stub(wheel: Path, **kwargs: object) -> list[verify.SuiteResult]:
        seen.update(kwargs)
        return [verify.SuiteResult("equivalence", "3 passed")]

    monkeypatch.setattr(verify, "verify_release", stub)
    argv = ["verify", "equivalence", "--wheel", str(wheel), "--upstream-src", str(tmp_path), "--work-dir", str(tmp_path / "w"),
            "--backend", "jax", "--", "-k", "dtype", "--hypothesis-profile", "thorough"]
    assert cli.main(argv) == 0
    assert seen["pytest_args"] == ["-k", "dtype", "--hypothesis-profile", "thorough"]
    assert seen["backends"] == ["jax"] and seen["suites"] == ["equivalence"]
    assert capsys.readouterr().out == "equivalence: passed (3 passed)\n"
    seen.clear()
    assert cli.main(argv[: argv.index("--") + 1]) == 0  # a bare `--` (the nox sessions without posargs)
    assert seen["pytest_args"] == []


def test_an_environment_finds_a_packaged_file_without_importing_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # keras cannot be imported without its backend: the probe must not import the package.
    package = tmp_path / "site" / "explodes"
    (package / "src" / "layers").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('importing me needs a backend')\n")
    (package / "src" / "layers" / "layer_test.py").write_text("")
    env = verify.Environment(Path(sys.prefix))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    assert env.has_file("explodes", "src/layers/layer_test.py")
    assert not env.has_file("explodes", "src/layers/missing_test.py")
    assert not env.has_file("not_installed_anywhere", "src/layers/layer_test.py")


def test_the_upstream_plugins_gate_runs_in_an_environment_without_forkgen(tmp_path: Path) -> None:
    # Keras's own tests run in an environment of Keras and its test requirements; the plugin's
    # gate imports forkgen's provenance module from the path verify gives it. `python -S` leaves
    # out every site-packages (forkgen's and codemods' too); a stand-in pytest gives the plugin
    # what it uses at import and in its gate; a stand-in keras is the fork wheel installed, or
    # another fork.
    upstream_dir = Path(__file__).resolve().parents[1] / "upstream"
    stand_in = tmp_path / "stand-in"
    stand_in.mkdir()
    (stand_in / "pytest.py").write_text(
        "import sys\n"
        "def fixture(*args, **kwargs):\n    return lambda function: function\n"
        "def exit(message, returncode):\n    print(message)\n    sys.exit(returncode)\n"
    )
    data = gate_cases.provenance()
    wheel = gate_cases.fork_wheel(tmp_path / "dist" / "keras-3.15.1+fastcallspec.2-py3-none-any.whl", data)
    ours = gate_cases.site(tmp_path / "ours", data)
    other = gate_cases.site(tmp_path / "other", gate_cases.provenance(fork_version="3.15.1+other.1"))

    def gate(path: str, installed: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", "-c", "import keras_upstream_plugin as p; p._gate()"], cwd=tmp_path,
            capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(stand_in), str(installed), path]), "FORKGEN_WHEEL": str(wheel)},
        )

    bare = gate(str(upstream_dir), ours)
    assert bare.returncode != 0 and "No module named 'forkgen'" in bare.stderr  # the probe can fail
    given = verify.plugin_path(upstream_dir, tmp_path / "w")
    passed = gate(given, ours)
    assert (passed.returncode, passed.stdout, passed.stderr) == (0, "", "")
    refused = gate(given, other)
    assert refused.returncode == 9 and refused.stdout.startswith("upstream_tests: refusing to test: the installed keras"), refused


def test_a_stale_wheel_is_refused_before_any_environment_is_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "keras-3.15.1+fast.x-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setattr(verify, "release_of", lambda wheel: verify.Release("keras", "3.15.1", None))
    monkeypatch.setattr(verify, "environment", lambda *a, **k: pytest.fail("an environment was made"))
    with pytest.raises(VerificationError, match="is not a wheel"):
        verify.run_upstream(wheel, "torch", project=Path(__file__).resolve().parents[2], work=tmp_path / "w",
                            reports=tmp_path / "r")


class Simulated:
    """`verify.run` and the environment of `run_upstream`, simulated: Keras's tests are the keys of
    `collected`; a pytest run writes the JUnit file of the outcomes `outcomes[installed]` gives
    (for the tests its FORKGEN_RERUN_TESTS listing names, when it has one); parity agrees."""

    python = sys.executable

    def __init__(self, collected: list[str], outcomes: dict[str, list[dict[str, str]]], pytest_exit: int = 0) -> None:
        self.collected = collected
        self.outcomes = outcomes  # "upstream"/"fork" -> one dict per run, in order
        self.pytest_exit = pytest_exit
        self.installed = "upstream"
        self.log: list[str] = []

    def has_file(self, package: str, relative: str) -> bool:
        return True

    def install(self, *requirements: str, options: Sequence[str] = (), what: str = "") -> None:
        if any(r.endswith(".whl") for r in requirements):
            self.installed = "fork"
        elif "keras===3.15.1" in requirements and "--force-reinstall" in options:
            self.installed = "upstream"

    def uninstall(self, distribution: str) -> None:
        self.log.append(f"uninstall {distribution}")

    def run(self, command: list[str], *, env: dict[str, str] | None = None, **kwargs: object) -> subprocess.CompletedProcess[str]:
        env = env or {}
        argv = [str(a) for a in command]
        if "--compare" in argv:
            return subprocess.CompletedProcess(argv, 0, "parity: 76 arrays compared bit for bit, 0 differ\n", "")
        if "--out" in argv:
            return subprocess.CompletedProcess(argv, 0, "", "")
        if "--co" in argv:
            self.log.append(f"collect with {self.installed}")
            Path(env["FORKGEN_COLLECTED"]).write_text("".join(f"{k}\n" for k in self.collected))
            return subprocess.CompletedProcess(argv, 0, "", "")
        listing = env.get("FORKGEN_RERUN_TESTS")
        wanted = Path(listing).read_text().split() if listing else None
        self.log.append(f"pytest with {self.installed}" + (f" on {wanted}" if wanted is not None else ""))
        if self.pytest_exit:
            return subprocess.CompletedProcess(argv, self.pytest_exit, "", "")
        outcomes = self.outcomes[self.installed].pop(0)
        junit(Path(next(a for a in argv if a.startswith("--junitxml=")).partition("=")[2]),
              {k: o for k, o in outcomes.items() if wanted is None or k in wanted})
        return subprocess.CompletedProcess(argv, 0, "", "")


def run_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, simulated: Simulated) -> list[verify.SuiteResult]:
    wheel = tmp_path / "keras-3.15.1+fast.x-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setattr(verify, "environment", lambda *a, **k: simulated)
    monkeypatch.setattr(verify, "release_of", lambda wheel: verify.Release("keras", "3.15.1", None))
    monkeypatch.setattr(provenance, "require_current", lambda wheel: None)
    monkeypatch.setattr(verify, "run", simulated.run)
    return verify.run_upstream(wheel, "numpy", project=Path(__file__).resolve().parents[2], work=tmp_path / "w",
                               reports=tmp_path / "r")


def test_keras_tests_that_wrote_no_results_stop_verification_with_what_happened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    simulated = Simulated(["m.T::a"], {}, pytest_exit=3)  # INTERNALERROR, nothing written
    with pytest.raises(VerificationError) as caught:
        run_simulated(tmp_path, monkeypatch, simulated)
    assert caught.value.exit_code == EXIT_VERIFY
    assert caught.value.message == "Keras's own tests did not run with the patched keras 3.15.1 on numpy (pytest exit 3, no results written)"
    assert simulated.log == ["collect with upstream", "pytest with fork"]


def test_upstream_runs_only_the_tests_the_fork_did_not_pass_and_judges_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    collected = ["m.T::passes", "m.T::breaks", "m.T::fails_in_both", "m.T::skipped_by_fork", "m.T::vanishes", "m.T::flaky"]
    fork = {"m.T::passes": "passed", "m.T::breaks": "failed", "m.T::fails_in_both": "failed",
            "m.T::skipped_by_fork": "skipped", "m.T::flaky": "error", "m.T::fork_only": "error"}
    upstream = {k: "passed" for k in collected} | {"m.T::fails_in_both": "failed"}
    rerun = {"m.T::breaks": "failed", "m.T::vanishes": "failed", "m.T::flaky": "passed", "m.T::fork_only": "error"}
    simulated = Simulated(collected, {"upstream": [upstream], "fork": [fork, rerun, dict(rerun), dict(rerun)]})
    with pytest.raises(VerificationError) as caught:
        run_simulated(tmp_path, monkeypatch, simulated)
    baseline = ["m.T::breaks", "m.T::fails_in_both", "m.T::vanishes", "m.T::flaky"]
    suspects = ["m.T::breaks", "m.T::flaky", "m.T::vanishes", "m.T::fork_only"]
    assert simulated.log == [
        "collect with upstream", "pytest with fork", "uninstall keras", f"pytest with upstream on {baseline}",
        *[f"pytest with fork on {suspects}"] * 3,
    ]
    assert caught.value.message == "3 test(s) pass with upstream Keras and fail with the patched wheel (numpy: " \
        "keras.src.layers.layer_test keras.src.layers.core keras.src.models)"
    report = json.loads((tmp_path / "r" / "upstream-tests-numpy.json").read_text())
    assert sorted(r["test"] for r in report["regressions"]) == ["m.T::breaks", "m.T::fork_only", "m.T::vanishes"]
    assert [r["test"] for r in report["flaky"]] == ["m.T::flaky"]
    assert [r["test"] for r in report["failing_in_both"]] == ["m.T::fails_in_both"]
    assert report["baseline"] == "the 4 of the 6 tests it collects that the fork did not pass"
    assert "upstream ran the 4 of the 6 tests it collects that the fork did not pass" in capsys.readouterr().out


def test_when_the_fork_passes_everything_upstream_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    simulated = Simulated(["m.T::a", "m.T::b"], {"fork": [{"m.T::a": "passed", "m.T::b": "skipped"}]})
    results = run_simulated(tmp_path, monkeypatch, simulated)
    assert simulated.log == ["collect with upstream", "pytest with fork"]
    assert [(r.name, r.summary) for r in results] == [
        ("parity", "76 arrays compared bit for bit, 0 differ"),
        ("upstream tests", "1 passed with the fork, regressions none, flaky 0"),
    ]


