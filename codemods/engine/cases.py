"""A patch's examples (`Case`), behaviours (`behaviours`, run on its synthetic modules with
`run_module`) and mutants (`Mutant`), and the inserted code they expect (`piece_text`)."""

from __future__ import annotations

import builtins
import importlib.util
import io
import re
import textwrap
import tokenize
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from codemods.engine.tree import PLACEHOLDER

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


def _cases_module(package: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(f"{package}.cases")
    except ModuleNotFoundError as missing:
        if missing.name != f"{package}.cases":
            raise
        return None


def examples(package: str) -> tuple[tuple[Case, ...], tuple[Mutant, ...]]:
    """The `CASES` and `MUTANTS` of `package`'s `cases` module (none without one)."""
    module = _cases_module(package)
    if module is None:
        return (), ()
    return tuple(getattr(module, "CASES", ())), tuple(getattr(module, "MUTANTS", ()))


#: What a behaviour is: a function that asserts (it returns nothing).
Behaviour = Callable[..., None]


def behaviours(package: str) -> tuple[Behaviour, ...]:
    """The `BEHAVIOURS` of `package`'s `cases` module (none without one).

    A behaviour is an executable example of what the patched code does: a function that runs the
    package's synthetic modules, upstream's and patched (`run_module`), and asserts that the
    patched one behaves as upstream's and does what the patch is for (fewer writes, fewer copies,
    the fast path taken). `tests/unit/test_patch_cases.py` calls each. Its parameters are filled
    by the pytest fixtures of their names: `monkeypatch`, `tmp_path`, or a stand-in of a framework
    the synthetic modules import (`tests/unit/conftest.py`), so a cases module imports nothing
    from tests/ and names no stand-in in its texts. Behaviours on real Keras are the equivalence
    tests' (tests/equivalence), not these.
    """
    module = _cases_module(package)
    return tuple(getattr(module, "BEHAVIOURS", ())) if module is not None else ()


def run_module(text: str, name: str = "synthetic", stand_ins: Mapping[str, object] | None = None) -> types.ModuleType:
    """Execute `text`, a synthetic module of a case, as a fresh module `name`.

    An import of a module `stand_ins` names (`import torch`, `from torch.utils import _pytree`)
    gets the object given for it (a stand-in a behaviour was handed; for `import a.b`, the one
    given for `a`), in the module and in every function it defines; every other import is the
    real one. Nothing outside the module changes (`sys.modules` included).
    """
    given = dict(stand_ins or {})

    def importer(module: str, globals: object = None, locals: object = None, fromlist: object = (), level: int = 0) -> object:
        wanted = module if fromlist else module.partition(".")[0]
        if level == 0 and wanted in given:
            return given[wanted]
        return builtins.__import__(module, globals, locals, fromlist, level)  # type: ignore[arg-type]

    loaded = types.ModuleType(name)
    loaded.__dict__["__builtins__"] = {**vars(builtins), "__import__": importer}
    exec(compile(text, f"<{name}>", "exec"), loaded.__dict__)
    return loaded


def replace_once(text: str, old: str, new: str) -> str:
    """`text` with its only occurrence of `old` replaced, for a case's text made from another
    (raises when `old` is not there exactly once, so a case cannot silently lose its change)."""
    if text.count(old) != 1:
        raise ValueError(f"expected exactly one occurrence of:\n{old}")
    return text.replace(old, new)


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


def applied_piece(patch: str, function: str, indent: str = "", upstream: str | None = None) -> str:
    """`piece_text` of the piece `function` of the patch `patch` (its name), read from that patch's
    `inserted.py` without importing it: how a patch that `tolerates` another recognises the other's
    applied code in what it relies on. The package of a patch is named after it (a unit test holds
    the series to that)."""
    spec = importlib.util.find_spec(f"codemods.{patch.replace('-', '_')}")
    if spec is None or spec.origin is None:
        raise ValueError(f"no patch package for {patch}")
    return piece_text(spec.origin, function, indent, upstream)
