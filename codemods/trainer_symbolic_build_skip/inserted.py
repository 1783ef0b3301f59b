"""What `trainer-symbolic-build-skip` inserts into keras/src/trainers/trainer.py.

Parsed by the engine, never imported. Each function's body is one piece: `guard` goes into
`Trainer._symbolic_build` right after its four `*_unbuilt` flags are computed (the flags are
upstream's locals there); `helper` goes at module level right after `class Trainer` (the guard
only calls it at run time). `_forkgen_param_dict_sorts` holds, per ParameterDict class, whether
it orders the items of a plain dict it is built from by key (torch's `ParameterDict.update`
sorts a Mapping's items); found once by building a tiny one. The docstring of
`_forkgen_defining_class` is indented here as it reads once at module level.

The helper answers "would `self._post_build()` change nothing observable?" and says yes only
for the two `_post_build`s of Keras 3.6.0-3.15.1 and only where that is certain:
`Operation._post_build` (jax, tensorflow, numpy: `pass`), and torch's `TorchLayer._post_build`
when in a stateless scope (it returns at once) or when the model's `_torch_params` already is a
`ParameterDict` holding, in the order a fresh one would, the very objects (`is`) that
`_track_variables` would put into a new one. Anything else (another override, an instance
attribute, an unexpected type, a mismatch) answers no, and upstream's code runs unchanged.
"""
# ruff: noqa


def guard(self, model_unbuilt, compile_metrics_unbuilt, compile_loss_unbuilt, optimizer_unbuilt):
    # forkgen: trainer-symbolic-build-skip (return only when _post_build would change nothing)
    if (
        not (model_unbuilt or compile_metrics_unbuilt or compile_loss_unbuilt or optimizer_unbuilt)
        and _forkgen_post_build_is_noop(self)
    ):
        return


def helper():
    # forkgen: trainer-symbolic-build-skip (helper)
    _forkgen_param_dict_sorts = {}


    def _forkgen_defining_class(cls, name):
        """The first class of `cls.__mro__` whose own namespace defines `name` (what attribute
    lookup finds on the class), or None."""
        for klass in cls.__mro__:
            if name in klass.__dict__:
                return klass
        return None


    def _forkgen_is_class(klass, module, qualname):
        return klass is not None and klass.__module__ == module and klass.__qualname__ == qualname


    def _forkgen_post_build_is_noop(model):
        """Whether `model._post_build()` (Keras 3.15.1's) would leave every observable state as it is."""
        cls = type(model)
        state = model.__dict__
        if "_post_build" in state or cls.__getattribute__ is not object.__getattribute__:
            return False
        owner = _forkgen_defining_class(cls, "_post_build")
        if _forkgen_is_class(owner, "keras.src.ops.operation", "Operation"):
            # `Operation._post_build` is `pass`.
            return True
        if not _forkgen_is_class(owner, "keras.src.backend.torch.layer", "TorchLayer"):
            return False
        from keras.src.backend.common.stateless_scope import in_stateless_scope

        if in_stateless_scope():
            # `TorchLayer._post_build` returns before anything else in a stateless scope.
            return True
        if "_track_variables" in state or _forkgen_defining_class(cls, "_track_variables") is not owner:
            return False
        # Where `self._torch_params` is found (torch.nn.Module keeps submodules in `_modules`), read
        # without running any code: `hasattr` or the `torch_params` property would build it.
        if "_torch_params" in state:
            params = state["_torch_params"]
        else:
            modules = state.get("_modules")
            if type(modules) is not dict or "_torch_params" not in modules:
                return False
            params = modules["_torch_params"]
        kind = type(params)
        if not _forkgen_is_class(kind, "torch.nn.modules.container", "ParameterDict"):
            return False
        held = params.__dict__.get("_parameters")
        keys = params.__dict__.get("_keys")
        if type(held) is not dict or type(keys) is not dict:
            return False
        # The dict `_track_variables` builds, by the same expression (duplicate paths collapse alike).
        expected = {variable.path: variable.value for variable in model.variables}
        if len(expected) != len(held) or len(expected) != len(keys):
            return False
        items = list(expected.items())
        for key, _ in items:
            if type(key) is not str:
                return False
        sorts = _forkgen_param_dict_sorts.get(kind)
        if sorts is None:
            sorts = list(kind({"b": None, "a": None}).__dict__["_keys"]) == ["a", "b"]
            _forkgen_param_dict_sorts[kind] = sorts
        if sorts:
            # Distinct str keys: the order `sorted(expected.items())` gives, without comparing values.
            items.sort(key=lambda item: item[0])
        for (key, value), (held_key, held_value), key_order in zip(items, held.items(), keys):
            if held_key != key or key_order != key or held_value is not value:
                return False
        return True
