"""The per-class effect analysis (issue 43: codemods/engine/effects.py, verdicts.py; `forkgen effects`)
on a small synthetic Keras-shaped tree written here: each effect a step provides is read directly,
through a helper, through a callable stored on `self` and through a subclass's override, each refused
with its file:line; harmless layers are accepted; what the analysis cannot follow fails closed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from codemods.engine import STEPS, ClassVerdict, analyse_effects
from forkgen import cli
from forkgen.errors import EXIT_DRIFT

#: A Keras-shaped tree: global state, a name scope, a variable that reads the autocast scope, an op,
#: a Layer whose __call__ sets up the steps, activations, and the layers under test.
TREE = {
    "keras/src/__init__.py": "",
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/common/__init__.py": "",
    "keras/src/backend/common/global_state.py": """
        GLOBAL_STATE_TRACKER = {}

        def set_global_attribute(name, value):
            GLOBAL_STATE_TRACKER[name] = value

        def get_global_attribute(name, default=None):
            return GLOBAL_STATE_TRACKER.get(name, default)
    """,
    "keras/src/backend/common/name_scope.py": """
        from keras.src.backend.common import global_state

        def current_path():
            stack = global_state.get_global_attribute("name_scope_stack")
            return "/".join(stack or [])
    """,
    "keras/src/backend/common/variables.py": """
        import torch

        from keras.src.backend.common import global_state
        from keras.src.backend.common.name_scope import current_path

        class Variable:
            def __init__(self, shape):
                self.path = current_path()
                self._value = torch.zeros(shape)

            @property
            def value(self):
                scope = global_state.get_global_attribute("autocast_scope")
                if scope is not None:
                    return torch.zeros(1)
                return self._value
    """,
    "keras/src/ops/__init__.py": "from keras.src.ops.numpy import add\n",
    "keras/src/ops/numpy.py": """
        import torch

        def add(x, y):
            return torch.add(x, y)
    """,
    "keras/src/activations/__init__.py": """
        from keras.src.activations.activations import linear, noisy, relu

        ALL_OBJECTS = {linear, relu, noisy}
        ALL_OBJECTS_DICT = {fn.__name__: fn for fn in ALL_OBJECTS}

        def get(identifier):
            if identifier is None:
                return linear
            if isinstance(identifier, str):
                return ALL_OBJECTS_DICT.get(identifier)
            raise ValueError(identifier)
    """,
    "keras/src/activations/activations.py": """
        import torch

        from keras.src.backend.common.name_scope import current_path

        def linear(x):
            return x

        def relu(x):
            return torch.relu(x)

        def noisy(x):
            print(current_path())
            return x
    """,
    "keras/src/layers/__init__.py": "",
    "keras/src/layers/layer.py": """
        from keras.src.backend.common import global_state
        from keras.src.backend.common.variables import Variable

        class Layer:
            def __init__(self, name=None):
                self.name = name

            def __call__(self, *args, **kwargs):
                global_state.set_global_attribute("name_scope_stack", [self.name])
                global_state.set_global_attribute("current_call_ctx", object())
                return self.call(*args, **kwargs)

            def call(self, *args, **kwargs):
                raise NotImplementedError

            def add_weight(self, shape):
                return Variable(shape)
    """,
    "keras/src/layers/cases.py": """
        from keras.src import activations, ops
        from keras.src.backend.common import global_state
        from keras.src.backend.common.name_scope import current_path
        from keras.src.layers.layer import Layer

        def helper(x):
            return current_path()

        class Plain(Layer):
            def call(self, x):
                return ops.add(x, x)

        class Direct(Layer):
            def call(self, x):
                global_state.get_global_attribute("name_scope_stack")
                return x

        class ThroughHelper(Layer):
            def call(self, x):
                helper(x)
                return x

        class Stored(Layer):
            def __init__(self, activation=None):
                super().__init__()
                self.activation = activations.get(activation)

            def call(self, x):
                return self.activation(ops.add(x, x))

        class Base(Layer):
            def call(self, x):
                return x

        class Inherits(Base):
            pass

        class Override(Base):
            def call(self, x):
                return current_path()

        class Trains(Layer):
            def call(self, x, training=None):
                if training:
                    return ops.add(x, x)
                return x

        class Ignores(Layer):
            def call(self, x, training=None):
                return x

        class Dynamic(Layer):
            def call(self, x):
                return getattr(self, self.name)(x)

        class FromRegistry(Layer):
            def call(self, x):
                return activations.ALL_OBJECTS_DICT["relu"](x)

        class Composite(Layer):
            def __init__(self):
                super().__init__()
                self.inner = Plain()

            def call(self, x):
                return self.inner(x)

        class Weighted(Layer):
            def build(self, shape):
                self.w = self.add_weight(shape)

            def call(self, x):
                return ops.add(x, self.w.value)

        class ReadsContext(Layer):
            def call(self, x):
                global_state.get_global_attribute("current_call_ctx")
                return x
    """,
}

CASES_PY = "keras/src/layers/cases.py"


def files() -> dict[str, str]:
    return {path: textwrap.dedent(text).lstrip() for path, text in TREE.items()}


@pytest.fixture(scope="module")
def verdicts() -> dict[str, ClassVerdict]:
    return {c.key.rpartition(".")[2]: c for c in analyse_effects(files(), "torch").classes}


def line_of(text: str) -> int:
    """The line of `text` in cases.py (what a reason must point at)."""
    source = files()[CASES_PY].splitlines()
    return next(i for i, line in enumerate(source, 1) if text in line)


def skips(v: ClassVerdict) -> dict[str, bool]:
    return {s.step: s.skip for s in v.steps}


def test_every_layer_subclass_is_analysed_and_layer_itself_not(verdicts: dict[str, ClassVerdict]) -> None:
    assert set(verdicts) == {"Plain", "Direct", "ThroughHelper", "Stored", "Base", "Inherits", "Override", "Trains",
                             "Ignores", "Dynamic", "FromRegistry", "Composite", "Weighted", "ReadsContext"}
    assert [s.step for s in verdicts["Plain"].steps] == list(STEPS)


@pytest.mark.parametrize("name", ["Plain", "Base", "Inherits", "Ignores"])
def test_harmless_layers_skip_every_step(verdicts: dict[str, ClassVerdict], name: str) -> None:
    assert skips(verdicts[name]) == {step: True for step in STEPS}
    assert all(not s.reasons and not s.conditions for s in verdicts[name].steps)


DIRECT_READ = 'global_state.get_global_attribute("name_scope_stack")'


@pytest.mark.parametrize(("name", "where"), [
    ("Direct", f"{CASES_PY}:{line_of(DIRECT_READ)}"),
    ("ThroughHelper", "keras/src/backend/common/name_scope.py:4"),
    ("Override", "keras/src/backend/common/name_scope.py:4"),
])
def test_a_name_scope_read_keeps_the_name_scope_step(verdicts: dict[str, ClassVerdict], name: str, where: str) -> None:
    """Read directly, through a helper, or in a subclass's override of a harmless base's call()."""
    step = verdicts[name].step("name scope")
    assert not step.skip
    assert any(r.startswith(where) and "name_scope_stack" in r for r in step.reasons), step.reasons
    assert verdicts[name].step("call context").skip


def test_a_subclass_gets_its_own_verdict(verdicts: dict[str, ClassVerdict]) -> None:
    assert verdicts["Base"].step("name scope").skip and not verdicts["Override"].step("name scope").skip
    assert verdicts["Inherits"].path == CASES_PY


def test_a_stored_callable_is_a_run_time_condition_on_clean_functions(verdicts: dict[str, ClassVerdict]) -> None:
    """`self.activation` typed as linear, relu or noisy: the step is skipped only while it is one of
    the functions whose own summary allows it (noisy reads the name scope)."""
    name_scope = verdicts["Stored"].step("name scope")
    assert name_scope.skip
    assert name_scope.conditions == (("activation", ("keras.src.activations.activations.linear",
                                                     "keras.src.activations.activations.relu")),)
    context = verdicts["Stored"].step("call context")
    assert context.skip and dict(context.conditions)["activation"][-1].endswith(".relu")
    assert len(dict(context.conditions)["activation"]) == 3  # noisy reads no call context


def test_reading_training_keeps_the_call_context_step(verdicts: dict[str, ClassVerdict]) -> None:
    step = verdicts["Trains"].step("call context")
    assert not step.skip
    assert step.reasons == (f"{CASES_PY}:{line_of('class Trains') + 1}: call() reads `training`, which the step fills in",)
    assert verdicts["Trains"].step("name scope").skip
    assert verdicts["Ignores"].step("call context").skip  # takes `training`, never reads it


def test_a_call_context_read_keeps_only_that_step(verdicts: dict[str, ClassVerdict]) -> None:
    assert skips(verdicts["ReadsContext"]) == {"name scope": True, "call context": False, "autocast": True}


def test_what_the_analysis_cannot_follow_keeps_every_step(verdicts: dict[str, ClassVerdict]) -> None:
    v = verdicts["Dynamic"]
    assert skips(v) == {step: False for step in STEPS}
    assert any(f"{CASES_PY}:{line_of('getattr(self, self.name)')}" in r and "computed name" in r for r in v.step("autocast").reasons)


def test_a_function_taken_from_a_container_by_subscript_is_not_followed(verdicts: dict[str, ClassVerdict]) -> None:
    v = verdicts["FromRegistry"]
    assert skips(v) == {step: False for step in STEPS}
    assert any("taken from a container" in r for r in v.step("name scope").reasons)


def test_calling_a_stored_layer_keeps_every_step(verdicts: dict[str, ClassVerdict]) -> None:
    v = verdicts["Composite"]
    assert skips(v) == {step: False for step in STEPS}
    assert any("self.inner" in r for r in v.step("name scope").reasons)


def test_reading_a_variable_keeps_the_autocast_step_only(verdicts: dict[str, ClassVerdict]) -> None:
    """`Variable.value` reads the autocast scope; creating a variable (build) is not call()."""
    v = verdicts["Weighted"]
    assert skips(v) == {"name scope": True, "call context": True, "autocast": False}
    assert any(r.startswith("keras/src/backend/common/variables.py:") and "autocast_scope" in r for r in v.step("autocast").reasons)


def test_the_analysis_can_fail_a_harmless_layer_made_harmful() -> None:
    """The same tree with Plain's op reading the name scope: Plain is refused (the cases above can fail)."""
    tree = files()
    tree["keras/src/ops/numpy.py"] = tree["keras/src/ops/numpy.py"].replace(
        "    return torch.add(x, y)", "    from keras.src.backend.common.name_scope import current_path\n    current_path()\n    return torch.add(x, y)")
    plain = next(c for c in analyse_effects(tree, "torch").classes if c.key.endswith(".Plain"))
    assert not plain.step("name scope").skip and plain.step("call context").skip


def write(root: Path) -> Path:
    for relative, text in files().items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_cli_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "src")
    assert cli.main(["effects", str(src), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["backend"] == "torch" and document["steps"]["name scope"] == ["name_scope_stack"]
    by_name = {c["class"].rpartition(".")[2]: c for c in document["classes"]}
    assert by_name["Plain"]["steps"]["name scope"] == {"skip": True, "reasons": [], "conditions": {}}
    assert document["counts"] == {step: sum(c["steps"][step]["skip"] for c in document["classes"]) for step in STEPS}
    assert cli.main(["effects", str(src)]) == 0
    text = capsys.readouterr().out
    assert "keras.src.layers.cases.Direct" in text and f"{CASES_PY}:{line_of(DIRECT_READ)}" in text
    assert "name scope: skip if self.activation is one of linear, relu" in text


def test_cli_refuses_a_tree_that_is_not_keras(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty" / "keras" / "src").mkdir(parents=True)  # no keras/src/layers/layer.py
    assert cli.main(["effects", str(tmp_path / "empty"), "--json"]) == EXIT_DRIFT
    assert json.loads(capsys.readouterr().out)["ok"] is False


#: Two layers whose helpers recurse: each summary needs a second round (its cycle's value grows).
RECURSIVE_PY = """
    from keras.src import ops
    from keras.src.layers.layer import Layer

    def countdown(x, n):
        if n:
            return countdown(ops.add(x, x), n - 1)
        return x

    def ping(x, n):
        return pong(x, n - 1) if n else x

    def pong(x, n):
        return ping(x, n)

    class First(Layer):
        def call(self, x):
            return countdown(x, 3)

    class Second(Layer):
        def call(self, x):
            return ping(countdown(x, 2), 3)
"""


def test_a_later_cycle_does_not_redo_what_an_earlier_summary_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary whose cycle grows computes again only what it computed itself: the summaries an
    earlier class finished are final (they reached their own fixed point) and are not walked again,
    and every verdict is the one a fresh analysis of that class alone gives."""
    from codemods.engine import effectwalk
    from codemods.engine.codeindex import Tree
    from codemods.engine.effects import Analysis
    from codemods.engine.verdicts import layer_classes, verdict

    tree_files = {**files(), "keras/src/layers/recursive.py": textwrap.dedent(RECURSIVE_PY).lstrip()}
    walked: list[str] = []
    go = effectwalk._W.go

    def counted(self: effectwalk._W) -> None:
        walked.append(self.fn.key)
        go(self)

    monkeypatch.setattr(effectwalk._W, "go", counted)
    tree = Tree(tree_files, "torch")
    classes = {c.key.rpartition(".")[2]: c for c in layer_classes(tree)}
    shared = Analysis(tree)
    first = verdict(shared, classes["First"])
    assert walked.count("keras.src.layers.recursive.countdown") >= 2  # its cycle needed a second round
    walked.clear()
    second = verdict(shared, classes["Second"])
    assert walked.count("keras.src.layers.recursive.ping") >= 2
    assert "keras.src.layers.recursive.countdown" not in walked  # (its summary for those arguments is final)
    assert "keras.src.ops.numpy.add" not in walked
    for name, found in (("First", first), ("Second", second)):
        alone = Tree(tree_files, "torch")
        assert found == verdict(Analysis(alone), next(c for c in layer_classes(alone) if c.key.endswith("." + name)))
