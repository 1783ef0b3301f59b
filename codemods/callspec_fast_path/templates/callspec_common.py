# The code forkgen inserts into keras/src/layers/layer.py, common to every
# CallSpec variant. What differs between variants, the rule deciding whether a
# default is plain (`_callspec_fast_default_is_plain`), lives in the variant's
# own template module (callspec_v1.py, callspec_v2.py, callspec_v3.py for V3 and V4).
#
# This module is never imported. The codemods parse it with libcst and splice
# its pieces into upstream's layer.py:
#   * every top-level statement before `class Layer` (the "module" piece), with
#     the variant's `_callspec_fast_default_is_plain` placed right before
#     `_callspec_fast_plan`, goes right before upstream's `class CallSpec`;
#   * the statements after the `_call_signature` anchor in `Layer.__init__`
#     (the "eligibility" piece) go right after upstream's anchor;
#   * the `if` in `Layer.__call__` (the "guard" piece) replaces upstream's
#     `call_spec = CallSpec(...)` statement, which becomes its `else` body,
#     byte for byte; the placeholder `else` body below is discarded;
#   * `CallSpec._fast` (the "fast constructor" piece) is appended to upstream's
#     `class CallSpec`.
# Names used here and not defined here (`inspect`, `KerasTensor`, `CallSpec`,
# and in the variant modules `tree`, `is_backend_tensor_or_symbolic`) must be
# bound in the target module; the analysis checks that before inserting.
# ruff: noqa


import os as _callspec_fast_path_os

# Kill switch, read once at import: KERAS_CALLSPEC_FAST_PATH=0 makes every layer
# build its CallSpec through `signature.bind`, exactly as upstream Keras does.
_CALLSPEC_FAST_PATH_ENABLED = _callspec_fast_path_os.environ.get(
    "KERAS_CALLSPEC_FAST_PATH", "1"
).strip().lower() not in ("0", "false", "no", "off")


class _CallSpecFastPlan:
    """What `CallSpec._fast` needs to build the CallSpec of `layer(x)`.

    Computed once per layer from its call signature by `_callspec_fast_plan`.
    `signature` is kept so that `__call__` can tell when `_call_signature` was
    replaced after `__init__` (the plan is then stale and the slow path runs).
    """

    __slots__ = ("signature", "first_name", "argument_names", "defaults")

    def __init__(self, signature, first_name, argument_names, defaults):
        self.signature = signature
        self.first_name = first_name
        self.argument_names = argument_names
        self.defaults = defaults


def _callspec_fast_plan(signature):
    """Return the `_CallSpecFastPlan` of `signature`, or None when `layer(x)`
    must keep building its CallSpec through `signature.bind`.

    Eligible: the first parameter takes a positional argument, there is no
    `*args`/`**kwargs`, every other parameter has a plain default, and no
    positional-only parameter is named `training` (the slow path would later
    pass `training=` as a keyword to it).
    """
    if not _CALLSPEC_FAST_PATH_ENABLED:
        return None
    parameters = list(signature.parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return None
    defaults = {}
    for parameter in parameters:
        if (
            parameter.name == "training"
            and parameter.kind is inspect.Parameter.POSITIONAL_ONLY
        ):
            return None
        if parameter is parameters[0]:
            continue
        if parameter.kind in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            return None
        if parameter.default is inspect.Parameter.empty:
            return None
        if not _callspec_fast_default_is_plain(parameter.default):
            return None
        defaults[parameter.name] = parameter.default
    return _CallSpecFastPlan(
        signature,
        parameters[0].name,
        tuple(parameter.name for parameter in parameters),
        defaults,
    )


class Layer:
    def __init__(self):
        self._call_signature = inspect.signature(self.call)
        # forkgen CallSpec fast path: can `layer(x)` skip `signature.bind`?
        self._call_spec_fast_plan = _callspec_fast_plan(self._call_signature)
        self._call_spec_fast_path = self._call_spec_fast_plan is not None

    def __call__(self, *args, **kwargs):
        # forkgen CallSpec fast path: `layer(x)` with one tensor and no kwargs.
        if (
            self._call_spec_fast_path
            and not kwargs
            and len(args) == 1
            and self._call_spec_fast_plan is not None
            and self._call_spec_fast_plan.signature is self._call_signature
            and is_backend_tensor_or_symbolic(args[0])
        ):
            call_spec = CallSpec._fast(self._call_spec_fast_plan, args[0])
        else:
            call_spec = CallSpec(
                self._call_signature, self._call_context_args, args, kwargs
            )


class CallSpec:
    def __init__(self, signature, call_context_args, args, kwargs):
        pass

    @classmethod
    def _fast(cls, plan, first_arg):
        """The CallSpec of `layer(first_arg)`, equal to the one `__init__`
        builds for `args=(first_arg,)` and no kwargs, without binding.

        The caller has checked that `first_arg` is a backend tensor or a
        KerasTensor, so it is the only tensor argument and the call is eager
        exactly when it is not a KerasTensor. Every container is new.
        """
        self = cls.__new__(cls)
        name = plan.first_name
        self.user_arguments_dict = {name: first_arg}
        arguments_dict = {name: first_arg}
        arguments_dict.update(plan.defaults)
        self.arguments_dict = arguments_dict
        self.argument_names = list(plan.argument_names)
        self.tensor_arguments_dict = {name: first_arg}
        self.tensor_arguments_names = [name]
        self.nested_tensor_argument_names = []
        self.first_arg = first_arg
        self.eager = not isinstance(first_arg, KerasTensor)
        return self
