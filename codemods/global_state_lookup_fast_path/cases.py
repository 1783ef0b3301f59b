"""What `global-state-lookup-fast-path` makes of global_state.py modules shaped like Keras's (run
by tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch.

`FILES` holds a small `keras/src/backend/common/global_state.py` shaped like Keras's (written
for these tests; only the anchored statements follow Keras): `import threading` among the
leading imports, the tracker as a `threading.local()`, `set_global_attribute`,
`get_global_attribute` starting with `attr = getattr(GLOBAL_STATE_TRACKER, name, None)`, and a
`clear_session` that puts a new local in the tracker's place. It imports nothing from Keras, so
tests/unit/test_global_state_lookup_fast_path.py can execute it, patched or not, with `load_module`.
"""

import textwrap

from codemods.engine import Case, Mutant, piece_text

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

BEFORE = GLOBAL_STATE_PY

LOOKUP = "    attr = getattr(GLOBAL_STATE_TRACKER, name, None)\n"
MODULE_LEVEL = "\n" + piece_text(__file__, "module_level")
FAST = piece_text(__file__, "get_global_attribute_lookup", "    ", upstream=LOOKUP)
AFTER = BEFORE.replace("import threading\n", "import threading\n" + MODULE_LEVEL, 1).replace(LOOKUP, FAST, 1)
#: Other getattr calls on the tracker, the settings tracker and other functions stay as they are.
EXTRA = '''

def get_setting(name):
    return getattr(GLOBAL_SETTINGS_TRACKER, name, None)


def has_state(name):
    return getattr(GLOBAL_STATE_TRACKER, name, None) is not None
'''
COMMENTED = BEFORE.replace(LOOKUP, "    # read the state\n" + LOOKUP.replace("\n", "  # may be unset\n"), 1)
DOC = '"""Doc."""\n\nfrom __future__ import annotations\n\nimport threading\n'
FUTURE = DOC + BEFORE.split("import threading\n", 1)[1]


def _lookup(statement: str) -> str:
    return BEFORE.replace(LOOKUP, statement, 1)


CASES = (
    Case("the names before the tracker, the look-up in place of upstream's statement", BEFORE, AFTER,
         detail="get_global_attribute: a plain name from the per-thread dict",
         anchors=(("attr = getattr(GLOBAL_STATE_TRACKER, name, None)", 15), ("import threading", 4))),
    Case("nothing else changes", BEFORE + EXTRA, AFTER + EXTRA),
    Case("upstream's comments and a trailing comment stay with the statement", COMMENTED,
         AFTER.replace(FAST, "    # read the state\n" + FAST.replace(", None)\n", ", None)  # may be unset\n"), 1)),
    Case("a docstring and future imports keep their place", FUTURE,
         FUTURE.replace("import threading\n", "import threading\n" + MODULE_LEVEL, 1).replace(LOOKUP, FAST, 1)),
    *(Case(f"upstream reads the thread dict: {statement.strip()}", _lookup(statement), upstream=True) for statement in (
        "    attr = GLOBAL_STATE_TRACKER.__dict__.get(name)\n",
        "    attr = vars(GLOBAL_STATE_TRACKER).get(name, None)\n",
        "    tracker = GLOBAL_STATE_TRACKER\n    attr = tracker.__dict__.get(name)\n",
        "    if isinstance(name, str):\n        attr = GLOBAL_STATE_TRACKER.__dict__.get(name)\n"
        "    else:\n        attr = getattr(GLOBAL_STATE_TRACKER, name, None)\n",
    )),
    Case("a dict look-up on another object is not upstream's",
         _lookup("    attr = GLOBAL_SETTINGS_TRACKER.__dict__.get(name)\n"), drift="expected exactly one"),
    *(Case(f"drift: {name}", text, drift=drift) for name, text, drift in (
        ("no default", _lookup("    attr = getattr(GLOBAL_STATE_TRACKER, name)\n"),
         ":14: anchor 'attr = getattr(GLOBAL_STATE_TRACKER, name, None)': expected exactly one"),
        ("another default", _lookup("    attr = getattr(GLOBAL_STATE_TRACKER, name, default)\n"), ":14: anchor 'attr"),
        ("twice", _lookup(LOOKUP + LOOKUP), ":15: anchor 'attr = getattr(GLOBAL_STATE_TRACKER, name, None)'"),
        ("another statement on its line", _lookup("    attr = getattr(GLOBAL_STATE_TRACKER, name, None); x = 1\n"),
         ":14: anchor 'attr"),
        ("through another name", _lookup("    value = getattr(GLOBAL_STATE_TRACKER, name, None)\n    attr = value\n"),
         ":14: anchor 'attr"),
        ("tracker in use", _lookup("    tracker = None\n" + LOOKUP),
         ":16: anchor 'get_global_attribute: tracker': expected names free"),
        ("the function renamed", BEFORE.replace("def get_global_attribute(", "def get_attribute("),
         ":1: anchor 'get_global_attribute': expected exactly one def get_global_attribute"),
        ("no import threading", BEFORE.replace("import threading\n", "from threading import local\n")
         .replace("threading.local()", "local()"), "anchor 'GLOBAL_STATE_TRACKER = threading.local()'"),
        ("import threading twice", BEFORE.replace("import gc\n", "import gc\nimport threading\n"),
         ":4: anchor 'import threading': expected exactly one `import threading` at module level; found 2"),
        ("a name of forkgen's defined", BEFORE.replace("GLOBAL_SETTINGS_TRACKER = threading.local()\n",
                                                       "_forkgen_local_type = None\n"),
         ":7: anchor '_forkgen_local_type': expected names free for module_level"),
        ("the look-up without its names", AFTER.replace(MODULE_LEVEL, "", 1), "all pieces present or none"),
    )),
)

MUTANTS = (
    Mutant("the names a threading.local answers itself are read from its dict",
           "    if type(tracker) is _forkgen_local_type and type(name) is str and name not in _forkgen_local_names:\n",
           "    if type(tracker) is _forkgen_local_type and type(name) is str:\n"),
    Mutant("a missing name answers the default (set_to_default then stores nothing)",
           "        attr = tracker.__dict__.get(name)\n", "        attr = tracker.__dict__.get(name, default)\n"),
)
