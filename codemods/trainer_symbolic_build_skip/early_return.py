"""Codemod: `Trainer._symbolic_build` returns right after its four `*_unbuilt` flags when they
are all False and the `self._post_build()` it would end with changes nothing observable
(forkgen's narrowing of keras-nightly's unconditional early return).

In Keras 3.5.0-3.15.1 `_symbolic_build` computes `model_unbuilt`, `compile_metrics_unbuilt`,
`compile_loss_unbuilt` and `optimizer_unbuilt`, builds what is unbuilt, and always ends with
`self._post_build()`. Every `train_on_batch`/`test_on_batch`/`predict_on_batch` runs it; on
torch, `_post_build` rebuilds the model's `ParameterDict` of all its variables each time.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile

from codemods.patchlib import (
    AnchorDrift,
    AnchorReport,
    BackportCommand,
    cst_function,
    has_marker,
    marker,
)

NAME = "trainer-symbolic-build-skip"
TRAINER_PY = "keras/src/trainers/trainer.py"
#: Read only: the two `_post_build`s the inserted helper vouches for must be 3.15.1's.
TORCH_LAYER_PY = "keras/src/backend/torch/layer.py"
OPERATION_PY = "keras/src/ops/operation.py"
CLASS = "Trainer"
#: keras-nightly renamed the class `BaseTrainer` (only read there, to recognise the upstream shape).
CLASSES = (CLASS, "BaseTrainer")
METHOD = "_symbolic_build"
QUALNAME = f"{CLASS}.{METHOD}"
FLAGS = ("model_unbuilt", "compile_metrics_unbuilt", "compile_loss_unbuilt", "optimizer_unbuilt")
HELPER = "_forkgen_post_build_is_noop"
ANCHOR = "optimizer_unbuilt = (...)"
POST_BUILD_ANCHOR = "self._post_build()"


def _any_unbuilt() -> m.BaseMatcherNode:
    """`model_unbuilt or compile_metrics_unbuilt or compile_loss_unbuilt or optimizer_unbuilt`
    (left-associative, as Python parses it)."""
    node: m.BaseMatcherNode = m.Name(FLAGS[0])
    for flag in FLAGS[1:]:
        node = m.BooleanOperation(left=node, operator=m.Or(), right=m.Name(flag))  # type: ignore[arg-type]
    return node


#: `not (<any unbuilt>)`.
ALL_BUILT = m.UnaryOperation(operator=m.Not(), expression=_any_unbuilt())  # type: ignore[arg-type]
RETURN_ONLY = m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(value=None)])])
#: keras-nightly (3.16.0.dev2026102704): `if not (<any unbuilt>): return` right after the flags.
NIGHTLY = m.If(test=ALL_BUILT, body=RETURN_ONLY, orelse=None)
#: Ours: `if not (<any unbuilt>) and _forkgen_post_build_is_noop(self): return`.
GUARD = m.If(
    test=m.BooleanOperation(
        left=ALL_BUILT, operator=m.And(), right=m.Call(func=m.Name(HELPER), args=[m.Arg(m.Name("self"), keyword=None)])
    ),
    body=RETURN_ONLY,
    orelse=None,
)
#: `self._post_build()`, the statement 3.15.1's `_symbolic_build` ends with.
POST_BUILD = m.SimpleStatementLine(
    body=[m.Expr(m.Call(func=m.Attribute(m.Name("self"), m.Name("_post_build")), args=[]))]
)


def flag_assign(name: str) -> m.SimpleStatementLine:
    return m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])])


# -- the template -----------------------------------------------------------------------------


@functools.cache
def _template() -> cst.Module:
    package = __package__ or "codemods.trainer_symbolic_build_skip"
    return cst.parse_module(resources.files(package).joinpath("inserted.py").read_text(encoding="utf-8"))


def _bound_name(statement: cst.CSTNode) -> str | None:
    if isinstance(statement, cst.FunctionDef):
        return statement.name.value
    if m.matches(statement, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())])])):
        line = cst.ensure_type(statement, cst.SimpleStatementLine)
        target = cst.ensure_type(line.body[0], cst.Assign).targets[0].target
        return cst.ensure_type(target, cst.Name).value
    return None


@functools.cache
def guard_piece() -> cst.If:
    """The template's `if`, its marker comment in its leading lines."""
    functions = [s for s in _template().body if m.matches(s, m.FunctionDef(name=m.Name("symbolic_build_guard")))]
    assert len(functions) == 1
    body = cst.ensure_type(cst.ensure_type(functions[0], cst.FunctionDef).body, cst.IndentedBlock).body
    assert len(body) == 1 and m.matches(body[0], GUARD)
    return cst.ensure_type(body[0], cst.If)


@functools.cache
def helper_pieces() -> tuple[cst.SimpleStatementLine | cst.BaseCompoundStatement, ...]:
    """The template's module-level `_forkgen_*` statements, the first one under the marker."""
    found = [s for s in _template().body if (_bound_name(s) or "").startswith("_forkgen_")]
    assert HELPER in {_bound_name(s) for s in found}
    first = cst.ensure_type(found[0], cst.SimpleStatementLine)
    lines = [cst.EmptyLine(), cst.EmptyLine(), cst.EmptyLine(comment=cst.Comment(f"{marker(NAME)} (helper)"))]
    return (first.with_changes(leading_lines=lines), *found[1:])


@functools.cache
def helper_names() -> tuple[str, ...]:
    return tuple(_bound_name(s) or "" for s in helper_pieces())


# -- the analysis -----------------------------------------------------------------------------

ABSENT = "upstream's unconditional _post_build"
OURS = "forkgen's guarded early return"
THEIRS = "keras-nightly's early return"


@dataclass(frozen=True)
class Analysis:
    path: str
    state: str
    #: Line of the statement after which the early return goes (or went).
    line: int
    #: Line of the final `self._post_build()` (0 where upstream's shape has none to report).
    post_build_line: int
    #: Index, in `_symbolic_build`'s body, of the statement the early return follows.
    index: int
    #: Index, in the module's body, of `class Trainer`.
    class_index: int


def _method_lines(tree: ast.Module, owner: str) -> tuple[int, list[int]]:
    """The line of `<owner>._symbolic_build` and of each of its top-level statements."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == owner:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == METHOD:
                    return item.lineno, [s.lineno for s in item.body]
    return 1, []


def _module_bindings(tree: ast.Module, names: Sequence[str]) -> dict[str, list[int]]:
    """The lines where module-level code binds each of `names`."""
    found: dict[str, list[int]] = {name: [] for name in names}
    for node in tree.body:
        targets: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [(a.asname or a.name.split(".")[0]) for a in node.names]
        else:
            targets = [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        for name in targets:
            if name in found:
                found[name].append(node.lineno)
    return found


def analyze(module: cst.Module, tree: ast.Module, path: str = TRAINER_PY) -> Analysis:
    """Where the early return goes in `_symbolic_build`, or that it is there; else drift."""
    owner = next(
        (c for c in CLASSES if any(m.matches(s, m.ClassDef(name=m.Name(c))) for s in module.body)), CLASS
    )
    function = cst_function(module, f"{owner}.{METHOD}", path, tree)
    method_line, lines = _method_lines(tree, owner)
    body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
    class_index = next(i for i, s in enumerate(module.body) if m.matches(s, m.ClassDef(name=m.Name(owner))))

    def line_of(index: int) -> int:
        return lines[index] if 0 <= index < len(lines) else method_line

    # keras-nightly: the flags come from `_get_unbuilt_components()`, then the bare early return.
    nightly = [i for i, s in enumerate(body) if m.matches(s, NIGHTLY)]
    if len(nightly) > 1:
        raise AnchorDrift(path, line_of(nightly[1]), "if not (...unbuilt...): return", "at most one", f"{len(nightly)}")
    if nightly:
        if has_marker(body[nightly[0]], module, NAME):
            raise AnchorDrift(path, line_of(nightly[0]), "if not (...unbuilt...): return", "no forkgen marker", "one")
        return Analysis(path, THEIRS, line_of(nightly[0]), 0, nightly[0] - 1, class_index)

    positions = []
    for flag in FLAGS:
        found = [i for i, s in enumerate(body) if m.matches(s, flag_assign(flag))]
        if len(found) != 1:
            raise AnchorDrift(
                path, method_line, f"{flag} = ...", f"exactly one top-level assignment in {QUALNAME}", f"{len(found)}"
            )
        positions.append(found[0])
    if positions != list(range(positions[0], positions[0] + len(FLAGS))):
        raise AnchorDrift(
            path, line_of(positions[0]), ANCHOR, f"the assignments of {', '.join(FLAGS)} in a row, in that order",
            f"them at statements {positions}",
        )
    index = positions[-1]
    posts = [i for i, s in enumerate(body) if m.matches(s, POST_BUILD)]
    if len(posts) != 1 or posts[0] != len(body) - 1:
        where = f"{len(posts)}" if len(posts) != 1 else "it before other statements"
        raise AnchorDrift(
            path, line_of(posts[0] if posts else len(body) - 1), POST_BUILD_ANCHOR,
            f"exactly one, as the last statement of {QUALNAME}", where,
        )
    bindings = _module_bindings(tree, helper_names())
    after = body[index + 1] if index + 1 < len(body) else None
    guard = after is not None and m.matches(after, GUARD) and has_marker(after, module, NAME)
    if guard:
        wrong = {name: found for name, found in bindings.items() if len(found) != 1}
        if wrong:
            name, found = next(iter(wrong.items()))
            raise AnchorDrift(
                path, line_of(index + 1), name, "exactly one module-level definition beside forkgen's guard",
                f"{len(found)}",
            )
        return Analysis(path, OURS, line_of(index), line_of(len(body) - 1), index, class_index)
    if after is not None and (m.matches(after, GUARD) or m.matches(after, NIGHTLY)):
        raise AnchorDrift(path, line_of(index + 1), ANCHOR, "forkgen's guard with its marker", "it without the marker")
    taken = {name: found for name, found in bindings.items() if found}
    if taken:
        name, found = next(iter(taken.items()))
        raise AnchorDrift(path, found[0], name, "a name the module does not bind yet", f"it bound at line {found[0]}")
    return Analysis(path, ABSENT, line_of(index), line_of(len(body) - 1), index, class_index)


def anchors(analysis: Analysis) -> tuple[AnchorReport, ...]:
    found = [AnchorReport(ANCHOR, analysis.line, f"in {QUALNAME}: the early return goes after it")]
    if analysis.post_build_line:
        found.append(AnchorReport(POST_BUILD_ANCHOR, analysis.post_build_line, f"the last statement of {QUALNAME}"))
    return tuple(found)


# -- the _post_build methods the helper vouches for -------------------------------------------

#: `if in_stateless_scope(): return` then `self._track_variables()` (comments aside).
TORCH_POST_BUILD: list[m.BaseMatcherNode] = [
    m.If(
        test=m.Call(func=m.Name("in_stateless_scope"), args=[]),
        body=RETURN_ONLY,
        orelse=None,
    ),
    m.SimpleStatementLine(
        body=[m.Expr(m.Call(func=m.Attribute(m.Name("self"), m.Name("_track_variables")), args=[]))]
    ),
]
#: `self._torch_params = torch.nn.ParameterDict({variable.path: variable.value for variable in self.variables})`.
TORCH_TRACK_VARIABLES: list[m.BaseMatcherNode] = [
    m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Attribute(m.Name("self"), m.Name("_torch_params")))],
                value=m.Call(
                    func=m.Attribute(m.Attribute(m.Name("torch"), m.Name("nn")), m.Name("ParameterDict")),
                    args=[
                        m.Arg(
                            m.DictComp(
                                key=m.Attribute(m.Name("variable"), m.Name("path")),
                                value=m.Attribute(m.Name("variable"), m.Name("value")),
                                for_in=m.CompFor(
                                    target=m.Name("variable"),
                                    iter=m.Attribute(m.Name("self"), m.Name("variables")),
                                    ifs=[],
                                    inner_for_in=None,
                                ),
                            ),
                            keyword=None,
                        )
                    ],
                ),
            )
        ]
    )
]
DOCSTRING: m.BaseMatcherNode = m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])
PASS: m.BaseMatcherNode = m.SimpleStatementLine(body=[m.Pass()])


def check_post_builds(torch_layer: tuple[cst.Module, ast.Module], operation: tuple[cst.Module, ast.Module]) -> None:
    """`TorchLayer._post_build`/`_track_variables` and `Operation._post_build` are 3.15.1's."""
    cases = (
        (TORCH_LAYER_PY, torch_layer, "TorchLayer._post_build", [TORCH_POST_BUILD], "if in_stateless_scope(): return; self._track_variables()"),
        (TORCH_LAYER_PY, torch_layer, "TorchLayer._track_variables", [TORCH_TRACK_VARIABLES], "self._torch_params = torch.nn.ParameterDict({v.path: v.value for v in self.variables})"),
        (OPERATION_PY, operation, "Operation._post_build", [[DOCSTRING, PASS], [PASS], [DOCSTRING]], "a body that does nothing (`pass`)"),
    )
    for path, (module, tree), qualname, shapes, expected in cases:
        function = cst_function(module, qualname, path, tree)
        body = list(cst.ensure_type(function.body, cst.IndentedBlock).body)
        if not any(len(body) == len(shape) and all(m.matches(s, p) for s, p in zip(body, shape, strict=True)) for shape in shapes):
            node = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function.name.value), None)
            raise AnchorDrift(path, getattr(node, "lineno", 1), qualname, expected, "another body")


# -- the codemod ------------------------------------------------------------------------------


class EarlyReturnCommand(BackportCommand):
    DESCRIPTION: str = "Return early from Trainer._symbolic_build when all is built and _post_build is a no-op."
    VERSION = "1"

    def __init__(self, context: CodemodContext, tree: ast.Module | None = None) -> None:
        """`tree`: the `ast` of the module to transform, when the caller has it already."""
        super().__init__(context)
        self._tree = tree

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        analysis = analyze(tree, self._tree or ast.parse(tree.code), self.context.filename or TRAINER_PY)
        if analysis.state != ABSENT:
            raise SkipFile(f"{QUALNAME} has {analysis.state} already")
        owner = cst.ensure_type(tree.body[analysis.class_index], cst.ClassDef)
        members = list(cst.ensure_type(owner.body, cst.IndentedBlock).body)
        at = next(i for i, s in enumerate(members) if m.matches(s, m.FunctionDef(name=m.Name(METHOD))))
        function = cst.ensure_type(members[at], cst.FunctionDef)
        block = cst.ensure_type(function.body, cst.IndentedBlock)
        statements = list(block.body)
        statements.insert(analysis.index + 1, guard_piece())
        members[at] = function.with_changes(body=block.with_changes(body=statements))
        owner = owner.with_changes(body=cst.ensure_type(owner.body, cst.IndentedBlock).with_changes(body=members))
        body = list(tree.body)
        body[analysis.class_index : analysis.class_index + 1] = [owner, *helper_pieces()]
        return tree.with_changes(body=body)
