"""What `trainer-symbolic-build-skip` makes of trainer, torch layer and operation modules shaped
like Keras's (written for these tests, not copied), what the patched trainer module does when run
with stand-in classes (its behaviours; both run by tests/unit/test_patch_cases.py), and the breaks
of its inserted code the equivalence suite must catch."""

import textwrap
import types
from typing import Any

import pytest

from codemods.engine import AnchorDrift, Case, Mutant, Outcome, Sources, piece_text, run_module
from codemods.trainer_symbolic_build_skip import PATCH

TRAINER_PY = "keras/src/trainers/trainer.py"
TORCH_LAYER_PY = "keras/src/backend/torch/layer.py"
OPERATION_PY = "keras/src/ops/operation.py"


def _once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


TRAINER = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/trainers/trainer.py."""

    from keras.src import backend


    class Trainer:
        def __init__(self):
            self._compile_metrics = None
            self._compile_loss = None
            self.optimizer = None

        def _symbolic_build(self, iterator=None, data_batch=None):
            model_unbuilt = not all(layer.built for layer in self._flatten_layers())
            compile_metrics_unbuilt = (
                self._compile_metrics is not None and not self._compile_metrics.built
            )
            compile_loss_unbuilt = (
                self._compile_loss is not None and not self._compile_loss.built
            )
            optimizer_unbuilt = (
                self.optimizer is not None and not self.optimizer.built
            )
            if model_unbuilt or compile_metrics_unbuilt or compile_loss_unbuilt:
                backend.compute_output_spec(self, data_batch)
            if optimizer_unbuilt:
                # Build the optimizer.
                self.optimizer.build(self.trainable_variables)
            self._post_build()


    def model_supports_jit(model):
        return True
    '''
)

TORCH_LAYER = textwrap.dedent(
    '''\
    import torch

    from keras.src.backend.common.stateless_scope import in_stateless_scope


    class TorchLayer(torch.nn.Module):
        def _post_build(self):
            # Nothing to track without initialized variables.
            if in_stateless_scope():
                return
            self._track_variables()

        def _track_variables(self):
            self._torch_params = torch.nn.ParameterDict(
                {variable.path: variable.value for variable in self.variables}
            )
    '''
)

#: The synthetic operation.py of operation-call-error-info's cases (a copy: this patch does not
#: require that one), with Keras's `_post_build` hook at the end of class Operation: the series'
#: synthetic tree has one operation.py, this one, which holds both patches' anchors.
OPERATION = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/ops/operation.py."""

    from keras.src.backend.common.keras_tensor import any_symbolic_tensors
    from keras.src.utils import traceback_utils


    class Operation:
        def __init__(self, name=None):
            self.name = name

        @traceback_utils.filter_traceback
        def __call__(self, *args, **kwargs):
            if traceback_utils.is_traceback_filtering_enabled():
                # Pick the function to call.
                if any_symbolic_tensors(args, kwargs):
                    call_fn = self.symbolic_call
                elif getattr(self, "quantization_mode", None) is not None:
                    call_fn = self.quantized_call
                else:
                    call_fn = self.call
                call_fn = traceback_utils.inject_argument_info_in_traceback(
                    call_fn,
                    object_name=(f"{self.__class__.__name__}.call()"),
                )
                return call_fn(*args, **kwargs)

            # Plain flow.
            if any_symbolic_tensors(args, kwargs):
                return self.symbolic_call(*args, **kwargs)
            return self.call(*args, **kwargs)

        def symbolic_call(self, *args, **kwargs):
            return self.compute_output_spec(*args, **kwargs)

        def quantized_call(self, *args, **kwargs):
            return self.call(*args, **kwargs)

        def _post_build(self):
            """Can be overridden for per backend post build actions."""
            pass
    '''
)

FILES = {TRAINER_PY: TRAINER, TORCH_LAYER_PY: TORCH_LAYER, OPERATION_PY: OPERATION}

FLAGS_END = "            self.optimizer is not None and not self.optimizer.built\n        )\n"
GUARD = piece_text(__file__, "guard", " " * 8)
MARK = GUARD.splitlines(True)[0]
#: The helper's statements as inserted.py holds them (in `def helper():`), between class Trainer
#: and the next module-level statement (its marker line, two blank lines above it, apart);
#: removing it and the guard gives upstream's text back.
_HELPER_MARK, HELPER = piece_text(__file__, "helper").rstrip("\n").split("\n", 1)
HELPER_MARK = "\n\n\n" + _HELPER_MARK + "\n"
NEXT = "\n\n\ndef model_supports_jit(model):"
AFTER = _once(_once(TRAINER, FLAGS_END, FLAGS_END + GUARD), NEXT, HELPER_MARK + HELPER + NEXT)
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
NIGHTLY = _once(TRAINER, FLAGS_END, FLAGS_END + NIGHTLY_RETURN)
NIGHTLY_BASE = _once(NIGHTLY, "class Trainer:", "class BaseTrainer:")
POST_BUILD = "        self._post_build()\n"
SYMBOLIC_BUILD = "Trainer._symbolic_build"


def files(trainer: str = TRAINER, **others: str) -> dict[str, str]:
    return {**FILES, TRAINER_PY: trainer, **{{"torch_layer": TORCH_LAYER_PY, "operation": OPERATION_PY}[k]: v
                                             for k, v in others.items()}}


def _once_in(path: str, old: str, new: str) -> dict[str, str]:
    return {**FILES, path: _once(FILES[path], old, new)}


def _relied(name: str, found: str, where: str = f"in {SYMBOLIC_BUILD}") -> str:
    return f"anchor '{name}': expected exactly one `{name}` {where}; found {found}"


ORDER = "model_unbuilt, compile_metrics_unbuilt, compile_loss_unbuilt, optimizer_unbuilt (in this order)"
LAST = f"self._post_build() as the last statement of {SYMBOLIC_BUILD}"
TRACK = ("TorchLayer._track_variables: self._torch_params = torch.nn.ParameterDict({v.path: v.value for v in "
         "self.variables})")

CASES = (
    Case("the guard right after the flags, the helper right after class Trainer", files(), AFTER,
         detail="return early from _symbolic_build when _post_build is a no-op",
         anchors=(("optimizer_unbuilt = (...)", 20), ("self._post_build()", 28))),
    Case("keras-nightly: the bare early return", files(NIGHTLY), upstream=True,
         detail="_symbolic_build returns early when everything is built", anchors=(("optimizer_unbuilt = (...)", 23),)),
    Case("keras-nightly: the bare early return in BaseTrainer", files(NIGHTLY_BASE), upstream=True,
         detail="_symbolic_build returns early when everything is built", anchors=(("optimizer_unbuilt = (...)", 23),)),
    # Keras 3.1-3.4: no compile_loss_unbuilt.
    Case("three flags", files(_once(TRAINER, "        compile_loss_unbuilt = (\n            self._compile_loss is not None "
                                    "and not self._compile_loss.built\n        )\n", "")),
         drift="keras/src/trainers/trainer.py:17: anchor 'compile_loss_unbuilt': expected bound where guard goes "
         "(in Trainer._symbolic_build or at module level); found not bound"),
    Case("the flags out of order",
         files(_once(_once(TRAINER, "        optimizer_unbuilt = (\n            self.optimizer is not None and not "
                           "self.optimizer.built\n        )\n", ""), "        model_unbuilt = ",
                     "        optimizer_unbuilt = self.optimizer is not None and not self.optimizer.built\n"
                     "        model_unbuilt = ")),
         drift="trainer.py:12: " + _relied(ORDER, "0")),
    Case("_post_build not last", files(_once(TRAINER, POST_BUILD, POST_BUILD + "        self.done = True\n")),
         drift="trainer.py:6: " + _relied(LAST, "0", "in Trainer")),
    Case("_post_build twice", files(_once(TRAINER, POST_BUILD, POST_BUILD * 2)),
         drift="trainer.py:28: " + _relied("self._post_build()", "2")),
    Case("_post_build gone", files(_once(TRAINER, POST_BUILD, "        pass\n")),
         drift="trainer.py:12: " + _relied("self._post_build()", "0")),
    Case("a helper name taken", files(TRAINER + "\n\ndef _forkgen_post_build_is_noop(model):\n    return True\n"),
         drift="keras/src/trainers/trainer.py:35: anchor '_forkgen_post_build_is_noop': expected names free for "
         "helper (forkgen's helper); found already bound"),
    Case("the guard without its helper", files(_once(AFTER, HELPER_MARK + HELPER, "")),
         drift="trainer.py:6: anchor 'trainer-symbolic-build-skip': expected all pieces present or none; found "
         "optimizer_unbuilt = (...) forkgen's, the helper missing"),
    Case("the guard without its marker", files(_once(AFTER, MARK, "")),
         drift="trainer.py:20: anchor 'optimizer_unbuilt = (...)': expected to edit, or edited by forkgen; found an "
         "edited form without forkgen's marker"),
    # 3.5.0 tracked the variables as `torch_params`.
    Case("torch's layer tracks torch_params",
         _once_in(TORCH_LAYER_PY, "self._torch_params =", "self.torch_params ="),
         drift="keras/src/backend/torch/layer.py:6: " + _relied(TRACK, "0", "in TorchLayer")),
    Case("torch's _post_build tracks in a stateless scope too",
         _once_in(TORCH_LAYER_PY, "        if in_stateless_scope():\n            return\n", ""),
         drift="anchor 'TorchLayer._post_build: if in_stateless_scope(): return; self._track_variables()'"),
    Case("Operation._post_build does something",
         _once_in(OPERATION_PY, '        """Can be overridden for per backend post build actions."""\n        pass\n',
                  "        self.built = True\n"),
         drift="keras/src/ops/operation.py:7: " + _relied("Operation._post_build: a body that does nothing (`pass`)",
                                                          "0", "in Operation")),
)

MUTANTS = (
    Mutant("the held ParameterDict's values compared by key only, not identity",
           "            if held_key != key or key_order != key or held_value is not value:\n",
           "            if held_key != key or key_order != key:\n"),
    Mutant("a _track_variables override no longer stops the skip",
           '        if "_track_variables" in state or _forkgen_defining_class(cls, "_track_variables") is not owner:\n',
           '        if "_track_variables" in state:\n'),
)


# -- behaviours: the applied anchors, and what the inserted helper and guard do when run -----------


def _patched(text: str = TRAINER) -> str:
    sources = Sources(files(text).get)
    PATCH.apply(sources)
    return sources.rendered()[TRAINER_PY]


def the_applied_anchors() -> None:
    present = PATCH.check(Sources(files(AFTER).get))
    assert present.outcome is Outcome.APPLIED and present.present
    assert [(a.name, a.line) for a in present.anchors] == [("optimizer_unbuilt = (...)", 20), ("self._post_build()", 34)]


def drift_no_trainer() -> None:
    tree = files()
    del tree[TRAINER_PY]
    with pytest.raises(AnchorDrift, match="keras/src/trainers/trainer.py:1: anchor 'module'"):
        PATCH.check(Sources(tree.get))


def _patched_module(stateless: list[bool]) -> types.ModuleType:
    """The patched trainer module, run with `keras.src.backend.common.stateless_scope` a stand-in
    whose `in_stateless_scope()` returns `stateless[0]` (and `from keras.src import backend` one
    that holds it)."""
    scope = types.SimpleNamespace(in_stateless_scope=lambda: stateless[0])
    backend = types.SimpleNamespace(common=types.SimpleNamespace(stateless_scope=scope))
    return run_module(_patched(), "trainer", {"keras.src": types.SimpleNamespace(backend=backend),
                                              "keras.src.backend.common.stateless_scope": scope})


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


def the_helper_answers_yes_only_where_post_build_changes_nothing() -> None:
    stateless = [False]
    namespace = vars(_patched_module(stateless))
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


def the_early_return_follows_the_flags_and_the_helper() -> None:
    text = textwrap.dedent(
        """\
        class Built:
            built = True
        """
    )
    calls: list[str] = []
    namespace = vars(_patched_module([False]))
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


BEHAVIOURS = (
    the_applied_anchors,
    drift_no_trainer,
    the_helper_answers_yes_only_where_post_build_changes_nothing,
    the_early_return_follows_the_flags_and_the_helper,
)
