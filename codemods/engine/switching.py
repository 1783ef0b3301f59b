"""Run-time switches for every patch, made by the engine once the series has run (issue 42).

Each module the series changed keeps the series' statements where they are, byte for byte, and
gets, right after every run of statements the series changed (a function, a method, an
assignment), upstream's statements for when the run's patches are disabled, and around every run
the series only added (helpers, module-level code of a patch) the condition that they are not:

    def f(...):                                         # the series' f
        ...
    if not _forkgen_switches.on("patch-a", "patch-b"):  # forkgen: switch
        def f(...):                                     # upstream's f, defined again
            ...
    if _forkgen_switches.on("patch-a"):                 # forkgen: switch
        def _forkgen_helper(...): ...

Which runs is decided once, at import: a disabled patch runs upstream's statements at no cost per
call (no flag is read on a hot path, dynamo guards nothing new: the functions are the patched ones
or upstream's, as defined); with a patch disabled, its functions are defined twice, the second
time as upstream wrote them, which is the definition that stays (a decorator that registers
what it decorates registers upstream's last). The names are the patches whose code is in that
run, with every patch whose code shares a run with them (a patch's pieces in one function may
rely on its pieces in another, so a patch is switched as a whole: `switch_groups`).
`keras/src/forkgen_switches.py` (`switches_module`) reads `KERAS_FORKGEN_DISABLE` once and adds
the patches that require a disabled one.

A run is found by aligning the module-level statements of upstream's module and the series'
(and, in a class whose header is unchanged, its statements: methods are runs of their own;
a nested function belongs to its outermost one). `unswitch` gives the series' text back from a
switched one, byte for byte, so that a switched tree checks as applied. Only forkgen's lines are
added: upstream's, as the series left them, stay as they are (the copies of upstream's statements
and the added runs are indented under their condition).
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import libcst as cst

#: Where the switches live in the tree, and the name each switched module binds them to.
SWITCHES_PY = "keras/src/forkgen_switches.py"
ALIAS = "_forkgen_switches"
MARK = "# forkgen: switch"
#: The environment variable the tree reads at import.
VARIABLE = "KERAS_FORKGEN_DISABLE"
#: The version of the form this module writes into a tree. It is part of the wheel's label
#: (`codemods.series.series_label`): a new form of the switches changes every switched file, so
#: it must give a new wheel name even when no patch's version changed. Raise it with any change
#: to what `switch_module` or `switches_module` write.
FORMAT = "1"
_IMPORT = f"from keras.src import forkgen_switches as {ALIAS}  {MARK}\n"


def _bare(statement: cst.CSTNode) -> str:
    """A statement's code without the blank lines and comments above it (what alignment compares)."""
    node = statement.with_changes(leading_lines=()) if hasattr(statement, "leading_lines") else statement
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        node = node.with_changes(lines_after_decorators=())
    return cst.Module(body=[node]).code  # type: ignore[list-item]


def _key(statement: cst.CSTNode, owner: str) -> str:
    """What a statement is across the series' states: a def or class by its qualified name, any
    other statement by its code."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return f"{owner}{statement.name.value}"
    return f"{owner}:{_bare(statement)}"


def _class_body(statement: cst.CSTNode) -> Sequence[cst.BaseStatement] | None:
    if isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
        return statement.body.body
    return None


def _same_header(a: cst.ClassDef, b: cst.ClassDef) -> bool:
    empty = cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Pass()])])
    return _bare(a.with_changes(body=empty)) == _bare(b.with_changes(body=empty))


def _changes(before: Sequence[cst.BaseStatement], after: Sequence[cst.BaseStatement],
             owner: str = "") -> Iterable[tuple[str, int, int, int, int]]:
    """(owner, i1, i2, j1, j2) for each changed run: `before[i1:i2]` became `after[j1:j2]`.

    Statements are aligned by key (a def or class by its name, any other statement by its code),
    then a def or class found on both sides is changed when its code is; a class whose header is
    unchanged is looked into instead (its runs, owner `Class.`)."""
    matcher = difflib.SequenceMatcher(None, [_key(s, "") for s in before], [_key(s, "") for s in after], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            yield owner, i1, i2, j1, j2
            continue
        for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
            old, new = before[i], after[j]
            if _bare(old) == _bare(new):
                continue
            if isinstance(old, cst.ClassDef) and isinstance(new, cst.ClassDef) and _same_header(old, new):
                inner_before, inner_after = _class_body(old), _class_body(new)
                if inner_before is not None and inner_after is not None:
                    yield from _changes(inner_before, inner_after, f"{owner}{new.name.value}.")
                    continue
            yield owner, i, i + 1, j, j + 1


def _body(module: cst.Module, owner: str) -> Sequence[cst.BaseStatement]:
    statements: Sequence[cst.BaseStatement] = module.body
    for name in filter(None, owner.split(".")):
        statements = next(_class_body(s) or () for s in statements if isinstance(s, cst.ClassDef) and s.name.value == name)
    return statements


def changed_keys(before: str, after: str) -> set[str]:
    """The keys of every statement a patch changed, added or removed in one module."""
    a, b = cst.parse_module(before), cst.parse_module(after)
    keys: set[str] = set()
    for owner, i1, i2, j1, j2 in _changes(a.body, b.body):
        keys |= {_key(s, owner) for s in _body(a, owner)[i1:i2]} | {_key(s, owner) for s in _body(b, owner)[j1:j2]}
    return keys


def switch_groups(touched: Mapping[str, Mapping[str, set[str]]]) -> list[tuple[str, ...]]:
    """The patches switched together: `touched[patch][path]` are the keys of the statements that
    patch changed in that file; patches that changed a statement of the same key (in one file)
    are one group (connected components), each in series order (the mapping's)."""
    order = list(touched)
    parent = {p: p for p in order}

    def root(p: str) -> str:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    owners: dict[tuple[str, str], str] = {}
    for patch in order:
        for path, keys in touched[patch].items():
            for key in keys:
                other = owners.setdefault((path, key), patch)
                parent[root(patch)] = root(other)
    groups: dict[str, list[str]] = {}
    for patch in order:
        groups.setdefault(root(patch), []).append(patch)
    return [tuple(g) for g in groups.values()]


class _Unswitch(cst.CSTTransformer):
    """A switched module back to the series' text: upstream's copies dropped, added runs unwrapped."""

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] \
            | cst.RemovalSentinel:
        if not _switched(updated):
            return updated
        if isinstance(updated.test, cst.UnaryOperation):
            return cst.RemoveFromParent()
        statements = list(cst.ensure_type(updated.body, cst.IndentedBlock).body)
        statements[0] = statements[0].with_changes(leading_lines=(*updated.leading_lines, *_leading(statements[0])))
        return cst.FlattenSentinel(statements)


def _switched(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.If) and isinstance(node.body, cst.IndentedBlock) \
        and node.body.header.comment is not None and node.body.header.comment.value == MARK


def unswitch(text: str) -> str:
    """The series' text of a switched module (the text itself when it has no switch)."""
    if MARK not in text:
        return text
    module = cst.parse_module(text)
    body = [s for s in module.body if not (isinstance(s, cst.SimpleStatementLine) and MARK in _line(module, s))]
    return cst.Module(body=body, header=module.header, footer=module.footer, encoding=module.encoding,
                      default_indent=module.default_indent, default_newline=module.default_newline,
                      has_trailing_newline=module.has_trailing_newline).visit(_Unswitch()).code


def _line(module: cst.Module, statement: cst.CSTNode) -> str:
    return module.code_for_node(statement)


def _call(group: Sequence[str]) -> cst.BaseExpression:
    arguments = ", ".join(f'"{name}"' for name in sorted(group))
    return cst.parse_expression(f"{ALIAS}.on({arguments})")


def _block(statements: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
    header = cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(MARK))
    return cst.IndentedBlock(body=list(statements), header=header)


def _leading(statement: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    """The blank lines and comments above a statement (every statement node has them)."""
    return cast(Sequence[cst.EmptyLine], getattr(statement, "leading_lines"))  # noqa: B009 - not on BaseStatement's type


def _clean(lines: Sequence[cst.EmptyLine]) -> tuple[cst.EmptyLine, ...]:
    """Blank lines without the indentation libcst would give them in a block."""
    return tuple(line.with_changes(indent=False) if line.comment is None else line for line in lines)


def _indented(statements: Sequence[cst.BaseStatement], first: bool = True) -> list[cst.BaseStatement]:
    """`statements` to go in a block: blank lines unindented, none above the first (`first`)."""
    out = [s.with_changes(leading_lines=_clean(_leading(s))) for s in statements]
    if first:
        out[0] = out[0].with_changes(leading_lines=())
    return out


def _switch(before: cst.Module, after: cst.Module, group_of: Mapping[str, tuple[str, ...]]) -> cst.Module:
    """`after` with upstream's statements of each run that differs from `before` after it, under
    `if not on(group)`, and each run only added under `if on(group)`."""
    runs: dict[str, list[tuple[int, int, int, int]]] = {}
    for owner, i1, i2, j1, j2 in _changes(before.body, after.body):
        runs.setdefault(owner, []).append((i1, i2, j1, j2))

    def rebuilt(owner: str, olds_all: Sequence[cst.BaseStatement], news_all: Sequence[cst.BaseStatement]) \
            -> list[cst.BaseStatement]:
        out = list(news_all)
        for j, statement in enumerate(news_all):  # classes with runs inside
            if isinstance(statement, cst.ClassDef) and f"{owner}{statement.name.value}." in runs:
                inner_owner = f"{owner}{statement.name.value}."
                old_class = next(s for s in olds_all if isinstance(s, cst.ClassDef) and s.name.value == statement.name.value)
                body = rebuilt(inner_owner, _class_body(old_class) or (), _class_body(statement) or ())
                out[j] = statement.with_changes(body=cst.ensure_type(statement.body, cst.IndentedBlock).with_changes(body=body))
        gap = (cst.EmptyLine(indent=False),) * (1 if owner else 2)

        def group(statement: cst.BaseStatement) -> tuple[str, ...]:
            found = group_of.get(_key(statement, owner))
            if not found:
                raise ValueError(f"no patch changed {_key(statement, owner)!r}")
            return found

        for i1, i2, j1, j2 in sorted(runs.get(owner, ()), reverse=True):
            replaced: dict[tuple[str, ...], list[cst.BaseStatement]] = {}
            for statement in olds_all[i1:i2]:
                replaced.setdefault(group(statement), []).append(statement)
            run: list[cst.BaseStatement] = []
            for new, statement in zip(news_all[j1:j2], out[j1:j2], strict=True):
                mine = group(new)
                if mine in replaced:  # the series' version of statements upstream has: in place
                    run.append(statement)
                elif run and isinstance(last := run[-1], cst.If) and _switched(last) and last.test.deep_equals(_call(mine)):
                    block = cst.ensure_type(last.body, cst.IndentedBlock)
                    run[-1] = last.with_changes(body=block.with_changes(body=[*block.body, *_indented([statement], first=False)]))
                else:  # only added: forkgen's code, under its condition
                    run.append(cst.If(test=_call(mine), body=_block(_indented([statement])), leading_lines=_leading(statement)))
            for mine, olds in replaced.items():  # upstream's statements, defined again when disabled
                run.append(cst.If(test=cst.UnaryOperation(cst.Not(), _call(mine)), body=_block(_indented(olds)),
                                  leading_lines=gap))
            out[j1:j2] = run
        return out

    return after.with_changes(body=rebuilt("", before.body, after.body))


def switch_module(upstream: str, patched: str, group_of: Mapping[str, tuple[str, ...]]) -> str:
    """`patched` (the series' text of a module whose upstream text is `upstream`) with each changed
    run in an `if`/`else` on its group (`group_of[key]`: the group of the patches that changed the
    statement of that key) and the import of the switches after the docstring and `__future__`
    imports."""
    before, after = cst.parse_module(upstream), cst.parse_module(patched)
    if not any(True for _ in _changes(before.body, after.body)):
        return patched  # no statement changed (comments only): nothing to switch
    body = list(_switch(before, after, group_of).body)
    at = 0
    while at < len(body) and _prologue(body[at]):
        at += 1
    body.insert(at, cst.parse_statement(_IMPORT))
    return cst.parse_module(patched).with_changes(body=body).code


def _prologue(statement: cst.BaseStatement) -> bool:
    """The module's docstring, or a `from __future__` import."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    return isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name) and small.module.value == "__future__"


def closure(names: Iterable[str], requires: Mapping[str, Sequence[str]],
            groups: Sequence[Sequence[str]]) -> frozenset[str]:
    """The patches disabled with `names`: those that require a disabled one, and those switched with
    one (what the switches module computes at import, in its own copy of this rule)."""
    off = set(names)
    while True:
        more = {p for p, needs in requires.items() if off.intersection(needs)}
        more |= {p for group in groups if off.intersection(group) for p in group}
        if more <= off:
            return frozenset(off)
        off |= more


def read_switches(text: str) -> tuple[dict[str, tuple[str, ...]], tuple[tuple[str, ...], ...]]:
    """`REQUIRES` and `GROUPS` of a switches module's text."""
    found: dict[str, Any] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("REQUIRES", "GROUPS"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return dict(found.get("REQUIRES", {})), tuple(found.get("GROUPS", ()))


def switches_module(requires: Mapping[str, Sequence[str]], groups: Sequence[Sequence[str]]) -> str:
    """The text of keras/src/forkgen_switches.py for a tree carrying the patches of `requires`
    (name -> the patches it requires, in series order), switched in `groups`."""
    table = "".join(f"    {name!r}: {tuple(needs)!r},\n" for name, needs in requires.items())
    grouped = "".join(f"    {tuple(group)!r},\n" for group in groups)
    return f'''"""forkgen's run-time switches (written by forkgen; see the wheel's forkgen_provenance.py).

{VARIABLE}, read once when this module is first imported: a comma-separated list of patch names,
or `all`. A disabled patch runs upstream's statements, and so do the patches that require it and
the patches switched with it (their code shares a function with its code). Unknown names are
reported with a warning and otherwise ignored.
"""

import os as _os
import warnings as _warnings

#: The patches the tree carries, each with the patches it requires.
REQUIRES = {{
{table}}}
#: The patches switched together.
GROUPS = (
{grouped})


def _disabled(value):
    names = {{name.strip() for name in value.split(",") if name.strip()}}
    if "all" in names:
        return frozenset(REQUIRES)
    unknown = sorted(names - set(REQUIRES))
    if unknown:
        _warnings.warn(f"{VARIABLE}: no such patch in this build: {{', '.join(unknown)}}", stacklevel=2)
    off = names & set(REQUIRES)
    while True:
        more = {{p for p, needs in REQUIRES.items() if off.intersection(needs)}}
        more |= {{p for group in GROUPS if off.intersection(group) for p in group}}
        if more <= off:
            return frozenset(off)
        off |= more


#: The patches that run upstream's statements in this process.
DISABLED = _disabled(_os.environ.get({VARIABLE!r}, ""))


def on(*names):
    """Whether none of `names` is disabled (asked once per switched run, at import)."""
    return DISABLED.isdisjoint(names)
'''
