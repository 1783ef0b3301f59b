"""tests/bench/compile_run.py (`nox -s bench -- --compile`) without compiling anything: the tables
(the Keras model beside its plain-PyTorch twin, a compiled call's breakdown), the guards and the
break reasons it prints from two builds' reports, and its exit code; and tests/bench/compile.py's
pure parts: the frame choice for a break reason, a guard's source, the guards' summary, and the
breakdown of a compiled call from profiler events."""

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


def guards(count: int, kinds: list[tuple[str, int]] = (), sources: list[tuple[str, int]] = ()) -> dict[str, Any]:
    return {"count": count, "kinds": [list(k) for k in kinds], "sources": [list(s) for s in sources]}


def entry(model: str, workload: str, graphs: int, reasons: list[tuple[str, str, int]], *,
          fullgraph: str = "ok", timing: dict[str, Any] | None = None, guard_count: int | None = None,
          twin_guard_count: int | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "model": model, "workload": workload, "batch": 4,
        "explain": {"graphs": graphs, "breaks": graphs - 1,
                    "reasons": [{"reason": r, "where": w, "count": n} for r, w, n in reasons]},
        "fullgraph": fullgraph, "recompiles": [graphs, 1, 0],
    }
    if guard_count is not None:
        result["explain"]["guards"] = guards(guard_count, [("TYPE_MATCH", guard_count - 1), ("GRAD_MODE", 1)],
                                             [("model._layers", guard_count - 1), ("(global state)", 1)])
    if twin_guard_count is not None:
        result["twin_explain"] = {"graphs": 1, "breaks": 0, "reasons": [],
                                  "guards": guards(twin_guard_count, [("TENSOR_MATCH", twin_guard_count)],
                                                   [("made[0]._modules", twin_guard_count)])}
    if timing is not None:
        result["timing"] = timing
    return result


def parts(lookup: float, graph: float, region: float, outside: float, graphs: float = 1.0) -> dict[str, float]:
    return {"lookup": lookup, "graph": graph, "region": region, "outside": outside,
            "total": lookup + graph + region + outside, "lookups": graphs, "graphs": graphs}


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


def with_twins() -> dict[str, dict[str, Any]]:
    """Two builds' reports of the MLP forward measured beside its twin, and a train step without one."""
    def timed(compiled: float, compile_s: float, breakdown: dict[str, float], hit: int = 0) -> dict[str, Any]:
        return {"compile_s": compile_s, "eager_us": 2 * compiled, "compiled_us": compiled, "compiled_over_eager": 0.5,
                "caches": {"fxgraph_cache_hit": hit, "fxgraph_cache_miss": 1 - hit}, "breakdown": breakdown}

    def build(keras: str, compiled: float, guard_count: int, hit: int = 0) -> dict[str, Any]:
        timing = timed(compiled, 1.5, parts(90, 50, 80, 40))
        timing["twin"] = timed(90.0, 0.75, parts(6, 40, 40, 20), hit=hit)
        timing["compiled_over_twin"] = compiled / 90.0
        return {"keras": keras, "torch": "2.13.0", "warm_up_s": 11.5, "workloads": [
            entry("mlp", "forward", 1, [], timing=timing, guard_count=guard_count, twin_guard_count=114),
            entry("mlp", "train step", 1, [], timing=timed(420.0, 7.0, parts(170, 140, 70, 60)),
                  guard_count=guard_count + 1000),
        ]}

    return {"upstream": build("3.15.1", 450.0, 2600), "fork": build("3.15.1+fast.x", 180.0, 1954, hit=1)}


def cells(text: str, model: str, workload: str, build: str) -> list[str]:
    for line in text.splitlines()[2:]:
        row = [c.strip() for c in line.strip("|").split("|")]
        if row[:3] == [model, workload, build]:
            return row
    raise AssertionError(f"no row {model} {workload} {build} in\n{text}")


def test_the_table_has_a_row_per_workload_and_build_with_its_figures(report: ModuleType) -> None:
    lines = report.table(two_builds()).splitlines()
    assert len(lines) == 2 + 4
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:3]): line for line in lines[2:]}
    assert set(rows) == {(m, "forward", b) for m in ("mlp", "transformer") for b in ("upstream", "fork")}
    upstream_transformer = [c.strip() for c in rows[("transformer", "forward", "upstream")].strip("|").split("|")]
    assert upstream_transformer[3:7] == ["11", "10", "fails", "1/0"]
    assert upstream_transformer[7:] == ["-"] * 6
    fork_mlp = [c.strip() for c in rows[("mlp", "forward", "fork")].strip("|").split("|")]
    assert fork_mlp[3:] == ["1", "0", "ok", "1/0", "-", "11.0", "200 -> 140", "0.70", "-", "-"]


def test_the_table_puts_the_twin_beside_the_keras_model(report: ModuleType) -> None:
    text = report.table(with_twins())
    header = [c.strip() for c in text.splitlines()[0].strip("|").split("|")]
    fork = dict(zip(header, cells(text, "mlp", "forward", "fork"), strict=True))
    assert fork["guards (twin)"] == "1,954 (114)"
    assert fork["compile s (twin)"] == "1.5 (0.8)"
    assert fork["eager -> compiled us"] == "360 -> 180"
    assert fork["twin eager -> compiled us"] == "180 -> 90"
    assert fork["compiled/twin"] == "2.00"
    upstream = dict(zip(header, cells(text, "mlp", "forward", "upstream"), strict=True))
    assert (upstream["guards (twin)"], upstream["compiled/twin"]) == ("2,600 (114)", "5.00")
    train = dict(zip(header, cells(text, "mlp", "train step", "fork"), strict=True))  # no twin: its own figures only
    assert (train["guards (twin)"], train["compile s (twin)"]) == ("2,954", "7.0")
    assert (train["twin eager -> compiled us"], train["compiled/twin"]) == ("-", "-")


def test_the_breakdown_table_has_the_keras_model_and_its_twin_per_build(report: ModuleType) -> None:
    text = report.breakdown_table(with_twins())
    assert len(text.splitlines()) == 2 + 2 * 3  # the forward: keras and twin; the train step: keras
    assert cells(text, "mlp", "forward", "fork")[3:] == ["keras", "90", "50", "80", "40", "260", "1/1"]
    twin_rows = [line for line in text.splitlines() if "| twin |" in line]
    assert len(twin_rows) == 2 and all("| 6 | 40 | 40 | 20 | 106 | 1/1 |" in line for line in twin_rows)
    assert report.breakdown_table(two_builds()) == "none"


def test_the_guards_are_listed_by_kind_and_source_for_the_model_and_its_twin(report: ModuleType) -> None:
    text = report.guards(with_twins())
    assert ("- fork, mlp forward, keras: 1,954 guards; kinds: TYPE_MATCH 1,953, GRAD_MODE 1; sources: "
            "`model._layers` 1,953, `(global state)` 1") in text.splitlines()
    assert "- upstream, mlp forward, twin: 114 guards; kinds: TENSOR_MATCH 114; sources: `made[0]._modules` 114" in text
    assert "mlp train step, twin" not in text and "- fork, mlp train step, keras: 2,954 guards" in text
    assert report.guards(two_builds()) == "none"
    summary = guards(30, [(f"KIND_{i}", 10 - i) for i in range(9)], [(f"s{i}", 1) for i in range(12)])
    line = report.guard_line(summary, kinds=2, sources=3)
    assert line == "30 guards; kinds: KIND_0 10, KIND_1 9; sources: `s0` 1, `s1` 1, `s2` 1"


def test_a_compile_that_hit_a_cache_is_reported(report: ModuleType) -> None:
    builds = with_twins()
    assert report.stale_compiles(builds) == ["fork, mlp forward, twin: fxgraph_cache_hit 1"]
    assert "- fork, mlp forward, twin: fxgraph_cache_hit 1: a compile hit a cache" in report.reasons(builds)
    builds["fork"]["workloads"][0]["timing"]["twin"]["caches"]["fxgraph_cache_hit"] = 0
    assert report.stale_compiles(builds) == [] and report.reasons(builds) == "none"


def test_the_page_says_how_the_compile_times_were_taken(report: ModuleType) -> None:
    page = report.markdown(with_twins(), "now")
    assert "warm-up compile" in page and "upstream 11.5 s, fork 11.5 s" in page
    assert report.breakdown_table(with_twins()) in page and report.guards(with_twins()) in page
    assert "warm-up" not in report.headline(two_builds())


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


@pytest.fixture(scope="module")
def compile_module() -> ModuleType:
    sys.path.insert(0, str(ROOT / "tests" / "bench"))
    try:
        return load_bench("compile")
    finally:
        sys.path.remove(str(ROOT / "tests" / "bench"))


@pytest.mark.parametrize(("name", "source"), [
    ("list.__getitem__(G['model']._layers, 4).bias._value", "model._layers[4]"),
    ("type(list.__getitem__(G['model']._layers, 4).bias._value)", "model._layers[4]"),
    ("dict(type(G['model']).__mro__[1].__dict__)", "model.__class__.__mro__"),
    ("G['__import_keras_dot_src_dot_ops_dot_numpy'].any_symbolic_tensors.__defaults__",
     "keras.src.ops.numpy.any_symbolic_tensors.__defaults__"),
    ("G['__import_keras_dot_src_dot_backend_dot_common_dot_global_state']", "keras.src.backend.common.global_state"),
    ("___odict_getitem(L['self']._modules, 'x').weight", "self._modules['x']"),
    ("L['fn']._modules['0']._backward_hooks", "fn._modules['0']"),
    ("G['_139693070235616_c0'].Tensor", "(constant).Tensor"),
    ("L['x'].size()[0]", "x.size()[0]"),
    ("len(L['args'])", "args"),
    ("L['one_step'].__closure__[0].cell_contents._layers[1].kernel", "one_step.__closure__[0].cell_contents._layers"),
    ("", "(global state)"),
])
def test_a_guard_s_source_is_its_leading_object_and_two_steps(compile_module: ModuleType, name: str,
                                                                source: str) -> None:
    assert compile_module.guard_source(name) == source


def test_a_guard_source_keeps_as_many_steps_as_asked(compile_module: ModuleType) -> None:
    name = "L['self'].a.b['c'].d"
    assert [compile_module.guard_source(name, depth) for depth in (0, 1, 3, 9)] == \
        ["self", "self.a", "self.a.b['c']", "self.a.b['c'].d"]


def test_the_guard_summary_counts_kinds_and_the_top_sources(compile_module: ModuleType) -> None:
    listed = ([("G['model']._layers", "TYPE_MATCH")] * 3 + [("list.__getitem__(G['model']._layers, 0).x", "ID_MATCH")]
              + [("", "GRAD_MODE")] + [(f"L['v{i}']", "TENSOR_MATCH") for i in range(12)])
    summary = compile_module.guard_summary(iter(listed), top=3)
    assert summary["count"] == 17
    assert summary["kinds"] == [["TENSOR_MATCH", 12], ["TYPE_MATCH", 3], ["ID_MATCH", 1], ["GRAD_MODE", 1]]
    assert summary["sources"][:1] == [["model._layers", 3]] and len(summary["sources"]) == 3
    assert compile_module.guard_summary([]) == {"count": 0, "kinds": [], "sources": []}


def test_a_guard_s_kind_is_its_check_function_s_name(compile_module: ModuleType) -> None:
    assert compile_module.guard_kind(types.SimpleNamespace(create_fn_name=lambda: "TYPE_MATCH")) == "TYPE_MATCH"
    assert compile_module.guard_kind(types.SimpleNamespace()) == "unknown"


def one_call(start: float, lookup: float, region: float, graph: float, after: float = 5.0) -> list[tuple[str, float, float]]:
    """A marked call from `start`: 5 us of Python, the lookup, the compiled frame (2 us before its
    graph, an aten op inside the graph), then `after` us outside."""
    lookup_end = start + 5 + lookup
    graph_start = lookup_end + 2
    end = lookup_end + region + after
    return [("forkgen: compiled call", start, end), ("TorchDynamo Cache Lookup", start + 5, lookup_end),
            ("Torch-Compiled Region: 0/0", lookup_end, lookup_end + region),
            ("Pregraph bytecode", lookup_end, graph_start), ("CompiledFunction", graph_start - 1, graph_start + graph + 1),
            ("## Call CompiledFxGraph abc", graph_start, graph_start + graph),
            ("aten::addmm", graph_start + 1, graph_start + graph - 1)]


def test_the_breakdown_splits_a_compiled_call_into_lookup_graph_region_and_outside(compile_module: ModuleType) -> None:
    events = one_call(100.0, lookup=30, region=50, graph=20)
    events.append(("TorchDynamo Cache Lookup", 0.0, 50.0))  # outside every marked call: not counted
    parts = compile_module.breakdown(events)
    assert parts == {"total": 90.0, "lookup": 30.0, "graph": 20.0, "region": 30.0, "outside": 10.0,
                     "lookups": 1.0, "graphs": 1.0}


def test_the_breakdown_takes_the_median_call(compile_module: ModuleType) -> None:
    events = [*one_call(1000.0, 30, 50, 20), *one_call(0.0, 300, 500, 200), *one_call(2000.0, 10, 30, 10)]
    parts = compile_module.breakdown(events)
    assert (parts["lookup"], parts["graph"], parts["region"]) == (30.0, 20.0, 30.0)


def test_the_breakdown_of_a_call_with_a_graph_break(compile_module: ModuleType) -> None:
    """A frame's first graph, the break's Python, then the resume frame's lookup and its graph,
    both inside the outer frame: the nested lookup is the lookup's, both graphs the graph's."""
    events = [("forkgen: compiled call", 0.0, 200.0), ("TorchDynamo Cache Lookup", 5.0, 25.0),
              ("Torch-Compiled Region: 0/0", 25.0, 190.0), ("## Call CompiledFxGraph a", 30.0, 60.0),
              ("TorchDynamo Cache Lookup", 100.0, 120.0), ("Torch-Compiled Region: 1/0", 120.0, 180.0),
              ("## Call CompiledFxGraph b", 125.0, 165.0)]
    parts = compile_module.breakdown(events)
    assert parts["lookup"] == 40.0 and parts["graph"] == 70.0 and parts["lookups"] == 2 and parts["graphs"] == 2
    assert parts["region"] == 165.0 - 70.0 - 20.0
    assert parts["outside"] == 200.0 - 40.0 - 70.0 - 75.0


def test_the_breakdown_needs_marked_calls(compile_module: ModuleType) -> None:
    with pytest.raises(ValueError, match="no 'forkgen: compiled call' event"):
        compile_module.breakdown([("TorchDynamo Cache Lookup", 0.0, 1.0)])
    assert compile_module.breakdown(one_call(0.0, 1, 4, 2), call="forkgen: compiled call")["graph"] == 2.0
