"""What a patch of the series is: its DEP-3 headers, its files, its check and its codemods.

Pure: source text in, source text out. A patch never touches the disk; it reads and rewrites
the parsed modules of a `Sources`, which the series passes from one patch to the next so that
each file is parsed once per run.

Per release, a patch has one of four outcomes (`Outcome`): *applied* (its code goes in, or is
already in, put there by forkgen), *upstream* (the release already contains the change,
recognised structurally), *not applicable* (the release predates the code the patch targets:
declared by the patch, never guessed from a failed match) and *drift* (the patch targets this
release but an anchor moved: `AnchorDrift`, an error).
"""

from __future__ import annotations

import abc
import ast
import enum
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, cast

import libcst as cst
from libcst.codemod import VisitorBasedCodemodCommand

from codemods.engine.report import CallRules

T = TypeVar("T")


#: What a drift found when the tree lacks the file (`Sources.require`).
NO_SUCH_FILE = "no such file"


class AnchorDrift(Exception):
    """Upstream code a patch depends on is missing, duplicated or reshaped."""

    def __init__(self, path: str, line: int, anchor: str, expected: str, found: str) -> None:
        self.path = path
        self.line = line
        self.anchor = anchor
        self.expected = expected
        self.found = found
        super().__init__(f"{path}:{line}: anchor '{anchor}': expected {expected}; found {found}")

    @property
    def missing_file(self) -> bool:
        """The tree has no such file: nothing a patch's `explain` can tell more about."""
        return self.found == NO_SUCH_FILE


@dataclass(frozen=True)
class AnchorReport:
    """One anchor, as `forkgen analyze` prints it."""

    name: str
    line: int
    description: str
    #: The file the anchor is in (relative to the tree), when not the patch's only file.
    path: str = ""


class Outcome(enum.Enum):
    APPLIED = "applied"
    UPSTREAM = "upstream"
    NOT_APPLICABLE = "not applicable"
    DRIFT = "drift"


@dataclass(frozen=True)
class Headers:
    """The patch described with Debian's DEP-3 fields (https://dep-team.pages.debian.net/deps/dep3/)."""

    description: str
    #: "upstream, <PR or commit URL>" for a backport, "ours" for forkgen's own.
    origin: str
    #: The upstream issue the change answers, if any.
    bug: str | None
    #: The upstream PR that carries the change, or "not-needed".
    forwarded: str
    #: The first release or nightly that contains the change; None while no build has it.
    applied_upstream: str | None
    last_update: str


@dataclass(frozen=True)
class Check:
    """What a patch found in one tree."""

    outcome: Outcome
    #: One line: where the patch goes, what shows it is upstream, or why it does not apply.
    detail: str
    anchors: tuple[AnchorReport, ...] = ()
    #: With APPLIED: the tree already carries the patch (forkgen put it there).
    present: bool = False
    #: Facts about the tree worth recording in the provenance (e.g. the CallSpec variant).
    facts: Mapping[str, str] = field(default_factory=dict)


class Store(Protocol):
    """Where a patch keeps what it derives from a tree, as text under a key (letters, digits,
    `-`, `_`, `.` and `/`): forkgen's keeps files under its cache (`forkgen/patch.py`). Each method
    may fail quietly: `get` gives None, `put` keeps nothing."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, text: str) -> None: ...


class Sources:
    """The files of one tree that the series reads and rewrites, each parsed at most once.

    `read(path)` gives a file's text, or None when the tree has no such file; `listing()`, where
    given, the relative path of every file of the tree (`paths`); `store`, where given, where a
    patch may keep what it derives from the tree, keyed by what it was derived from (`Store`).
    """

    def __init__(self, read: Callable[[str], str | None], listing: Callable[[], Iterable[str]] | None = None,
                 store: Store | None = None) -> None:
        self._read = read
        self._listing = listing
        self._paths: tuple[str, ...] | None = None
        self.store = store
        self._texts: dict[str, str | None] = {}
        self._modules: dict[str, cst.Module] = {}
        self._trees: dict[str, ast.Module] = {}
        #: Paths whose module a patch replaced, in the order they were first changed.
        self.changed: list[str] = []
        #: Per-run memo for analyses that several patches share (keyed by the patch package).
        self.memo: dict[str, object] = {}

    def memoised(self, key: str, compute: Callable[[], T]) -> T:
        """`compute()`, kept in `memo` under `key` until a patch changes a file: what a patch's
        `check` found, handed to its `apply` (on the same modules) instead of being redone."""
        if key not in self.memo:
            self.memo[key] = compute()
        return cast(T, self.memo[key])

    def paths(self) -> tuple[str, ...]:
        """Every file of the tree, relative, sorted (none where the tree was given file by file:
        a codemod run on one file)."""
        if self._paths is None:
            self._paths = tuple(sorted(self._listing())) if self._listing is not None else ()
        return self._paths

    def original(self, path: str) -> str | None:
        """The text of `path` as the tree has it, before any patch of this run changed it."""
        return self._texts[path] if path in self._texts and path not in self.changed else self._read(path)

    def exists(self, path: str) -> bool:
        return path in self._modules or self.text(path) is not None  # a parsed file: no need to render it

    def text(self, path: str) -> str | None:
        """The current text of `path` (after the patches applied so far)."""
        if path not in self._texts:
            self._texts[path] = self._modules[path].code if path in self.changed else self._read(path)
        return self._texts[path]

    def require(self, path: str, anchor: str) -> str:
        text = self.text(path)
        if text is None:
            raise AnchorDrift(path, 1, anchor, f"the file {path}", NO_SUCH_FILE)
        return text

    def module(self, path: str) -> cst.Module:
        """The parsed module of `path`; a missing file or a syntax error is drift."""
        if path not in self._modules:
            text = self.require(path, "module")
            try:
                self._modules[path] = cst.parse_module(text)
            except cst.ParserSyntaxError as error:
                raise AnchorDrift(path, error.raw_line, "module", "valid Python", f"a syntax error: {error.message}") from None
        return self._modules[path]

    def ast(self, path: str) -> ast.Module:
        """The `ast` of the current text of `path` (for line numbers: cheap, unlike libcst's)."""
        if path not in self._trees:
            text = self.require(path, "module")
            try:
                self._trees[path] = ast.parse(text)
            except SyntaxError as error:
                raise AnchorDrift(path, error.lineno or 1, "module", "valid Python", f"a syntax error: {error.msg}") from None
        return self._trees[path]

    def replace(self, path: str, module: cst.Module) -> None:
        """Record the rewritten module of `path`."""
        self._modules[path] = module
        self._texts.pop(path, None)
        self._trees.pop(path, None)
        if path not in self.changed:
            self.changed.append(path)
        self.memo.clear()

    def rendered(self) -> dict[str, str]:
        """The new text of every changed file (rendered once: `text` keeps it)."""
        return {path: self.require(path, "module") for path in self.changed}


#: Caches of what was found in the trees' modules, keyed by node (the engine's lines and names).
#: They hold the nodes, so a series run empties them when it ends (`forget_trees`): its trees
#: are freed with its `Sources`, not kept until the process exits.
TREE_CACHES: list[dict[Any, Any]] = []


def forget_trees() -> None:
    for cache in TREE_CACHES:
        cache.clear()


class Patch(abc.ABC):
    """One patch of the series. Subclasses declare the class variables and implement
    `check` (analysis; raises `AnchorDrift`) and `apply` (runs the codemods)."""

    #: Unique, lower-case, hyphenated; what `--patch`/`--without-patch` and the config name.
    name: ClassVar[str]
    #: Bumped whenever the code the patch inserts changes; recorded in the provenance and label.
    version: ClassVar[str]
    headers: ClassVar[Headers]
    #: Files the patch reads and may rewrite, relative to the tree's root.
    files: ClassVar[tuple[str, ...]]
    #: Patches that must be applied before this one (in the series, earlier).
    requires: ClassVar[tuple[str, ...]] = ()
    #: The first Keras release with the code the patch targets: older releases are *not applicable*.
    since: ClassVar[str | None] = None
    #: The codemods, in the order `apply` runs them (each a VisitorBasedCodemodCommand).
    codemods: ClassVar[tuple[type[VisitorBasedCodemodCommand], ...]]
    #: An environment variable that switches the patched behaviour off at run time, if any.
    switch: ClassVar[str | None] = None
    #: Patches of the series whose applied form this one must recognise (their code in a function
    #: it relies on, say) or whose check it needs, without requiring them: it reads their pieces
    #: (`applied_piece`) and their checks (`tolerated`) through the engine, never by importing them.
    tolerates: ClassVar[tuple[str, ...]] = ()
    #: The rules `forkgen report` gives its verdicts with (`CallRules`: those of the code the patch
    #: inserts in `Layer.__call__`), for the one patch of the series that offers them
    #: (`codemods.series.call_rules` finds it); None for every other patch.
    call_rules: ClassVar[CallRules | None] = None

    @abc.abstractmethod
    def check(self, sources: Sources) -> Check:
        """Where the patch goes in `sources`, or that it is upstream or not applicable."""

    @abc.abstractmethod
    def apply(self, sources: Sources) -> None:
        """Insert the patch into `sources` (only called after `check` said APPLIED, not present)."""

    def tolerated(self, name: str) -> Patch:
        """The patch `name` of the series, which this one declares in `tolerates` (its check, say)."""
        if name not in self.tolerates:
            raise ValueError(f"{self.name}: {name} is not in its `tolerates`")
        series = importlib.import_module("codemods.series")  # the series imports the patches, not they it
        found: list[Patch] = [p for p in series.load_series() if p.name == name]
        if not found:
            raise ValueError(f"{self.name}: tolerates {name}, which the series does not have")
        return found[0]

    def codemod_versions(self) -> dict[str, str]:
        return {c.__name__: str(getattr(c, "VERSION", self.version)) for c in self.codemods}
