"""The CallSpec fast path's examples (`CASES`, run by tests/unit/test_patch_cases.py), the
breaks of its inserted code (its templates) that the equivalence suite must catch (`nox -s
mutants`), and the synthetic layer.py of each CallSpec variant (`LAYERS`), which the tests
use too (tests/support/synthetic.py re-exports them).

`LAYER_V4` has the shape of `keras/src/layers/layer.py` in Keras 3.10-3.15.1
(CallSpec variant V4) reduced to what the codemods anchor on. It imports Keras's
backend and tree as layer.py does; whoever executes it (patched or not) hands in
the `fake_backend` stand-in for them (`keras_stand_ins`), so the patched result
runs without Keras.
No Keras code is copied here: the statements are those the CallSpec contract
in docs/keras-releases.md describes. The older variants are made from it (`_older`).
"""

import textwrap

import libcst as cst

from codemods.callspec_fast_path import templates
from codemods.engine import Case, Mutant, replace_once

LAYER_V4 = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/layers/layer.py (CallSpec variant V4)."""

    import inspect

    from keras.src.backend import KerasTensor
    from keras.src import backend
    from keras.src import tree


    class Layer:
        def __init__(self, *, name=None):
            self.name = name
            self._call_signature = inspect.signature(self.call)
            self.call_signature_parameters = [
                p.name for p in self._call_signature.parameters.values()
            ]
            self._call_context_args = {"training"}

        def call(self, *args, **kwargs):
            raise NotImplementedError

        def __call__(self, *args, **kwargs):
            original_args = args
            original_kwargs = kwargs
            def maybe_convert(x):
                return self.dtype_policy.convert_input(x, self.autocast, self.input_dtype)
            if (kwargs or len(args) != 1) and self._convert_input_args:
                args = tree.map_structure(maybe_convert, args)
                kwargs = tree.map_structure(maybe_convert, kwargs)
            if not self._allow_non_tensor_positional_args:
                for arg in tree.flatten(args):
                    if not is_backend_tensor_or_symbolic(arg, allow_none=True):
                        raise ValueError("Only input tensors may be passed as positional arguments.")

            # Caches info about `call()` signature, args, kwargs.
            call_spec = CallSpec(
                self._call_signature, self._call_context_args, args, kwargs
            )
            self.last_call_spec = call_spec
            self._assert_input_compatibility(call_spec.first_arg)
            if len(call_spec.tensor_arguments_dict) == 1:
                if "mask" in call_spec.argument_names and call_spec.arguments_dict["mask"] is None:
                    kwargs["mask"] = backend.get_keras_mask(call_spec.first_arg)
            elif len(call_spec.tensor_arguments_dict) > 1:
                for name, value in call_spec.tensor_arguments_dict.items():
                    if f"{name}_mask" in call_spec.argument_names and call_spec.arguments_dict[f"{name}_mask"] is None:
                        kwargs[f"{name}_mask"] = backend.get_keras_mask(value)
            if "mask" in kwargs and kwargs["mask"] is not None:
                previous_mask = kwargs["mask"]
            else:
                previous_mask = tree.map_structure(backend.get_keras_mask, call_spec.first_arg)
            self._called = True
            with self._open_name_scope():
                self._maybe_build(call_spec)
            call_context = self._get_call_context()
            for context_arg in self._call_context_args:
                self._resolve_and_populate_arg(context_arg, call_spec, call_context, kwargs)
            try:
                with self._open_name_scope():
                    current_scope = backend.get_autocast_scope()
                    new_scope = None
                    if current_scope is not None:
                        new_scope = backend.AutocastScope(None)
                    elif self.compute_dtype != self.variable_dtype:
                        new_scope = backend.AutocastScope(self.compute_dtype)
                    if new_scope is not None:
                        with new_scope:
                            outputs = self.call(*args, **kwargs)
                    else:
                        outputs = self.call(*args, **kwargs)
                    distribution = distribution_lib.distribution()
                    if distribution is not None:
                        raise NotImplementedError("the synthetic layers run without a distribution")
            finally:
                self._maybe_reset_call_context()
            if self.supports_masking:
                self._set_mask_metadata(call_spec.first_arg, outputs, previous_mask)
            elif any(m is not None for m in tree.flatten(previous_mask)):
                self._masks_dropped = getattr(self, "_masks_dropped", 0) + 1
            if any_symbolic_tensors(original_args, original_kwargs):
                self._symbolic_calls = getattr(self, "_symbolic_calls", 0) + 1
            self.built = True
            return outputs

        def compute_output_spec(self, *args, **kwargs):
            call_spec = CallSpec(
                self._call_signature, self._call_context_args, args, kwargs
            )
            return call_spec.first_arg

        built = False

        def _maybe_build(self, call_spec):
            if self.built:
                return

        def _open_name_scope(self):
            return _NameScope()

        def _get_call_context(self):
            return None

        def _resolve_and_populate_arg(self, name, call_spec, call_context, kwargs):
            return None

        def _maybe_reset_call_context(self):
            return None

        compute_dtype = variable_dtype = "float32"

        _allow_non_tensor_positional_args = False
        _input_spec = None
        supports_masking = False

        @property
        def input_spec(self):
            return self._input_spec

        def _assert_input_compatibility(self, arg_0):
            if self.input_spec is not None:
                raise ValueError("the synthetic layers check no input spec")

        def compute_mask(self, inputs, previous_mask):
            return previous_mask

        def _set_mask_metadata(self, inputs, outputs, previous_mask):
            flat_outputs = tree.flatten(outputs)
            mask_already_computed = all(backend.get_keras_mask(x) is not None for x in flat_outputs)
            if mask_already_computed:
                return
            output_masks = self.compute_mask(inputs, previous_mask)
            if output_masks is None:
                return
            for tensor, mask in zip(flat_outputs, tree.flatten(output_masks)):
                if backend.get_keras_mask(tensor) is None and mask is not None:
                    backend.set_keras_mask(tensor, mask)

        def _clear_losses(self):
            self._losses.clear()
            self._loss_ids.clear()
            for layer in self._layers:
                layer._clear_losses()


    def is_backend_tensor_or_symbolic(x, allow_none=False):
        if allow_none and x is None:
            return True
        return backend.is_tensor(x) or isinstance(x, backend.KerasTensor)


    class CallSpec:
        def __init__(self, signature, call_context_args, args, kwargs):
            # Context args the call() does not accept are popped before binding.
            call_args = {
                context_arg: kwargs.pop(context_arg)
                for context_arg in call_context_args
                if context_arg in kwargs and context_arg not in signature.parameters
            }
            bound_args = signature.bind(*args, **kwargs)
            self.user_arguments_dict = {**call_args, **bound_args.arguments}
            bound_args.apply_defaults()
            arg_dict = {}
            arg_names = []
            tensor_arg_dict = {}
            tensor_arg_names = []
            nested_tensor_arg_names = []
            for name, value in bound_args.arguments.items():
                arg_dict[name] = value
                arg_names.append(name)
                if is_backend_tensor_or_symbolic(value):
                    tensor_arg_names.append(name)
                    tensor_arg_dict[name] = value
                elif tree.is_nested(value) and len(value) > 0:
                    flat_values = tree.flatten(value)
                    if all(
                        is_backend_tensor_or_symbolic(x, allow_none=True)
                        for x in flat_values
                    ):
                        tensor_arg_names.append(name)
                        tensor_arg_dict[name] = value
                        nested_tensor_arg_names.append(name)
                    elif any(is_backend_tensor_or_symbolic(x) for x in flat_values):
                        raise ValueError(f"mixed tensors and non-tensors: {name}={value}")
            self.arguments_dict = arg_dict
            self.argument_names = arg_names
            self.tensor_arguments_dict = tensor_arg_dict
            self.tensor_arguments_names = tensor_arg_names
            self.nested_tensor_argument_names = nested_tensor_arg_names
            self.first_arg = arg_dict[arg_names[0]]
            self.eager = all(
                backend.is_tensor(x) for x in self.tensor_arguments_dict.values()
            )


    def any_symbolic_tensors(args=None, kwargs=None):
        return any(isinstance(x, KerasTensor) for x in tree.flatten((args, kwargs)))


    class input_spec:
        # Stands for `from keras.src.layers import input_spec`.
        class InputSpec:
            pass


    def get_shapes_dict(call_spec):
        return {k: None for k in call_spec.tensor_arguments_dict}


    class _NameScope:
        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            return False


    class dtype_policies:
        # Stands for `from keras.src import dtype_policies`; never reached here.
        DTypePolicy = None


    # The synthetic layers never convert their inputs (the tests count the fake tree's calls).
    Layer._convert_input_args = False


    # What Keras's layer.py imports at its top and the layer-call-proven-steps helper reads.
    from keras.src.backend.common import global_state  # noqa: E402
    from keras.src.distribution import distribution_lib  # noqa: E402
    from keras.src.utils import tracking  # noqa: E402
    '''
)

_V4_BINDING = """\
        # Context args the call() does not accept are popped before binding.
        call_args = {
            context_arg: kwargs.pop(context_arg)
            for context_arg in call_context_args
            if context_arg in kwargs and context_arg not in signature.parameters
        }
        bound_args = signature.bind(*args, **kwargs)
        self.user_arguments_dict = {**call_args, **bound_args.arguments}
"""
_OLD_BINDING = """\
        # A `training` the call() does not take is dropped before binding.
        if "training" in kwargs and "training" not in signature.parameters:
            kwargs.pop("training")
            bound_args = signature.bind(*args, **kwargs)
        else:
            bound_args = signature.bind(*args, **kwargs)
        self.user_arguments_dict = {k: v for k, v in bound_args.arguments.items()}
"""
_ALL_OR_NONE = """\
                if all(
                    is_backend_tensor_or_symbolic(x, allow_none=True)
                    for x in flat_values
                ):
"""
_ALL = """\
                if all(is_backend_tensor_or_symbolic(x) for x in flat_values):
"""


def _older(variant: str) -> str:
    """LAYER_V4 turned into the shape of an older CallSpec variant (docs/keras-releases.md)."""
    source = LAYER_V4.replace("(CallSpec variant V4)", f"(CallSpec variant {variant})")
    source = replace_once(source, _V4_BINDING, _OLD_BINDING)
    source = replace_once(
        source,
        "def __init__(self, signature, call_context_args, args, kwargs):",
        "def __init__(self, signature, args, kwargs):",
    )
    construction = "self._call_signature, self._call_context_args, args, kwargs"
    assert source.count(construction) == 2
    source = source.replace(construction, "self._call_signature, args, kwargs")
    if variant in ("V1", "V2"):
        source = replace_once(source, _ALL_OR_NONE, _ALL)
    if variant == "V1":
        source = replace_once(source, "elif tree.is_nested(value) and len(value) > 0:", "elif tree.is_nested(value):")
    return source


#: A synthetic layer.py of each CallSpec variant.
LAYERS = {"V1": _older("V1"), "V2": _older("V2"), "V3": _older("V3"), "V4": LAYER_V4}


def keras_stand_ins(fake_backend: object) -> dict[str, object]:
    """What `run_module(text, name, stand_ins)` is handed to execute a text of `LAYERS` (patched
    or not): the stand-in `fake_backend` (its `backend`, `tree`, `KerasTensor`) for the Keras
    imports the texts have (`from keras.src import backend, tree`, `from keras.src.backend import
    KerasTensor`, `global_state`, `distribution_lib` and `tracking`)."""
    return {"keras.src": fake_backend, "keras.src.backend": fake_backend,
            "keras.src.backend.common": fake_backend, "keras.src.distribution": fake_backend,
            "keras.src.utils": fake_backend}



def module_code(statements: tuple[cst.BaseStatement, ...]) -> str:
    """Module-level pieces as the patch writes them (two blank lines above)."""
    return cst.Module(body=list(statements)).code


def member_code(method: cst.BaseStatement) -> str:
    """A method piece as the patch writes it into `class CallSpec` (a blank line above)."""
    code = cst.Module(body=[cst.ClassDef(cst.Name("CallSpec"), cst.IndentedBlock([method]))]).code
    return code[code.index("\n") + 1:]


def method_code(statements: tuple[cst.BaseStatement, ...]) -> str:
    """Statement pieces as the patch writes them into a method's body (`UPSTREAM` where the
    piece keeps upstream's statements)."""
    method = cst.FunctionDef(cst.Name("method"), cst.Parameters(), cst.IndentedBlock(list(statements)))
    code = cst.Module(body=[cst.ClassDef(cst.Name("Layer"), cst.IndentedBlock([method]))]).code
    return code.split("\n", 2)[2]


PIECES = templates.base_pieces("V4")
SIG = "        self._call_signature = inspect.signature(self.call)\n"
INIT_AFTER = SIG + method_code(PIECES["eligibility"])
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
#: The guard around upstream's construction: upstream's comment line stays above it, the
#: construction goes in its `else:`.
_COMMENT, *_CONSTRUCTION, _LAST = UPSTREAM.splitlines(True)
GUARDED = _COMMENT + method_code(PIECES["guard"]).replace(
    "            UPSTREAM\n", textwrap.indent("".join(_CONSTRUCTION), "    ")) + _LAST
CALLSPEC = "\n\nclass CallSpec:\n"


def patched(layer: str) -> str:
    after = replace_once(layer, SIG, INIT_AFTER)
    after = replace_once(after, CALLSPEC, module_code(PIECES["helpers"]) + CALLSPEC)
    after = replace_once(after, EAGER, EAGER + member_code(PIECES["fast"][0]))
    return replace_once(after, UPSTREAM, GUARDED)


CASES = (
    Case("layer(x) builds its CallSpec through CallSpec._fast (V4)", LAYER_V4, after=patched(LAYER_V4),
         detail="CallSpec variant V4",
         anchors=(("layer_class", 10), ("call_signature", 13), ("callspec_construction", 36), ("callspec_class", 151))),
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
