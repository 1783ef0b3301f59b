# The extension's rule for CallSpec variants V1-V3 (Keras 3.0.0 - 3.9.2; see
# KERAS_FACTS.md): what `CallSpec.__init__` does with a `training` keyword that
# call() does not accept. Spliced by the extension codemod into layer.py with
# the rest of callspec_bound_common.py; never imported.
# ruff: noqa


def _callspec_fast_pops_training(layer):
    """Whether `CallSpec.__init__` (V1-V3) removes a `training` keyword that
    `layer.call` does not accept before binding: always."""
    return True


def _callspec_fast_popped_training(training, user_arguments):
    """`user_arguments_dict` after `CallSpec.__init__` (V1-V3) removed a
    `training` keyword: only what was bound; the value is dropped."""
    return user_arguments
