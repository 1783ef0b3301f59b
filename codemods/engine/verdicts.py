"""Per-class verdicts (issue 43): which steps of `Layer.__call__` an instance of exactly a class may
skip, derived from the effects of its `call()` (effects.py), and for each step it may not, why.

A step provides its state through global-state keys (STEPS). A class may skip a step when its
`call()`, and all the Keras code it reaches, reads and writes none of the step's keys and does
nothing the analysis does not follow (`unknown`). A callable stored on the instance
(`self.activation(x)`) becomes a run-time condition: the attribute must be one of the functions it
was typed as whose own summary allows the step. The call-context step also fills in `call()`'s
context arguments (`training`): a `call()` that reads one keeps the step.

A verdict holds for the class itself only (the patch checks `type(layer) is C`), under the
run-time facts its summary assumed (`assumes`, checked by the patch), with no instance attribute
shadowing the plain methods it reached on the class (`methods`), and with the functions of the
modules it read (`modules`) those of import time.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .codeindex import Class, Function, Tree
from .effects import Analysis, of_class, stored_candidates, summary
from .effectvalues import Effect
from .patch import Store

T = TypeVar("T")

#: The steps of `Layer.__call__` a verdict is about, and the global-state keys through which each
#: provides what it provides.
STEPS: dict[str, tuple[str, ...]] = {
    "name scope": ("name_scope_stack",),
    "call context": ("current_call_ctx",),
    "autocast": ("autocast_scope",),
}
#: `call()` parameters the call-context step fills in.
CONTEXT_ARGUMENTS = ("training",)
LAYER_CLASS = "keras.src.layers.layer.Layer"
#: How many of a refusal's unknowns a verdict names (the count is given in full).
SHOWN = 3


@dataclass(frozen=True)
class StepVerdict:
    step: str
    skip: bool
    #: Why not, each "path:line: what (in function)"; empty where `skip`.
    reasons: tuple[str, ...] = ()
    #: Where `skip` holds only at run time: (attribute, the functions it may be).
    conditions: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"skip": self.skip, "reasons": list(self.reasons),
                "conditions": {attr: list(fns) for attr, fns in self.conditions}}


@dataclass(frozen=True)
class ClassVerdict:
    key: str
    path: str
    line: int
    steps: tuple[StepVerdict, ...]
    assumes: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    unknowns: int = 0

    def step(self, name: str) -> StepVerdict:
        return next(s for s in self.steps if s.step == name)

    def to_json(self) -> dict[str, Any]:
        return {"class": self.key, "where": f"{self.path}:{self.line}",
                "steps": {s.step: s.to_json() for s in self.steps}, "assumes": list(self.assumes),
                "methods": list(self.methods), "modules": list(self.modules), "unknowns": self.unknowns}


@dataclass
class Verdicts:
    """The verdicts of a tree for one backend."""

    backend: str
    classes: list[ClassVerdict] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many classes may skip each step (conditionally or not)."""
        return {step: sum(1 for c in self.classes if c.step(step).skip) for step in STEPS}

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "steps": {k: list(v) for k, v in STEPS.items()}, "counts": self.counts(),
                "classes": [c.to_json() for c in self.classes]}


def _reason(e: Effect, what: str | None = None) -> str:
    return f"{e.where()}: {what or e.what} (in {e.function})"


def _via(trail: tuple[str, ...]) -> str:
    """The call chain an unknown was reached through (its first and last functions)."""
    if len(trail) < 2:
        return ""
    names = [t.removeprefix("keras.src.") for t in trail[:-1]]
    return " via " + " > ".join(names if len(names) <= 6 else [*names[:3], "...", *names[-2:]])


def _blocks(effects: Iterable[Effect], keys: tuple[str, ...]) -> list[Effect]:
    return sorted(e for e in effects if e.kind == "unknown" or e.kind.partition(":")[2] in keys and e.kind.partition(":")[0] in ("reads", "writes"))


def layer_classes(tree: Tree) -> list[Class]:
    """Every class of the tree whose MRO holds Keras's Layer and whose `call()` is not Layer's own."""
    out = []
    for cls in tree.subclasses_of(LAYER_CLASS):
        call = tree.method(cls, "call")
        if call is not None and hasattr(call, "node"):
            if not isinstance(call, Function):  # a class or a value bound to `call`: no `defined_in`, an AttributeError
                raise AttributeError(f"{cls.key}.call is not a function of the tree: {call!r}")
            if call.defined_in is not None and call.defined_in.key != LAYER_CLASS:
                out.append(cls)
    return out


def verdict(analysis: Analysis, cls: Class) -> ClassVerdict:
    effects = of_class(analysis, cls)
    call = analysis.tree.method(cls, "call")
    assert isinstance(call, Function)  # (of_class has summarised it)
    read_context = [a for a in CONTEXT_ARGUMENTS if any(isinstance(n, ast.Name) and n.id == a and isinstance(n.ctx, ast.Load)
                                                         for n in ast.walk(call.node))]
    stored = sorted({e.kind.partition(":")[2] for e in effects if e.kind.startswith("stored:")})
    steps = []
    for step, keys in STEPS.items():
        reasons = []
        blocking = _blocks(effects, keys)
        unknown = [e for e in blocking if e.kind == "unknown"]
        reasons += [_reason(e, f"{e.kind}") for e in blocking if e.kind != "unknown"]
        reasons += [_reason(e) + _via(analysis.trails.get(e, ())) for e in unknown[:SHOWN]]
        if len(unknown) > SHOWN:
            reasons.append(f"... and {len(unknown) - SHOWN} more the analysis does not follow")
        if step == "call context":
            reasons += [f"{call.path}:{call.node.lineno}: call() reads `{a}`, which the step fills in" for a in read_context]
        conditions = []
        for target in stored:
            owner, _, attr = target.rpartition(".")
            where = next(e for e in sorted(effects) if e.kind == f"stored:{target}")
            if owner != cls.key:
                reasons.append(_reason(where, f"calls `{attr}` stored on an instance of {owner}"))
                continue
            allowed = tuple(c.fn.key for c in stored_candidates(analysis, cls, attr)
                            if not _blocks(summary(analysis, c.fn), keys))
            if allowed:
                conditions.append((attr, allowed))
            else:
                reasons.append(_reason(where, f"calls `self.{attr}`, typed as no function that allows the step"))
        steps.append(StepVerdict(step, not reasons, tuple(reasons), tuple(conditions) if not reasons else ()))
    kinds = {e.kind for e in effects}
    return ClassVerdict(
        cls.key, cls.path, cls.node.lineno, tuple(steps),
        assumes=tuple(sorted(k.partition(":")[2] for k in kinds if k.startswith("assumes:"))),
        methods=tuple(sorted(k.partition(":")[2].rpartition(".")[2] for k in kinds
                             if k.startswith("method:") and k.partition(":")[2].rpartition(".")[0] == cls.key)),
        modules=tuple(sorted(k.partition(":")[2] for k in kinds if k.startswith("module:"))),
        unknowns=sum(1 for e in effects if e.kind == "unknown"),
    )


def analyse(files: Mapping[str, str], backend: str = "torch",
            progress: Callable[[int, int, str], None] | None = None) -> Verdicts:
    """The verdicts of every Layer subclass of the tree `files` ({relative path: text}) for
    `backend`. `progress(done, total, class)` is called before each class."""
    tree = Tree(files, backend)
    analysis = Analysis(tree)
    classes = layer_classes(tree)
    out = Verdicts(backend)
    for i, cls in enumerate(classes):
        if progress is not None:
            progress(i, len(classes), cls.key)
        out.classes.append(verdict(analysis, cls))
    return out


# -- the verdicts as a patch reads them -------------------------------------------------------------

#: Each step's bit in a proven class's flags (`ProvenClass.steps`).
STEP_BITS = {"name scope": 1, "call context": 2, "autocast": 4}
#: The run-time facts a verdict may assume that the patch reading it checks (`ClassVerdict.assumes`):
#: a class whose verdict assumes another is left out of the table.
CHECKED_ASSUMPTIONS = frozenset({"eager inputs", "initialized variables", "plain dtype policy"})
#: The code the verdicts are derived by: a cached table is valid only for the same code.
_ANALYSIS_MODULES = ("codeindex.py", "effects.py", "effectflow.py", "effectvalues.py", "effectwalk.py", "verdicts.py")
#: Deep call chains: the analysis runs on a thread with a large stack and recursion limit.
_RECURSION = 40_000
_STACK = 512 * 1024 * 1024


@dataclass(frozen=True)
class ProvenClass:
    """What a patch needs of one class's verdict: the steps it may skip (STEP_BITS), the names no
    instance attribute may shadow (`call` and the plain methods the summary reached), the modules
    whose attributes must be those of import time, and the run-time conditions on stored callables,
    each (attribute, the steps' bits it conditions, the functions it may be)."""

    steps: int
    methods: tuple[str, ...]
    modules: tuple[str, ...]
    conditions: tuple[tuple[str, int, tuple[str, ...]], ...]

    def to_json(self) -> list[Any]:
        return [self.steps, list(self.methods), list(self.modules),
                [[attr, bits, list(fns)] for attr, bits, fns in self.conditions]]

    @classmethod
    def from_json(cls, data: list[Any]) -> ProvenClass:
        steps, methods, modules, conditions = data
        return cls(int(steps), tuple(methods), tuple(modules),
                   tuple((str(attr), int(bits), tuple(fns)) for attr, bits, fns in conditions))


def proven(verdicts: Verdicts) -> dict[str, ProvenClass]:
    """The classes that may skip at least one step, by class key, as a patch checks them; a class
    whose verdict assumes a run-time fact outside CHECKED_ASSUMPTIONS is left out."""
    out = {}
    for c in verdicts.classes:
        bits = sum(STEP_BITS[s.step] for s in c.steps if s.skip)
        if not bits or not set(c.assumes) <= CHECKED_ASSUMPTIONS:
            continue
        by_attr: dict[tuple[str, tuple[str, ...]], int] = {}
        for s in c.steps:
            for attr, fns in s.conditions if s.skip else ():
                by_attr[(attr, fns)] = by_attr.get((attr, fns), 0) | STEP_BITS[s.step]
        conditions = tuple(sorted((attr, b, fns) for (attr, fns), b in by_attr.items()))
        out[c.key] = ProvenClass(bits, tuple(sorted({"call", *c.methods})), c.modules, conditions)
    return out


def deep(work: Callable[[], T]) -> T:
    """`work()` on a thread with a large stack and recursion limit (the analysis follows deep call
    chains: a layer's call() down to a backend's conversions); its exception re-raised here."""
    result: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as error:  # re-raised in the caller's thread
            failed.append(error)

    limit, size = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(limit, _RECURSION))
    threading.stack_size(_STACK)
    try:
        thread = threading.Thread(target=run, name="forkgen-effects")
        thread.start()
        thread.join()
    finally:
        threading.stack_size(size)
        sys.setrecursionlimit(limit)
    if failed:
        raise failed[0]
    return result[0]


def analysis_digest() -> str:
    """sha256 of the analysis's own code (a cached result of another analysis is not used)."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in _ANALYSIS_MODULES:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return digest.hexdigest()


def proven_cached(files: Mapping[str, str], backend: str, store: Store | None) -> dict[str, ProvenClass]:
    """`proven(analyse(files, backend))`, kept in `store` (None: not kept) under the sha256 of the
    files, the backend and the analysis's own code; what the store gives back that does not read
    as a table is computed again."""
    digest = hashlib.sha256()
    digest.update(f"{backend}\0{analysis_digest()}\0".encode())
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + files[path].encode("utf-8", errors="surrogatepass") + b"\0")
    key = f"proven-steps/{digest.hexdigest()}.json"
    kept = store.get(key) if store is not None else None
    if kept is not None:
        try:
            return {k: ProvenClass.from_json(v) for k, v in json.loads(kept).items()}
        except (ValueError, TypeError, AttributeError):
            pass
    table = proven(deep(lambda: analyse(files, backend)))
    if store is not None:
        store.put(key, json.dumps({k: v.to_json() for k, v in sorted(table.items())}, sort_keys=True))
    return table
