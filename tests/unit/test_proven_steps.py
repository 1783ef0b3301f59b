"""The verdicts as `layer-call-proven-steps` reads them (issue 43): the table of proven classes
(codemods/engine/verdicts.py `proven`, `proven_cached`), the whole tree a patch reads through
`Sources` (`paths`, `original`), and the table the patch writes into layer.py, on the small
synthetic tree of tests/unit/test_effects.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from codemods.engine import STEP_BITS, Sources, analyse_effects, proven_cached
from codemods.engine import verdicts as verdicts_module
from codemods.engine.verdicts import ProvenClass, proven
from codemods.layer_call_proven_steps import PATCH, table_source
from codemods.layer_call_proven_steps import cases as patch_cases
from tests.unit.test_effects import files as effect_files

ALL = STEP_BITS["name scope"] | STEP_BITS["call context"] | STEP_BITS["autocast"]
CASES = "keras.src.layers.cases."


@pytest.fixture(scope="module")
def table() -> dict[str, ProvenClass]:
    return proven(analyse_effects(effect_files(), "torch"))


def test_the_table_holds_the_classes_that_may_skip_a_step_with_their_bits(table: dict[str, ProvenClass]) -> None:
    assert table[CASES + "Plain"].steps == ALL
    assert table[CASES + "Plain"].conditions == ()
    assert "call" in table[CASES + "Plain"].methods
    assert table[CASES + "Weighted"].steps == ALL & ~STEP_BITS["autocast"]  # reads a Variable
    assert table[CASES + "ReadsContext"].steps == ALL & ~STEP_BITS["call context"]
    for reads_the_scope in ("Direct", "ThroughHelper"):
        assert table[CASES + reads_the_scope].steps == ALL & ~STEP_BITS["name scope"]
    for refused in ("Dynamic", "FromRegistry", "Composite"):  # no step
        assert CASES + refused not in table, refused


def test_a_stored_callable_becomes_a_condition_on_the_steps_it_allows(table: dict[str, ProvenClass]) -> None:
    stored = table[CASES + "Stored"]
    assert stored.steps == ALL
    by_steps = {bits: functions for attr, bits, functions in stored.conditions if attr == "activation"}
    assert set(by_steps) == {STEP_BITS["name scope"], ALL & ~STEP_BITS["name scope"]}
    assert "keras.src.activations.activations.relu" in by_steps[STEP_BITS["name scope"]]
    noisy = "keras.src.activations.activations.noisy"  # it reads the name scope
    assert noisy not in by_steps[STEP_BITS["name scope"]]
    assert noisy in by_steps[ALL & ~STEP_BITS["name scope"]]


def test_the_modules_a_proof_read_include_those_of_the_functions_it_reached(table: dict[str, ProvenClass]) -> None:
    modules = table[CASES + "Plain"].modules
    assert "keras.src.ops" in modules  # `ops.add`: an attribute of a module
    assert "keras.src.ops.numpy" in modules  # the module of the function it reached
    assert "keras.src.layers.cases" in modules  # its own module's globals


def test_a_verdict_assuming_an_unchecked_fact_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    verdicts = analyse_effects(effect_files(), "torch")
    plain = next(c for c in verdicts.classes if c.key == CASES + "Plain")
    monkeypatch.setattr(verdicts, "classes", [plain])
    assert CASES + "Plain" in proven(verdicts)
    object.__setattr__(plain, "assumes", ("a fact no patch checks",))
    assert proven(verdicts) == {}


def test_the_table_round_trips_through_json(table: dict[str, ProvenClass]) -> None:
    for entry in table.values():
        assert ProvenClass.from_json(entry.to_json()) == entry


class DictStore:
    """A `Store` in memory."""

    def __init__(self) -> None:
        self.kept: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self.kept.get(key)

    def put(self, key: str, text: str) -> None:
        self.kept[key] = text


def test_the_store_keeps_a_table_per_tree_backend_and_analysis(monkeypatch: pytest.MonkeyPatch,
                                                                table: dict[str, ProvenClass]) -> None:
    files, store = effect_files(), DictStore()
    assert proven_cached(files, "torch", store) == table
    (key,) = store.kept
    assert key.startswith("proven-steps/") and key.endswith(".json")

    def no_analysis(*args: object, **kwargs: object) -> object:
        raise AssertionError("analysed again")

    monkeypatch.setattr(verdicts_module, "analyse", no_analysis)
    assert proven_cached(files, "torch", store) == table  # read back
    changed = {**files, "keras/src/layers/cases.py": files["keras/src/layers/cases.py"] + "\n# changed\n"}
    with pytest.raises(AssertionError, match="analysed again"):
        proven_cached(changed, "torch", store)  # another tree: another key
    with pytest.raises(AssertionError, match="analysed again"):
        proven_cached(files, "jax", store)  # another backend too
    monkeypatch.setattr(verdicts_module, "analysis_digest", lambda: "another analysis")
    with pytest.raises(AssertionError, match="analysed again"):
        proven_cached(files, "torch", store)  # and another analysis
    monkeypatch.undo()
    store.kept[key] = "not json"
    assert proven_cached(files, "torch", store) == table  # a damaged entry is computed again
    assert proven_cached(files, "torch", None) == table


def test_forkgen_keeps_the_store_in_files_written_whole(tmp_path: Path) -> None:
    from forkgen.patch import DerivedStore

    store = DerivedStore(tmp_path / "derived")
    assert store.get("proven-steps/a.json") is None
    store.put("proven-steps/a.json", "{}")
    assert store.get("proven-steps/a.json") == "{}"
    assert [p.name for p in (tmp_path / "derived" / "proven-steps").iterdir()] == ["a.json"]  # no leftovers
    for bad in ("../a", "/etc/passwd", "a b", ""):
        with pytest.raises(ValueError):
            store.get(bad)


def test_forkgen_passes_by_a_store_it_cannot_write(tmp_path: Path) -> None:
    from forkgen.patch import DerivedStore

    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    store = DerivedStore(blocked / "derived")
    store.put("proven-steps/a.json", "{}")  # no error
    assert store.get("proven-steps/a.json") is None


def test_sources_list_the_tree_and_give_its_files_as_they_were() -> None:
    tree = {"keras/src/a.py": "a = 1\n", "keras/src/b.py": "b = 1\n"}
    sources = Sources(tree.get, lambda: iter(tree))
    assert sources.paths() == ("keras/src/a.py", "keras/src/b.py")
    assert Sources(tree.get).paths() == ()  # a tree given file by file
    import libcst as cst

    sources.replace("keras/src/a.py", cst.parse_module("a = 2\n"))
    assert sources.text("keras/src/a.py") == "a = 2\n"
    assert sources.original("keras/src/a.py") == "a = 1\n"
    assert sources.original("keras/src/c.py") is None


def _whole_tree() -> dict[str, str]:
    """The effects test tree with a layer.py shaped as the patch expects (its Layer keeps `call`)."""
    return {**effect_files(), "keras/src/layers/layer.py": patch_cases.BEFORE}


def test_the_patch_writes_the_tree_s_table_into_layer_py() -> None:
    tree = _whole_tree()
    sources = Sources(tree.get, lambda: iter(tree), DictStore())
    checked = PATCH.check(sources)
    assert "name scope" in checked.detail and checked.facts["proven_steps"].startswith("torch: ")
    PATCH.apply(sources)
    written = sources.rendered()["keras/src/layers/layer.py"]
    assignment = next(node for node in ast.walk(ast.parse(written)) if isinstance(node, ast.Assign)
                      and getattr(node.targets[0], "id", None) == "_LAYER_CALL_PROVEN_TABLE")
    found = ast.literal_eval(assignment.value)
    expected = proven(analyse_effects(tree, "torch"))
    assert found == ast.literal_eval(table_source(expected))
    assert found[CASES + "Plain"][0] == ALL
    assert found[CASES + "Direct"][0] == ALL & ~STEP_BITS["name scope"]
    assert CASES + "Dynamic" not in found
    assert not hasattr(PATCH, "_table")  # nothing kept past the run


def test_the_table_is_derived_from_the_files_before_this_run_s_patches() -> None:
    tree = _whole_tree()
    sources = Sources(tree.get, lambda: iter(tree))
    import libcst as cst

    # A patch earlier in the run made Plain read the name scope: the table is upstream's all the same.
    harmful = tree["keras/src/layers/cases.py"].replace("return ops.add(x, x)", "return helper(x)", 1)
    sources.replace("keras/src/layers/cases.py", cst.parse_module(harmful))
    assert PATCH.table(sources)[CASES + "Plain"].steps == ALL
