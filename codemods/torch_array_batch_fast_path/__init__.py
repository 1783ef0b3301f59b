"""Patch `torch-array-batch-fast-path` (ours, forkgen issue 26): on torch, the array data
adapter's `ArrayDataset.__getitems__` makes each batch of an exact NumPy array with upstream's
NumPy copies and its one `torch.as_tensor` call alone, and a flat tuple of them (`(x, y)`,
`(x, y, sample_weight)`) without the pytree walk.

Upstream (`keras/src/trainers/data_adapters/array_data_adapter.py`, 3.12.0-3.15.1 and
keras-nightly): `fit`/`evaluate`/`predict` on NumPy data iterate a torch `DataLoader` whose
dataset's `__getitems__(indices)` runs `tree.map_structure(slice_and_convert, self.array,
none_is_leaf=False)`; per leaf, `slice_and_convert` does `x = sliceable[indices]` (NumPy
fancy indexing: a new array), `sliceable.convert_to_torch_compatible(x)` (the identity for a
`NumpySliceable`) and the torch backend's `convert_to_tensor(x)`, which for an ndarray walks
its type tests, copies it again (`x = np.array(x)`), standardizes its dtype twice (the uint32
and bfloat16 tests, then `to_torch_dtype`: NumPy's slow `dtype.name`) and returns
`torch.as_tensor(x, dtype=to_torch_dtype(x.dtype), device=get_device())`. On the fork (torch
2.13 CPU, the MLP of /tmp/prof/loop.py, x (1024, 32) float32, y int64, batch 32), iterating the
epoch alone costs 53 us a batch of `(x, y)` and 27 us a batch of `x`; patched 28.5 and 21.

The patch puts a guarded fast path first in `slice_and_convert` (the leaf) and one before
`__getitems__`'s `return tree.map_structure(...)` (the flat tuple); when one does not return,
upstream's code below it runs unchanged.

Guards (side-effect free reads; nothing is computed before all pass). State, on every call:
`convert_to_tensor` (the closure's) is the module-level `convert_to_tensor` of the torch
backend's core module (`keras.src.backend.torch.core`, nightly `...torch.ops.core`: its
`__globals__`, its name), that module's `np` and `torch` are NumPy and torch, its
`to_torch_dtype` is its own and its `standardize_dtype` is `keras.src.backend.common.variables`'
(checked when the dtype table is made, on first use), and the seven names upstream's
conversion reads from it for an ndarray (`np`, `torch`, `Variable`, `is_tensor`,
`standardize_dtype`, `to_torch_dtype`, `get_device`) are still the objects the table was made
with; torch is not compiling (Dynamo then traces upstream's code); `NumpySliceable`'s MRO,
`__getattribute__` (object's), `__getitem__` (`Sliceable`'s, captured at import) and
`convert_to_torch_compatible` (`Sliceable`'s classmethod, captured) are as imported, and no
class of the two binds `array`. Leaf: `indices` is an exact list (NumPy's fancy indexing then gives an
ndarray, never a NumPy scalar: `convert_to_tensor` takes a float64 or complex128 scalar for a
Python float or complex and casts it to floatx), `type(sliceable) is NumpySliceable`, its instance dict
does not shadow `convert_to_torch_compatible`, its `array` is an exact `np.ndarray` whose
`dtype` is the very builtin dtype object of one of bool, int8, int16, int32, int64, uint8,
uint16, float16, float32, float64, complex64, complex128 for which `to_torch_dtype` answered
(uint32 and bfloat16 are cast by upstream, others refused: upstream's path). Flat tuple: also
`type(self.array) is tuple`, `indices`' items exact ints (no user `__index__`, so no
code that could raise StopIteration inside torch's `map`), every leaf passes, and the torch
tree is upstream's: `tree.map_structure`, the tree impl (`keras.src.tree.torchtree_impl`, the
torch backend), its `is_nested`, `map_structure` and torch's `tree_map` are those captured at
import, `tuple` is a pytree node and `NumpySliceable` is not.

Why the batches are identical. For such a leaf upstream computes `b = array[indices]`
(`Sliceable.__getitem__`: `self.array[indices]`, the instance's attribute), returns it from
`convert_to_torch_compatible`, and in `convert_to_tensor(b)` (3.12.0-3.15.1 and nightly alike
for an ndarray with no dtype, sparse or ragged): not a `Variable` nor a torch tensor, not a
Python scalar nor a SymInt/SymFloat, so `x = np.array(b)`; its dtype is b's builtin dtype, not
uint32 nor bfloat16, so `dtype = x.dtype` and `torch.as_tensor(x, dtype=to_torch_dtype(dtype),
device=get_device())`. `to_torch_dtype` of a builtin NumPy dtype is a pure function of it
(`TORCH_DTYPES[standardize_dtype(d)]`, `standardize_dtype` reading `d.name` and module constants
Keras never writes), so the table holds its answer. The fast path evaluates `np.array(array[
indices])`, then `get_device()` (the core module's, read at call time as upstream reads it),
then calls `torch.as_tensor` with the same arguments: the same NumPy copies and the same one
torch call, in upstream's order, so the tensor has the same values, dtype, device, strides
and kind (it shares memory with a fresh copy nobody else holds, as upstream's), and any error
(an index out of range) is NumPy's or torch's own from the same call. On the torch tree,
`map_structure(f, t, none_is_leaf=False)` for an exact tuple `t` of such leaves flattens `t`
into its items (tuple node; a NumpySliceable is a leaf), maps `func_skipping_none` (which calls
`f`: no item is None) over them in order and unflattens into `tuple(results)`: exactly what the
fast path returns, computing the leaves in the same order. No randomness is drawn: the samplers
(`RandomSampler`, `SequentialSampler`, the "batch" shuffler) and the `DataLoader` are untouched
and consume the torch and NumPy generators exactly as before.

Not guarded, because no code does it: the module constants behind `to_torch_dtype`
(`TORCH_DTYPES`, `ALLOWED_DTYPES`, `PYTHON_DTYPES_MAP`) mutated after the first batch; torch's
pytree internals other than `tree_map` (its registry is checked) or `np.array`/`torch.as_tensor`
replaced (the fast path calls them too). The torch core's `convert_to_tensor` is not an anchor
of this patch (the series' `torch-convert-to-tensor-*` patches edit its tensor branch only; its
ndarray path, compared by hand, is the same in 3.12.0-3.15.1 and keras-nightly, and the
equivalence test holds the installed release to upstream's own code).

Left out: nested structures' walk (a dict of inputs: its leaves take the leaf fast path, the
pytree walk stays), torch tensors, pandas, memmaps, uint32/bfloat16 arrays (upstream's path);
one index array shared by all leaves and slices for SequentialSampler's contiguous batches
(about 1-2 us a leaf, a proof about layouts and index conversion for little); the
`DataLoader`'s own per-batch work (its `record_function`, sampler and fetcher: torch's, and a
user-visible object) and `EpochIterator.__next__`'s context manager (about 1 us).

Applies from 3.12.0 (`since`), the first release whose `__getitems__` passes
`none_is_leaf=False` (3.12.0-3.15.1 have the same file). keras-nightly's `__getitems__` is the
same and imports `convert_to_tensor` from `backend/torch/ops/core.py`: applied there too. No
switch: the fast paths keep no state but the dtype table.
"""

from __future__ import annotations

from codemods.engine import Anchor, Append, DeclaredPatch, Details, Headers, InsertBefore, Prepend

ADAPTER_PY = "keras/src/trainers/data_adapters/array_data_adapter.py"
SLICING_PY = "keras/src/trainers/data_adapters/array_slicing.py"
DATASET = "ArrayDataAdapter.get_torch_dataloader.ArrayDataset"
GETITEMS = f"{DATASET}.__getitems__"
RETURN = "return tree.map_structure(slice_and_convert, self.array, none_is_leaf=False)"
RETURN_LABEL = "ArrayDataset.__getitems__: return tree.map_structure(...)"
LEAF_LABEL = "ArrayDataset.__getitems__.slice_and_convert"
#: Upstream's `__getitems__`, 3.12.0-3.15.1 and keras-nightly (`{}`: where a fast path is, once in).
GETITEMS_BODY = """
def __getitems__(self, indices):
    def slice_and_convert(sliceable):{}
        x = sliceable[indices]
        x = sliceable.convert_to_torch_compatible(x)
        x = convert_to_tensor(x)
        return x
{}
    return tree.map_structure(slice_and_convert, self.array, none_is_leaf=False)
"""
APPLIED_LEAF = "\n        __\n        if __: ___"
APPLIED_TUPLE = "    __\n    if __: ___\n"


class TorchArrayBatchFastPath(DeclaredPatch):
    name = "torch-array-batch-fast-path"
    version = "1"
    headers = Headers(
        description="torch: the array data adapter's ArrayDataset.__getitems__ makes an exact NumPy array's "
        "batch with upstream's NumPy copies and torch.as_tensor call alone, and a flat tuple of them without "
        "the pytree walk.",
        origin="ours", bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed", applied_upstream=None, last_update="2026-12-05",
    )
    files = (ADAPTER_PY,)
    since = "3.12.0"
    edits = (
        Prepend(f"{GETITEMS}.slice_and_convert", "leaf_fast_path", description="the leaf fast path ({state})"),
        InsertBefore(Anchor(GETITEMS, RETURN, name=RETURN_LABEL), "tuple_fast_path", label=RETURN_LABEL),
        Append("helpers", label="the helpers"),
    )
    #: The code the fast paths mirror (with them in, once applied) and the names they read.
    relies_on = (
        Anchor(DATASET, GETITEMS_BODY.format("", ""), name="ArrayDataset.__getitems__ (3.12.0+)", reported=False,
               alternatives=(GETITEMS_BODY.format(APPLIED_LEAF, APPLIED_TUPLE),)),
        Anchor("ArrayDataAdapter.get_torch_dataloader", "from keras.src.backend.torch.core import convert_to_tensor",
               alternatives=("from keras.src.backend.torch.ops.core import convert_to_tensor",), reported=False),
        Anchor("", "import numpy as np", reported=False),
        Anchor("", "from keras.src import tree", reported=False),
        Anchor("", "from keras.src.trainers.data_adapters import array_slicing", reported=False),
        Anchor("Sliceable", "def __getitem__(self, indices):\n    __\n    return self.array[indices]",
               path=SLICING_PY, reported=False, name="Sliceable.__getitem__ returns self.array[indices]"),
        Anchor("Sliceable", "@classmethod\ndef convert_to_torch_compatible(cls, x):\n    __\n    return x",
               path=SLICING_PY, reported=False, name="Sliceable.convert_to_torch_compatible returns x"),
        Anchor("", "class NumpySliceable(Sliceable):\n    pass", path=SLICING_PY, reported=False,
               name="class NumpySliceable(Sliceable): pass"),
    )
    #: The enclosing functions' names the pieces read (the engine looks in the piece's own function
    #: and the module): both relied-on anchors above bind them there.
    names = {
        "indices": "__getitems__'s parameter, read by the nested slice_and_convert as upstream's code reads it",
        "convert_to_tensor": "get_torch_dataloader's import, read by the nested functions as upstream's code reads it",
    }
    details = Details(apply="NumPy batch fast paths in ArrayDataset.__getitems__",
                      present="ArrayDataset.__getitems__ has the NumPy batch fast paths (forkgen)", upstream="")


PATCH = TorchArrayBatchFastPath()
TorchArrayBatchFastPathCommand = PATCH.command
