"""Patch trainer-symbolic-build-skip on synthetic trainer, torch layer and operation modules:
what its cases (codemods/trainer_symbolic_build_skip/cases.py) cannot say."""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from codemods import series
from codemods.engine import AnchorDrift, Outcome, Sources
from codemods.trainer_symbolic_build_skip import PATCH
from codemods.trainer_symbolic_build_skip import cases as synthetic

TRAINER = synthetic.TRAINER_PY


def patched(text: str = synthetic.TRAINER) -> str:
    tree = Sources(synthetic.files(text).get)
    PATCH.apply(tree)
    return tree.rendered()[TRAINER]


def test_the_applied_anchors() -> None:
    present = PATCH.check(Sources(synthetic.files(synthetic.AFTER).get))
    assert present.outcome is Outcome.APPLIED and present.present
    assert [(a.name, a.line) for a in present.anchors] == [("optimizer_unbuilt = (...)", 20), ("self._post_build()", 34)]


def test_the_series_runs_it_and_older_releases_are_not_applicable() -> None:
    result = series.run(synthetic.files().get, [PATCH], release="3.15.1")
    assert result.results[0].changed and result.unswitched_files[TRAINER] == synthetic.AFTER
    again = series.run(synthetic.files(synthetic.AFTER).get, [PATCH], release="3.15.1")
    assert [r.outcome for r in again.results] == [Outcome.APPLIED] and not again.changed and again.files == {}
    for release in ("3.5.0", "3.4.1"):
        old = series.run(synthetic.files().get, [PATCH], release=release)
        assert old.results[0].outcome is Outcome.NOT_APPLICABLE
        assert old.results[0].check.detail == "targets code Keras has since 3.6.0"


def test_drift_no_trainer() -> None:
    tree = synthetic.files()
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
