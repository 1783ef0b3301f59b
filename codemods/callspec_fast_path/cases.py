"""The CallSpec fast path's examples (`CASES`, run by tests/unit/test_patch_cases.py) and the
breaks of its inserted code (its templates) that the equivalence suite must catch (`nox -s
mutants`)."""

import libcst as cst

from codemods.callspec_fast_path import templates
from codemods.engine import Case, Mutant
from tests.support.synthetic import LAYER_V4, replace_once

SIG = "        self._call_signature = inspect.signature(self.call)\n"
INIT_AFTER = SIG + """\
        # forkgen CallSpec fast path: can `layer(x)` skip `signature.bind`?
        self._call_spec_fast_plan = _callspec_fast_plan(self._call_signature)
        self._call_spec_fast_path = self._call_spec_fast_plan is not None
"""
EAGER = """\
        self.eager = all(
            backend.is_tensor(x) for x in self.tensor_arguments_dict.values()
        )
"""
UPSTREAM = """\
        # Caches info about `call()` signature, args, kwargs.
        call_spec = CallSpec(
            self._call_signature, self._call_context_args, args, kwargs
        )
        self.last_call_spec = call_spec
"""
GUARDED = """\
        # Caches info about `call()` signature, args, kwargs.
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
        self.last_call_spec = call_spec
"""
CALLSPEC = "\n\nclass CallSpec:\n"


def module_code(statements: tuple[cst.BaseStatement, ...]) -> str:
    """Module-level pieces as the patch writes them (two blank lines above)."""
    return cst.Module(body=list(statements)).code


def member_code(method: cst.BaseStatement) -> str:
    """A method piece as the patch writes it into `class CallSpec` (a blank line above)."""
    code = cst.Module(body=[cst.ClassDef(cst.Name("CallSpec"), cst.IndentedBlock([method]))]).code
    return code[code.index("\n") + 1:]


def patched(layer: str) -> str:
    pieces = templates.base_pieces("V4")
    after = replace_once(layer, SIG, INIT_AFTER)
    after = replace_once(after, CALLSPEC, module_code(pieces["helpers"]) + CALLSPEC)
    after = replace_once(after, EAGER, EAGER + member_code(pieces["fast"][0]))
    return replace_once(after, UPSTREAM, GUARDED)


CASES = (
    Case("layer(x) builds its CallSpec through CallSpec._fast (V4)", LAYER_V4, after=patched(LAYER_V4),
         detail="CallSpec variant V4",
         anchors=(("layer_class", 10), ("call_signature", 13), ("callspec_construction", 36), ("callspec_class", 114))),
    Case("upstream's comment lines stay above the guard, odd formatting node for node",
         LAYER_V4.replace("args, kwargs\n        )\n        self.last", "args, kwargs)   # odd\n        self.last"),
         after=patched(LAYER_V4).replace("args, kwargs\n            )\n        self.last", "args, kwargs)   # odd\n        self.last")),
    Case("a ninth attribute in CallSpec.__init__", replace_once(LAYER_V4, EAGER, EAGER + "        self.extra = None\n"),
         drift="extra `extra`"),
    Case("a member CallSpec has in no release", replace_once(
        LAYER_V4, EAGER, EAGER + "\n    def as_dict(self):\n        return vars(self)\n"), drift="anchor 'class CallSpec'"),
    Case("a `_fast` forkgen did not write", replace_once(
        LAYER_V4, EAGER, EAGER + "\n    @classmethod\n    def _fast(cls, plan, x):\n        return None\n"),
        drift="a different `_fast`"),
    Case("a second construction in Layer.__call__", replace_once(
        LAYER_V4, "        self.last_call_spec = call_spec\n",
        "        self.last_call_spec = CallSpec(self._call_signature, self._call_context_args, args, kwargs)\n"),
        drift="anchor 'callspec_construction'"),
    Case("the construction with keyword arguments", replace_once(
        LAYER_V4, "self._call_context_args, args, kwargs\n        )\n        self.last",
        "self._call_context_args, args=args, kwargs=kwargs\n        )\n        self.last"),
        drift="anchor 'callspec_construction'"),
    Case("a conditional call signature", replace_once(LAYER_V4, SIG, "        if name:\n    " + SIG), drift="nested"),
    Case("a name of the plan already bound", replace_once(LAYER_V4, "import inspect\n", "import inspect\n_callspec_fast_plan = None\n"),
         drift="_callspec_fast_plan"),
    Case("the guard without the rest of the patch", replace_once(LAYER_V4, UPSTREAM, GUARDED),
         drift="all pieces present or none"),
)

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
