"""`forkgen report` on synthetic Keras-shaped trees: class resolution, eligibility, output, exit codes."""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods import series
from codemods.callspec_fast_path import rules
from codemods.callspec_fast_path.source import patch_source
from codemods.engine import CodeClass, CodeTree
from forkgen import cli, report
from forkgen.errors import EXIT_DRIFT, EXIT_INTERNAL, EXIT_USAGE
from tests.support.synthetic import LAYER_V4, LAYERS, load_layer, tree_files, write_tree

#: The patched synthetic layer.py of every variant, executed: the template's own rules.
PATCHED = {variant: load_layer(patch_source(source).source, f"report_{variant}") for variant, source in LAYERS.items()}

MODULES = {
    "keras/src/layers/__init__.py": """
        from keras.src.layers.layer import Layer
        from keras.src.layers.base import Base
    """,
    "keras/src/layers/base.py": """
        from keras.src.layers.layer import Layer as KerasLayer

        class Base(KerasLayer):
            def call(self, inputs, training=None):
                return inputs
    """,
    "keras/src/layers/child.py": """
        from keras.src.layers import Base

        class Child(Base):
            pass

        class _Hidden(Child):
            pass
    """,
    "keras/src/layers/relative.py": """
        from .base import Base

        class Relative(Base):
            def call(self, x, mask=None):
                return x
    """,
    "keras/src/other/attribute.py": """
        from keras.src import layers

        class Attribute(layers.Layer):
            def call(self, query, value, key=None, training=None):
                return query
    """,
    "keras/src/other/module_alias.py": """
        import keras.src.layers.layer as L
        import keras.src.layers

        class ModuleAlias(L.Layer):
            pass

        class Dotted(keras.src.layers.layer.Layer):
            def call(self, inputs, **kwargs):
                return inputs
    """,
    "keras/src/ops/__init__.py": "from keras.src.ops.core import *\n",
    "keras/src/ops/core.py": """
        from keras.src.layers.layer import Layer

        class Starred(Layer):
            def call(self, x, training=None, /):
                return x
    """,
    "keras/src/other/star.py": """
        from keras.src import ops

        class ViaStar(ops.Starred):
            pass
    """,
    "keras/src/other/diamond.py": """
        from keras.src.layers.layer import Layer

        class Root(Layer):
            def call(self, a):
                return a

        class Mid(Root):
            pass

        class Right(Root):
            def call(self, a, b=None):
                return a

        class Left(Mid):
            pass

        class Join(Left, Right):  # C3: Join, Left, Mid, Right, Root: Right's call
            pass

        class Flip(Right, Left):
            pass
    """,
    "keras/src/other/odd.py": """
        import functools
        from keras.src.layers.layer import Layer

        def helper(self, x):
            return x

        class Decorated(Layer):
            @functools.wraps(helper)
            def call(self, x):
                return x

        class Assigned(Layer):
            call = helper

        class NotALayer:
            def call(self, x):
                return x

        class Alias(Decorated):
            pass
    """,
    "keras/src/layers/child_test.py": "from keras.src.layers.layer import Layer\n\nclass InATest(Layer):\n    pass\n",
    "keras/src/testing/test_case.py": "from keras.src.layers.layer import Layer\n\nclass InTesting(Layer):\n    pass\n",
}

EXPECTED_CLASSES = {
    "keras.src.layers.base.Base",
    "keras.src.layers.child.Child",
    "keras.src.layers.child._Hidden",
    "keras.src.layers.relative.Relative",
    "keras.src.ops.core.Starred",
    "keras.src.other.attribute.Attribute",
    "keras.src.other.diamond.Flip",
    "keras.src.other.diamond.Join",
    "keras.src.other.diamond.Left",
    "keras.src.other.diamond.Mid",
    "keras.src.other.diamond.Right",
    "keras.src.other.diamond.Root",
    "keras.src.other.module_alias.Dotted",
    "keras.src.other.module_alias.ModuleAlias",
    "keras.src.other.odd.Alias",
    "keras.src.other.odd.Assigned",
    "keras.src.other.odd.Decorated",
    "keras.src.other.star.ViaStar",
}


def make_tree(root: Path, modules: dict[str, str], variant: str = "V4", *, patched: bool = False, extension: bool = True) -> Path:
    layer = LAYERS[variant]
    if patched:
        layer = patch_source(layer, extension=extension).source
    files = {**tree_files(layer), **{path: textwrap.dedent(text).lstrip() for path, text in modules.items()}}
    return write_tree(root, files)


def rows(root: Path) -> dict[str, report.LayerReport]:
    return {f"{row.module}.{row.name}": row for row in report.report(root).layers}


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> dict[str, report.LayerReport]:
    return rows(make_tree(tmp_path_factory.mktemp("mini"), MODULES, patched=True))


def test_finds_every_layer_subclass_through_imports(mini: dict[str, report.LayerReport]) -> None:
    assert set(mini) == EXPECTED_CLASSES
    assert [key for key, row in mini.items() if row.name.startswith("_")] == ["keras.src.layers.child._Hidden"]


@pytest.mark.parametrize(
    ("key", "defined_in", "signature"),
    [
        ("keras.src.layers.child.Child", "keras.src.layers.base.Base", "(inputs, training=None)"),
        ("keras.src.layers.child._Hidden", "keras.src.layers.base.Base", "(inputs, training=None)"),
        ("keras.src.layers.relative.Relative", "keras.src.layers.relative.Relative", "(x, mask=None)"),
        ("keras.src.other.module_alias.ModuleAlias", "keras.src.layers.layer.Layer", "(*args, **kwargs)"),
        ("keras.src.other.star.ViaStar", "keras.src.ops.core.Starred", "(x, training=None, /)"),
        ("keras.src.other.diamond.Join", "keras.src.other.diamond.Right", "(a, b=None)"),
        ("keras.src.other.diamond.Flip", "keras.src.other.diamond.Right", "(a, b=None)"),
        ("keras.src.other.diamond.Left", "keras.src.other.diamond.Root", "(a)"),
    ],
)
def test_call_resolved_through_the_mro(mini: dict[str, report.LayerReport], key: str, defined_in: str, signature: str) -> None:
    assert (mini[key].call_defined_in, mini[key].signature) == (defined_in, signature)


def test_c3_matches_python() -> None:
    namespace: dict[str, Any] = {"Layer": type("Layer", (), {})}
    body = textwrap.dedent(MODULES["keras/src/other/diamond.py"]).split("\n", 2)[2]
    exec(body, namespace)
    tree = CodeTree({"keras/src/other/diamond.py": textwrap.dedent(MODULES["keras/src/other/diamond.py"])})
    for name in ("Join", "Flip"):
        python = [c.__name__ for c in namespace[name].__mro__ if c.__name__ not in ("Layer", "object")]
        found = tree.resolve("keras.src.other.diamond", name)
        assert isinstance(found, CodeClass)
        assert [c.name for c in tree.mro(found)] == python


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("keras.src.other.odd.Decorated", "unresolved (call() is decorated with @functools.wraps(helper))"),
        ("keras.src.other.odd.Alias", "unresolved (call() is decorated with @functools.wraps(helper))"),
        ("keras.src.other.odd.Assigned", "unresolved (call = helper)"),
    ],
)
def test_unresolved_call_is_slow_with_the_reason(mini: dict[str, report.LayerReport], key: str, reason: str) -> None:
    row = mini[key]
    assert row.signature == reason and row.arities is None
    for shape in ("layer(x)", "layer(x, training=b)", "keywords", "nested"):
        assert row.shapes[shape] == report.Verdict(False, False, reason)
    assert row.shapes["positional"]["2"].reason == reason


def test_shapes_of_a_multi_head_attention_like_call(mini: dict[str, report.LayerReport]) -> None:
    row = mini["keras.src.other.attribute.Attribute"]  # (query, value, key=None, training=None)
    # layer(x) does not bind (upstream raises too); every call that binds is fast.
    assert row.shapes["layer(x)"] == report.Verdict(False, False, "parameter `value` has no default")
    assert row.shapes["layer(x, training=b)"].reason == "parameter `value` has no default"
    assert row.shapes["nested"].reason == "parameter `value` has no default"
    assert row.shapes["keywords"] == report.Verdict(True, True)  # e.g. layer(query=q, value=v)
    assert {n: v.fast for n, v in row.shapes["positional"].items()} == {"2": True, "3": True, "4": True}
    assert row.arities == [2, 3, 4]


def test_kwargs_and_positional_only_training(mini: dict[str, report.LayerReport]) -> None:
    dotted = mini["keras.src.other.module_alias.Dotted"]
    starred = mini["keras.src.other.star.ViaStar"]
    # **kwargs: no plan for layer(x), but bindings: every call that binds is fast.
    assert all(v == report.Verdict(True, True) for v in (dotted.shapes["layer(x)"], dotted.shapes["keywords"]))
    assert dotted.shapes["positional"]["2"].reason == "only 1 parameter takes a positional argument"
    # A positional-only `training`: no plan, no bindings.
    verdicts = [*(starred.shapes[s] for s in ("layer(x)", "layer(x, training=b)", "keywords", "nested")),
                *starred.shapes["positional"].values()]
    assert {v.reason for v in verdicts} == {"positional-only `training`"} and starred.arities == []
    module_alias = mini["keras.src.other.module_alias.ModuleAlias"]  # *args: fast through the bindings
    assert module_alias.shapes["layer(x)"] == report.Verdict(True, True)
    assert module_alias.shapes["positional"]["2"] == report.Verdict(True, True)


def test_dense_like_layer_and_the_training_note(mini: dict[str, report.LayerReport]) -> None:
    child = mini["keras.src.layers.child.Child"]  # (inputs, training=None), V4 patched with the extension
    assert child.shapes["layer(x)"] == report.Verdict(True, True)
    assert child.shapes["layer(x, training=b)"] == report.Verdict(True, True)
    assert child.shapes["positional"]["2"] == report.Verdict(True, True)  # the second binds to `training`
    assert child.shapes["positional"].keys() == {"2"} and child.arities == [1, 2]
    relative = mini["keras.src.layers.relative.Relative"]  # no `training`: popped as a call-context argument
    assert relative.shapes["layer(x, training=b)"].note == "fast while `training` is a call-context argument (the default)"
    assert relative.shapes["positional"]["2"].fast


@pytest.mark.parametrize(
    ("variant", "default", "plain", "why"),
    [
        ("V1", "()", False, "empty nested value, V1"),
        ("V1", "{'a': []}", False, "nested value without leaves, V1"),
        ("V1", "(None, None)", True, None),
        ("V2", "()", True, None),
        ("V2", "((),)", False, "nested value without leaves, V2"),
        ("V2", "(None, None)", True, None),
        ("V3", "(None, None)", False, "nested value of only None, V3"),
        ("V3", "()", True, None),
        ("V4", "[None]", False, "nested value of only None, V4"),
        ("V4", "{'a': None}", False, "nested value of only None, V4"),
        ("V4", "(3, 3)", True, None),
        ("V4", "'valid'", True, None),
        ("V4", "(None, 1)", True, None),
    ],
)
def test_default_classes_per_variant(tmp_path: Path, variant: str, default: str, plain: bool, why: str | None) -> None:
    modules = {"keras/src/layers/pad.py": f"from keras.src.layers.layer import Layer\n\nclass Pad(Layer):\n    def call(self, inputs, padding={default}):\n        return inputs\n"}
    row = rows(make_tree(tmp_path, modules, variant))["keras.src.layers.pad.Pad"]
    assert row.parameters[1] == rules.Parameter("padding", rules.POSITIONAL_OR_KEYWORD, default, plain, why)
    # A plain default: layer(x) has the base's plan; otherwise the extension's bindings take it.
    expected = report.Verdict(False, True, "not patched" if plain else "extension not in this tree")
    assert row.shapes["layer(x)"] == expected
    assert (rules.plan_reason(list(row.parameters)) is None) is plain
    # Any other call: the extension (absent from this tree) would take it whatever the default.
    verdict = row.shapes["layer(x, training=b)"]
    assert (verdict.fast, verdict.eligible, verdict.reason) == (False, True, "extension not in this tree")


def test_non_literal_default_is_assumed_plain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    modules = {"keras/src/layers/scaled.py": "from keras.src.layers.layer import Layer\nSCALE = 2\n\nclass Scaled(Layer):\n    def call(self, x, *, scale=SCALE):\n        return x\n"}
    src = make_tree(tmp_path / "src", modules)
    assert cli.main(["report", str(src), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["layers"][0]
    assert (row["class"], row["signature"], row["assumed_plain"]) == ("Scaled", "(x, *, scale=SCALE)", ["scale"])
    assert row["shapes"]["layer(x)"] == {"fast": False, "eligible": True, "reason": "not patched", "note": None}


# -- the rules are the template's: the same verdicts as the inserted code, executed ------------
_NAMES = ("a", "b", "c", "mask", "training")
_DEFAULTS = (None, "None", "()", "[]", "{}", "(None, None)", "[None]", "((),)", "(3, 3)", "'same'", "{'k': None}", "[[], None]", "SCALE")


@st.composite
def signatures(draw: st.DrawFn) -> str:
    names = draw(st.lists(st.sampled_from(_NAMES), unique=True, max_size=5))
    kinds = sorted(draw(st.lists(st.sampled_from((0, 1, 2)), min_size=len(names), max_size=len(names))))
    parts, defaulted = ["self"], False
    for name, kind in zip(names, kinds, strict=True):
        default = draw(st.sampled_from(_DEFAULTS))
        if kind < 2 and defaulted and default is None:
            default = "None"  # no required positional after a defaulted one
        defaulted = defaulted or (kind < 2 and default is not None)
        if kind == 2 and "*" not in " ".join(parts):
            parts.append("*args" if draw(st.booleans()) else "*")
        parts.append(name if default is None else f"{name}={default}")
        if kind == 0 and (kinds + [2])[names.index(name) + 1] != 0:
            parts.append("/")
    if draw(st.booleans()):
        parts.append("**kwargs")
    return ", ".join(parts)


@settings(max_examples=300, deadline=None)
@given(spec=signatures(), variant=st.sampled_from(sorted(LAYERS)))
def test_rules_agree_with_the_inserted_code(spec: str, variant: str) -> None:
    source = f"def call({spec}):\n    pass\n"
    namespace: dict[str, Any] = {"SCALE": 2}
    exec(source, namespace)
    signature = inspect.signature(types.MethodType(namespace["call"], object()))
    fn = ast.parse(source).body[0]
    assert isinstance(fn, ast.FunctionDef)
    params = rules.call_parameters(fn, variant)
    module = PATCHED[variant]
    assert (rules.plan_reason(params) is None) == (module._callspec_fast_plan(signature) is not None), spec
    assert (rules.bindings_reason(params) is None) == (module._callspec_fast_bindings(signature) is not None), spec
    # Which positional calls bind: the report's reasons against Signature.bind itself.
    for n in range(1, 5):
        try:
            signature.bind(*range(n))
        except TypeError:
            binds = False
        else:
            binds = True
        assert (rules.unbound_reason(params, n) is None) is binds, (spec, n)
    try:
        signature.bind(0, training=True)
    except TypeError:
        binds_training = "training" not in signature.parameters and rules.unbound_reason(params, 1) is None
    else:
        binds_training = True
    assert (rules.unbound_reason(params, 1, frozenset({"training"})) is None) is binds_training, spec


# -- the command: header, output, exit codes -----------------------------------------------------
def test_text_report_header_lines_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_tree(tmp_path / "src", MODULES, "V3", patched=True, extension=False)
    assert cli.main(["report", str(src)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"keras 3.15.1 at {src}: CallSpec variant V3"
    assert lines[1] == "base patch: present; extension: absent"
    child = next(line for line in lines if line.startswith("keras.src.layers.child.Child "))
    assert child == (
        "keras.src.layers.child.Child  (inputs, training=None)  [call from keras.src.layers.base.Base]"
        "  layer(x): fast  training: slow (extension not in this tree)"
        "  keywords: slow (extension not in this tree)  nested: slow (extension not in this tree)"
        "  positional: 2 slow (extension not in this tree)"
    )
    assert "keras.src.layers.child._Hidden [private]  (inputs, training=None)" in "\n".join(lines)
    assert lines[-1] == (
        "18 layers (1 private, 3 unresolved): layer(x) fast 10 (eligible 12),"
        " layer(x, training=b) fast 0 (eligible 12), keywords fast 0 (eligible 13), >=2 positionals fast 0 (eligible 9)"
    )
    assert len(lines) == 2 + 18 + 1


def test_json_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_tree(tmp_path / "src", MODULES, patched=True)
    assert cli.main(["report", str(src), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and (doc["keras_version"], doc["variant"]) == ("3.15.1", "V4")
    assert doc["patched"]["base"] is True and doc["patched"]["extension"] is True
    layer = next(row for row in doc["layers"] if row["class"] == "Attribute")
    assert set(layer) == {
        "module", "class", "line", "private", "call_defined_in", "signature", "parameters", "shapes",
        "arities", "assumed_plain",
    }
    assert layer["line"] == 3 and layer["private"] is False
    assert set(layer["shapes"]) == {"layer(x)", "layer(x, training=b)", "keywords", "nested", "positional"}
    assert layer["shapes"]["positional"]["2"] == {"fast": True, "eligible": True, "reason": None, "note": None}
    assert [p["name"] for p in layer["parameters"]] == ["query", "value", "key", "training"]
    assert doc["summary"]["layers"] == 18 and doc["summary"]["positional"]["fast"] >= 1


def test_unpatched_tree_is_slow_everywhere(tmp_path: Path) -> None:
    result = report.report(make_tree(tmp_path, MODULES, "V1"))
    assert not result.base_patched and not result.extension_patched
    assert not any(v.fast for row in result.layers for v in report._all_verdicts(row, "layer(x)"))
    # 10 layers have a plan for layer(x); 2 more take it through the extension's bindings.
    assert report.summary(result)["layer(x)"] == {"fast": 0, "eligible": 12}


@pytest.mark.parametrize(
    ("setup", "code", "message"),
    [
        (lambda root: root / "missing", EXIT_USAGE, "does not exist or is not a directory"),
        (lambda root: write_tree(root, {"keras/src/__init__.py": ""}), EXIT_DRIFT, "no keras/src/layers/layer.py"),
        (
            lambda root: write_tree(root, tree_files(LAYER_V4.replace("class CallSpec:", "class CallSpecs:"))),
            EXIT_DRIFT,
            "upstream drift: keras/src/layers/layer.py",
        ),
    ],
)
def test_bad_source_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: Any, code: int, message: str) -> None:
    src = setup(tmp_path / "src")
    assert cli.main(["report", str(src)]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("error: ") and message in err[0] and err[1].startswith("hint: ")
    assert cli.main(["report", str(src), "--json"]) == code
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["exit_code"] == code and message in doc["error"]


# -- the rules: read through the series' declared interface, never from a named patch ------------
def test_the_series_has_one_patch_declaring_call_rules() -> None:
    declaring = [p for p in series.load_series() if p.call_rules is not None]
    assert len(declaring) == 1
    assert series.call_rules() is declaring[0].call_rules


@pytest.mark.parametrize("count", [0, 1, 2])
def test_call_rules_needs_exactly_one_declaring_patch(count: int) -> None:
    rules = series.call_rules()
    patches: Any = [types.SimpleNamespace(name=f"p{i}", call_rules=rules if i < count else None) for i in range(3)]
    if count == 1:
        assert series.call_rules(patches) is rules
        return
    with pytest.raises(series.DeclarationError, match=f"declaring them: {'none' if count == 0 else 'p0, p1'}$"):
        series.call_rules(patches)


def test_report_gives_the_declared_rules_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = series.call_rules()

    class Refusing:  # the series' rules, but no layer gets a plan or bindings
        base_pieces = real.base_pieces
        analyze_source = staticmethod(real.analyze_source)
        call_parameters = staticmethod(real.call_parameters)
        unbound_reason = staticmethod(real.unbound_reason)

        @staticmethod
        def plan_reason(params: list[Any]) -> str:
            return "refused by the declared rules"

        bindings_reason = plan_reason

    src = make_tree(tmp_path / "src", MODULES, patched=True)
    assert any(row.shapes["layer(x)"].fast for row in report.report(src).layers)
    monkeypatch.setattr(series, "call_rules", lambda: Refusing())
    rows = [row for row in report.report(src).layers if row.arities is not None]
    refused = report.Verdict(False, False, "refused by the declared rules")
    assert rows and all(row.shapes["keywords"] == refused and not row.shapes["layer(x)"].fast for row in rows)
    assert any(row.shapes["layer(x)"] == refused for row in rows)


def test_report_without_declared_rules_is_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_tree(tmp_path / "src", MODULES, patched=True)
    undeclared = tuple(types.SimpleNamespace(name=p.name, call_rules=None) for p in series.load_series())
    monkeypatch.setattr(series, "load_series", lambda: undeclared)
    assert cli.main(["report", str(src)]) == EXIT_INTERNAL
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: forkgen report: exactly one patch of the series must declare `call_rules`")
    assert err[0].endswith("declaring them: none") and err[1].startswith("hint: ")
