"""What `torch-array-batch-fast-path` puts into keras/src/trainers/data_adapters/array_data_adapter.py.

Parsed by the codemod, never imported. The body of `leaf_fast_path` goes first in
`slice_and_convert` (nested in `ArrayDataAdapter.get_torch_dataloader`'s `ArrayDataset.__getitems__`),
the body of `tuple_fast_path` right before `__getitems__`'s `return tree.map_structure(...)`; when a
fast path does not return, upstream's code below it runs unchanged. The body of `helpers` goes at
the end of the module. The comments are the markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def leaf_fast_path(sliceable, indices, convert_to_tensor):
    # forkgen: torch-array-batch-fast-path (an exact NumPy array: upstream's copies and torch.as_tensor alone)
    fast_batch = _forkgen_numpy_batch(sliceable, indices, convert_to_tensor)
    if fast_batch is not None:
        return fast_batch


def tuple_fast_path(self, indices, convert_to_tensor):
    # forkgen: torch-array-batch-fast-path (a flat tuple of exact NumPy arrays: each leaf's batch, no tree walk)
    fast_batches = _forkgen_numpy_batches(self.array, indices, convert_to_tensor)
    if fast_batches is not None:
        return fast_batches


def helpers():
    # forkgen: torch-array-batch-fast-path (what ArrayDataset.__getitems__'s fast paths rely on)
    _forkgen_numpy_sliceable = array_slicing.NumpySliceable
    _FORKGEN_NUMPY_SLICEABLE = (
        array_slicing.NumpySliceable.__mro__,
        array_slicing.Sliceable.__getitem__,
        array_slicing.Sliceable.__dict__.get("convert_to_torch_compatible"),
    )
    _forkgen_tree_impl = getattr(getattr(tree, "tree_api", None), "tree_impl", None)
    if getattr(_forkgen_tree_impl, "__name__", None) == "keras.src.tree.torchtree_impl":
        #: What upstream's `tree.map_structure` calls on the torch tree (torch backend).
        _FORKGEN_TORCH_TREE = (
            tree.map_structure, _forkgen_tree_impl.is_nested, _forkgen_tree_impl.map_structure,
            _forkgen_tree_impl.torch_tree.tree_map,
        )
    else:
        _FORKGEN_TORCH_TREE = None
    #: The NumPy dtypes whose arrays upstream's torch `convert_to_tensor` neither casts (uint32,
    #: bfloat16) nor refuses: `torch.as_tensor(np.array(x), dtype=to_torch_dtype(x.dtype), ...)`.
    _FORKGEN_BATCH_DTYPES = (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
        "float16", "float32", "float64", "complex64", "complex128",
    )
    _FORKGEN_TORCH_CORES = ("keras.src.backend.torch.core", "keras.src.backend.torch.ops.core")
    _forkgen_batch_states = {}


    def _forkgen_batch_setup(convert):
        """`(core globals, what upstream's conversion reads from them, dtype table, torch)` when
    `convert` is the torch backend's own module-level `convert_to_tensor`; else None. The table
    maps each builtin NumPy dtype above to `(dtype, to_torch_dtype(dtype))`."""
        import torch

        core = getattr(convert, "__globals__", None)
        if (
            type(core) is not dict
            or core.get("__name__") not in _FORKGEN_TORCH_CORES
            or core.get("convert_to_tensor") is not convert
            or getattr(getattr(convert, "__code__", None), "co_name", None) != "convert_to_tensor"
            or core.get("np") is not np
            or core.get("torch") is not torch
            or not callable(getattr(getattr(torch, "compiler", None), "is_compiling", None))
        ):
            return None
        to_torch_dtype = core.get("to_torch_dtype")
        standardize_dtype = core.get("standardize_dtype")
        if (
            getattr(to_torch_dtype, "__globals__", None) is not core
            or to_torch_dtype.__code__.co_name != "to_torch_dtype"
            or getattr(standardize_dtype, "__globals__", {}).get("__name__") != "keras.src.backend.common.variables"
            or standardize_dtype.__code__.co_name != "standardize_dtype"
        ):
            return None
        dtypes = {}
        for name in _FORKGEN_BATCH_DTYPES:
            dtype = np.dtype(name)
            try:
                dtypes[dtype] = (dtype, to_torch_dtype(dtype))
            except Exception:
                continue
        return core, _forkgen_batch_reads(core), dtypes, torch


    def _forkgen_batch_reads(core):
        """The names upstream's `convert_to_tensor` reads from its module for a NumPy array."""
        return (
            core.get("np"), core.get("torch"), core.get("Variable"), core.get("is_tensor"),
            core.get("standardize_dtype"), core.get("to_torch_dtype"), core.get("get_device"),
        )


    def _forkgen_batch_state(convert):
        """The state of `convert` (`_forkgen_batch_setup`, made on first use) while what upstream's
    conversion reads is what the table was made with, NumpySliceable and Sliceable are as
    imported, and torch is not compiling (Dynamo then traces upstream's code); else None."""
        if type(convert) is not type(_forkgen_batch_setup):
            return None  # not a Python function (maybe not even hashable): upstream's path
        state = _forkgen_batch_states.get(convert, False)
        if state is False:
            state = _forkgen_batch_setup(convert)
            if len(_forkgen_batch_states) < 8:
                _forkgen_batch_states[convert] = state
        if state is None:
            return None
        core, reads, _, torch = state
        now = _forkgen_batch_reads(core)
        for read, was in zip(now, reads):
            if read is not was:
                return None
        if torch.compiler.is_compiling():
            return None
        cls = _forkgen_numpy_sliceable
        mro, getitem, to_torch_compatible = _FORKGEN_NUMPY_SLICEABLE
        if (
            cls.__mro__ is not mro
            or cls.__getattribute__ is not object.__getattribute__
            or cls.__getitem__ is not getitem
            or "convert_to_torch_compatible" in cls.__dict__
            or array_slicing.Sliceable.__dict__.get("convert_to_torch_compatible") is not to_torch_compatible
            or "array" in cls.__dict__
            or "array" in array_slicing.Sliceable.__dict__
        ):
            return None
        return state


    def _forkgen_numpy_leaf(sliceable, dtypes):
        """`(array, torch dtype)` of an exact NumpySliceable over an exact ndarray of a dtype in
    `dtypes` (the very builtin dtype object), its `convert_to_torch_compatible` not shadowed; else None."""
        if type(sliceable) is not _forkgen_numpy_sliceable:
            return None
        own = sliceable.__dict__
        if "convert_to_torch_compatible" in own:
            return None
        array = own.get("array")
        if type(array) is not np.ndarray:
            return None
        dtype = array.dtype
        entry = dtypes.get(dtype)
        if entry is None or entry[0] is not dtype:
            return None
        return array, entry[1]


    def _forkgen_numpy_batch(sliceable, indices, convert):
        """Upstream's `convert(sliceable.convert_to_torch_compatible(sliceable[indices]))` for an
    exact NumPy array that conversion would neither cast nor refuse, indexed by a list (NumPy's
    fancy indexing: an array, never a NumPy scalar, which the conversion treats otherwise), with
    the same NumPy and torch calls in the same order; else None."""
        if type(indices) is not list:
            return None
        state = _forkgen_batch_state(convert)
        if state is None:
            return None
        leaf = _forkgen_numpy_leaf(sliceable, state[2])
        if leaf is None:
            return None
        array, torch_dtype = leaf
        return state[3].as_tensor(np.array(array[indices]), dtype=torch_dtype, device=state[0]["get_device"]())


    def _forkgen_numpy_batches(arrays, indices, convert):
        """Upstream's `tree.map_structure(slice_and_convert, arrays, none_is_leaf=False)` for a
    flat tuple of leaves `_forkgen_numpy_batch` takes, indexed by a list of exact ints, on the
    torch tree (a tuple of each leaf's batch, in order); else None."""
        if type(arrays) is not tuple or type(indices) is not list:
            return None
        for index in indices:
            if type(index) is not int:
                return None
        torch_tree = _FORKGEN_TORCH_TREE
        impl = _forkgen_tree_impl
        if (
            torch_tree is None
            or tree.map_structure is not torch_tree[0]
            or tree.tree_api.tree_impl is not impl
            or impl.is_nested is not torch_tree[1]
            or impl.map_structure is not torch_tree[2]
            or impl.torch_tree.tree_map is not torch_tree[3]
        ):
            return None
        nodes = impl.torch_tree.SUPPORTED_NODES
        if type(nodes) is not dict or tuple not in nodes or _forkgen_numpy_sliceable in nodes:
            return None
        state = _forkgen_batch_state(convert)
        if state is None:
            return None
        dtypes = state[2]
        leaves = []
        for sliceable in arrays:
            leaf = _forkgen_numpy_leaf(sliceable, dtypes)
            if leaf is None:
                return None
            leaves.append(leaf)
        torch = state[3]
        core = state[0]
        batches = []
        for array, torch_dtype in leaves:
            batches.append(torch.as_tensor(np.array(array[indices]), dtype=torch_dtype, device=core["get_device"]()))
        return tuple(batches)
