"""Codemod: memoise `result_type` (keras-team/keras#23336, open upstream).

Two pieces in `keras/src/backend/common/dtypes.py`: the memo and its helpers at module level,
right after `def _lattice_result_type`, and in `result_type`, an `if` right before the final
`return _lattice_result_type(...)` that answers from the memo (or computes that same
expression and remembers it). Upstream's statements all stay, byte for byte.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import (
    AnchorDrift,
    AnchorReport,
    BackportCommand,
    cst_function,
    find_statements,
    has_marker,
    template_pieces,
    walk,
)

NAME = "memoised-result-type"
DTYPES_PY = "keras/src/backend/common/dtypes.py"
FUNCTION = "result_type"
LATTICE = "_lattice_result_type"
#: The names the module-level piece defines (ours; drift if upstream defines one of them).
HELPERS = ("_FORKGEN_RESULT_TYPES", "_FORKGEN_KEY_CLASSES", "_forkgen_key_class", "_forkgen_result_type_key",
           "_forkgen_memoise")

#: `return _lattice_result_type(...)`: how result_type ends in every Keras 3 release (3.0.0-3.15.1).
FINAL_RETURN = m.SimpleStatementLine(body=[m.Return(m.Call(func=m.Name(LATTICE)))])
#: Our lookup, before it: `if (memo_key := _forkgen_result_type_key(dtypes)) is not None:`.
LOOKUP = m.If(
    test=m.Comparison(
        left=m.NamedExpr(target=m.Name("memo_key"), value=m.Call(func=m.Name("_forkgen_result_type_key"))),
    )
)


@functools.cache
def pieces() -> dict[str, list[cst.BaseStatement]]:
    return template_pieces(__package__ or "codemods.memoised_result_type", "inserted.py")


@dataclass(frozen=True)
class Analysis:
    """Where the pieces go in dtypes.py, and which are there."""

    lattice_line: int
    lattice: cst.FunctionDef
    line: int
    final_line: int
    final: cst.SimpleStatementLine
    #: Our `if` before the final return, when present.
    lookup: bool
    #: Our module-level statements present (by HELPERS name).
    helpers: tuple[str, ...]
    #: A memoising function result_type calls that is not ours (the upstream PR's shape).
    upstream: str | None


def _defined_names(statement: cst.CSTNode) -> list[str]:
    if isinstance(statement, cst.FunctionDef):
        return [statement.name.value]
    if isinstance(statement, cst.SimpleStatementLine):
        return [
            t.target.value for s in statement.body if isinstance(s, cst.Assign)
            for t in s.targets if isinstance(t.target, cst.Name)
        ]
    return []


def _memoised(function: cst.FunctionDef, module: cst.Module) -> bool:
    """Whether `function` is decorated with `functools.lru_cache`/`cache` (in any spelling)."""
    return any(
        name in module.code_for_node(d.decorator) for d in function.decorators for name in ("lru_cache", "cache")
    )


def analyze(module: cst.Module, tree: ast.Module, path: str = DTYPES_PY) -> Analysis:
    """The anchors of dtypes.py for the memo; AnchorDrift when missing, duplicated or reshaped."""
    lattice = cst_function(module, LATTICE, path, tree)
    function = cst_function(module, FUNCTION, path, tree)
    lines = {s.name: s.lineno for s in tree.body if isinstance(s, ast.FunctionDef)}
    line = lines[FUNCTION]
    star = function.params.star_arg
    if not (isinstance(star, cst.Param) and star.name.value == "dtypes"):
        raise AnchorDrift(path, line, f"def {FUNCTION}(*dtypes)", "the arguments as `*dtypes`", "another signature")
    # The PR's shape (#23336): result_type calls an lru_cache'd helper of the module. Ours
    # calls no decorated function (its helpers are plain functions and a dict).
    decorated = {
        s.name.value for s in module.body if isinstance(s, cst.FunctionDef) and _memoised(s, module)
    }
    calls = {
        n.func.value for n in walk(function)
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in decorated
    }
    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    function_ast = next(s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == FUNCTION)
    returns = find_statements(function, FINAL_RETURN)
    if len(returns) != 1 or not body or returns[0] is not body[-1]:
        raise AnchorDrift(path, function_ast.body[-1].lineno, f"return {LATTICE}(...)",
                          f"exactly one, as the last statement of {FUNCTION}",
                          f"{len(returns)}" + (", not last" if len(returns) == 1 else ""))
    final_line = function_ast.body[-1].lineno
    lookup = len(body) >= 2 and m.matches(body[-2], LOOKUP) and has_marker(body[-2], module, NAME)
    helpers = tuple(
        name for s in module.body if has_marker(s, module, NAME) for name in _defined_names(s) if name in HELPERS
    )
    theirs = [name for s in module.body if not has_marker(s, module, NAME) for name in _defined_names(s)
              if name in HELPERS]
    if theirs:
        raise AnchorDrift(path, 1, theirs[0], "forkgen's helper names free (or marked ours)", "an unmarked definition")
    return Analysis(lines[LATTICE], lattice, line, final_line, cst.ensure_type(body[-1], cst.SimpleStatementLine),
                    lookup, helpers, min(calls) if calls else None)


def anchors(analysis: Analysis) -> tuple[AnchorReport, ...]:
    return (
        AnchorReport(f"def {LATTICE}", analysis.lattice_line, "the memo goes after it"),
        AnchorReport(f"return {LATTICE}(...)", analysis.final_line, f"last statement of {FUNCTION}"),
    )


def present(analysis: Analysis) -> bool:
    """Both pieces there; drift when only part of them is."""
    complete = analysis.lookup and sorted(analysis.helpers) == sorted(HELPERS)
    if not complete and (analysis.lookup or analysis.helpers):
        raise AnchorDrift(DTYPES_PY, analysis.line, "memo", "all pieces present or none",
                          f"lookup {'present' if analysis.lookup else 'absent'}, helpers {list(analysis.helpers)}")
    return complete


class MemoiseResultTypeCommand(BackportCommand):
    DESCRIPTION: str = "result_type answers from a memo keyed on floatx and its arguments' classes and values."
    VERSION = "1"

    def __init__(self, context: CodemodContext, analysis: Analysis | None = None) -> None:
        """`analysis`: `analyze` of the module to transform, when the caller made it (the series
        hands over its check's: the module is neither rendered nor parsed again)."""
        super().__init__(context)
        self._given = analysis

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        path = self.context.filename or DTYPES_PY
        analysis = self._given or analyze(tree, ast.parse(tree.code), path)
        if analysis.upstream is not None:
            raise SkipFile(f"result_type already calls the memoised {analysis.upstream}")
        if present(analysis):
            raise SkipFile("the memo is there already")
        body: list[cst.BaseStatement] = []
        for statement in tree.body:
            if statement is analysis.lattice:
                body.append(statement)
                first, *rest = pieces()["module_level"]
                assert isinstance(first, cst.SimpleStatementLine)
                # Two blank lines after upstream's function, as between module-level defs.
                blank = [cst.EmptyLine(), cst.EmptyLine()]
                body.extend([first.with_changes(leading_lines=[*blank, *first.leading_lines]), *rest])
            elif m.matches(statement, m.FunctionDef(name=m.Name(FUNCTION))):
                body.append(self._with_lookup(cst.ensure_type(statement, cst.FunctionDef), analysis.final))
            else:
                body.append(statement)
        return tree.with_changes(body=body)

    @staticmethod
    def _with_lookup(function: cst.FunctionDef, final: cst.SimpleStatementLine) -> cst.FunctionDef:
        value = cst.ensure_type(cst.ensure_type(final.body[0], cst.Return).value, cst.Call)

        class Fill(cst.CSTTransformer):
            def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
                return value if updated_node.value == "UPSTREAM_VALUE" else updated_node

        lookup = cst.ensure_type(pieces()["memo_lookup"][0].visit(Fill()), cst.If)
        block = cst.ensure_type(function.body, cst.IndentedBlock)
        statements = list(block.body)
        # Upstream's comment lines above the return move above our `if`.
        statements[-1:] = [lookup.with_changes(leading_lines=final.leading_lines), final.with_changes(leading_lines=[])]
        return function.with_changes(body=block.with_changes(body=statements))
