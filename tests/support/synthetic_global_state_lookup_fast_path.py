"""The synthetic file `global-state-lookup-fast-path` anchors on.

`FILES` holds a small `keras/src/backend/common/global_state.py` shaped like Keras's (written
for these tests; only the anchored statements follow Keras): `import threading` among the
leading imports, the tracker as a `threading.local()`, `set_global_attribute`,
`get_global_attribute` starting with `attr = getattr(GLOBAL_STATE_TRACKER, name, None)`, and a
`clear_session` that puts a new local in the tracker's place. It imports nothing from Keras, so
the tests can execute it, patched or not, with `load_module`.
"""

from __future__ import annotations

import textwrap

PATH = "keras/src/backend/common/global_state.py"

GLOBAL_STATE_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/common/global_state.py."""

    import gc
    import threading

    GLOBAL_STATE_TRACKER = threading.local()
    GLOBAL_SETTINGS_TRACKER = threading.local()


    def set_global_attribute(name, value):
        setattr(GLOBAL_STATE_TRACKER, name, value)


    def get_global_attribute(name, default=None, set_to_default=False):
        attr = getattr(GLOBAL_STATE_TRACKER, name, None)
        if attr is None and default is not None:
            attr = default
            if set_to_default:
                set_global_attribute(name, attr)
        return attr


    def clear_session(free_memory=True):
        # Every piece of state goes with the old trackers.
        global GLOBAL_STATE_TRACKER
        global GLOBAL_SETTINGS_TRACKER

        GLOBAL_STATE_TRACKER = threading.local()
        GLOBAL_SETTINGS_TRACKER = threading.local()
        if free_memory:
            gc.collect()
    '''
)

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the module too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/common/__init__.py": "",
    PATH: GLOBAL_STATE_PY,
}
