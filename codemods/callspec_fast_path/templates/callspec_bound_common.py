# The code the extension codemod (extend_callspec_fast_path.py) inserts into
# keras/src/layers/layer.py on top of the base patch (callspec_common.py): the
# fast path for `layer(x1, ..., xn)` with several positional tensors and for
# `layer(x1, ..., xn, training=<bool>)`. What differs between CallSpec variants,
# what becomes of a `training` that call() does not accept, lives in
# callspec_bound_v1.py (V1-V3) and callspec_bound_v4.py (V4).
#
# This module is never imported. The extension codemod parses it with libcst and
# splices its pieces into a layer.py that already carries the base patch:
#   * every top-level statement before `class Layer` (the "module" piece), with
#     the variant's two functions placed right before `_callspec_fast_bindable`,
#     goes right before upstream's `class CallSpec` (after the base's helpers,
#     whose `_callspec_fast_default_is_plain` and kill switch it uses);
#   * the statements after the base's `self._call_spec_fast_path = ...` in
#     `Layer.__init__` (the "bindings" piece) go right after that statement;
#   * the `elif` of the `if` in `Layer.__call__` (the "branch" piece) is added
#     to the base's guard, between its fast branch and upstream's `else`;
#   * `CallSpec._fast_bound` is appended to `class CallSpec`, after `_fast`.
# ruff: noqa


class _CallSpecFastBindings:
    """What `CallSpec._fast_bound` needs to build the CallSpec of a call with
    n positional tensors and no kwargs or only `training=<bool>`.

    Computed once per layer from its call signature by `_callspec_fast_bindings`:
    `arities` holds the n for which a call without kwargs is eligible,
    `training_arities` those for which a call with `training=<bool>` is, and
    `tails[n]` the defaults of every parameter after the n-th, in signature
    order (`training` included when call() takes it). `signature` is kept so
    that `__call__` can tell when `_call_signature` was replaced after `__init__`.
    """

    __slots__ = (
        "signature",
        "argument_names",
        "arities",
        "training_arities",
        "accepts_training",
        "tails",
    )

    def __init__(
        self, signature, argument_names, arities, training_arities, accepts_training, tails
    ):
        self.signature = signature
        self.argument_names = argument_names
        self.arities = arities
        self.training_arities = training_arities
        self.accepts_training = accepts_training
        self.tails = tails


def _callspec_fast_bindings(signature):
    """Return the `_CallSpecFastBindings` of `signature`, or None when no call
    with several positional tensors or with `training=<bool>` can skip
    `signature.bind`.

    n positional tensors bind, unambiguously, to the first n parameters when
    each of those takes a positional argument and none is named `training`.
    Such a call is eligible when every later parameter has a plain default,
    `training` excepted when it is passed. A signature with `*args` or
    `**kwargs`, or with a positional-only `training`, has no bindings.
    """
    if not _CALLSPEC_FAST_PATH_ENABLED:
        return None
    positional_kinds = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )
    parameters = list(signature.parameters.values())
    for parameter in parameters:
        if parameter.kind in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            return None
        if (
            parameter.name == "training"
            and parameter.kind is inspect.Parameter.POSITIONAL_ONLY
        ):
            return None
    positional = 0
    for parameter in parameters:
        if parameter.kind not in positional_kinds or parameter.name == "training":
            break
        positional += 1
    plain = [
        parameter.default is not inspect.Parameter.empty
        and _callspec_fast_default_is_plain(parameter.default)
        for parameter in parameters
    ]
    arities = set()
    training_arities = set()
    tails = [None] * (positional + 1)
    for n in range(1, positional + 1):
        rest = range(n, len(parameters))
        if not all(plain[i] or parameters[i].name == "training" for i in rest):
            continue
        training_arities.add(n)
        if all(plain[i] for i in rest):
            arities.add(n)
        # A `training` without a default is in the tail only for calls that
        # pass it, which overwrite the placeholder.
        tails[n] = {parameters[i].name: parameters[i].default for i in rest}
    if not training_arities:
        return None
    return _CallSpecFastBindings(
        signature,
        tuple(parameter.name for parameter in parameters),
        frozenset(arities),
        frozenset(training_arities),
        "training" in signature.parameters,
        tuple(tails),
    )


def _callspec_fast_bindable(layer, bindings, args, kwargs):
    """Whether `layer(*args, **kwargs)` may build its CallSpec with
    `CallSpec._fast_bound`: every positional argument is a backend tensor or a
    KerasTensor, their number is one of the layer's arities, and kwargs is
    empty or exactly `training=<bool>`.
    """
    if kwargs:
        if len(kwargs) != 1 or kwargs.get("training").__class__ is not bool:
            return False
        if len(args) not in bindings.training_arities:
            return False
        if not bindings.accepts_training and not _callspec_fast_pops_training(layer):
            return False
    elif len(args) not in bindings.arities:
        return False
    for arg in args:
        if not is_backend_tensor_or_symbolic(arg):
            return False
    return True


class Layer:
    def __init__(self):
        self._call_signature = inspect.signature(self.call)
        self._call_spec_fast_plan = _callspec_fast_plan(self._call_signature)
        self._call_spec_fast_path = self._call_spec_fast_plan is not None
        # forkgen CallSpec fast path, extension: can calls with several
        # positional tensors or with `training=<bool>` skip `signature.bind`?
        self._call_spec_fast_bindings = _callspec_fast_bindings(self._call_signature)
        if self._call_spec_fast_bindings is not None:
            self._call_spec_fast_path = True

    def __call__(self, *args, **kwargs):
        if self._call_spec_fast_path and self._call_spec_fast_plan is not None:
            call_spec = CallSpec._fast(self._call_spec_fast_plan, args[0])
        # forkgen CallSpec fast path, extension: several positional tensors,
        # and `training=<bool>`.
        elif (
            self._call_spec_fast_path
            and self._call_spec_fast_bindings is not None
            and self._call_spec_fast_bindings.signature is self._call_signature
            and _callspec_fast_bindable(self, self._call_spec_fast_bindings, args, kwargs)
        ):
            call_spec = CallSpec._fast_bound(self._call_spec_fast_bindings, args, kwargs)
        else:
            call_spec = CallSpec(
                self._call_signature, self._call_context_args, args, kwargs
            )


class CallSpec:
    def __init__(self, signature, call_context_args, args, kwargs):
        pass

    @classmethod
    def _fast(cls, plan, first_arg):
        pass

    @classmethod
    def _fast_bound(cls, bindings, args, kwargs):
        """The CallSpec of `layer(*args, **kwargs)`, equal to the one
        `__init__` builds, without binding; `kwargs` is empty or
        `{"training": <bool>}`, and a `training` that call() does not accept
        is removed from it, as `__init__` does.

        The caller has checked that every positional argument is a backend
        tensor or a KerasTensor, so they are the tensor arguments and the call
        is eager exactly when none is a KerasTensor. Every container is new.
        """
        self = cls.__new__(cls)
        names = bindings.argument_names
        user_arguments = dict(zip(names, args))
        arguments = dict(user_arguments)
        arguments.update(bindings.tails[len(args)])
        if kwargs:
            training = kwargs["training"]
            if bindings.accepts_training:
                user_arguments["training"] = training
                arguments["training"] = training
            else:
                del kwargs["training"]
                user_arguments = _callspec_fast_popped_training(training, user_arguments)
        self.user_arguments_dict = user_arguments
        self.arguments_dict = arguments
        self.argument_names = list(names)
        self.tensor_arguments_dict = dict(zip(names, args))
        self.tensor_arguments_names = list(names[: len(args)])
        self.nested_tensor_argument_names = []
        self.first_arg = args[0]
        eager = True
        for arg in args:
            if isinstance(arg, KerasTensor):
                eager = False
        self.eager = eager
        return self
