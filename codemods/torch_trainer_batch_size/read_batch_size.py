"""Codemod: the torch trainer's `train_step` and `test_step` hand their loss tracker `x.shape[0]`
when `x` is a plain tensor, instead of walking `tree.flatten(x)` for it (keras-team/keras#23187).

In Keras 3.12.0-3.15.1 both methods call
`self._loss_tracker.update_state(loss, sample_weight=next(i for i in tree.flatten(x) if i is not
None).shape[0])`: the batch size, read from the first non-None leaf of the inputs. For a single
tensor, the common case, that is a flatten (several Python calls into the tree implementation),
a generator and `next` to reach `x` itself.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import SkipFile

from codemods.patchlib import (
    PLACEHOLDER,
    AnalysedCommand,
    AnchorDrift,
    AnchorReport,
    ancestors,
    ast_function,
    cst_function,
    has_marker,
    template_pieces,
    walk,
)

NAME = "torch-trainer-batch-size"
TRAINER_PY = "keras/src/backend/torch/trainer.py"
#: Read only: the inserted guard calls `tree.is_nested`, which the `tree` package must export.
TREE_INIT_PY = "keras/src/tree/__init__.py"
#: `TorchTrainer` in 3.0.0-3.15.1; keras-nightly renamed it `Trainer` (only read there, to
#: recognise the upstream shape).
CLASSES = ("TorchTrainer", "Trainer")
METHODS = ("train_step", "test_step")
ANCHOR = "sample_weight=next(i for i in tree.flatten(x) if i is not None).shape[0]"
#: The names the inserted guard reads besides `x`: each must mean what it means in 3.15.1.
GUARD_NAMES = ("torch", "tree", "type")

# -- the shapes -------------------------------------------------------------------------------

#: `next(i for i in tree.flatten(x) if i is not None).shape[0]`: 3.12.0-3.15.1 (3.2.0-3.11.3
#: had `tree.flatten(x)[0].shape[0]`, without the None skip: not this patch's target).
FLATTEN_BATCH = m.Subscript(
    value=m.Attribute(
        value=m.Call(
            func=m.Name("next"),
            args=[
                m.Arg(
                    value=m.GeneratorExp(
                        elt=m.Name("i"),
                        for_in=m.CompFor(
                            target=m.Name("i"),
                            iter=m.Call(
                                func=m.Attribute(m.Name("tree"), m.Name("flatten")), args=[m.Arg(m.Name("x"))]
                            ),
                            ifs=[
                                m.CompIf(
                                    test=m.Comparison(
                                        left=m.Name("i"),
                                        comparisons=[m.ComparisonTarget(m.IsNot(), m.Name("None"))],
                                    )
                                )
                            ],
                            inner_for_in=None,
                            asynchronous=None,
                        ),
                    ),
                    keyword=None,
                    star="",
                )
            ],
        ),
        attr=m.Name("shape"),
    ),
    slice=[m.SubscriptElement(m.Index(m.Integer("0")))],
)
#: `x.shape[0]`, the branch taken for a plain tensor (ours and upstream's).
X_BATCH = m.Subscript(
    value=m.Attribute(m.Name("x"), m.Name("shape")), slice=[m.SubscriptElement(m.Index(m.Integer("0")))]
)
#: keras-nightly since #23187: `x.shape[0] if isinstance(x, torch.Tensor) else <FLATTEN_BATCH>`.
NIGHTLY = m.IfExp(
    test=m.Call(func=m.Name("isinstance"), args=[m.Arg(m.Name("x")), m.Arg(m.Attribute(m.Name("torch"), m.Name("Tensor")))]),
    body=X_BATCH,
    orelse=FLATTEN_BATCH,
)
#: The one call per method that the patch rewrites an argument of.
UPDATE_STATE = m.Call(func=m.Attribute(m.Attribute(m.Name("self"), m.Name("_loss_tracker")), m.Name("update_state")))
SAMPLE_WEIGHT = m.Arg(keyword=m.Name("sample_weight"))

#: The state of one site.
ABSENT = "upstream's flatten"
OURS = "forkgen's guard"
THEIRS = "keras-nightly's isinstance"


@functools.cache
def piece() -> cst.IfExp:
    """The template's parenthesised `x.shape[0] if ... else UPSTREAM`, marker comment included."""
    body = template_pieces(__package__ or "codemods.torch_trainer_batch_size", "inserted.py")["loss_tracker_update"]
    args = [n for s in body for n in walk(s) if m.matches(n, SAMPLE_WEIGHT)]
    assert len(args) == 1
    value = cst.ensure_type(cst.ensure_type(args[0], cst.Arg).value, cst.IfExp)
    assert m.matches(value.orelse, m.Name(PLACEHOLDER)) and m.matches(value.body, X_BATCH)
    return value


def splice(upstream: cst.BaseExpression) -> cst.IfExp:
    """The template with upstream's expression, node for node, as its `else` branch."""
    return piece().with_changes(orelse=upstream)


def _ours(value: cst.BaseExpression, module: cst.Module) -> bool:
    """Exactly what `splice` produces (the guard and the branch compared node for node)."""
    template = piece()
    return (
        isinstance(value, cst.IfExp)
        and value.test.deep_equals(template.test)
        and value.body.deep_equals(template.body)
        and m.matches(value.orelse, FLATTEN_BATCH)
        and has_marker(value, module, NAME)
    )


# -- the analysis -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """The `sample_weight=` argument of one method's `self._loss_tracker.update_state(...)`."""

    method: str
    line: int
    arg: cst.Arg
    state: str


@dataclass(frozen=True)
class Analysis:
    path: str
    owner: str
    sites: tuple[Site, ...]
    #: Every node from the module down to each site's argument (what the codemod visits).
    path_ids: frozenset[int]

    @property
    def state(self) -> str:
        """The common state of the sites (the analysis refuses a mixed tree)."""
        return self.sites[0].state


def bindings(nodes: Iterable[ast.AST], descend: bool) -> Iterator[tuple[str, ast.AST]]:
    """(name, node) for every name the code of `nodes` binds or deletes, in that scope.

    With `descend`, nested functions, classes and comprehensions count too (an
    over-approximation: a name bound anywhere in a method is refused, never guessed about).
    """
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node
            if not descend:
                stack.extend(node.decorator_list)
                continue
        if isinstance(node, ast.Lambda) and not descend:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node.id, node
        elif isinstance(node, ast.arg):
            yield node.arg, node
        elif isinstance(node, ast.alias):
            yield (node.asname or node.name.split(".")[0]), node
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name, node
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            yield node.name, node
        elif isinstance(node, ast.MatchMapping) and node.rest:
            yield node.rest, node
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                yield name, node
        stack.extend(ast.iter_child_nodes(node))


def _import_lines(tree: ast.Module) -> dict[str, list[tuple[int, bool]]]:
    """Per guard name: (line, is the expected import) of every module-level binding."""
    found: dict[str, list[tuple[int, bool]]] = {name: [] for name in GUARD_NAMES}
    for name, node in bindings(tree.body, descend=False):
        if name not in found:
            continue
        expected = False
        parent = next(
            (s for s in ast.walk(tree) if isinstance(s, (ast.Import, ast.ImportFrom)) and node in s.names), None
        )
        if name == "torch" and isinstance(parent, ast.Import):
            expected = isinstance(node, ast.alias) and node.name == "torch" and node.asname is None
        if name == "tree" and isinstance(parent, ast.ImportFrom):
            expected = (
                parent.module == "keras.src" and parent.level == 0 and isinstance(node, ast.alias)
                and node.name == "tree" and node.asname is None
            )
        found[name].append((getattr(parent or node, "lineno", 1), expected))
    return {name: sorted(lines) for name, lines in found.items()}


def check_names(tree: ast.Module, owner: str, path: str) -> None:
    """The guard's `torch`, `tree` and `type` are the module `torch`, `keras.src.tree` and the
    builtin in both methods: bound once at module level by the expected import (`type` never),
    and never bound inside the methods."""
    wanted = {
        "torch": "exactly one binding, `import torch`",
        "tree": "exactly one binding, `from keras.src import tree`",
        "type": "no binding (the builtin)",
    }
    for name, found in _import_lines(tree).items():
        ok = (len(found) == 1 and found[0][1]) if name != "type" else not found
        if not ok:
            line = found[0][0] if found else 1
            where = ", ".join(f"line {n}" + ("" if e else " (another binding)") for n, e in found) or "none"
            raise AnchorDrift(path, line, f"module-level {name}", wanted[name], where)
    for method in METHODS:
        function = ast_function(tree, f"{owner}.{method}")
        assert function is not None  # cst_function found it
        local = [(n, node) for n, node in bindings(function.body, descend=True) if n in GUARD_NAMES]
        local += [(a.arg, a) for a in ast.walk(function.args) if isinstance(a, ast.arg) and a.arg in GUARD_NAMES]
        if local:
            name, node = local[0]
            raise AnchorDrift(path, getattr(node, "lineno", function.lineno), f"{owner}.{method}",
                              f"no local binding of {', '.join(GUARD_NAMES)}", f"`{name}` bound")


def check_is_nested_exported(tree: ast.Module, path: str = TREE_INIT_PY) -> None:
    """`tree.is_nested` is tree_api's `is_nested` (the function tree_api's `flatten` consults)."""
    found = [node for name, node in bindings(tree.body, descend=False) if name == "is_nested"]
    imports = [
        s for s in tree.body
        if isinstance(s, ast.ImportFrom) and s.module == "keras.src.tree.tree_api" and s.level == 0
        and any(a.name == "is_nested" and a.asname is None for a in s.names)
    ]
    if len(found) != 1 or len(imports) != 1:
        line = imports[0].lineno if imports else 1
        raise AnchorDrift(path, line, "from keras.src.tree.tree_api import is_nested",
                          "exactly one binding of is_nested, that import", f"{len(found)} binding(s)")


def _keyword_lines(function: ast.FunctionDef) -> list[int]:
    """The line of every `sample_weight=` of a `self._loss_tracker.update_state(...)` call."""
    lines = []
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update_state"
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "_loss_tracker"
        ):
            lines += [k.lineno for k in node.keywords if k.arg == "sample_weight"]
    return sorted(lines)


def _owner(module: cst.Module, tree: ast.Module, path: str) -> str:
    classes = [
        cst.ensure_type(s, cst.ClassDef).name.value
        for s in module.body
        if m.matches(s, m.ClassDef(name=m.OneOf(*(m.Name(c) for c in CLASSES))))
    ]
    if len(classes) != 1:
        lines = [s.lineno for s in tree.body if isinstance(s, ast.ClassDef) and s.name in CLASSES]
        raise AnchorDrift(path, lines[0] if lines else 1, "class TorchTrainer",
                          "exactly one class TorchTrainer (Trainer in keras-nightly)", f"{len(classes)}")
    return classes[0]


def _site(module: cst.Module, tree: ast.Module, owner: str, method: str, path: str) -> tuple[Site, cst.FunctionDef]:
    function = cst_function(module, f"{owner}.{method}", path, tree)
    node = ast_function(tree, f"{owner}.{method}")
    assert node is not None
    calls = [n for n in walk(function) if m.matches(n, UPDATE_STATE)]
    lines = _keyword_lines(node)
    if len(calls) != 1:
        raise AnchorDrift(path, node.lineno, "self._loss_tracker.update_state(...)", f"exactly one in {method}",
                          f"{len(calls)}")
    args = [a for a in cst.ensure_type(calls[0], cst.Call).args if m.matches(a, SAMPLE_WEIGHT)]
    if len(args) != 1 or len(lines) != 1:
        raise AnchorDrift(path, node.lineno, ANCHOR, f"exactly one sample_weight= in {method}'s update_state",
                          f"{len(args)}")
    arg = args[0]
    if m.matches(arg.value, FLATTEN_BATCH):
        state = ABSENT
    elif _ours(arg.value, module):
        state = OURS
    elif m.matches(arg.value, NIGHTLY) and not has_marker(arg.value, module, NAME):
        state = THEIRS
    else:
        found = "forkgen's marker on another expression" if has_marker(arg.value, module, NAME) else "another expression"
        raise AnchorDrift(path, lines[0], ANCHOR, "upstream's flatten, forkgen's guard or keras-nightly's isinstance",
                          found)
    return Site(method, lines[0], arg, state), function


def analyze(module: cst.Module, tree: ast.Module, path: str = TRAINER_PY) -> Analysis:
    """Both sites of a torch trainer module, in one common state; else drift."""
    owner = _owner(module, tree, path)
    found = [_site(module, tree, owner, method, path) for method in METHODS]
    sites = tuple(site for site, _ in found)
    if len({s.state for s in sites}) != 1:
        raise AnchorDrift(path, sites[1].line, ANCHOR, "train_step and test_step in the same state",
                          ", ".join(f"{s.method}: {s.state}" for s in sites))
    if sites[0].state != THEIRS:
        check_names(tree, owner, path)
    path_ids: set[int] = set()
    for site, function in found:
        path_ids |= ancestors(function, site.arg)
    classes = [s for s in module.body if m.matches(s, m.ClassDef(name=m.Name(owner)))]
    path_ids |= {id(module), id(classes[0]), id(classes[0].body)}
    return Analysis(path, owner, sites, frozenset(path_ids))


def anchors(analysis: Analysis) -> tuple[AnchorReport, ...]:
    return tuple(
        AnchorReport(ANCHOR, s.line, f"in {analysis.owner}.{s.method}'s loss tracker update") for s in analysis.sites
    )


class ReadBatchSizeCommand(AnalysedCommand[Analysis]):
    DESCRIPTION: str = "Hand the torch trainer's loss tracker x.shape[0] for a plain tensor x, without tree.flatten."
    VERSION = "1"
    PATH = TRAINER_PY
    _targets: set[int]
    _path: frozenset[int] = frozenset()

    def analyze_module(self, module: cst.Module, tree: ast.Module, path: str) -> Analysis:
        return analyze(module, tree, path)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        analysis = self.site(tree)
        if analysis.state != ABSENT:
            raise SkipFile(f"the batch size is read as {analysis.state} already")
        self._targets = {id(s.arg) for s in analysis.sites}
        # Visit only the nodes leading to the two arguments: the rest is kept as it is.
        self._path = analysis.path_ids
        return super().transform_module_impl(tree)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self._path

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if id(original_node) not in self._targets:
            return updated_node
        return updated_node.with_changes(value=splice(updated_node.value))
