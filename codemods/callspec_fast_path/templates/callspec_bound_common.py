# The code the extension (callspec-training-fast-path) inserts into
# keras/src/layers/layer.py on top of the base patch (callspec_common.py): the
# fast path for every call that binds, whatever its shape (several positional
# arguments, any keyword, `training=None`, nested and non-tensor values,
# `*args`/`**kwargs`). What differs between CallSpec variants (which keywords
# the constructor pops before binding, what becomes of them, how it classifies
# a nested value) lives in callspec_bound_v1.py ... callspec_bound_v4.py.
#
# This module is never imported. The extension codemod parses it with libcst and
# splices its pieces into a layer.py that already carries the base patch:
#   * every top-level statement before `class Layer` (the "module" piece), with
#     the variant's three functions placed right before `_callspec_fast_bindings`,
#     goes right before upstream's `class CallSpec` (after the base's helpers,
#     whose kill switch it uses);
#   * the statements after the base's `self._call_spec_fast_path = ...` in
#     `Layer.__init__` (the "bindings" piece) go right after that statement;
#   * the `elif` of the `if` in `Layer.__call__` (the "branch" piece) is added
#     to the base's guard, between its fast branch and upstream's `else`;
#   * `CallSpec._fast_bound` is appended to `class CallSpec`, after `_fast`.
# ruff: noqa


# How `CallSpec._fast_bound` fills a parameter that the call did not bind: a
# positional or keyword parameter takes its default (or, without one, the call
# does not bind), `*args` takes `()`, `**kwargs` a new `{}`; as
# `BoundArguments.apply_defaults` does. The two codes a keyword can fill come
# first, so that one comparison tells them from the variadic ones.
_CALLSPEC_FAST_DEFAULT = 0
_CALLSPEC_FAST_REQUIRED = 1
_CALLSPEC_FAST_VAR_POSITIONAL = 2
_CALLSPEC_FAST_VAR_KEYWORD = 3

# The `position` of a parameter that takes no positional argument (keyword-only
# and variadic ones): larger than any call's argument count, so that
# `position < len(args)` alone tells whether the parameter took one.
_CALLSPEC_FAST_NO_POSITION = 1 << 62

# Values that are neither tensors nor nested structures on any backend, so that
# classifying them needs no call (exact types only: subclasses take the full test).
# A tuple, not a frozenset: torch.compile's guards on a set of classes fail.
_CALLSPEC_FAST_PLAIN_TYPES = (bool, int, float, str)

# The classes whose instances `is_backend_tensor_or_symbolic` has accepted, each
# mapped to whether it is a KerasTensor class (a symbolic argument: the call is
# not eager). Every backend's `is_tensor` is an `isinstance` test (torch.is_tensor,
# `isinstance` against jax.Array or np.ndarray, tf.is_tensor's TF-type classes), and
# so is the KerasTensor test: a class accepted once is accepted for every instance,
# looked up by `value.__class__` as `isinstance` itself falls back to it. Classes
# never accepted take the full test every time.
_CALLSPEC_FAST_TENSOR_TYPES = {}


class _CallSpecFastBindings:
    """The binding plan of a layer's call signature, computed once per layer
    by `_callspec_fast_bindings`, that lets `CallSpec._fast_bound` bind a call
    with a few dictionary operations instead of `signature.bind`.

    `parameters` holds, in signature order, `(name, position, fill, default)`:
    `position` is the index of the positional argument the parameter takes
    (`_CALLSPEC_FAST_NO_POSITION` for keyword-only and variadic parameters), `fill` one of the
    `_CALLSPEC_FAST_*` codes above. `positional_count` is the number of
    parameters that take a positional argument, `var_positional` and
    `var_keyword` the names of `*args` and `**kwargs` (or None),
    `keyword_names` the parameters a keyword binds to, `positional_only_names`
    the positional-only ones (mapped to their position), `parameter_names` them all. `signature` is kept
    so that `__call__` can tell when `_call_signature` was replaced after
    `__init__` (the plan is then stale and the slow path runs).
    """

    __slots__ = (
        "signature",
        "argument_names",
        "parameter_names",
        "parameters",
        "positional_count",
        "var_positional",
        "var_keyword",
        "keyword_names",
        "positional_only_names",
        "first_name",
    )

    def __init__(
        self,
        signature,
        argument_names,
        parameters,
        positional_count,
        var_positional,
        var_keyword,
        keyword_names,
        positional_only_names,
    ):
        self.signature = signature
        self.argument_names = argument_names
        self.parameter_names = frozenset(argument_names)
        self.parameters = parameters
        self.positional_count = positional_count
        self.var_positional = var_positional
        self.var_keyword = var_keyword
        self.keyword_names = keyword_names
        self.positional_only_names = positional_only_names
        self.first_name = argument_names[0]


def _callspec_fast_bindings(signature):
    """Return the `_CallSpecFastBindings` of `signature`, or None when every
    call but `layer(x)` keeps building its CallSpec through `signature.bind`:
    the kill switch is set, call() takes no parameter, or it has a
    positional-only `training` (the slow path passes `training=` to it later
    as a keyword, which must keep failing where upstream fails).
    """
    if not _CALLSPEC_FAST_PATH_ENABLED:
        return None
    parameters = []
    keyword_names = set()
    positional_only_names = {}
    positional_count = 0
    var_positional = None
    var_keyword = None
    for parameter in signature.parameters.values():
        name = parameter.name
        kind = parameter.kind
        position = _CALLSPEC_FAST_NO_POSITION
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            if name == "training":
                return None
            positional_only_names[name] = positional_count
        if kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            position = positional_count
            positional_count += 1
        if kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        ):
            keyword_names.add(name)
        if kind is inspect.Parameter.VAR_POSITIONAL:
            var_positional = name
            fill = _CALLSPEC_FAST_VAR_POSITIONAL
        elif kind is inspect.Parameter.VAR_KEYWORD:
            var_keyword = name
            fill = _CALLSPEC_FAST_VAR_KEYWORD
        elif parameter.default is inspect.Parameter.empty:
            fill = _CALLSPEC_FAST_REQUIRED
        else:
            fill = _CALLSPEC_FAST_DEFAULT
        parameters.append((name, position, fill, parameter.default))
    if not parameters:
        return None
    return _CallSpecFastBindings(
        signature,
        tuple(parameter[0] for parameter in parameters),
        tuple(parameters),
        positional_count,
        var_positional,
        var_keyword,
        frozenset(keyword_names),
        positional_only_names,
    )


class Layer:
    def __init__(self):
        self._call_signature = inspect.signature(self.call)
        self._call_spec_fast_plan = _callspec_fast_plan(self._call_signature)
        self._call_spec_fast_path = self._call_spec_fast_plan is not None
        # forkgen CallSpec fast path, extension: every other call that binds
        # skips `signature.bind` too.
        self._call_spec_fast_bindings = _callspec_fast_bindings(self._call_signature)
        if self._call_spec_fast_bindings is not None:
            self._call_spec_fast_path = True

    def __call__(self, *args, **kwargs):
        if self._call_spec_fast_path and self._call_spec_fast_plan is not None:
            call_spec = CallSpec._fast(self._call_spec_fast_plan, args[0])
        # forkgen CallSpec fast path, extension: any other call that binds;
        # `_fast_bound` returns None (and leaves `kwargs` alone) for a call
        # that would not bind, which upstream's constructor below then rejects.
        elif (
            self._call_spec_fast_path
            and self._call_spec_fast_bindings is not None
            and self._call_spec_fast_bindings.signature is self._call_signature
            and (
                call_spec := CallSpec._fast_bound(
                    self._call_spec_fast_bindings, self, args, kwargs
                )
            )
            is not None
        ):
            pass
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
    def _fast_bound(cls, bindings, layer, args, kwargs):
        """The CallSpec of `layer(*args, **kwargs)`, equal to the one
        `__init__` builds, without `signature.bind`; or None, with `kwargs`
        untouched, when the call would not bind as `signature.bind` binds it
        (missing, unexpected or repeated arguments, a keyword naming a
        positional-only parameter that took no positional argument) or when classifying a value raises or finds
        tensors mixed with other values: `__init__` then runs and raises.

        Binding follows `Signature.bind`: positional arguments fill the
        positional parameters in order and the rest goes to `*args`; keywords
        go to their parameters and the rest to `**kwargs`; `user_arguments_dict`
        holds what was bound, in signature order (after the call-context
        keywords the variant keeps), `arguments_dict` every parameter, defaults
        applied. Each value is classified as `__init__` classifies it. Every
        container is new; the call-context keywords `__init__` pops from
        `kwargs` are popped here too, once the call is known to bind.
        """
        count = len(args)
        positional_count = bindings.positional_count
        if count > positional_count and bindings.var_positional is None:
            return None
        popped_names = ()
        extra = None
        keyword_names = bindings.keyword_names
        if kwargs:
            for name in kwargs:
                if name in keyword_names:
                    continue
                if not popped_names:
                    popped_names = _callspec_fast_popped_names(layer, bindings, kwargs)
                if name in popped_names:
                    continue
                if bindings.var_keyword is None:
                    return None
                # A positional-only name goes to `**kwargs` when its parameter
                # took a positional argument; otherwise `bind` refuses it.
                position = bindings.positional_only_names.get(name)
                if position is not None and position >= count:
                    return None
                if extra is None:
                    extra = {}
                extra[name] = kwargs[name]
        user_arguments = {}
        arguments = {}
        tensor_arguments = {}
        nested_names = []
        eager = True
        plain_types = _CALLSPEC_FAST_PLAIN_TYPES
        tensor_types = _CALLSPEC_FAST_TENSOR_TYPES
        for name, position, fill, default in bindings.parameters:
            if position < count:
                if kwargs and name in kwargs and name in keyword_names:
                    return None  # also passed as a keyword
                value = user_arguments[name] = args[position]
            elif fill < _CALLSPEC_FAST_VAR_POSITIONAL:  # a keyword may fill it
                if name in kwargs:
                    value = user_arguments[name] = kwargs[name]
                elif fill == _CALLSPEC_FAST_DEFAULT:
                    value = default
                else:
                    return None  # a required argument is missing
            elif fill == _CALLSPEC_FAST_VAR_POSITIONAL:
                if count > positional_count:
                    value = user_arguments[name] = tuple(args[positional_count:])
                else:
                    value = ()
            elif extra is not None:  # **kwargs, holding the keywords no parameter took
                value = user_arguments[name] = extra
            else:
                value = {}
            arguments[name] = value
            if value is None:
                continue
            # A known tensor class first (the common case), then the plain types.
            symbolic = tensor_types.get(value.__class__)
            if symbolic is None:
                if value.__class__ in plain_types:
                    continue
                if is_backend_tensor_or_symbolic(value):
                    symbolic = isinstance(value, KerasTensor)
                    tensor_types[value.__class__] = symbolic
            if symbolic is not None:
                tensor_arguments[name] = value
                if symbolic:
                    eager = False
                continue
            nested = _callspec_fast_nested_kind(value)
            if nested is None:
                return None
            if nested:
                tensor_arguments[name] = value
                nested_names.append(name)
                eager = False
        if popped_names:
            popped = {name: kwargs.pop(name) for name in popped_names}
            user_arguments = _callspec_fast_kept_arguments(popped, user_arguments)
        self = cls.__new__(cls)
        self.user_arguments_dict = user_arguments
        self.arguments_dict = arguments
        self.argument_names = list(bindings.argument_names)
        self.tensor_arguments_dict = tensor_arguments
        self.tensor_arguments_names = [*tensor_arguments]
        self.nested_tensor_argument_names = nested_names
        self.first_arg = arguments[bindings.first_name]
        self.eager = eager
        return self
