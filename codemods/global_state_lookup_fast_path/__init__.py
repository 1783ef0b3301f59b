"""Patch `global-state-lookup-fast-path` (ours, not upstream): `get_global_attribute` reads a
plain `str` name of the `threading.local` tracker from the calling thread's dict of the local.

Keras keeps its global state (`stateless_scope`, `autocast_scope`, `torch_device`, the name
scopes, ...) as attributes of `GLOBAL_STATE_TRACKER`, a `threading.local()` that
`clear_session` replaces, and `get_global_attribute(name, default=None, set_to_default=False)`
starts with `attr = getattr(GLOBAL_STATE_TRACKER, name, None)`. Most of these look-ups miss in
eager code (the scopes are not entered), and a miss makes `getattr` raise and swallow an
AttributeError in C. Measured on the built fork (2-core CPU, CPython 3.11, torch 2.13 CPU, same
process): a miss 0.35 us with 3.15.1's statement, 0.09 us with the patch; a hit 0.07 us against
0.09 us. A 4-layer Dense MLP's `model(x)` makes 121 look-ups, 102 of them misses: 224 us with
3.15.1's look-up, 202 us with the patch (-10%, medians of interleaved rounds).
keras-team/keras#22561 is about that overhead.

What the patch carries: upstream's statement becomes

    tracker = GLOBAL_STATE_TRACKER
    if type(tracker) is _forkgen_local_type and type(name) is str and name not in _forkgen_local_names:
        attr = tracker.__dict__.get(name)
    else:
        attr = getattr(GLOBAL_STATE_TRACKER, name, None)   # upstream's statement, unchanged

with, at module level after the imports, `_forkgen_local_type = threading.local` and
`_forkgen_local_names = frozenset((*dir(threading.local), "__dict__"))`.

Why it is exact. On an object whose type is exactly `threading.local` (CPython's
`_thread._local`), attribute look-up (`local_getattro`) first creates the calling thread's dict
if this thread has none (as `tracker.__dict__` does, by the same function), answers `__dict__`
with that dict, then looks the name up in that dict, then falls back on the generic look-up
over the type's MRO (`_thread._local`, `object`: immutable types whose attributes are exactly
`dir(threading.local)`), which finds nothing else for a name outside the type. So for an exact
`str` name that is neither `__dict__` nor in `dir(threading.local)`, `getattr(tracker, name,
None)` is the thread dict's value or None: `tracker.__dict__.get(name)`. (`__dict__` is not in
`dir(threading.local)`, hence the explicit addition.) Everything else keeps upstream's statement:
the names the type answers (dunders, also when a per-thread value shadows one), `str`
subclasses (their own `__eq__`/`__hash__`), non-`str` names (upstream's TypeError), and a
tracker that is not exactly a `threading.local` (a subclass, or an object someone put in its
place). The tracker is read once, as upstream reads it once; the `else` reads it again through
upstream's own statement, which changes nothing observable. (One difference is left, reachable
only by writing a non-`str` key with an `__eq__` of its own straight into the thread's dict
(`tracker.__dict__[key] = ...`; `setattr` takes `str` names only): on a miss whose hash collides
with it, upstream compares it twice, the patch once.) The same reasoning holds for the
pure-Python `_threading_local.local` fallback, whose `__dict__` is a slot in its `dir`.

Not carried: nothing upstream (an upstream proposal to inline the look-ups at their call sites
was closed); `set_global_attribute` and the other readers of the tracker are left as they are.

Applies to every release 3.0.0-3.15.1 and to keras-nightly 3.16.0.dev2026102704: all have
this `get_global_attribute` and `import threading` (no `since`). "Already upstream" is a
`get_global_attribute` that reads `GLOBAL_STATE_TRACKER.__dict__.get(name)` (or `vars(...)`,
or through a local `tracker`) without forkgen's marker. No switch: the patched look-up keeps no
state and returns what upstream's does for every input.
"""

from __future__ import annotations

from codemods.engine import Anchor, DeclaredPatch, Details, Headers, Helper, Replace

GLOBAL_STATE_PY = "keras/src/backend/common/global_state.py"
FUNCTION = "get_global_attribute"
DICT_GET = "GLOBAL_STATE_TRACKER.__dict__.get(name)"


class GlobalStateLookupFastPath(DeclaredPatch):
    name = "global-state-lookup-fast-path"
    version = "1"
    headers = Headers(
        description="get_global_attribute reads a plain str name of the threading.local tracker from "
        "the calling thread's dict instead of getattr, which raises and swallows AttributeError on a miss.",
        origin="ours",
        bug="https://github.com/keras-team/keras/issues/22561",
        forwarded="not-needed",
        applied_upstream=None,
        last_update="2026-12-01",
    )
    files = (GLOBAL_STATE_PY,)
    #: Upstream's change, where a release has it, is the piece in its words, without the marker.
    upstream_forms = True
    #: Upstream's look-up goes in the `else` of inserted.py's guarded look-up; the local type and
    #: its names go at module level right before the tracker's `threading.local()` (after the
    #: imports, which `import threading` must be among as the tracker needs it).
    edits = (
        Replace(Anchor(FUNCTION, "attr = getattr(GLOBAL_STATE_TRACKER, name, None)",
                       description="a plain str name is read from the calling thread's dict of the local"),
                "get_global_attribute_lookup", rebinds=("attr",)),
        Helper(Anchor("", "GLOBAL_STATE_TRACKER = threading.local()", reported=False), "module_level",
               blank_lines=1, before=True),
    )
    relies_on = (Anchor("", "import threading", description="_forkgen_local_type and _forkgen_local_names go after the imports"),)
    #: Upstream reading the per-thread dict itself, through the tracker or a `tracker` alias.
    upstream_patterns = (
        Anchor(FUNCTION, "GLOBAL_STATE_TRACKER.__dict__.get(name, ___)", expression=True, name=DICT_GET,
               description=f"{FUNCTION} reads the per-thread dict (upstream)",
               alternatives=("vars(GLOBAL_STATE_TRACKER).get(name, ___)", "tracker.__dict__.get(name, ___)",
                             "vars(tracker).get(name, ___)")),
    )
    details = Details(
        apply="get_global_attribute: a plain name from the per-thread dict",
        present="the global-state look-up fast path is in (forkgen)",
        upstream="get_global_attribute reads the per-thread dict",
    )


PATCH = GlobalStateLookupFastPath()
GlobalStateLookupFastPathCommand = PATCH.command
