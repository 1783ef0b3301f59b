"""tests/bench/compile_run.py (`nox -s bench -- --compile`) without compiling anything: the table
and the break reasons it prints from two builds' reports, and its exit code; and
tests/bench/compile.py's frame choice for a break reason."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]




@pytest.fixture(scope="module")
def report() -> ModuleType:
    return load_bench("compile_run")


def entry(model: str, workload: str, graphs: int, reasons: list[tuple[str, str, int]], *,
          fullgraph: str = "ok", timing: dict[str, float] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "model": model, "workload": workload, "batch": 4,
        "explain": {"graphs": graphs, "breaks": graphs - 1,
                    "reasons": [{"reason": r, "where": w, "count": n} for r, w, n in reasons]},
        "fullgraph": fullgraph, "recompiles": [graphs, 1, 0],
    }
    if timing is not None:
        result["timing"] = timing
    return result


def two_builds() -> dict[str, dict[str, Any]]:
    probe = ("Attempted to call function marked as skipped", "keras/src/backend/torch/nn.py:1477 (_can_use_flash_attention)")
    return {
        "upstream": {"keras": "3.15.1", "torch": "2.13.0", "workloads": [
            entry("mlp", "forward", 1, [], timing={"compile_s": 12.0, "eager_us": 300.0, "compiled_us": 150.0,
                                                  "compiled_over_eager": 0.5}),
            entry("transformer", "forward", 11, [(*probe, 3)], fullgraph="Unsupported: Attempted to call function"),
        ]},
        "fork": {"keras": "3.15.1+fast.x", "torch": "2.13.0", "workloads": [
            entry("mlp", "forward", 1, [], timing={"compile_s": 11.0, "eager_us": 200.0, "compiled_us": 140.0,
                                                  "compiled_over_eager": 0.7}),
            entry("transformer", "forward", 1, []),
        ]},
    }


def test_the_table_has_a_row_per_workload_and_build_with_its_figures(report: ModuleType) -> None:
    lines = report.table(two_builds()).splitlines()
    assert len(lines) == 2 + 4
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:3]): line for line in lines[2:]}
    assert set(rows) == {(m, "forward", b) for m in ("mlp", "transformer") for b in ("upstream", "fork")}
    upstream_transformer = [c.strip() for c in rows[("transformer", "forward", "upstream")].strip("|").split("|")]
    assert upstream_transformer[3:7] == ["11", "10", "fails", "1/0"]
    assert upstream_transformer[7:] == ["-", "-", "-"]
    fork_mlp = [c.strip() for c in rows[("mlp", "forward", "fork")].strip("|").split("|")]
    assert fork_mlp[3:] == ["1", "0", "ok", "1/0", "11.0", "200 -> 140", "0.70"]


def test_the_reasons_name_the_build_the_workload_and_the_keras_frame(report: ModuleType) -> None:
    text = report.reasons(two_builds())
    assert "- upstream, transformer forward: 3x Attempted to call function marked as skipped " \
           "(at keras/src/backend/torch/nn.py:1477 (_can_use_flash_attention))" in text
    assert "- upstream, transformer forward: fullgraph=True: Unsupported" in text
    assert "fork," not in text
    clean = two_builds()
    clean["upstream"] = clean["fork"]
    assert report.reasons(clean) == "none"


def test_a_workload_that_cannot_run_in_the_fork_fails_the_report(report: ModuleType, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    builds = two_builds()
    outputs = iter([builds["upstream"], builds["fork"]])

    class FakeProcess:
        """What `subprocess.Popen` gives: the report on the stdout file it was handed."""

        def __init__(self, command: list[str], stdout: Any, **kwargs: Any) -> None:
            stdout.write(json.dumps(next(outputs)) + "\n")
            self.stderr = iter(["compile: mlp forward\n", "a warning\n"])

        def wait(self) -> int:
            return 0

    monkeypatch.setattr("subprocess.Popen", FakeProcess)
    envs = {"upstream": tmp_path / "u", "fork": tmp_path / "f"}
    out = tmp_path / "compile.json"
    docs = tmp_path / "compile-results.md"
    assert report.main(envs, lambda env: sys.executable, None, True, out, docs) == 0
    assert json.loads(out.read_text())["fork"]["keras"] == "3.15.1+fast.x"
    page = docs.read_text()
    assert page.startswith("# torch.compile") and report.table(two_builds()) in page and report.reasons(two_builds()) in page
    printed = capsys.readouterr()
    assert "| transformer | forward | fork | 1 | 0 | ok |" in printed.out
    assert "bench: fork: mlp forward" in printed.err and "a warning" not in printed.err

    builds["fork"]["workloads"].append({"model": "convnet", "workload": "forward", "batch": 8, "error": "boom"})
    outputs = iter([builds["upstream"], builds["fork"]])
    assert report.main(envs, lambda env: sys.executable, None, True, out, docs) == 1


def test_a_break_is_placed_at_its_innermost_keras_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "bench"))
    compile_module = load_bench("compile")
    frame = types.SimpleNamespace
    stack = [frame(filename="/v/site-packages/keras/src/layers/layer.py", lineno=10, name="__call__"),
             frame(filename="/v/site-packages/keras/src/backend/torch/nn.py", lineno=1477, name="_probe"),
             frame(filename="/v/site-packages/torch/_dynamo/polyfills/__init__.py", lineno=505, name="new")]
    assert compile_module.keras_frame(stack) == "keras/src/backend/torch/nn.py:1477 (_probe)"
    assert compile_module.keras_frame(stack[2:]) == "torch/_dynamo/polyfills/__init__.py:505 (new)"
    assert compile_module.keras_frame([]) == ""


class StandInTrainer:
    """Builds its train function as Keras's torch trainer does: `torch.compile` of a one-step
    function, wrapped in `around` (what a build puts around the compiled step), or not compiled."""

    def __init__(self, torch: Any, around: Any) -> None:
        self.torch, self.around = torch, around
        self.jit_compile, self.run_eagerly, self.train_function = False, True, None
        self.steps: list[Any] = []

    def train_step(self, data: Any) -> Any:
        self.steps.append(data)
        return {"loss": len(self.steps)}

    def make_train_function(self, force: bool = False) -> None:
        def one_step_on_data(data: Any) -> Any:
            return self.train_step(data[0])

        if self.jit_compile and not self.run_eagerly:
            self.train_function = self.around(self.torch.compile(one_step_on_data))
        else:
            self.train_function = one_step_on_data


def test_the_train_step_is_compiled_by_the_caller_and_called_through_keras_s_wrapper(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "bench"))
    compile_module = load_bench("compile")
    def never(function: Any) -> Any:
        pytest.fail("the build's own torch.compile ran")

    torch = types.SimpleNamespace(compile=never)
    monkeypatch.setitem(sys.modules, "torch", torch)
    wrapped: list[str] = []

    def around(compiled: Any) -> Any:
        def keras_wrapper(data: Any) -> Any:
            wrapped.append("in")
            return compiled(data)

        return keras_wrapper

    model = StandInTrainer(torch, around)
    step, outer = compile_module.keras_train_step(model, lambda x, y: (x, y))
    assert (model.jit_compile, model.run_eagerly) == (True, False)
    assert torch.compile is never  # put back

    assert step(1, 2) == {"loss": 1} and model.steps == [(1, 2)] and wrapped == []  # eager: the step alone
    compiled_calls: list[tuple[Any, ...]] = []

    def compiled(*args: Any) -> Any:
        compiled_calls.append(args)
        return step(*args)

    assert outer(compiled)(3, 4) == {"loss": 2}
    assert wrapped == ["in"] and compiled_calls == [(3, 4)] and model.steps[-1] == (3, 4)
