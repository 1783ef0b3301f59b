"""What `torch-array-batch-fast-path` makes of modules shaped like Keras's array_data_adapter.py
and array_slicing.py (run by tests/unit/test_patch_cases.py), and the breaks of its inserted code
the equivalence suite must catch. The modules are ours: only the anchored statements follow Keras."""

from codemods.engine import Case, Mutant, piece_text

ADAPTER = "keras/src/trainers/data_adapters/array_data_adapter.py"
SLICING = "keras/src/trainers/data_adapters/array_slicing.py"
BEFORE = '''\
import numpy as np

from keras.src import tree
from keras.src.trainers.data_adapters import array_slicing


class ArrayDataAdapter:
    def __init__(self, inputs):
        self._inputs = inputs

    def get_torch_dataloader(self):
        import torch

        from keras.src.backend.torch.core import convert_to_tensor

        class ArrayDataset(torch.utils.data.Dataset):
            def __init__(self, array):
                self.array = array

            def __getitems__(self, indices):
                def slice_and_convert(sliceable):
                    x = sliceable[indices]
                    x = sliceable.convert_to_torch_compatible(x)
                    x = convert_to_tensor(x)
                    return x

                return tree.map_structure(
                    slice_and_convert, self.array, none_is_leaf=False
                )

        inputs = array_slicing.convert_to_sliceable(self._inputs)
        return torch.utils.data.DataLoader(ArrayDataset(inputs), batch_size=None)
'''
SLICING_PY = '''\
class Sliceable:
    def __init__(self, array):
        self.array = array

    def __getitem__(self, indices):
        """The rows at `indices`."""
        return self.array[indices]

    @classmethod
    def convert_to_torch_compatible(cls, x):
        """As it is."""
        return x


class NumpySliceable(Sliceable):
    pass


def convert_to_sliceable(arrays):
    return NumpySliceable(arrays)
'''
LEAF = piece_text(__file__, "leaf_fast_path", " " * 20)
TUPLE = piece_text(__file__, "tuple_fast_path", " " * 16)
HELPERS = "\n\n" + piece_text(__file__, "helpers")


def _after(before: str = BEFORE) -> str:
    text = before.replace("                    x = sliceable[indices]\n", LEAF + "                    x = sliceable[indices]\n")
    text = text.replace("                return tree.map_structure(\n", TUPLE + "                return tree.map_structure(\n")
    return text + HELPERS


AFTER = _after()
assert AFTER.count("# forkgen:") == 3
NIGHTLY = BEFORE.replace("backend.torch.core import", "backend.torch.ops.core import")
SHAPE = "anchor 'ArrayDataset.__getitems__ (3.12.0+)': expected exactly one"


def tree(adapter: str, slicing: str = SLICING_PY) -> dict[str, str]:
    return {ADAPTER: adapter, SLICING: slicing}


def _drift(name: str, old: str, new: str, drift: str = SHAPE, slicing: bool = False) -> Case:
    text = SLICING_PY if slicing else BEFORE
    assert text.count(old) == 1, old
    changed = text.replace(old, new)
    return Case(name, tree(BEFORE, changed) if slicing else tree(changed), drift=drift)


LEAF_LABEL = "ArrayDataAdapter.get_torch_dataloader.ArrayDataset.__getitems__.slice_and_convert: first statement"
RETURN_LABEL = "ArrayDataset.__getitems__: return tree.map_structure(...)"

CASES = (
    Case("the leaf fast path first in slice_and_convert, the tuple one above the walk, the helpers at the end",
         tree(BEFORE), {ADAPTER: AFTER}, detail="NumPy batch fast paths in ArrayDataset.__getitems__",
         anchors=((LEAF_LABEL, 21), (RETURN_LABEL, 27))),
    Case("keras-nightly's import of convert_to_tensor from torch/ops/core.py", tree(NIGHTLY),
         {ADAPTER: _after(NIGHTLY)}),
    _drift("3.11's walk: None entries handed to slice_and_convert", ", none_is_leaf=False", "",
           "anchor 'ArrayDataset.__getitems__: return tree.map_structure(...)': expected exactly one"),
    _drift("a conversion with a dtype", "x = convert_to_tensor(x)", 'x = convert_to_tensor(x, dtype="float32")'),
    _drift("a step between the slice and the conversion", "                    x = sliceable.convert_to_torch_compatible(x)\n",
           "                    x = sliceable.convert_to_torch_compatible(x)\n                    x = np.asarray(x)\n"),
    _drift("convert_to_tensor imported from elsewhere", "from keras.src.backend.torch.core import convert_to_tensor",
           "from keras.src.backend.torch.numpy import convert_to_tensor",
           "anchor 'from keras.src.backend.torch.core import convert_to_tensor': expected exactly one"),
    _drift("no numpy import", "import numpy as np\n", "import numpy\n",
           "anchor 'np': expected bound where helpers goes"),
    _drift("Sliceable slicing otherwise", "return self.array[indices]", "return self.array[indices, ...]",
           "anchor 'Sliceable.__getitem__ returns self.array[indices]': expected exactly one", slicing=True),
    _drift("a conversion of its own for NumPy arrays", "class NumpySliceable(Sliceable):\n    pass\n",
           "class NumpySliceable(Sliceable):\n    @classmethod\n    def convert_to_torch_compatible(cls, x):\n"
           "        return x.copy()\n",
           "anchor 'class NumpySliceable(Sliceable): pass': expected exactly one", slicing=True),
    Case("a helper name taken", tree(BEFORE + "\n_forkgen_numpy_batch = None\n"),
         drift="expected names free for helpers (forkgen's helper); found already bound"),
    Case("half applied", tree(AFTER.replace(HELPERS, "\n")), drift="expected all pieces present or none"),
    Case("an unmarked fast path is not upstream's",
         tree(AFTER.replace("# forkgen: torch-array-batch-fast-path (an exact", "# (an exact")),
         drift="expected to edit, or edited by forkgen; found an edited form without forkgen's marker"),
)

MUTANTS = (
    Mutant("a sliceable's own convert_to_torch_compatible skipped (the instance-dict guard dropped)",
           '        if "convert_to_torch_compatible" in own:\n            return None\n', ""),
    Mutant("a conversion table kept after torch core's names changed (the reads check dropped)",
           "            if read is not was:\n                return None\n", "            pass\n"),
    Mutant("a NumPy float64 scalar converted as an array (the leaf's list guard dropped)",
           "        if type(indices) is not list:\n            return None\n        state = _forkgen_batch_state(convert)\n",
           "        state = _forkgen_batch_state(convert)\n"),
    Mutant("a namedtuple flattened into a tuple (exact tuple guard loosened)",
           "        if type(arrays) is not tuple or type(indices) is not list:",
           "        if not isinstance(arrays, tuple) or type(indices) is not list:"),
)


#: The synthetic files of the series' whole synthetic tree (tests/support/synthetic.py).
FILES = {
    "keras/src/trainers/__init__.py": "",
    "keras/src/trainers/data_adapters/__init__.py": "",
    ADAPTER: BEFORE,
    SLICING: SLICING_PY,
}
