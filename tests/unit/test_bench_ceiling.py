"""tests/bench/ceiling.py (`nox -s bench -- --ceiling`) without Keras: the variants' source
rewrites on a synthetic `__call__`, the refusal of a source that lacks a step's text, and the
targets' projection from a results.json."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.bench import load_bench


@pytest.fixture(scope="module")
def ceiling() -> ModuleType:
    return load_bench("ceiling")


#: A `__call__` of our own with the lines the variants rewrite (the fork's shape, not its code).
SYNTHETIC = textwrap.dedent('''\
    def __call__(self, *args, **kwargs):
        original_args = args
        fast_lane = _layer_call_fast_lane(self, original_args, call_spec)
        if not (fast_lane and _layer_call_fast_lane_spec_passes(self, call_spec.first_arg)):
            check(call_spec.first_arg)
        call_context = self._get_call_context()
        for context_arg in self._call_context_args:
            resolve(context_arg)
        if fast_lane and backend.get_keras_mask(call_spec.first_arg) is None:
            previous_mask = None
        try:
            with self._open_name_scope():
                current_scope = backend.get_autocast_scope()
                if current_scope is not None:
                    pass
                elif self.compute_dtype != self.variable_dtype:
                    pass
                outputs = super(Layer, self).__call__(*args, **kwargs)
                outputs = super(Layer, self).__call__(*args, **kwargs)
        finally:
            self._maybe_reset_call_context()
        return outputs
''')


def test_each_step_replaces_every_occurrence_of_its_texts(ceiling: ModuleType) -> None:
    for step, (_, replacements) in ceiling.STEPS.items():
        rewritten = ceiling.variant_source(SYNTHETIC, (step,))
        for text, stand_in in replacements:
            assert text not in rewritten, step
            assert stand_in in rewritten, step
        compile(rewritten, step, "exec")  # still Python
    ceiling_source = ceiling.variant_source(SYNTHETIC, ceiling.VARIANTS["ceiling"])
    assert "super(Layer, self).__call__" not in ceiling_source
    assert ceiling_source.count("self.call(*args, **kwargs)") == 2
    assert "_open_name_scope" not in ceiling_source and "_get_call_context" not in ceiling_source


def test_the_variants_nest_and_the_ceiling_takes_out_every_step(ceiling: ModuleType) -> None:
    assert all(ceiling.VARIANTS[step] == (step,) for step in ceiling.STEPS)
    assert set(ceiling.VARIANTS["steps"]) == set(ceiling.STEPS) - {"dispatch"}
    assert set(ceiling.VARIANTS["ceiling"]) == set(ceiling.STEPS)


def test_a_source_without_a_steps_text_is_refused_naming_it(ceiling: ModuleType) -> None:
    source = SYNTHETIC.replace("self._maybe_reset_call_context()", "self._reset()")
    assert ceiling.variant_source(source, ("name scope",))  # the other steps do not need it
    with pytest.raises(ceiling.CeilingError, match=r"call context: 'self._maybe_reset_call_context\(\)'"):
        ceiling.variant_source(source, ceiling.VARIANTS["steps"])


def test_the_call_source_is_a_module_level_function(ceiling: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "synthetic_layer.py"
    path.write_text(textwrap.dedent('''\
        import functools


        def deco(f):
            @functools.wraps(f)
            def wrapper(*a, **k):
                return f(*a, **k)
            return wrapper


        class Base:
            def __call__(self, x):
                return ("base", x)


        class Layer(Base):
            @deco
            def __call__(self, x):
                y = (x
        @ x) if False else x
                return super().__call__(y)
    '''))
    spec = importlib.util.spec_from_file_location("synthetic_layer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = ceiling.call_source(module.Layer.__dict__["__call__"].__wrapped__)
    assert source.startswith("def __call__(self, x):")
    assert "@ x" in source  # a line starting with "@" below the signature is code, not a decorator
    assert "super(Layer, self).__call__(y)" in source
    compiled: dict[str, Any] = {}
    exec(source, vars(module), compiled)
    assert compiled["__call__"](module.Layer(), 3) == ("base", 3)


def results_row(case: str, ratios: dict[str, float], targets: dict[str, float]) -> dict[str, Any]:
    return {"case": case, "ratios": {name: {"ratio": value} for name, value in ratios.items()},
            "targets": {name: {"at_most": value} for name, value in targets.items()}}


def test_the_projection_multiplies_each_ratio_by_each_factor(ceiling: ModuleType) -> None:
    rows = [results_row("mlp_fit", {"fork/upstream": 0.54, "fork/torch": 2.3}, {"fork/upstream": 0.5, "fork/torch": 2.5}),
            results_row("dense", {"fork/torch": 4.0}, {"fork/torch": 3.0}),
            results_row("callspec", {"fork/upstream": 0.2}, {"fork/upstream": 0.3})]
    factors = {"mlp_fit": {"steps": 0.95, "ceiling": 0.9}, "dense": {"steps": 0.8, "ceiling": 0.7}}
    projected = ceiling.project(rows, factors)
    assert [(p["case"], p["ratio"]) for p in projected] == [
        ("mlp_fit", "fork/upstream"), ("mlp_fit", "fork/torch"), ("dense", "fork/torch")]  # callspec: not timed
    fit = projected[0]
    assert fit["met_now"] is False
    assert fit["variants"]["steps"]["ratio"] == pytest.approx(0.54 * 0.95)
    assert fit["variants"]["steps"]["reached"] is False  # 0.513
    assert fit["variants"]["ceiling"]["reached"] is True  # 0.486
    assert projected[1]["met_now"] is True
    dense = projected[2]
    assert [dense["variants"][v]["reached"] for v in ("steps", "ceiling")] == [False, True]  # 3.2, 2.8
    text = ceiling.projection_text(projected, ["steps", "ceiling"])
    lines = text.splitlines()
    assert "| mlp_fit | fork/upstream | 0.5 | 0.540 | 0.513 | 0.486 | reached only by the variant `ceiling` |" in lines
    assert "| mlp_fit | fork/torch | 2.5 | 2.300 | 2.185 | 2.070 | met |" in lines


def test_a_target_out_of_reach_says_so(ceiling: ModuleType) -> None:
    projected = ceiling.project([results_row("mlp_predict", {"fork/torch": 7.5}, {"fork/torch": 5.0})],
                                {"mlp_predict": {"steps": 0.8, "ceiling": 0.7}})
    assert projected[0]["variants"]["ceiling"]["ratio"] == pytest.approx(5.25)
    assert "out of reach of the layer-call path" in ceiling.projection_text(projected, ["steps", "ceiling"])


def test_only_a_results_json_of_the_same_backend_is_projected(ceiling: ModuleType) -> None:
    assert ceiling.projection_refusal({"backend": "torch", "cases": []}, "torch") is None
    assert "jax backend" in ceiling.projection_refusal({"backend": "jax", "cases": []}, "torch")
    assert "no cases" in ceiling.projection_refusal({"backend": "torch"}, "torch")


def test_run_refuses_ceiling_with_compile_or_ablation(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = load_bench("run")
    for extra in ("--compile", "--ablation"):
        monkeypatch.setattr(sys, "argv", ["run.py", "--wheel", "w.whl", "--upstream", "keras==3.15.1", "--ceiling", extra])
        with pytest.raises(SystemExit) as raised:
            run.main()
        assert raised.value.code == 2
        assert "--ceiling goes with neither --compile nor --ablation" in capsys.readouterr().err
