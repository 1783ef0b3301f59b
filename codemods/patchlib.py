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
import io
import re
import textwrap
import tokenize
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

import libcst as cst
from libcst.codemod import VisitorBasedCodemodCommand

T = TypeVar("T")


class AnchorDrift(Exception):
    """Upstream code a patch depends on is missing, duplicated or reshaped."""

    def __init__(self, path: str, line: int, anchor: str, expected: str, found: str) -> None:
        self.path = path
        self.line = line
        self.anchor = anchor
        self.expected = expected
        self.found = found
        super().__init__(f"{path}:{line}: anchor '{anchor}': expected {expected}; found {found}")


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


class Sources:
    """The files of one tree that the series reads and rewrites, each parsed at most once.

    `read(path)` gives a file's text, or None when the tree has no such file.
    """

    def __init__(self, read: Callable[[str], str | None]) -> None:
        self._read = read
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
            raise AnchorDrift(path, 1, anchor, f"the file {path}", "no such file")
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

    @abc.abstractmethod
    def check(self, sources: Sources) -> Check:
        """Where the patch goes in `sources`, or that it is upstream or not applicable."""

    @abc.abstractmethod
    def apply(self, sources: Sources) -> None:
        """Insert the patch into `sources` (only called after `check` said APPLIED, not present)."""

    def codemod_versions(self) -> dict[str, str]:
        return {c.__name__: str(getattr(c, "VERSION", self.version)) for c in self.codemods}


# -- a patch's examples and mutants ------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """An example of what a patch makes of a tree, in the manner of Fixit's VALID/INVALID examples.

    A package's `cases.py` lists them as `CASES`; `tests/unit/test_patch_cases.py` runs each one.
    `before` is the text of the patch's (first) file, or `{path: text}` for a patch of several
    files. Say what must happen with exactly one of:

    - `after`: the patch applies (not present) and makes `before` into `after` (text, or
      `{path: text}` for the files it changes); `after` then checks as applied and present, and
      applying again changes nothing;
    - `upstream=True`: the outcome is *upstream*, and applying changes nothing;
    - `drift`: the outcome is drift; the message starts with `<file>:<line>: ` and contains `drift`.

    `detail`, when given, is the outcome's detail on `before`; `anchors`, when given, are the
    (name, line) pairs the outcome reports on `before`.
    """

    name: str
    before: str | Mapping[str, str]
    after: str | Mapping[str, str] | None = None
    upstream: bool = False
    drift: str | None = None
    detail: str | None = None
    anchors: tuple[tuple[str, int], ...] | None = None

    def __post_init__(self) -> None:
        said = [self.after is not None, self.upstream, self.drift is not None]
        if sum(said) != 1:
            raise ValueError(f"case {self.name!r}: give exactly one of after, upstream=True, drift")


@dataclass(frozen=True)
class Mutant:
    """A small break of a patch's inserted code that its equivalence tests must catch (`nox -s
    mutants` builds a fork with it): the text `old`, found exactly once in the package's file
    `file`, becomes `new`."""

    description: str
    old: str
    new: str
    file: str = "inserted.py"


def examples(package: str) -> tuple[tuple[Case, ...], tuple[Mutant, ...]]:
    """The `CASES` and `MUTANTS` of `package`'s `cases` module (none without one)."""
    import importlib

    try:
        module = importlib.import_module(f"{package}.cases")
    except ModuleNotFoundError as missing:
        if missing.name != f"{package}.cases":
            raise
        return (), ()
    return tuple(getattr(module, "CASES", ())), tuple(getattr(module, "MUTANTS", ()))


def piece_text(cases_file: str, function: str, indent: str = "", upstream: str | None = None) -> str:
    """The text of the piece `function` of the `inserted.py` beside `cases_file` (a `cases.py`'s
    `__file__`), for its cases' expected texts: the body of `def function(...):` (its lines
    through the last one before the next line at column 0, blank lines at its end left out),
    each line's first level of indentation replaced by `indent` (a function's or class's body:
    its indentation; a `helpers` or `module_level` piece: ""). Blank lines, and the lines a
    multi-line string continues on (a docstring's: their text is the string's), stay as they
    are. With `upstream` (upstream's statements as a case's text has them), the piece's
    `UPSTREAM` line becomes those statements, re-indented to where `UPSTREAM` stands (blank lines
    stay empty): the piece as applied. Assumes a one-line `def` and the template's four-space
    indentation."""
    text = Path(cases_file).with_name("inserted.py").read_text(encoding="utf-8")
    lines = text.splitlines(True)
    in_string: set[int] = set()  # indexes of the lines a multi-line string continues on
    f_strings: list[int] = []  # Python 3.12+ tokenizes an f-string in parts
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.STRING:
            in_string.update(range(token.start[0], token.end[0]))  # rows count from 1
        elif token.type == getattr(tokenize, "FSTRING_START", None):
            f_strings.append(token.start[0])
        elif token.type == getattr(tokenize, "FSTRING_END", None):
            in_string.update(range(f_strings.pop(), token.end[0]))
    head = next(i for i, line in enumerate(lines)
                if line.startswith(f"def {function}(") and i not in in_string)
    end = next((i for i in range(head + 1, len(lines))
                if lines[i].strip() and i not in in_string and not lines[i][0].isspace()), len(lines))
    body = lines[head + 1:end]
    while body and not body[-1].strip():
        body.pop()
    text = "".join(line if i in in_string or not line.strip() else indent + line[4:]
                   for i, line in enumerate(body, head + 1))
    if upstream is None:
        return text
    at = re.search(rf"^([ ]*){PLACEHOLDER}\n", text, re.MULTILINE)
    if at is None:
        raise ValueError(f"{function}: no `{PLACEHOLDER}` line to put upstream's statements in")
    kept = textwrap.indent(textwrap.dedent(upstream), at.group(1))
    return text[:at.start()] + kept + text[at.end():]


# -- helpers for the patches' analyses ----------------------------------------------------------


#: The comment every piece a backport inserts carries, so that its presence is recognised
#: (and told apart from the same change made upstream): `# forkgen: <patch name>`.
MARKER = "# forkgen: {name}"


def marker(name: str) -> str:
    return MARKER.format(name=name)


def walk(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node of `root`'s subtree, parents first (read-only: nothing is rebuilt)."""
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


#: The nodes that hold statements (`statements`, `statement_ancestors`), and their fields
#: that do, in source order.
_STATEMENT_HOLDERS = (
    cst.Module,
    cst.BaseCompoundStatement,
    cst.IndentedBlock,
    cst.Else,
    cst.Finally,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.MatchCase,
)
_STATEMENT_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")
_STATEMENT_NODES = (*_STATEMENT_HOLDERS, cst.SimpleStatementLine)


def _statement_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    children: list[cst.CSTNode] = []
    if isinstance(node, _STATEMENT_HOLDERS):
        for name in _STATEMENT_FIELDS:
            value = getattr(node, name, None)
            if isinstance(value, cst.CSTNode):
                if isinstance(value, _STATEMENT_NODES):
                    children.append(value)
            elif value is not None:
                children.extend(child for child in value if isinstance(child, _STATEMENT_NODES))
    return children


def statements(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The statements of `root`'s subtree and the nodes holding them (blocks, `else`s,
    handlers), parents first, in source order: the nodes of `walk(root)` of those kinds, in
    the same order, without walking (and so rebuilding) any expression."""
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(_statement_children(node)))


def statement_ancestors(root: cst.CSTNode, targets: Iterable[cst.CSTNode]) -> set[int]:
    """The ids of each statement of `targets` and of every node from `root` down to it.

    Only statements and the nodes holding them are walked (no expression), so it is cheap
    even on a whole module; a target not found that way adds nothing. A codemod that rewrites
    only `targets` can visit just these nodes (`on_visit`) and keep every other subtree as it is.
    """
    wanted = {id(t) for t in targets}
    parents: dict[int, int] = {}
    found: set[int] = set()
    stack: list[cst.CSTNode] = [root]
    while stack and wanted:
        node = stack.pop()
        if id(node) in wanted:
            wanted.discard(id(node))
            # Up from the target to the root, through the parents recorded on the way down.
            at: int | None = id(node)
            while at is not None and at not in found:
                found.add(at)
                at = parents.get(at)
        for child in _statement_children(node):
            parents[id(child)] = id(node)
            stack.append(child)
    return found


def ancestors(root: cst.CSTNode, target: cst.CSTNode) -> set[int]:
    """The ids of `target` and of every node from `root` down to it (empty if not under it)."""
    stack: list[tuple[cst.CSTNode, tuple[int, ...]]] = [(root, (id(root),))]
    while stack:
        node, path = stack.pop()
        if node is target:
            return set(path)
        stack.extend((child, (*path, id(child))) for child in node.children)
    return set()


#: The torch backend's core module in 3.x releases, and where keras-nightly keeps it.
TORCH_CORE_PY = "keras/src/backend/torch/core.py"
NIGHTLY_TORCH_CORE_PY = "keras/src/backend/torch/ops/core.py"


#: The torch core module's move in keras-nightly, as a `DeclaredPatch.moved` entry.
TORCH_CORE_MOVED = {TORCH_CORE_PY: NIGHTLY_TORCH_CORE_PY}


PLACEHOLDER = "UPSTREAM"


