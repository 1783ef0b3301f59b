"""What `standardize-dtype-memo` inserts into `keras/src/backend/common/variables.py` and the
torch backend's core module.

Parsed by the engine, never imported. Each function's body is one piece (comments above a
function are notes, not inserted).
"""
# ruff: noqa


# Module level in variables.py, right after `def standardize_dtype`: the dtype class a backend
# registered and the name `standardize_dtype` gave each of its objects when it registered them.
# Until a backend registers one, the class is None: no object's type is None, so no call is
# answered from the memo.
def module_level():
    _STANDARDIZE_DTYPE_MEMO_TYPE = None  # forkgen: standardize-dtype-memo
    _STANDARDIZE_DTYPE_MEMO = {}  # forkgen: standardize-dtype-memo


# In `standardize_dtype`, right before `if dtype is None:` (after the exact-str fast path of
# dtype-fast-paths, when it is in): a registered dtype object gets the name computed for it at
# registration; any other argument, and a registered class's object left out of the memo,
# takes upstream's path.
def memo_lookup(dtype):
    if type(dtype) is _STANDARDIZE_DTYPE_MEMO_TYPE:  # forkgen: standardize-dtype-memo
        memoised = _STANDARDIZE_DTYPE_MEMO.get(dtype)
        if memoised is not None:
            return memoised


# At the end of the torch backend's core module, run once at its import: every `torch.dtype`
# object of the `torch` namespace with the name upstream's own `standardize_dtype` gives it
# (called before the class is registered, so it runs upstream's path); an object it rejects is
# left out, and keeps raising from upstream's path.
def register():
    # forkgen: standardize-dtype-memo
    def _standardize_dtype_memo_register():
        """Register `torch.dtype` with `standardize_dtype`'s memo: its objects are
    singletons compared by identity, and their names are fixed."""
        from keras.src.backend.common import variables as common_variables

        names = {}
        for value in list(vars(torch).values()):
            if type(value) is torch.dtype and value not in names:
                try:
                    names[value] = common_variables.standardize_dtype(value)
                except Exception:
                    continue
        common_variables._STANDARDIZE_DTYPE_MEMO.update(names)
        common_variables._STANDARDIZE_DTYPE_MEMO_TYPE = torch.dtype


    _standardize_dtype_memo_register()
