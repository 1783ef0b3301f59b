"""Patch trainer-symbolic-build-skip on synthetic trainer, torch layer and operation modules."""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from libcst.codemod import CodemodTest

from codemods import series
from codemods.patchlib import AnchorDrift, Outcome, Sources
from codemods.trainer_symbolic_build_skip import PATCH, EarlyReturnCommand
from tests.support import synthetic_trainer_symbolic_build_skip as synthetic

TRAINER = synthetic.TRAINER_PY
FLAGS_END = "            self.optimizer is not None and not self.optimizer.built\n        )\n"
GUARD = (
    "        # forkgen: trainer-symbolic-build-skip (return only when _post_build would change nothing)\n"
    "        if (\n"
    "            not (model_unbuilt or compile_metrics_unbuilt or compile_loss_unbuilt or optimizer_unbuilt)\n"
    "            and _forkgen_post_build_is_noop(self)\n"
    "        ):\n"
    "            return\n"
)
NIGHTLY_RETURN = (
    "        if not (\n"
    "            model_unbuilt\n"
    "            or compile_metrics_unbuilt\n"
    "            or compile_loss_unbuilt\n"
    "            or optimizer_unbuilt\n"
    "        ):\n"
    "            return\n"
)
# keras-nightly's shape: the early return without the helper (class renamed BaseTrainer there).
NIGHTLY = synthetic.TRAINER.replace(FLAGS_END, FLAGS_END + NIGHTLY_RETURN)
NIGHTLY_BASE = NIGHTLY.replace("class Trainer:", "class BaseTrainer:")


def files(**changed: str) -> dict[str, str]:
    found = dict(synthetic.FILES)
    found.update({synthetic.TRAINER_PY: changed.get("trainer", synthetic.TRAINER)})
    if "torch_layer" in changed:
        found[synthetic.TORCH_LAYER_PY] = changed["torch_layer"]
    if "operation" in changed:
        found[synthetic.OPERATION_PY] = changed["operation"]
    return found


def sources(**changed: str) -> Sources:
    tree = files(**changed)
    return Sources(tree.get)


def check(**changed: str) -> Any:
    return PATCH.check(sources(**changed))


def patched(text: str = synthetic.TRAINER) -> str:
    tree = sources(trainer=text)
    PATCH.apply(tree)
    return tree.rendered()[TRAINER]


def drift(**changed: str) -> AnchorDrift:
    with pytest.raises(AnchorDrift) as caught:
        check(**changed)
    return caught.value


class TestEarlyReturn(CodemodTest):
    TRANSFORM = EarlyReturnCommand

    def test_noop_when_already_applied(self) -> None:
        after = patched()
        self.assertCodemod(after, after, expected_skip=True)

    def test_noop_on_the_upstream_shape(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY, expected_skip=True)
        self.assertCodemod(NIGHTLY_BASE, NIGHTLY_BASE, expected_skip=True)


def test_the_guard_goes_right_after_the_flags_and_the_rest_is_unchanged() -> None:
    after = patched()
    assert after.count(GUARD) == 1
    assert after.index(GUARD) == after.index(FLAGS_END) + len(FLAGS_END)
    # The helper goes between class Trainer and the next module-level statement.
    helper = after.index("\n\n\n# forkgen: trainer-symbolic-build-skip (helper)\n_forkgen_param_dict_sorts = {}\n")
    assert after.index("class Trainer:") < helper < after.index("\n\n\ndef model_supports_jit(model):")
    assert after.count("def _forkgen_post_build_is_noop(model):") == 1
    # Removing what the patch added gives back upstream's text, byte for byte.
    start = after.index("# forkgen: trainer-symbolic-build-skip (helper)")
    end = after.index("def model_supports_jit")
    restored = after.replace(GUARD, "")
    restored = restored[: restored.index("# forkgen: trainer-symbolic-build-skip (helper)") - 2] + after[end - 2 :]
    assert restored == synthetic.TRAINER
    assert start < end


def test_outcomes_and_anchors() -> None:
    before = check()
    assert before.outcome is Outcome.APPLIED and not before.present
    assert [(a.name, a.line) for a in before.anchors] == [("optimizer_unbuilt = (...)", 20), ("self._post_build()", 28)]
    present = check(trainer=patched())
    assert present.outcome is Outcome.APPLIED and present.present
    assert [(a.name, a.line) for a in present.anchors] == [("optimizer_unbuilt = (...)", 20), ("self._post_build()", 34)]
    for text in (NIGHTLY, NIGHTLY_BASE):
        upstream = check(trainer=text)
        assert upstream.outcome is Outcome.UPSTREAM and upstream.anchors[0].line == 23


def test_apply_twice_is_byte_identical_and_present() -> None:
    tree = sources()
    PATCH.apply(tree)
    once = tree.rendered()[TRAINER]
    assert PATCH.check(tree).present
    again = sources(trainer=once)
    assert PATCH.check(again).present
    result = series.run(files(trainer=once).get, [PATCH], release="3.15.1")
    assert [r.outcome for r in result.results] == [Outcome.APPLIED] and not result.changed
    assert result.files == {}


def test_the_series_runs_it_and_older_releases_are_not_applicable() -> None:
    result = series.run(files().get, [PATCH], release="3.15.1")
    assert result.results[0].changed and GUARD in result.files[TRAINER]
    for release in ("3.5.0", "3.4.1"):
        old = series.run(files().get, [PATCH], release=release)
        assert old.results[0].outcome is Outcome.NOT_APPLICABLE
        assert old.results[0].check.detail == "targets code Keras has since 3.6.0"


# -- drift ------------------------------------------------------------------------------------


def test_drift_three_flags() -> None:
    # Keras 3.1-3.4: no compile_loss_unbuilt.
    text = synthetic.TRAINER.replace(
        "        compile_loss_unbuilt = (\n            self._compile_loss is not None and not self._compile_loss.built\n        )\n", ""
    )
    assert text != synthetic.TRAINER
    error = drift(trainer=text)
    assert str(error) == (
        "keras/src/trainers/trainer.py:12: anchor 'compile_loss_unbuilt = ...': expected exactly one top-level "
        "assignment in Trainer._symbolic_build; found 0"
    )


def test_drift_flags_out_of_order() -> None:
    text = synthetic.TRAINER.replace(
        "        optimizer_unbuilt = (\n            self.optimizer is not None and not self.optimizer.built\n        )\n", ""
    ).replace(
        "        model_unbuilt = ",
        "        optimizer_unbuilt = self.optimizer is not None and not self.optimizer.built\n        model_unbuilt = ",
    )
    error = drift(trainer=text)
    assert (error.line, error.anchor) == (14, "optimizer_unbuilt = (...)")
    assert error.found == "them at statements [1, 2, 3, 0]"


def test_drift_post_build_not_last_or_twice() -> None:
    moved = synthetic.TRAINER.replace("        self._post_build()\n", "        self._post_build()\n        self.done = True\n")
    error = drift(trainer=moved)
    assert (error.line, error.anchor, error.found) == (28, "self._post_build()", "it before other statements")
    twice = synthetic.TRAINER.replace("        self._post_build()\n", "        self._post_build()\n        self._post_build()\n")
    assert drift(trainer=twice).found == "2"
    missing = synthetic.TRAINER.replace("        self._post_build()\n", "        pass\n")
    assert drift(trainer=missing).found == "0"


def test_drift_helper_name_taken() -> None:
    text = synthetic.TRAINER + "\n\ndef _forkgen_post_build_is_noop(model):\n    return True\n"
    error = drift(trainer=text)
    assert str(error) == (
        "keras/src/trainers/trainer.py:35: anchor '_forkgen_post_build_is_noop': expected a name the module "
        "does not bind yet; found it bound at line 35"
    )


def test_drift_guard_without_its_helper_or_marker() -> None:
    after = patched()
    without_helper = after[: after.index("\n\n\n# forkgen: trainer-symbolic-build-skip (helper)")] + after[
        after.index("\n\n\ndef model_supports_jit") :
    ]
    error = drift(trainer=without_helper)
    assert (error.anchor, error.found) == ("_forkgen_param_dict_sorts", "0")
    unmarked = after.replace("        # forkgen: trainer-symbolic-build-skip (return only when _post_build would change nothing)\n", "")
    error = drift(trainer=unmarked)
    assert error.expected == "forkgen's guard with its marker" and error.line == 23


def test_drift_torch_layer_not_3_15() -> None:
    # 3.5.0 tracked the variables as `torch_params`.
    old = synthetic.TORCH_LAYER.replace("self._torch_params =", "self.torch_params =")
    error = drift(torch_layer=old)
    assert str(error) == (
        "keras/src/backend/torch/layer.py:13: anchor 'TorchLayer._track_variables': expected "
        "self._torch_params = torch.nn.ParameterDict({v.path: v.value for v in self.variables}); found another body"
    )
    unconditional = synthetic.TORCH_LAYER.replace("        if in_stateless_scope():\n            return\n", "")
    assert unconditional != synthetic.TORCH_LAYER
    assert drift(torch_layer=unconditional).anchor == "TorchLayer._post_build"


def test_drift_operation_post_build_does_something() -> None:
    busy = synthetic.OPERATION.replace('        """A hook for the backends\' layers."""\n        pass\n', "        self.built = True\n")
    assert busy != synthetic.OPERATION
    error = drift(operation=busy)
    assert (error.path, error.anchor, error.expected) == (
        "keras/src/ops/operation.py", "Operation._post_build", "a body that does nothing (`pass`)"
    )


def test_drift_no_trainer() -> None:
    tree = files()
    del tree[TRAINER]
    with pytest.raises(AnchorDrift, match="keras/src/trainers/trainer.py:1: anchor 'module'"):
        PATCH.check(Sources(tree.get))


# -- what the inserted helper answers (the patched module run with stand-in classes) ----------


@contextmanager
def stand_ins(stateless: list[bool]) -> Iterator[dict[str, Any]]:
    """The patched trainer module's namespace, with `keras.src.backend.common.stateless_scope`
    a stand-in whose `in_stateless_scope()` returns `stateless[0]`."""
    names = ("keras", "keras.src", "keras.src.backend", "keras.src.backend.common", "keras.src.backend.common.stateless_scope")
    saved = {name: sys.modules.get(name) for name in names}
    scope = types.ModuleType(names[-1])
    scope.in_stateless_scope = lambda: stateless[0]  # type: ignore[attr-defined]
    modules = {name: types.ModuleType(name) for name in names[:-1]}
    modules["keras.src"].backend = modules["keras.src.backend"]  # type: ignore[attr-defined]
    modules["keras.src.backend"].common = modules["keras.src.backend.common"]  # type: ignore[attr-defined]
    modules["keras.src.backend.common"].stateless_scope = scope  # type: ignore[attr-defined]
    sys.modules.update(modules)
    sys.modules[names[-1]] = scope
    try:
        namespace: dict[str, Any] = {}
        exec(compile(patched(), "<trainer>", "exec"), namespace)
        yield namespace
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _named(name: str, module: str, bases: tuple[type, ...] = (), **members: Any) -> type:
    return type(name, bases, {"__module__": module, "__qualname__": name, **members})


class ParameterDict:
    """Stands for torch's: sorts a plain dict's items, keeps `_parameters` and `_keys`."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._keys = {key: None for key, _ in sorted(values.items(), key=lambda kv: kv[0])}
        self._parameters = {key: values[key] for key in self._keys}


ParameterDict.__module__ = "torch.nn.modules.container"


class Variable:
    def __init__(self, path: str) -> None:
        self.path = path
        self.value = object()


Operation = _named("Operation", "keras.src.ops.operation", _post_build=lambda self: None)
TorchLayer = _named(
    "TorchLayer", "keras.src.backend.torch.layer", _post_build=lambda self: None, _track_variables=lambda self: None
)


def torch_model(variables: list[Variable], params: Any = None) -> Any:
    model = _named("Model", "keras.src.models.model", (TorchLayer,))()
    model.variables = variables
    model._modules = {} if params is None else {"_torch_params": params}
    return model


def test_the_helper_answers_yes_only_where_post_build_changes_nothing() -> None:
    stateless = [False]
    with stand_ins(stateless) as namespace:
        noop = namespace["_forkgen_post_build_is_noop"]
        # jax/tensorflow/numpy: Operation's `pass`.
        assert noop(_named("Model", "m", (Operation,))()) is True
        overridden = _named("Model", "m", (Operation,), _post_build=lambda self: None)()
        assert noop(overridden) is False
        instance = _named("Model", "m", (Operation,))()
        instance._post_build = lambda: None
        assert noop(instance) is False
        assert noop(_named("Model", "m", (Operation,), __getattribute__=object.__getattribute__)()) is True
        assert noop(_named("Model", "m", (Operation,), __getattribute__=lambda s, n: object.__getattribute__(s, n))()) is False
        assert noop(_named("Operation", "elsewhere", _post_build=lambda self: None)()) is False
        # torch: the held ParameterDict must be what _track_variables would build.
        variables = [Variable("dense/kernel"), Variable("dense/bias")]
        built = ParameterDict({v.path: v.value for v in variables})
        assert list(built._keys) == ["dense/bias", "dense/kernel"]
        assert noop(torch_model(variables, built)) is True
        assert noop(torch_model(variables)) is False  # no _torch_params yet: 3.15.1 builds it
        variables[0].value = object()  # a replaced _value
        assert noop(torch_model(variables, built)) is False
        added = [*variables, Variable("dense/extra")]
        assert noop(torch_model(added, ParameterDict({v.path: v.value for v in variables}))) is False
        removed = ParameterDict({v.path: v.value for v in added})
        assert noop(torch_model(variables, removed)) is False
        unsorted = ParameterDict({v.path: v.value for v in variables})
        unsorted._keys = dict(reversed(unsorted._keys.items()))
        assert noop(torch_model(variables, unsorted)) is False
        other = ParameterDict({v.path: v.value for v in variables})
        type_name = _named("ParameterDict", "elsewhere")
        other.__class__ = type_name
        assert noop(torch_model(variables, other)) is False
        # Duplicate paths collapse as in 3.15.1's dict (the last value wins).
        twins = [Variable("w"), Variable("w")]
        assert noop(torch_model(twins, ParameterDict({"w": twins[1].value}))) is True
        assert noop(torch_model(twins, ParameterDict({"w": twins[0].value}))) is False
        # A _track_variables override is called by 3.15.1: not skipped; a stateless scope is.
        tracked = _named("Model", "m", (TorchLayer,), _track_variables=lambda self: None)()
        tracked.variables, tracked._modules = variables, {"_torch_params": ParameterDict({v.path: v.value for v in variables})}
        assert noop(tracked) is False
        stateless[0] = True
        assert noop(tracked) is True and noop(torch_model(variables)) is True


def test_the_early_return_follows_the_flags_and_the_helper() -> None:
    text = textwrap.dedent(
        """\
        class Built:
            built = True
        """
    )
    calls: list[str] = []
    with stand_ins([False]) as namespace:
        exec(text, namespace)
        trainer_class = namespace["Trainer"]

        class Model(trainer_class):  # type: ignore[misc, valid-type]
            def _flatten_layers(self) -> list[Any]:
                return [namespace["Built"]()]

            def _post_build(self) -> None:
                calls.append("post_build")

        model = Model()
        model._symbolic_build()
        assert calls == ["post_build"]  # an override: still called every time
        namespace["_forkgen_post_build_is_noop"] = lambda model: True
        model._symbolic_build()
        assert calls == ["post_build"]
        model.optimizer = types.SimpleNamespace(built=False, build=lambda variables: calls.append("build"))
        model.trainable_variables = []
        model._symbolic_build()
        assert calls == ["post_build", "build", "post_build"]
