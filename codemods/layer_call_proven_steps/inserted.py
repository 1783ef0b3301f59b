"""What `layer-call-proven-steps` inserts into keras/src/layers/layer.py.

Parsed by the engine, never imported. Each function's body is one piece: `UPSTREAM` stands
for upstream's statement (or run), kept node for node; `__table` is the table of proven classes
the patch derives from the release's code at build time (`LayerCallProvenSteps.fill`).
"""
# ruff: noqa


def proven(self, fast_lane, original_kwargs):
    # forkgen: layer-call-proven-steps (the steps this exact class's call() provably never reads)
    proven_steps = 0
    if fast_lane and not original_kwargs and _layer_call_proven_classes.get(type(self), True) is not None:
        proven_steps = _layer_call_proven_steps(self)


def call_context(self, proven_steps):
    if proven_steps & 2:  # forkgen: layer-call-proven-steps
        if global_state.get_global_attribute("current_call_ctx") is None:
            self._clear_losses()  # what the outermost call's context step does that call() may see
    else:
        UPSTREAM


def name_scope(proven_steps):
    if (_LAYER_CALL_PROVEN_NO_SCOPE if proven_steps & 1 else UPSTREAM):  # forkgen: layer-call-proven-steps
        UPSTREAM


def autocast(self, proven_steps, args, kwargs):
    if proven_steps & 4:  # forkgen: layer-call-proven-steps
        outputs = super().__call__(*args, **kwargs)
    else:
        UPSTREAM


def reset(proven_steps):
    if not proven_steps & 2:  # forkgen: layer-call-proven-steps
        UPSTREAM


def helper():
    # forkgen: layer-call-proven-steps
    import contextlib as _layer_call_proven_contextlib
    import sys as _layer_call_proven_sys
    import types as _layer_call_proven_types

    #: Per Layer subclass of this release (module.qualname): the steps of `Layer.__call__` its
    #: call() provably never reads (bits: 1 name scope, 2 call context, 4 autocast), the names no
    #: instance attribute may shadow, the modules whose attributes must be those it was analysed
    #: with, and the stored callables each step's proof is conditional on (attribute, steps,
    #: functions). Derived at build time from the release's code (`forkgen effects`, torch).
    _LAYER_CALL_PROVEN_TABLE = __table
    _LAYER_CALL_PROVEN_NO_SCOPE = _layer_call_proven_contextlib.nullcontext()
    #: The dtype policy class the proofs assumed (a subclass may quantize or autocast otherwise).
    _LAYER_CALL_PROVEN_POLICY = "keras.src.dtype_policies.dtype_policy.DTypePolicy"
    #: Per class met: its entry, resolved (None: no step proven, or a check failed).
    _layer_call_proven_classes = {}
    #: Moves whenever a module a proof relies on is written to after its import (a dict watcher's
    #: count, in a list: a write to this module's own dict would wake the watcher again).
    _layer_call_proven_generation = [0]
    #: (id of a module's dict, a key written after the module's import finished): what the key held
    #: then (`_LAYER_CALL_PROVEN_MISSING`: nothing); key None: the dict was cleared or replaced wholesale.
    _layer_call_proven_originals = {}
    _LAYER_CALL_PROVEN_MISSING = object()

    def _layer_call_proven_replaceable(value):
        """What a monkeypatch replaces: a callable or a module (a module's data, such as
    `global_state`'s trackers that `clear_session()` rebinds, is read as the analysed code reads it)."""
        return callable(value) or isinstance(value, _layer_call_proven_types.ModuleType)

    def _layer_call_proven_watcher():
        """Whether every module a proof may rely on is watched from the end of its import on: a
    dict watcher (CPython 3.12 and later, through its C API) sees each later write to such a
    module (a user's monkeypatch), keeps what the key held before it and moves the generation.
    False where the interpreter has no dict watcher (3.11, another implementation): no class is
    then proven, since a monkeypatch could not be seen."""
        try:
            import atexit
            import ctypes

            api = ctypes.pythonapi
            add, watch, clear = api.PyDict_AddWatcher, api.PyDict_Watch, api.PyDict_ClearWatcher
        except (ImportError, AttributeError, OSError):
            return False
        relied = {name for entry in _LAYER_CALL_PROVEN_TABLE.values() for name in entry[2]}
        if not relied:  # nothing proven: nothing to watch
            return False
        modules = _layer_call_proven_sys.modules
        callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                         ctypes.c_void_p)
        as_object = ctypes.py_object

        def moved(event, mapping, key, value):
            # Runs before the write, on the writer's thread, the GIL held; never raises.
            try:
                mapping = ctypes.cast(mapping, as_object).value
                key = None if key is None else ctypes.cast(key, as_object).value
                if mapping is modules:  # a module is being imported: watch it from the start
                    if key in relied and value is not None:
                        watch(watcher, vars(ctypes.cast(value, as_object).value))
                    return 0
                spec = mapping.get("__spec__")
                if getattr(spec, "_initializing", False):  # its own import's writes
                    return 0
                if key is not None:
                    then = mapping.get(key, _LAYER_CALL_PROVEN_MISSING)
                    new = None if value is None else ctypes.cast(value, as_object).value
                    if not (_layer_call_proven_replaceable(then) or _layer_call_proven_replaceable(new)):
                        return 0  # data: what the proof read of it is the analysed code's own
                    if (isinstance(new, _layer_call_proven_types.ModuleType) and isinstance(key, str)
                            and new.__name__ == f"{mapping.get('__name__')}.{key}"):
                        return 0  # the import system binds a submodule to its package
                    _layer_call_proven_originals.setdefault((id(mapping), key), then)
                else:
                    _layer_call_proven_originals[(id(mapping), None)] = _LAYER_CALL_PROVEN_MISSING
            except BaseException:
                _layer_call_proven_originals[(id(mapping), None)] = _LAYER_CALL_PROVEN_MISSING
            _layer_call_proven_generation[0] += 1
            return 0

        callback = callback_type(moved)
        add.argtypes, add.restype = [callback_type], ctypes.c_int
        watch.argtypes, watch.restype = [ctypes.c_int, as_object], ctypes.c_int
        clear.argtypes, clear.restype = [ctypes.c_int], ctypes.c_int
        try:
            watcher = add(callback)
            watch(watcher, modules)
            for name in relied:
                if name in modules:
                    watch(watcher, vars(modules[name]))
        except Exception:  # every watcher slot taken
            return False
        # Cleared before the interpreter tears the modules down; the callback lives as long.
        atexit.register(clear, watcher)
        _layer_call_proven_watcher.callback = callback
        return True

    _layer_call_proven_watching = _layer_call_proven_watcher()

    def _layer_call_proven_object(dotted):
        module, _, name = dotted.rpartition(".")
        return getattr(_layer_call_proven_sys.modules.get(module), name, None)

    def _layer_call_proven_class(cls):
        """`cls`'s entry: [steps, shadowing names, conditions, the generation last checked, its
    modules' dicts, the dtype policy class, whether those still hold what they held when their
    import finished]; None where nothing is proven for exactly this class."""
        entry = None
        key = f"{cls.__module__}.{cls.__qualname__}"
        found = _LAYER_CALL_PROVEN_TABLE.get(key)
        if (
            _layer_call_proven_watching
            and found is not None
            and backend.backend() == "torch"
            and _layer_call_proven_object(key) is cls
            and all(_layer_call_proven_sys.modules.get(name) is not None for name in found[2])
        ):
            steps, names, modules, conditions = found
            dicts = {id(vars(_layer_call_proven_sys.modules[name])): vars(_layer_call_proven_sys.modules[name])
                     for name in modules}
            allowed = []
            for attr, bits, functions in conditions:
                objects = [_layer_call_proven_object(f) for f in functions]
                allowed.append((attr, bits, frozenset(id(f) for f in objects if f is not None),
                                tuple(objects)))
            policy = _layer_call_proven_object(_LAYER_CALL_PROVEN_POLICY)
            if policy is not None:
                entry = [steps, frozenset((*names, "forward")), tuple(allowed), -1, dicts, policy, False]
        _layer_call_proven_classes[cls] = entry
        return entry

    def _layer_call_proven_same(dicts):
        """Whether every key of these dicts written after its module's import holds again what it held."""
        for (where, key), then in tuple(_layer_call_proven_originals.items()):
            mapping = dicts.get(where)
            if mapping is not None and (key is None or mapping.get(key, _LAYER_CALL_PROVEN_MISSING) is not then):
                return False
        return True

    def _layer_call_proven_steps(layer):
        """The steps `layer(x)` may skip, asked on the fast lane (one eager tensor) with no
    keyword for a class not known to have no proof: those proven for exactly its class, while
    every run-time fact the proof assumed holds."""
        try:
            entry = _layer_call_proven_classes[type(layer)]
        except KeyError:
            entry = _layer_call_proven_class(type(layer))
        if entry is None:
            return 0
        if entry[3] != _layer_call_proven_generation[0]:  # a module was written to: does it hold the same?
            entry[6] = _layer_call_proven_same(entry[4])
            entry[3] = _layer_call_proven_generation[0]
        steps, names, conditions, _, _, policy, same = entry
        if not same:
            return 0
        hooks = _layer_call_proven_sys.modules["torch.nn.modules.module"]
        if (
            not layer.__dict__.keys().isdisjoint(names)
            or layer._forward_hooks
            or layer._forward_pre_hooks
            or layer._backward_hooks
            or layer._backward_pre_hooks
            or hooks._global_forward_hooks
            or hooks._global_forward_pre_hooks
            or hooks._global_backward_hooks
            or hooks._global_backward_pre_hooks
            or layer._remat_mode
            or type(layer._dtype_policy) is not policy
            or global_state.get_global_attribute("uninitialized_variables")
        ):
            return 0
        if (
            layer._parent_path is None
            or layer.activity_regularizer is not None
            or distribution_lib.distribution() is not None
        ):
            steps &= ~1
        for attr, bits, ids, _ in conditions:
            if id(getattr(layer, attr, None)) not in ids:
                steps &= ~bits
        return steps
