"""What `operation-call-error-info` inserts (keras-team/keras#23183, exact-mirror form).

Parsed by the codemod, never imported. The pieces:

- `helper`: the function `raise_with_argument_info`, added at module level to
  `keras/src/utils/traceback_utils.py` right after `inject_argument_info_in_traceback` (which
  stays; the docstring is indented here as it reads once at module level). It is that
  wrapper's `except` branch, run from the caller's own `except` block, so that a call that
  does not raise builds no wrapper.
- `call_site`: what replaces `call_fn = traceback_utils.inject_argument_info_in_traceback(...)`
  followed by `return call_fn(*args, **kwargs)` in `Operation.__call__` and `Cond.__call__`.
  `__object_name` is the `object_name=` expression upstream passed to the wrapper, moved here
  unchanged.
"""
# ruff: noqa


def helper():
    def raise_with_argument_info(e, fn, args, kwargs, object_name=None):  # forkgen: operation-call-error-info
        """Raise `e`, raised by `fn(*args, **kwargs)`, with `fn`'s arguments in its message.

    The error path of `inject_argument_info_in_traceback`, for callers that run
    `fn` themselves and call this from their `except` block: it always raises,
    and raises what that wrapper raises (same exception class, message,
    `_keras_call_info_injected` flag, `__cause__` and `__context__`). Only
    the innermost failing call describes its arguments.

    Arguments:
        e: The exception `fn(*args, **kwargs)` raised, being handled.
        fn: The function that was called.
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        object_name: String, display name of the class/function called.
    """
        if hasattr(e, "_keras_call_info_injected"):
            # A call nested in this one has described its arguments already.
            raise e
        signature = inspect.signature(fn)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            # Arguments `fn` cannot take: leave the error as it is.
            raise e
        described = []
        for parameter in signature.parameters.values():
            if parameter.name in bound.arguments:
                value = tree.map_structure(
                    format_argument_value, bound.arguments[parameter.name]
                )
            else:
                value = parameter.default
            described.append(f"  • {parameter.name}={value}")
        if not described:
            raise e.with_traceback(e.__traceback__) from None
        described = "\n".join(described)
        if backend.backend() == "tensorflow":
            from tensorflow import errors as tf_errors

            op_error = isinstance(e, tf_errors.OpError)
        else:
            op_error = False
        if op_error:
            original = e.message
        elif e.args:
            # An exception's message is its first argument (all built-in ones).
            original = e.args[0]
        else:
            original = ""
        name = f"{object_name if object_name else fn.__name__}"
        message = (
            f"Exception encountered when calling {name}.\n\n"
            f"\x1b[1m{original}\x1b[0m\n\n"
            f"Arguments received by {name}:\n"
            f"{described}"
        )
        if op_error:
            new_e = e.__class__(e.node_def, e.op, message, e.error_code)
        else:
            try:
                new_e = e.__class__(message)
            except TypeError:
                # A custom exception whose constructor takes no single message.
                new_e = RuntimeError(message)
        new_e._keras_call_info_injected = True
        raise new_e.with_traceback(e.__traceback__) from None


def call_site(self, call_fn, args, kwargs):
    try:  # forkgen: operation-call-error-info
        return call_fn(*args, **kwargs)
    except Exception as e:
        traceback_utils.raise_with_argument_info(
            e, call_fn, args, kwargs, object_name=__object_name
        )
