"""tests/bench/run.py (`nox -s bench`) without timing anything: which builds a case is timed in
(the plain-PyTorch twin on torch), the command that times the twin, the targets per case and
the issues' targets, and the twin's column in the table, the README headline and the results page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.bench import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("run")


def stats(mean: float, error: float | None = 0.01) -> dict[str, Any]:
    return {"mean": mean, "stdev": mean / 100, "median": mean, "values": 4, "processes": 2,
            "standard_error": None if error is None else mean * error}


def row(bench: ModuleType, case: str, means: dict[str, float], error: float | None = 0.01) -> dict[str, Any]:
    """A row as time_case makes it, from each build's mean time."""
    measured = {kind: stats(mean, error) for kind, mean in means.items()}
    result: dict[str, Any] = {"case": case, "description": bench.DESCRIPTIONS[case], "loops": 1, "stats": measured,
                              "ratios": {}, "targets": {}, "ablation": {}}
    for numerator, denominator in bench.RATIOS:
        if numerator in measured and denominator in measured:
            result["ratios"][f"{numerator}/{denominator}"] = bench.ratio(measured, numerator, denominator)
    for name, target in bench.case_targets(case).items():
        if name in result["ratios"]:
            result["targets"][name] = {"at_most": target, "met": result["ratios"][name]["ratio"] <= target}
    return result


def results(bench: ModuleType, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cases": rows, "counts": {kind: {"counts": {}} for kind in bench.BUILDS}, "ablation": [],
            "backend": "torch"}


def test_every_case_is_described_and_the_twins_and_loops_are_cases(bench: ModuleType) -> None:
    import cases  # run.py put tests/bench on sys.path

    assert set(bench.DESCRIPTIONS) == set(bench.CASES)
    assert set(bench.TWIN_CASES) <= set(bench.MODEL_CASES)
    assert set(cases.LOOP_KINDS) <= set(bench.CASES)
    # the earlier cases keep their names and order (their figures are compared over time)
    assert bench.CASES[:9] == ("callspec", "callspec_keywords", "dense", "mlp", "mlp_inference", "transformer",
                               "train_step", "generate", "conv_predict")
    assert {"mlp_train_step", "mlp_fit", "transformer_fit", "train_step"} <= bench.UNSUPPORTED["numpy"]
    assert not {"mlp_evaluate", "mlp_predict", "transformer_evaluate"} & bench.UNSUPPORTED["numpy"]


def test_the_twin_is_timed_on_torch_only_for_the_cases_that_have_one(bench: ModuleType) -> None:
    assert bench.builds_of("mlp_fit", "torch") == ["upstream", "nightly", "fork", "torch"]
    assert bench.builds_of("dense", "torch") == ["upstream", "nightly", "fork", "torch"]
    assert bench.builds_of("mlp_fit", "jax") == ["upstream", "nightly", "fork"]
    assert bench.builds_of("generate", "torch") == ["upstream", "nightly", "fork"]
    assert bench.builds_of("callspec", "torch") == ["upstream", "fork"]


def test_the_twin_runs_in_the_fork_environment_in_the_same_alternated_rounds(
        bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(bench, "run", lambda command, **kwargs: commands.append(command))
    monkeypatch.setattr(bench, "calibrated_loops", lambda path: 7)
    means = {"upstream": 3.0, "nightly": 2.5, "fork": 2.0, "torch": 0.5}
    monkeypatch.setattr(bench, "summary", lambda path: stats(means[Path(path).name.split("-")[0]]))
    envs = {kind: tmp_path / kind for kind in bench.BUILDS}
    args = argparse.Namespace(rounds=2, processes=1, values=1)
    result = bench.time_case(bench.builds_of("mlp_call", "torch"), envs, "mlp_call", "torch", args, tmp_path)
    order = [("--twin" in command, command[0]) for command in commands]
    fork, twin = str(tmp_path / "fork" / "bin" / "python"), (True, str(tmp_path / "fork" / "bin" / "python"))
    assert order[3] == twin and order[4] == twin  # round 1 ends with the twin, round 2 (reversed) starts with it
    assert [o for o in order if o[0]] == [twin, twin]
    assert order[2] == (False, fork)
    assert all("--loops" in command for command in commands[1:])  # the loops calibrated in the first run
    assert result["ratios"]["fork/torch"]["ratio"] == pytest.approx(4.0)
    assert result["targets"]["fork/torch"] == {"at_most": 3.0, "met": False}
    assert result["targets"]["fork/nightly"] == {"at_most": 0.60, "met": False}


def test_the_targets_per_case_are_the_strictest_of_the_issues(bench: ModuleType) -> None:
    # the earlier issues' targets stay as they were
    assert bench.TARGETS["dense"] == (0.60, 0.90)
    assert bench.TARGET_TEXT["dense"] == "Dense(4)(x) no slower than before"
    assert bench.case_targets("dense") == {"fork/upstream": 0.60, "fork/nightly": 0.60, "fork/torch": 3.0}
    assert bench.case_targets("mlp_fit") == {"fork/nightly": 0.60, "fork/torch": 2.5, "fork/upstream": 0.50}
    assert bench.case_targets("mlp_predict") == {"fork/nightly": 0.60, "fork/torch": 5.0, "fork/upstream": 0.30}
    assert bench.case_targets("mlp_evaluate") == {"fork/nightly": 0.60, "fork/upstream": 0.50}
    assert bench.case_targets("mlp_train_step") == {"fork/nightly": 0.60, "fork/torch": 2.0}
    assert bench.case_targets("transformer") == {"fork/upstream": 0.75, "fork/nightly": 0.60, "fork/torch": 2.5}
    assert bench.case_targets("transformer_fit") == {"fork/nightly": 0.60}
    assert bench.case_targets("callspec_keywords") == {"fork/upstream": 0.20}


def test_the_issue_targets_report_the_twin_ratios_and_nightly_on_every_case(bench: ModuleType) -> None:
    rows = [row(bench, "dense", {"upstream": 100.0, "nightly": 80.0, "fork": 50.0, "torch": 20.0}),
            row(bench, "mlp_fit", {"upstream": 100.0, "nightly": 90.0, "fork": 45.0, "torch": 30.0}),
            row(bench, "mlp_predict", {"upstream": 100.0, "nightly": 90.0, "fork": 35.0, "torch": 5.0})]
    targets = bench.issue_targets(results(bench, rows), None)
    by_text = {target["target"]: target for target in targets}
    assert by_text["Dense(4)(x) no slower than before"]["ratios"].keys() == {"fork/upstream", "fork/nightly"}
    assert by_text["Dense(4)(x) no slower than before"]["ratios"]["fork/nightly"]["at_most"] == 0.90
    assert by_text["fork / plain torch: Dense(4)(x) ≤ 3×"]["met"] is True  # 2.5x
    assert by_text["fork / plain torch: fit (MLP, one epoch) ≤ 2.5×"]["met"] is True  # 1.5x
    assert by_text["fork / plain torch: predict (MLP) ≤ 5×"]["met"] is False  # 7x
    assert by_text["fork / upstream: fit (MLP, one epoch) ≤ 0.50"]["met"] is True
    assert by_text["fork / upstream: predict (MLP) ≤ 0.30"]["met"] is False
    assert by_text["fork / plain torch: MLP model(x) ≤ 3×"]["met"] is None  # not timed
    nightly = by_text["fork / keras-nightly ≤ 0.60 on every case"]
    assert nightly["ratios"].keys() == {"dense", "mlp_fit", "mlp_predict"}
    assert nightly["met"] is False  # mlp_predict 0.39, mlp_fit 0.5, dense 0.625
    text = bench.targets_text(targets)
    assert "fork/torch 2.50× ± 0.04 (≤ 3.0×: met)" in text
    assert "fork / plain torch: MLP model(x) ≤ 3×" in text and ": not timed" in text
    assert "dense 0.625 ± 0.009 (faster) (≤ 0.60: missed)" in text


def test_the_table_shows_the_twin_and_fork_over_plain_torch(bench: ModuleType) -> None:
    rows = [row(bench, "mlp_call", {"upstream": 700e-6, "nightly": 600e-6, "fork": 400e-6, "torch": 62e-6}),
            row(bench, "generate", {"upstream": 0.2, "nightly": 0.15, "fork": 0.1})]
    text = bench.table(results(bench, rows))
    header, rule, with_twin, without_twin = text.splitlines()[:4]
    assert "| plain torch (mean ± std dev) |" in header and "| fork / plain torch ± std error |" in header
    assert "| target fork / plain torch |" in header
    assert header.count("|") == rule.count("|") == with_twin.count("|") == without_twin.count("|")
    assert "62 us ± 620 ns" in with_twin and "6.45× ± 0.09" in with_twin and "≤ 3.0×: missed" in with_twin
    cells = [cell.strip() for cell in without_twin.split("|")]
    assert cells[5] == "n/a" and cells[9] == "n/a" and cells[12] == "-"


def test_the_headline_has_the_twin_column(bench: ModuleType) -> None:
    rows = [row(bench, "dense", {"upstream": 100e-6, "nightly": 80e-6, "fork": 50e-6, "torch": 7e-6}),
            row(bench, "generate", {"upstream": 0.2, "nightly": 0.15, "fork": 0.1}),
            row(bench, "mlp_fit", {"upstream": 0.11, "nightly": 0.1, "fork": 0.09, "torch": 0.02}, error=None)]
    lines = bench.headline_markdown(results(bench, rows)).splitlines()
    assert lines[0] == "| case | fork / upstream | fork / keras-nightly | fork / plain torch |"
    assert lines[2] == "| `Dense(4)(x)` | 0.500 ± 0.007 | 0.625 ± 0.009 | 7.14× ± 0.10 |"
    assert lines[3] == "| greedy generation, 16 tokens | 0.500 ± 0.007 | 0.667 ± 0.009 | n/a |"
    # one worker process per build: no standard error, and the headline still renders
    assert lines[4] == "| 5-layer MLP, `fit`, one epoch | 0.818 ± ? | 0.900 ± ? | 4.50× ± ? |"


def test_the_results_page_renders_a_results_json_without_twins(bench: ModuleType) -> None:
    """A results.json of an earlier run (no twin, no twin targets) still renders."""
    earlier = results(bench, [row(bench, "dense", {"upstream": 100e-6, "nightly": 80e-6, "fork": 50e-6})])
    earlier["issue_targets"] = [{"target": "Dense(4)(x) no slower than before", "case": "dense", "before": None,
                                 "ratios": {"fork/upstream": {**earlier["cases"][0]["ratios"]["fork/upstream"],
                                                              "at_most": 0.6, "met": True}}, "met": True}]
    page = bench.results_markdown(earlier)
    assert "| dense: eager Dense(4)(x), x of shape (2, 4) |" in page
    assert "fork/upstream 0.500 ± 0.007 (faster) (≤ 0.60: met): met" in page
    assert sys.modules["cases"].TWIN_CASES == bench.TWIN_CASES


def test_switched_off_runs_in_the_fork_environment_with_the_variable_and_before_in_its_own(
        bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--switches: "fork-off" is the fork's environment with KERAS_FORKGEN_DISABLE=all; every other
    build runs without the variable even when the caller has it set; --before: its own environment.
    Their ratios (fork-off/upstream, fork-off/fork, fork/before) get a table of their own."""
    monkeypatch.setenv("KERAS_FORKGEN_DISABLE", "dtype-fast-paths")
    commands: list[tuple[str, str | None]] = []
    inherited: list[list[str]] = []
    monkeypatch.setattr(bench, "run", lambda command, **kwargs: (commands.append(
        (command[0], kwargs["env"].get("KERAS_FORKGEN_DISABLE"))), inherited.append(
        command[command.index("--inherit-environ") + 1:][:1] if "--inherit-environ" in command else [])))
    monkeypatch.setattr(bench, "calibrated_loops", lambda path: 7)
    means = {"upstream": 3.0, "nightly": 2.5, "fork": 2.0, "fork-off": 3.0, "before": 2.1}
    monkeypatch.setattr(bench, "summary", lambda path: stats(means[Path(path).name.rsplit("-", 1)[0]]))
    envs = {kind: tmp_path / kind for kind in (*bench.BUILDS, bench.BEFORE)}
    args = argparse.Namespace(rounds=1, processes=1, values=1)
    kinds = [*bench.builds_of("generate", "torch"), bench.SWITCHED_OFF, bench.BEFORE]
    result = bench.time_case(kinds, envs, "generate", "torch", args, tmp_path)
    python = {kind: str(tmp_path / kind / "bin" / "python") for kind in envs}
    assert commands == [(python["upstream"], None), (python["nightly"], None), (python["fork"], None),
                        (python["fork"], "all"), (python["before"], None)]
    # pyperf hands its worker processes only the variables it is told to (a bench run timed the
    # fork twice before this): fork-off's workers must inherit KERAS_FORKGEN_DISABLE.
    assert inherited == [[], [], [], ["KERAS_FORKGEN_DISABLE"], []]
    assert result["switches"]["fork-off/upstream"]["ratio"] == pytest.approx(1.0)
    assert result["switches"]["fork-off/fork"]["ratio"] == pytest.approx(1.5)
    assert result["switches"]["fork/before"]["ratio"] == pytest.approx(2.0 / 2.1)
    text = bench.table(results(bench, [result]))
    assert "Run-time switches: fork-off is the fork with KERAS_FORKGEN_DISABLE=all" in text
    line = next(line for line in text.splitlines() if line.startswith("| generate | "))
    header = text.splitlines()[text.splitlines().index(line) - 2]
    assert line.count("|") == header.count("|") == 7, (header, line)
    assert "1.000 ± 0.014 (within noise) | 1.500 ± 0.021 (SLOWER) | 0.952 ± 0.013 (faster)" in line, line
    plain = bench.time_case(bench.builds_of("generate", "torch"), envs, "generate", "torch", args, tmp_path)
    assert "switches" not in plain and "Run-time switches" not in bench.table(results(bench, [plain]))
