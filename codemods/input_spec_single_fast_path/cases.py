"""What `input-spec-single-fast-path` makes of input_spec.py modules shaped like Keras
3.4.0-3.15.1's (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code the
equivalence suite must catch. BEFORE and AFTER, made runnable (`runnable`), also run side by side in
tests/unit/test_input_spec_single_fast_path.py; `FILES` is the runnable BEFORE, for the synthetic trees."""

from codemods.engine import Case, Mutant, piece_text

#: The same statements and checks as Keras 3.4.0-3.15.1's `assert_input_compatibility` (the
#: patch pins their normalised shape), with messages of our own, which the patch ignores.
BEFORE = '''\
"""Synthetic stand-in for keras/src/layers/input_spec.py."""

from keras.src import backend
from keras.src import tree


class InputSpec:
    def __init__(
        self,
        dtype=None,
        shape=None,
        ndim=None,
        max_ndim=None,
        min_ndim=None,
        axes=None,
        allow_last_axis_squeeze=False,
        name=None,
        optional=False,
    ):
        self.dtype = dtype
        self.shape = shape
        self.ndim = len(shape) if shape is not None else ndim
        self.max_ndim = max_ndim
        self.min_ndim = min_ndim
        self.axes = axes or {}
        self.allow_last_axis_squeeze = allow_last_axis_squeeze
        self.name = name
        self.optional = optional


def assert_input_compatibility(input_spec, inputs, layer_name):
    """Raises ValueError when `inputs` do not match `input_spec`."""
    if not input_spec:
        return

    input_spec = tree.flatten(input_spec)
    if isinstance(inputs, dict):
        # Named specs take the dict's entries in their order.
        names = [spec.name for spec in input_spec]
        if all(names):
            list_inputs = []
            for name in names:
                if name not in inputs:
                    raise ValueError(f"{layer_name}: no input {name!r}")
                list_inputs.append(inputs[name])
            inputs = list_inputs

    inputs = tree.flatten(inputs)
    if len(inputs) != len(input_spec):
        spec_names = [spec.name for spec in input_spec if spec is not None]
        if len(spec_names) == len(input_spec) and all(spec_names):
            raise ValueError(f"{layer_name}: expected inputs {spec_names}")
        raise ValueError(f"{layer_name}: expected {len(input_spec)} inputs")
    for input_index, (x, spec) in enumerate(zip(inputs, input_spec)):
        if spec is None:
            continue
        if x is None and spec.optional:
            continue

        if not hasattr(x, "shape"):
            raise ValueError(f"{layer_name}: input {x!r} has no shape")

        shape = backend.standardize_shape(x.shape)
        ndim = len(shape)
        if spec.ndim is not None and not spec.allow_last_axis_squeeze:
            if ndim != spec.ndim:
                raise ValueError(f"{layer_name}[{input_index}]: ndim {ndim}")
        if spec.max_ndim is not None:
            if ndim is not None and ndim > spec.max_ndim:
                raise ValueError(f"{layer_name}[{input_index}]: max_ndim")
        if spec.min_ndim is not None:
            if ndim is not None and ndim < spec.min_ndim:
                raise ValueError(f"{layer_name}[{input_index}]: min_ndim")
        if spec.dtype is not None:
            dtype = backend.standardize_dtype(x.dtype)
            if dtype != spec.dtype:
                raise ValueError(f"{layer_name}[{input_index}]: dtype {dtype}")

        if spec.axes:
            for axis, value in spec.axes.items():
                if value is not None and shape[axis] not in {
                    value,
                    None,
                }:
                    raise ValueError(f"{layer_name}[{input_index}]: axis {axis}")
        if spec.shape is not None:
            spec_shape = spec.shape
            if spec.allow_last_axis_squeeze:
                if shape and shape[-1] == 1:
                    shape = shape[:-1]
                if spec_shape and spec_shape[-1] == 1:
                    spec_shape = spec_shape[:-1]
            for spec_dim, dim in zip(spec_shape, shape):
                if spec_dim is not None and dim is not None:
                    if spec_dim != dim:
                        raise ValueError(f"{layer_name}[{input_index}]: shape {shape}")
'''
EMPTY_RETURN = "    if not input_spec:\n        return\n"
#: The fast path right after the leading `if not input_spec: return`, the helper after the function.
AFTER = BEFORE.replace(EMPTY_RETURN, EMPTY_RETURN + "\n" + piece_text(__file__, "fast_path", "    ")) + "\n\n" + \
    piece_text(__file__, "helper")
#: keras-nightly's shape, reduced: a shared per-spec checker, without the squeeze.
NIGHTLY = BEFORE + '''

def _check_input_spec(spec, x, input_index, layer_name):
    shape = backend.standardize_shape(x.shape)
    for spec_dim, dim in zip(spec.shape, shape):
        pass
'''
SQUEEZE = """\
            if spec.allow_last_axis_squeeze:
                if shape and shape[-1] == 1:
                    shape = shape[:-1]
                if spec_shape and spec_shape[-1] == 1:
                    spec_shape = spec_shape[:-1]
"""
AXES = "            for axis, value in spec.axes.items():\n"
CHECKS = ":31: anchor 'assert_input_compatibility checks': expected the checks of Keras 3.4.0-3.15.1, which " \
    "_single_input_spec_passes mirrors (shape 5708a30f888e6faf); found other checks (shape "
RETURN = "anchor 'if not input_spec: return': expected exactly one `if not input_spec: return` in assert_input_compatibility"


def _reworded(text: str) -> str:
    return text.replace("has no shape", "is not a tensor").replace("    if not input_spec:\n", "    # Nothing to check.\n    if not input_spec:\n")


CASES = (
    Case("the fast path after the empty-spec return, the helper after the function", BEFORE, AFTER,
         detail="single InputSpec, unnested input: return early when the checks pass",
         anchors=(("if not input_spec: return", 33), ("assert_input_compatibility checks", 31))),
    Case("messages and comments do not matter", _reworded(BEFORE), _reworded(AFTER)),
    Case("keras-nightly's shared checker, without the squeeze", NIGHTLY, upstream=True,
         detail="upstream has the fast path (_check_input_spec); with nightly's squeeze semantics "
         "(allow_last_axis_squeeze no longer strips 1s)"),
    Case("the function gone", BEFORE.replace("def assert_input_compatibility(", "def check_inputs("),
         drift=":1: anchor 'assert_input_compatibility': expected exactly one def assert_input_compatibility; found 0"),
    Case("the empty-spec return gone", BEFORE.replace(EMPTY_RETURN, ""), drift=f":31: {RETURN}; found 0"),
    Case("the empty-spec return twice", BEFORE.replace(EMPTY_RETURN, EMPTY_RETURN * 2), drift=f":33: {RETURN}; found 2"),
    # Nightly's squeeze change without its helper: other checks than the fast path mirrors.
    Case("the squeeze removed", BEFORE.replace(SQUEEZE, ""), drift=CHECKS + "0bc0cbd84fc3b757)"),
    Case("the squeeze changed", BEFORE.replace("shape[-1] == 1", "shape[-1] == 2"), drift=CHECKS + "b8dc4dc293df98de)"),
    # An out-of-range axis raising ValueError (nightly): a new check.
    Case("an axis check", BEFORE.replace(AXES, AXES + "                if axis >= ndim:\n                    raise ValueError(axis)\n"),
         drift=CHECKS + "6118fd3afc6cac16)"),
    Case("half a patch: the helper without the fast path", BEFORE + AFTER[AFTER.index("\n\n# forkgen"):],
         drift=":33: anchor 'input-spec-single-fast-path': expected all pieces present or none; found "
         "def assert_input_compatibility(___): ___ forkgen's, if not input_spec: return missing"),
    Case("tree not imported", BEFORE.replace("from keras.src import tree\n", ""),
         drift=":32: anchor 'tree': expected bound where fast_path goes (in assert_input_compatibility or at module "
         "level); found not bound"),
)

MUTANTS = (
    Mutant("min_ndim is off by one", "        if spec.min_ndim is not None and ndim < spec.min_ndim:\n",
           "        if spec.min_ndim is not None and ndim < spec.min_ndim - 1:\n"),
    Mutant("a None input passes a spec that is not optional", "        if x is None and spec.optional:\n",
           "        if x is None:\n"),
)


def runnable(text: str) -> str:
    """An input_spec.py of this module (BEFORE, AFTER) importing `backend` and `tree` from
    `tests.support.fake_backend` (which the unit test of the patch injects) instead of Keras."""
    return text.replace("from keras.src import ", "from tests.support.fake_backend import ")


INPUT_SPEC_PY = runnable(BEFORE)

#: Relative path -> text, merged into the synthetic source trees (tests/support/synthetic.py).
FILES: dict[str, str] = {"keras/src/layers/input_spec.py": INPUT_SPEC_PY}
