"""The breaks of the CallSpec fast path's inserted code (its templates) that the equivalence suite
must catch (`nox -s mutants`)."""

from codemods.patchlib import Mutant

MUTANTS = (
    Mutant(
        "share the plan's argument_names between calls",
        '        self.argument_names = list(plan.argument_names)\n',
        '        self.argument_names = plan.argument_names\n',
        file='templates/callspec_common.py',
    ),
    Mutant(
        'drop the tensor check from the guard',
        '            and is_backend_tensor_or_symbolic(args[0])\n',
        '            and args[0] is not None\n',
        file='templates/callspec_common.py',
    ),
    Mutant(
        'arguments_dict aliases user_arguments_dict',
        '        arguments_dict = {name: first_arg}\n',
        '        arguments_dict = self.user_arguments_dict\n',
        file='templates/callspec_common.py',
    ),
    Mutant(
        'eager always True',
        '        self.eager = not isinstance(first_arg, KerasTensor)\n',
        '        self.eager = True\n',
        file='templates/callspec_common.py',
    ),
    Mutant(
        'tensor defaults count as plain',
        '        if is_backend_tensor_or_symbolic(value):\n            return False\n',
        '        if False:\n            return False\n',
        file='templates/callspec_v3.py',
    ),
    Mutant(
        'positional-only training allowed',
        '            and parameter.kind is inspect.Parameter.POSITIONAL_ONLY\n',
        '            and parameter.kind is None\n',
        file='templates/callspec_common.py',
    ),
)
