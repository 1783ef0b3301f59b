"""What `layer-call-fast-lane` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

from codemods.engine import Case, Mutant, piece_text

BEFORE = '''\
from keras.src import backend
from keras.src import tree
from keras.src.backend import KerasTensor
from keras.src.layers import input_spec


class Layer:
    def __call__(self, *args, **kwargs):
        original_args = args
        original_kwargs = kwargs
        if not self._allow_non_tensor_positional_args:
            for arg in tree.flatten(args):
                check(arg)
        call_spec = CallSpec(args, kwargs)
        self._assert_input_compatibility(call_spec.first_arg)
        if len(call_spec.tensor_arguments_dict) == 1:
            kwargs["mask"] = None
        elif len(call_spec.tensor_arguments_dict) > 1:
            kwargs["x_mask"] = None
        if "mask" in kwargs and kwargs["mask"] is not None:
            previous_mask = kwargs["mask"]
        else:
            # The first input's mask.
            previous_mask = tree.map_structure(backend.get_keras_mask, call_spec.first_arg)
        outputs = self.call(*args, **kwargs)
        if self.supports_masking:
            self._set_mask_metadata(call_spec.first_arg, outputs, previous_mask)
        elif previous_mask is not None:
            warn()
        if any_symbolic_tensors(original_args, original_kwargs):
            Node(self)
        return outputs


def is_backend_tensor_or_symbolic(x):
    return True
'''


def _wrapped(old: str, name: str) -> str:
    """`old` (lines of `Layer.__call__`'s body, 8 spaces deep) inside the piece `name`, one level deeper."""
    return piece_text(__file__, name, "        ", upstream=old)


POSITIONAL = '''\
        if not self._allow_non_tensor_positional_args:
            for arg in tree.flatten(args):
                check(arg)
'''
SPEC = "        self._assert_input_compatibility(call_spec.first_arg)\n"
MASKS = '''\
        if len(call_spec.tensor_arguments_dict) == 1:
            kwargs["mask"] = None
        elif len(call_spec.tensor_arguments_dict) > 1:
            kwargs["x_mask"] = None
'''
PREVIOUS = '''\
        if "mask" in kwargs and kwargs["mask"] is not None:
            previous_mask = kwargs["mask"]
        else:
            # The first input's mask.
            previous_mask = tree.map_structure(backend.get_keras_mask, call_spec.first_arg)
'''
METADATA = '''\
        if self.supports_masking:
            self._set_mask_metadata(call_spec.first_arg, outputs, previous_mask)
        elif previous_mask is not None:
            warn()
'''
NODE = '''\
        if any_symbolic_tensors(original_args, original_kwargs):
            Node(self)
'''
HELPERS = "\n\n" + piece_text(__file__, "helper")
AFTER = (
    BEFORE.replace(POSITIONAL, _wrapped(POSITIONAL, "positional_check"))
    .replace(SPEC, _wrapped(SPEC, "input_spec_check"))
    .replace(MASKS, _wrapped(MASKS, "mask_arguments"))
    .replace(PREVIOUS, _wrapped(PREVIOUS, "previous_mask").replace("__get_mask", "backend.get_keras_mask"))
    .replace(METADATA, _wrapped(METADATA, "mask_metadata"))
    .replace(NODE, _wrapped(NODE, "node"))
)


def _drift(name: str, old: str, new: str, drift: str) -> Case:
    assert BEFORE.count(old) == 1, old
    return Case(name, BEFORE.replace(old, new), drift=drift)


CASES = (
    Case("the six steps guarded, the helpers appended", BEFORE, AFTER + HELPERS,
         detail="an eager one-tensor call skips six steps of Layer.__call__",
         anchors=(("if not self._allow_non_tensor_positional_args: ___", 11),
                  ("self._assert_input_compatibility(call_spec.first_arg)", 15),
                  ("mask population", 16), ("previous_mask", 20), ("mask metadata", 26), ("Node", 30),
                  ("original_args = args", 9), ("original_kwargs = kwargs", 10))),
    Case("keras-nightly's bare get_keras_mask", BEFORE.replace("backend.get_keras_mask", "get_keras_mask"),
         (AFTER + HELPERS).replace("backend.get_keras_mask", "get_keras_mask")),
    _drift("3.10's previous_mask: no kwargs test", PREVIOUS,
           "        previous_mask = tree.map_structure(backend.get_keras_mask, call_spec.first_arg)\n",
           "expected exactly one"),
    _drift("no Node step", NODE, "", "expected exactly one"),
    _drift("two input-spec checks", SPEC, SPEC * 2, "found 2"),
    Case("a helper name taken", BEFORE + "\n_layer_call_fast_lane = None\n", drift="_layer_call_fast_lane"),
    Case("half applied", (AFTER + HELPERS).replace(_wrapped(NODE, "node"), NODE),
         drift="expected all pieces present or none"),
)
MUTANTS = (
    Mutant("the lane taken for a masked input (previous_mask None without looking)",
           'if fast_lane and "mask" not in kwargs and __get_mask(call_spec.first_arg) is None:',
           'if fast_lane and "mask" not in kwargs:'),
    Mutant("an input spec changed in place still counts as passed",
           "        and passed[2] == spec.__dict__\n", ""),
    Mutant("a class overriding the mask or spec methods takes the lane",
           "getattr(cls, name, None) is attr", "getattr(cls, name, None) is not None"),
    Mutant("a call() taking `mask` takes the lane",
           '        or "mask" in call_spec.argument_names\n', ""),
    Mutant("the lane taken while torch.compile traces (dynamo guards on its weak-keyed records)",
           "            _layer_call_fast_lane_compiling()\n            or len(args) != 1\n",
           "            len(args) != 1\n"),
    Mutant("the spec's record written while torch.compile traces (a store replayed after every compiled call)",
           "        if _layer_call_fast_lane_compiling():\n            return\n        spec = layer._input_spec\n",
           "        spec = layer._input_spec\n"),
)
