"""What `global-state-lookup-fast-path` puts into keras/src/backend/common/global_state.py.

Parsed by the codemod, never imported. The body of `module_level` goes at module level right
after the module's leading imports (`threading` is the module's `import threading`). The body of
`get_global_attribute_lookup` takes the place of upstream's `attr = getattr(GLOBAL_STATE_TRACKER,
name, None)`, which the codemod keeps node for node where `UPSTREAM` stands. The comments are the
markers that tell the pieces are forkgen's.
"""
# ruff: noqa


def module_level():
    # forkgen: global-state-lookup-fast-path (the names a threading.local answers itself)
    _forkgen_local_type = threading.local
    _forkgen_local_names = frozenset((*dir(threading.local), "__dict__"))


def get_global_attribute_lookup(name):
    # forkgen: global-state-lookup-fast-path (any other str name: the calling thread's dict)
    tracker = GLOBAL_STATE_TRACKER
    if type(tracker) is _forkgen_local_type and type(name) is str and name not in _forkgen_local_names:
        attr = tracker.__dict__.get(name)
    else:
        UPSTREAM
