# The extension's rule for CallSpec variant V4 (Keras 3.10.0 - 3.15.1, master,
# keras-nightly; see KERAS_FACTS.md): what `CallSpec.__init__` does with a
# `training` keyword that call() does not accept. Spliced by the extension
# codemod into layer.py with the rest of callspec_bound_common.py; never imported.
# ruff: noqa


def _callspec_fast_pops_training(layer):
    """Whether `CallSpec.__init__` (V4) removes a `training` keyword that
    `layer.call` does not accept before binding: when `training` is one of the
    layer's call-context arguments (otherwise binding raises)."""
    return "training" in layer._call_context_args


def _callspec_fast_popped_training(training, user_arguments):
    """`user_arguments_dict` after `CallSpec.__init__` (V4) popped a `training`
    keyword: the popped value first, then what was bound."""
    return {"training": training, **user_arguments}
