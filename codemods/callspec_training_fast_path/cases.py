"""The CallSpec extension's examples (`CASES`, run by tests/unit/test_patch_cases.py) and the
breaks of its inserted code that the equivalence suite must catch (`nox -s mutants`), in the base
patch's templates."""

from codemods.callspec_fast_path import templates
from codemods.callspec_fast_path.cases import (
    CALLSPEC,
    LAYER_V4,
    member_code,
    method_code,
    module_code,
    patched,
)
from codemods.engine import Case, Mutant, replace_once

PIECES = templates.extension_pieces("V4")
BASE = patched(LAYER_V4)
FLAG = "        self._call_spec_fast_path = self._call_spec_fast_plan is not None\n"
BINDINGS = method_code(PIECES["bindings"])
FAST_END = """\
        self.eager = not isinstance(first_arg, KerasTensor)
        return self
"""
GUARD_END = """\
            call_spec = CallSpec._fast(self._call_spec_fast_plan, args[0])
        else:
"""
#: The branch (`if UPSTREAM: UPSTREAM elif ...: pass else: UPSTREAM`) between the base's fast
#: branch and upstream's `else:`.
_BRANCH = method_code(PIECES["branch"]).split("            UPSTREAM\n")
assert len(_BRANCH) == 3 and _BRANCH[0] == "        if UPSTREAM:\n" and _BRANCH[2] == ""
EXTENDED_GUARD_END = GUARD_END.splitlines(True)[0] + _BRANCH[1]


def extended(base: str) -> str:
    after = replace_once(base, FLAG, FLAG + BINDINGS)
    after = replace_once(after, GUARD_END, EXTENDED_GUARD_END)
    after = replace_once(after, CALLSPEC, module_code(PIECES["helpers"]) + CALLSPEC)
    return replace_once(after, FAST_END, FAST_END + member_code(PIECES["fast_bound"][0]))


CASES = (
    Case("every call that binds gets the fast path, on top of the base (V4)", BASE, after=extended(BASE),
         detail="CallSpec variant V4", anchors=()),
    Case("not without the base", LAYER_V4, drift="anchor 'self._call_spec_fast_path = self._call_spec_fast_plan is not None'"),
    Case("part of the extension", replace_once(extended(BASE), BINDINGS, ""), drift="all pieces present or none"),
    Case("a `_fast_bound` forkgen did not write", replace_once(
        BASE, FAST_END, FAST_END + "\n    @classmethod\n    def _fast_bound(cls, *args):\n        return None\n"),
        drift="a different `_fast_bound`"),
)

MUTANTS = (
    Mutant(
        "extension: the **kwargs dict is the call's kwargs dict",
        '                    extra = {}\n',
        '                    extra = kwargs\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension: keyword-bound arguments in kwargs order, not signature order',
        '        self.user_arguments_dict = user_arguments\n',
        '        self.user_arguments_dict = {**{n: user_arguments[n] for n in kwargs if n in user_arguments}, **user_arguments}\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension (V4): popped call-context arguments kept last in user_arguments_dict',
        '    return {**popped, **user_arguments}\n',
        '    return {**user_arguments, **popped}\n',
        file='../callspec_fast_path/templates/callspec_bound_v4.py',
    ),
    Mutant(
        'extension: call-context arguments call() does not take are not popped from kwargs',
        '            popped = {name: kwargs.pop(name) for name in popped_names}\n',
        '            popped = {name: kwargs[name] for name in popped_names}\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension (V4): call-context arguments popped even when call() takes them',
        '        if name in kwargs and name not in bindings.parameter_names\n',
        '        if name in kwargs\n',
        file='../callspec_fast_path/templates/callspec_bound_v4.py',
    ),
    Mutant(
        'extension (V4): training popped even when it is no longer a call-context argument',
        '        for name in layer._call_context_args\n',
        '        for name in {"training"} | set(layer._call_context_args)\n',
        file='../callspec_fast_path/templates/callspec_bound_v4.py',
    ),
    Mutant(
        'extension: an unbound *args is [] instead of ()',
        '                    value = ()\n',
        '                    value = []\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension: an unbound **kwargs is one {} shared by every call',
        '                value = {}\n',
        '                value = _callspec_fast_bindings.__dict__\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension: an argument passed positionally and as a keyword binds',
        '                    return None  # also passed as a keyword\n',
        '                    pass  # also passed as a keyword\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension: a missing required argument binds',
        '                    return None  # a required argument is missing\n',
        '                    value = default  # a required argument is missing\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension: too many positional arguments bind (the extra one dropped)',
        '        if count > positional_count and bindings.var_positional is None:\n',
        '        if count > positional_count + 1 and bindings.var_positional is None:\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension: eager ignores nested tensor arguments',
        '                nested_names.append(name)\n                eager = False\n',
        '                nested_names.append(name)\n                eager = eager\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension: the tensor class cache records every class as not symbolic',
        '                tensor_types[value.__class__] = symbolic\n',
        '                tensor_types[value.__class__] = False\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension (V4): a nested value mixing tensors and non-tensors is plain',
        '        if any(is_backend_tensor_or_symbolic(x) for x in flat_values):\n            return None\n',
        '        if any(is_backend_tensor_or_symbolic(x) for x in flat_values):\n            return False\n',
        file='../callspec_fast_path/templates/callspec_bound_v4.py',
    ),
    Mutant(
        'extension: lists are plain values',
        '_CALLSPEC_FAST_PLAIN_TYPES = (bool, int, float, str)\n',
        '_CALLSPEC_FAST_PLAIN_TYPES = (bool, int, float, str, list)\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
    Mutant(
        'extension: first_arg is the first positional argument',
        '        self.first_arg = arguments[bindings.first_name]\n',
        '        self.first_arg = args[0] if args else arguments[bindings.first_name]\n',
        file='../callspec_fast_path/templates/callspec_bound_common.py',
    ),
)
