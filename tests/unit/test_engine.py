"""The patch engine (codemods/engine/) on a small synthetic module: patterns, lines, each edit,
counts, drift wording, markers and outcomes, name checks, the generated command."""

from __future__ import annotations

import ast
import textwrap
from typing import Any

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest, SkipFile

from codemods import series
from codemods.engine import (
    TREE_CACHES,
    AddElse,
    Analysis,
    Anchor,
    AnchorDrift,
    Append,
    Check,
    DeclaredPatch,
    Details,
    Edit,
    Headers,
    Helper,
    InsertAfter,
    InsertBefore,
    Outcome,
    Prepend,
    Replace,
    ReplaceExpression,
    Sources,
    Unwrap,
    Wrap,
    WrapBody,
    compile_pattern,
    linemap,
    lines,
    names,
    names_of,
    statements,
)

PATH = "pkg/mod.py"
MODULE = textwrap.dedent(
    '''\
    """A module."""

    from lib import helper


    def anchor_fn():
        return 1


    class Box:
        def __init__(self, value):
            self.value = value
            self.ready = False

        def get(self, key, default=None):
            """Look up key."""
            # find it
            found = helper(self.value, key)
            if found is None:
                return default
            self.ready = True
            return found

        def other(self):
            self.ready = True
    '''
)
#: The pieces of the test patches (`inserted.py`'s shape: one function per piece).
TEMPLATE = textwrap.dedent(
    '''\
    def guard(self):
        if not self.ready:  # forkgen: test-patch
            UPSTREAM


    def count(self):
        # forkgen: test-patch
        self.lookups = getattr(self, "lookups", 0) + 1


    def size(self):
        self.size = len(self.value)  # forkgen: test-patch


    def fast(self, key):
        if key is None:  # forkgen: test-patch
            return None


    def checked(found):
        assert found is not None  # forkgen: test-patch
        UPSTREAM


    def two():
        return 2  # forkgen: test-patch


    def cached(self, key):
        # forkgen: test-patch
        return _cache.get(key) or UPSTREAM


    def helpers():
        # forkgen: test-patch
        _cache = {}


    def rebinds(self):
        found = None  # forkgen: test-patch


    def unmarked(self):
        self.size = 0


    def enclosed(self):
        with self.lock:
            assert self.value  # forkgen: test-patch
            UPSTREAM


    def early():
        # forkgen: test-patch
        _seen = set()
    '''
)
HEADERS = Headers("A test patch.", "ours", None, "not-needed", None, "2026-12-01")
DETAILS = Details(apply="edit {todo}", present="all in", upstream="upstream did it")


def declare(*edits: Edit, **extra: Any) -> DeclaredPatch:
    """A patch `test-patch` of `pkg/mod.py` made of `edits`, its pieces from TEMPLATE; unless told
    otherwise, an unmarked applied form is upstream's (`upstream_forms`, which most tests here
    exercise; a patch's default is drift)."""
    namespace = {
        "name": "test-patch", "version": "3", "headers": HEADERS, "files": (PATH,), "edits": edits,
        "details": DETAILS, "template_source": TEMPLATE, "__module__": __name__, "upstream_forms": True, **extra,
    }
    cls = type("TestPatch", (DeclaredPatch,), namespace)
    return cls()  # type: ignore[no-any-return]


def sources(text: str) -> Sources:
    return Sources(lambda path: text if path == PATH else None)


def run(patch: DeclaredPatch, text: str) -> tuple[Check, str]:
    """The patch's check on `text` and the text after its apply (unchanged if nothing to do)."""
    tree = sources(text)
    check = patch.check(tree)
    if check.outcome is Outcome.APPLIED and not check.present:
        patch.apply(tree)
        return check, tree.rendered()[PATH]
    return check, text


def edited(old: str, new: str, text: str = MODULE) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def unmarked(text: str) -> str:
    """`text` as upstream would write forkgen's change: without its marker."""
    return text.replace("  # forkgen: test-patch", "").replace("        # forkgen: test-patch\n", "").replace(
        "# forkgen: test-patch\n", "")


def drift(patch: DeclaredPatch, text: str) -> str:
    with pytest.raises(AnchorDrift) as caught:
        patch.check(sources(text))
    return str(caught.value)


# -- patterns ------------------------------------------------------------------------------------


def matches(pattern: str, code: str, expression: bool = False) -> bool:
    node = cst.parse_expression(code) if expression else cst.parse_statement(code)
    return compile_pattern(pattern, expression).match(node) is not None


@pytest.mark.parametrize(
    ("pattern", "code", "expected"),
    [
        ("self.x = True", "self.x = True", True),
        ("self.x = True", "self.x=True  # a comment", True),
        ("self.x = True", "(self).x = (True)", True),
        ("self.x = True", "self.x = 1", False),
        ("self.x = True", "self.y = True", False),
        ("self.x = True", "self.x = True; y = 1", False),
        ("f(__)", "f(1)", True),
        ("f(__)", "f(1, 2)", False),
        ("f(__, ___)", "f(a, b, *c, k=3)", True),
        ("f(__, ___)", "f()", False),
        ("f(___)", "f()", True),
        ("x = [___, 3]", "x = [1, 2, 3]", True),
        ("x = [___, 3]", "x = [1, 2]", False),
        ('x == "meta"', 'x == "meta"', True),
        ('x == "meta"', "x == 'meta'", False),  # strings are as written
        ("if a: ___", "if a:\n    b()\n    c()\n", True),
        ("if a: b()", "if a:\n    b()\n", True),  # a body on the header's line is also the block's
        ("if a: b()", "if a:\n    c()\n", False),
        ("if a: ___", "if a:\n    b()\nelse:\n    c()\n", False),  # no `else:` in the pattern: none
        ("if a: ___\nelse: ___", "if a:\n    b()\nelse:\n    c()\n", True),
        ("def f(___): ___", "@cache\ndef f(a, *, b) -> int:\n    return a\n", True),  # any header
        ("def f(___): ___", "async def f():\n    pass\n", False),
        ("class C: ___", "class C(Base, metaclass=M):\n    x = 1\n", True),
        ("def __init__(___): ___", "def __init__(self):\n    pass\n", True),  # a dunder is a name
        ("def __init__(___): ___", "def init(self):\n    pass\n", False),
        ("__x.append(__y)", "out.append(v + 1)", True),
        ("import threading", "import threading as t", False),
        ("from . import x", "from .. import x", False),
    ],
)
def test_pattern(pattern: str, code: str, expected: bool) -> None:
    assert matches(pattern, code) is expected


def test_expression_pattern_and_captures() -> None:
    pattern = compile_pattern("getattr(__obj, __name, None)", expression=True)
    assert pattern.kind == "Call" and pattern.captures == ("obj", "name")
    found = pattern.match(cst.parse_expression("getattr(TRACKER, name, None)"))
    assert found is not None
    assert found["obj"].deep_equals(cst.Name("TRACKER")) and found["name"].deep_equals(cst.Name("name"))
    assert pattern.match(cst.parse_expression("getattr(TRACKER, name)")) is None


@pytest.mark.parametrize(
    ("pattern", "error"),
    [("x = ___", "any number of items"), ("__", "a wildcard alone"), ("f(__a, __a)", "appears twice")],
)
def test_pattern_errors(pattern: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        compile_pattern(pattern)


def test_a_pattern_is_compiled_once() -> None:
    assert compile_pattern("self.x = True") is compile_pattern("self.x = True")


# -- lines ---------------------------------------------------------------------------------------

LINES = textwrap.dedent(
    '''\
    """Doc
    string."""
    import os; import sys


    @decorator(
        1,
    )
    # a comment between
    def f(a,
          b):
        x = """
        text
        """
        if a:  # trailing
            pass
        elif b:
            y = (1 +
                 2)
        else:
            try:
                z = 3
            except E:
                raise
            finally:
                w = 4
        return [
            i for i in x
        ]


    class C:

        # comment

        attr = 1
    '''
)


def test_lines_are_the_lines_ast_gives_every_statement() -> None:
    module = cst.parse_module(LINES)
    nodes = [n for n in statements(module) if isinstance(n, (cst.SimpleStatementLine, cst.BaseCompoundStatement))]
    found = lines(module, nodes)
    assert sorted(set(found.values())) == sorted({s.lineno for s in ast.walk(ast.parse(LINES)) if isinstance(s, ast.stmt)})
    assert len(found) == len(nodes)
    f = next(n for n in nodes if isinstance(n, cst.FunctionDef))
    assert found[id(f)] == 10  # the `def`, below its decorator and the comment


def test_lines_of_expressions_and_of_the_module() -> None:
    module = cst.parse_module(LINES)
    small = [s.body[-1] for s in statements(module) if isinstance(s, cst.SimpleStatementLine)]
    operation = next(n for s in small for n in _nodes(s) if isinstance(n, cst.BinaryOperation))
    comprehension = next(n for s in small for n in _nodes(s) if isinstance(n, cst.ListComp))
    found = lines(module, [module, *small, operation, comprehension])
    assert found[id(module)] == 1
    assert [found[id(s)] for s in small][:4] == [1, 3, 12, 16]  # the docstring, `import sys`, `x = ...`, `pass`
    assert (found[id(operation)], found[id(comprehension)]) == (18, 27)


def _nodes(root: cst.CSTNode) -> list[cst.CSTNode]:
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(node.children)
    return found


# -- each edit -----------------------------------------------------------------------------------

WRAP = declare(Wrap(Anchor("Box.get", "self.ready = True"), "guard", label="self.ready"))
WRAPPED = edited(
    "        self.ready = True\n        return found\n",
    "        if not self.ready:  # forkgen: test-patch\n            self.ready = True\n        return found\n",
)
BEFORE_LOOKUP = declare(InsertBefore(Anchor("Box.get", "found = helper(self.value, __)"), "count"))
COUNTED = edited(
    "        # find it\n        found = helper",
    "        # find it\n        # forkgen: test-patch\n"
    '        self.lookups = getattr(self, "lookups", 0) + 1\n        found = helper',
)
AFTER_VALUE = declare(InsertAfter(Anchor("Box.__init__", "self.value = __"), "size"))
SIZED = edited(
    "        self.value = value\n",
    "        self.value = value\n        self.size = len(self.value)  # forkgen: test-patch\n",
)
PREPEND = declare(Prepend("Box.get", "fast"))
PREPENDED = edited(
    '        """Look up key."""\n        # find it\n',
    '        """Look up key."""\n        # find it\n        if key is None:  # forkgen: test-patch\n'
    "            return None\n",
)
REPLACE = declare(Replace(Anchor("Box.get", "return found"), "checked"))
REPLACED = edited(
    "        return found\n", "        assert found is not None  # forkgen: test-patch\n        return found\n"
)
REPLACE_ALL = declare(Replace(Anchor("anchor_fn", "return 1"), "two"))
REPLACED_ALL = edited("    return 1\n", "    return 2  # forkgen: test-patch\n")
EXPRESSION = declare(
    ReplaceExpression(Anchor("Box.get", "helper(self.value, __)", expression=True), "cached"),
    Helper(Anchor("", "def anchor_fn(): ___"), "helpers"),
)
CACHED = edited(
    "        # find it\n        found = helper(self.value, key)\n",
    "        # find it\n        # forkgen: test-patch\n        found = _cache.get(key) or helper(self.value, key)\n",
    edited("    return 1\n\n\n", "    return 1\n\n\n# forkgen: test-patch\n_cache = {}\n\n\n"),
)
CASES = {
    "wrap": (WRAP, WRAPPED, "self.ready"),
    "insert before": (BEFORE_LOOKUP, COUNTED, "found = helper(self.value, __)"),
    "insert after": (AFTER_VALUE, SIZED, "self.value = __"),
    "prepend": (PREPEND, PREPENDED, "Box.get: first statement"),
    "replace, keeping the statement": (REPLACE, REPLACED, "return found"),
    "replace": (REPLACE_ALL, REPLACED_ALL, "return 1"),
    "replace an expression, with a helper": (EXPRESSION, CACHED, "helper(self.value, __) and def anchor_fn(): ___"),
}


@pytest.mark.parametrize(("patch", "after", "todo"), CASES.values(), ids=CASES.keys())
def test_each_edit(patch: DeclaredPatch, after: str, todo: str) -> None:
    check, text = run(patch, MODULE)
    assert (check.outcome, check.present, check.detail) == (Outcome.APPLIED, False, f"edit {todo}")
    assert text == after
    # Already applied: recognised by the pieces and their marker, nothing changes.
    again, same = run(patch, after)
    assert (again.outcome, again.present, again.detail, same) == (Outcome.APPLIED, True, "all in", after)
    # The same change without forkgen's marker is upstream's.
    upstream, _ = run(patch, unmarked(after))
    assert (upstream.outcome, upstream.detail) == (Outcome.UPSTREAM, "upstream did it")


def test_reports_name_each_anchor_at_its_line() -> None:
    assert [(a.name, a.line, a.description, a.path) for a in WRAP.check(sources(MODULE)).anchors] == [
        ("self.ready = True", 21, "in Box.get", "")
    ]
    # Once wrapped, the line is still the anchor's (inside the guard), not the guard's.
    assert [a.line for a in WRAP.check(sources(WRAPPED)).anchors] == [22]
    assert [(a.name, a.line, a.description) for a in PREPEND.check(sources(MODULE)).anchors] == [
        ("Box.get: first statement", 15, "first statement of Box.get")
    ]
    assert [(a.name, a.line) for a in EXPRESSION.check(sources(MODULE)).anchors] == [
        ("helper(self.value, __)", 18), ("def anchor_fn(): ___", 6)
    ]



def test_a_description_names_the_state_of_its_piece() -> None:
    patch = declare(Wrap(Anchor("Box.get", "self.ready = True", description="guard: {state}"), "guard"))
    assert [[a.description for a in patch.check(sources(text)).anchors] for text in (MODULE, WRAPPED, unmarked(WRAPPED))] == [
        ["guard: absent"], ["guard: ours"], ["guard: theirs"]]



def test_a_series_run_leaves_no_tree_in_the_caches_by_node() -> None:
    # Lines and names are kept by node, the node with them: a run empties them as it ends.
    WRAP.check(sources(MODULE))
    assert all(TREE_CACHES) and {id(c) for c in TREE_CACHES} >= {id(linemap._PARTS), id(linemap._LINES), id(names._NAMES)}
    result = series.run(lambda path: MODULE if path == PATH else None, (WRAP,))
    assert result.unswitched_files == {PATH: WRAPPED} and not any(TREE_CACHES)


class TestGeneratedCommand(CodemodTest):
    TRANSFORM = WRAP.command

    def test_the_command_makes_the_change(self) -> None:
        self.assertCodemod(MODULE, WRAPPED)

    def test_the_command_skips_an_applied_or_upstream_module(self) -> None:
        self.assertCodemod(WRAPPED, WRAPPED, expected_skip=True)
        self.assertCodemod(unmarked(WRAPPED), unmarked(WRAPPED), expected_skip=True)


def test_one_command_per_patch_named_and_versioned() -> None:
    command = WRAP.command
    assert type(WRAP).codemods == (command,)
    assert (command.__name__, command.VERSION, command.DESCRIPTION) == ("TestPatchCommand", "3", "A test patch.")
    assert command.__module__ == __name__ and WRAP.codemod_versions() == {"TestPatchCommand": "3"}
    named = declare(Wrap(Anchor("Box.get", "self.ready = True"), "guard"), codemod="GuardReadyCommand")
    assert named.command.__name__ == "GuardReadyCommand" and type(named).codemod == "GuardReadyCommand"


def test_the_transformer_visits_only_the_statements_leading_to_the_edit() -> None:
    visited: list[cst.CSTNode] = []

    class Recording(WRAP.command):  # type: ignore[name-defined,misc]  # a class made at run time
        def on_visit(self, node: cst.CSTNode) -> bool:
            entered: bool = super().on_visit(node)
            if entered:
                visited.append(node)
            return entered

    module = cst.parse_module(MODULE)
    assert Recording(CodemodContext()).transform_module(module).code == WRAPPED
    kinds = [type(n).__name__ for n in visited]
    # Module, class Box, its block, def get, its block, the write; nothing else (not `other`).
    assert kinds == ["Module", "ClassDef", "IndentedBlock", "FunctionDef", "IndentedBlock", "SimpleStatementLine"]
    assert cst.ensure_type(visited[3], cst.FunctionDef).name.value == "get"


# -- counts and drift wording --------------------------------------------------------------------


def test_counts() -> None:
    both = declare(InsertBefore(Anchor("Box.get", "return __", count=2), "size"))
    check, text = run(both, MODULE)
    assert [(a.name, a.line) for a in check.anchors] == [("return __", 20), ("return __", 22)]
    assert text.count("self.size = len(self.value)  # forkgen: test-patch\n") == 2
    assert run(both, text)[0].present
    three = declare(InsertBefore(Anchor("Box.get", "return __", count=3), "size"))
    assert drift(three, MODULE) == "pkg/mod.py:20: anchor 'return __': expected exactly three `return __` in Box.get; found 2"


@pytest.mark.parametrize(
    ("patch", "text", "message"),
    [
        (WRAP, edited("        self.ready = True\n        return", "        return"),
         "pkg/mod.py:15: anchor 'self.ready = True': expected exactly one `self.ready = True` in Box.get; "
         "found 0 unguarded and 0 guarded"),
        (WRAP, edited("        return found\n", "        self.ready = True\n        return found\n", WRAPPED),
         "pkg/mod.py:22: anchor 'self.ready = True': expected exactly one `self.ready = True` in Box.get; "
         "found 1 unguarded and 1 guarded"),
        (AFTER_VALUE, edited("        self.ready = False\n", "        self.value = 0\n", SIZED),
         "pkg/mod.py:12: anchor 'self.value = __': expected exactly one `self.value = __` in Box.__init__; "
         "found 1 to edit and 1 edited"),
        (declare(Helper(Anchor("", "def missing(): ___"), "helpers")), MODULE,
         "pkg/mod.py:1: anchor 'def missing(): ___': expected exactly one `def missing(): ___` at module level; found 0"),
        (declare(Wrap(Anchor("Bag.get", "self.ready = True"), "guard")), MODULE,
         "pkg/mod.py:1: anchor 'Bag.get': expected exactly one class Bag; found 0"),
        (declare(Wrap(Anchor("Box.put", "self.ready = True"), "guard")), MODULE,
         "pkg/mod.py:10: anchor 'Box.put': expected exactly one def put; found 0"),
        (WRAP, MODULE + "\n\nclass Box:\n    pass\n",
         "pkg/mod.py:1: anchor 'Box.get': expected exactly one class Box; found 2"),
    ],
    ids=["anchor gone", "anchor twice, once wrapped", "anchor twice, once edited", "helper anchor gone",
         "no such class", "no such method", "two classes"],
)
def test_drift_wording(patch: DeclaredPatch, text: str, message: str) -> None:
    assert drift(patch, text) == message


def test_drift_in_the_command_names_the_file_it_was_given() -> None:
    command = WRAP.command(CodemodContext(filename="/tmp/x/mod.py"))
    with pytest.raises(AnchorDrift, match=r"^/tmp/x/mod.py:15: anchor 'self.ready = True'"):
        command.transform_module(cst.parse_module(edited("        self.ready = True\n        return", "        return")))


# -- outcomes: markers, partial presence, upstream -----------------------------------------------

TWO = declare(
    Wrap(Anchor("Box.get", "self.ready = True"), "guard", label="self.ready"),
    InsertAfter(Anchor("Box.__init__", "self.value = __"), "size", label="size"),
)
TWO_APPLIED = edited(
    "        self.value = value\n",
    "        self.value = value\n        self.size = len(self.value)  # forkgen: test-patch\n",
    WRAPPED,
)


def test_outcomes_of_two_pieces() -> None:
    check, text = run(TWO, MODULE)
    assert check.detail == "edit self.ready and size" and text == TWO_APPLIED
    assert run(TWO, TWO_APPLIED)[0].present
    assert run(TWO, unmarked(TWO_APPLIED))[0].outcome is Outcome.UPSTREAM
    # forkgen's piece beside one missing: drift, whatever the order.
    assert drift(TWO, WRAPPED) == (
        "pkg/mod.py:12: anchor 'test-patch': expected all pieces present or none; found self.ready forkgen's, size missing"
    )
    # upstream's piece beside one to apply: drift, unless the pieces are independent.
    assert drift(TWO, unmarked(WRAPPED)) == (
        "pkg/mod.py:12: anchor 'test-patch': expected all pieces upstream's or none; found self.ready upstream's, size missing"
    )
    independent = declare(*TWO.edits, upstream_per_piece=True)
    check, text = run(independent, unmarked(WRAPPED))
    assert (check.outcome, check.detail) == (Outcome.APPLIED, "edit size")
    assert text == edited("        self.value = value\n", "        self.value = value\n        self.size = len(self.value)  "
                          "# forkgen: test-patch\n", unmarked(WRAPPED))
    assert run(independent, text)[0].present  # forkgen's and upstream's pieces: all there


def test_a_piece_without_its_marker_is_refused() -> None:
    with pytest.raises(ValueError, match="carries no `# forkgen: test-patch`"):
        run(declare(InsertAfter(Anchor("Box.__init__", "self.value = __"), "unmarked")), MODULE)


UPSTREAM_GET = edited("        found = helper(self.value, key)\n", "        found = self._cache.get(key)\n")


def test_declared_upstream_patterns() -> None:
    patch = declare(*BEFORE_LOOKUP.edits, upstream_patterns=(
        Anchor("Box.get", "self._cache.get(__)", expression=True, description="upstream's cache"),))
    assert run(patch, MODULE)[0].outcome is Outcome.APPLIED
    # The anchor is gone but the upstream pattern is there: upstream, not drift.
    check, _ = run(patch, UPSTREAM_GET)
    assert (check.outcome, check.detail) == (Outcome.UPSTREAM, "upstream did it")
    assert [(a.name, a.line, a.description) for a in check.anchors] == [("self._cache.get(__)", 18, "upstream's cache")]
    # Without the pattern, the same tree is drift.
    assert "found 0" in drift(BEFORE_LOOKUP, UPSTREAM_GET)


# -- names ---------------------------------------------------------------------------------------


def test_names_of() -> None:
    code = cst.parse_module("import a.b as c, d.e\nfor i, (j, *k) in f(x):\n    y.z = i\n    w += lambda p: p + q\n")
    used, bound = names_of(code.body)
    assert bound == {"c", "d", "i", "j", "k", "w"}
    assert used == {"f", "x", "y", "i", "w", "q"}
    assert names_of(cst.parse_module("def f(a):\n    b = 1\nclass C:\n    d = 2\n").body, into_defs=False)[1] == {"f", "C"}
    # A lambda's parameters are its own; its body's other names and its defaults are the scope's.
    assert names_of(cst.parse_module("y = g(key=lambda x, k=K: x + z)\n").body) == ({"g", "K", "z"}, {"y"})


def test_free_names_must_be_bound() -> None:
    alone = declare(ReplaceExpression(Anchor("Box.get", "helper(self.value, __)", expression=True), "cached"))
    assert drift(alone, MODULE) == (
        "pkg/mod.py:18: anchor '_cache': expected bound where cached goes (in Box.get or at module level); found not bound"
    )
    # Declared by the patch, or bound in the module: fine.
    assert run(declare(*alone.edits, names={"_cache": "a module global the patch sets"}), MODULE)[0].outcome is Outcome.APPLIED
    assert run(alone, MODULE + "\n_cache = {}\n")[0].outcome is Outcome.APPLIED


def test_names_the_piece_binds_must_be_free_in_its_function() -> None:
    patch = declare(InsertBefore(Anchor("Box.get", "return found"), "rebinds"))
    assert drift(patch, MODULE) == "pkg/mod.py:22: anchor 'Box.get: found': expected names free for rebinds; found used"


def test_a_helper_name_bound_elsewhere_is_drift() -> None:
    assert drift(EXPRESSION, MODULE + "\n_cache = None\n") == (
        "pkg/mod.py:27: anchor '_cache': expected names free for helpers (forkgen's helper); found already bound"
    )


# -- the escape hatch ----------------------------------------------------------------------------


def test_a_declaration_adds_its_own_check() -> None:
    seen: list[Analysis] = []

    def verify(self: DeclaredPatch, sources: Sources, analysis: Analysis) -> None:
        seen.append(analysis)
        if "self.ready = False" not in sources.require(PATH, "module"):
            raise AnchorDrift(PATH, 13, "self.ready = False", "Box starts not ready", "another start")

    patch = declare(*WRAP.edits, verify=verify)
    assert run(patch, MODULE)[1] == WRAPPED and seen and seen[0].check.outcome is Outcome.APPLIED
    assert drift(patch, edited("self.ready = False", "self.ready = None")).endswith("found another start")
    # Not asked on a tree that carries the change upstream.
    seen.clear()
    assert run(patch, unmarked(WRAPPED))[0].outcome is Outcome.UPSTREAM and not seen


def test_two_edits_of_one_statement_are_refused() -> None:
    patch = declare(InsertBefore(Anchor("Box.get", "return found"), "size"),
                    InsertAfter(Anchor("Box.get", "return found"), "count"))
    with pytest.raises(ValueError, match="two edits of one node"):
        run(patch, MODULE)


def test_skipfile_reason() -> None:
    with pytest.raises(SkipFile, match="applied already"):
        WRAP.command(CodemodContext()).transform_module(cst.parse_module(WRAPPED))


# -- alternatives, upstream shapes, escape hatches -------------------------------------------------


def test_an_anchor_with_alternatives_matches_each_and_is_named_by_its_pattern() -> None:
    patch = declare(Wrap(Anchor("Box.get", "self.ready = True", alternatives=("self.ready = 1",)), "guard"))
    one = edited("        self.ready = True\n        return found\n", "        self.ready = 1\n        return found\n")
    check, after = run(patch, one)
    assert [(a.name, a.line) for a in check.anchors] == [("self.ready = True", 21)]
    assert after == WRAPPED.replace("self.ready = True\n        return", "self.ready = 1\n        return")
    assert run(patch, after)[0].present and run(patch, MODULE)[1] == WRAPPED
    assert "found 0 unguarded" in drift(WRAP, one)
    either = Anchor("Box.get", "self.ready = True", alternatives=("if x: pass",)).compiled
    assert either.kind == "" and either.match(cst.parse_statement("if x:\n    pass\n")) == {}
    assert either.match(cst.parse_statement("return found")) is None
    with pytest.raises(ValueError, match="capture other names"):
        _ = Anchor("Box.get", "f(__a)", alternatives=("f(__b)",)).compiled.matcher


def test_an_unmarked_applied_form_may_be_drift_and_a_form_reports_its_own_line() -> None:
    assert [a.line for a in run(WRAP, WRAPPED)[0].anchors] == [22]  # the anchor's, inside the guard
    at_form = declare(Wrap(Anchor("Box.get", "self.ready = True"), "guard", form_line=True))
    assert [a.line for a in run(at_form, WRAPPED)[0].anchors] == [21]
    assert run(at_form, unmarked(WRAPPED))[0].outcome is Outcome.UPSTREAM
    strict = declare(*WRAP.edits, upstream_forms=DeclaredPatch.upstream_forms)
    assert DeclaredPatch.upstream_forms is False  # the default: most patches' upstream change has another shape
    assert run(strict, WRAPPED)[0].present
    assert drift(strict, unmarked(WRAPPED)) == (
        "pkg/mod.py:21: anchor 'self.ready = True': expected unguarded, or guarded by forkgen; "
        "found a guard without forkgen's marker"
    )


def test_upstream_patterns_absent_or_not_reported() -> None:
    cache = Anchor("Box.get", "self._cache.get(__)", expression=True)
    quiet = Anchor("Box.get", "return found", reported=False)
    patch = declare(*BEFORE_LOOKUP.edits, upstream_patterns=(cache, quiet))
    check, _ = run(patch, UPSTREAM_GET)
    assert check.outcome is Outcome.UPSTREAM and [a.name for a in check.anchors] == ["self._cache.get(__)"]
    both = edited("        return found\n", "        self._cache.get(key)\n        return found\n")
    assert run(patch, both)[0].outcome is Outcome.UPSTREAM  # the anchor is there, yet the patterns match
    gone = Anchor("Box.get", "found = helper(self.value, __)", 0)
    patch = declare(*BEFORE_LOOKUP.edits, upstream_patterns=(cache, gone))
    assert run(patch, both)[0].outcome is Outcome.APPLIED
    assert run(patch, UPSTREAM_GET)[0].outcome is Outcome.UPSTREAM


def test_explain_rewords_drift_that_is_not_upstream() -> None:
    def explain(self: DeclaredPatch, sources: Sources, drift: AnchorDrift) -> None:
        raise AnchorDrift(drift.path, 1, "helper", "the lookup", f"{len(self.matches(sources, BEFORE_LOOKUP.edits[0].anchor))}")

    patch = declare(*BEFORE_LOOKUP.edits, explain=explain)
    assert drift(patch, UPSTREAM_GET) == "pkg/mod.py:1: anchor 'helper': expected the lookup; found 0"
    with_cache = declare(*BEFORE_LOOKUP.edits, explain=explain,
                         upstream_patterns=(Anchor("Box.get", "self._cache.get(__)", expression=True),))
    assert run(with_cache, UPSTREAM_GET)[0].outcome is Outcome.UPSTREAM


def test_matches_and_starts_with() -> None:
    tree = sources(MODULE)
    assert [(type(n).__name__, line) for n, line in WRAP.matches(tree, Anchor("Box.get", "return __"))] == [
        ("SimpleStatementLine", 20), ("SimpleStatementLine", 22)]
    assert WRAP.matches(sources(MODULE), Anchor("Box", "x = 1", path="pkg/absent.py")) == []
    assert WRAP.starts_with(tree, "Box.get", "found = helper(___)")  # after the docstring
    assert not WRAP.starts_with(tree, "Box.__init__", "self.ready = False")
    with pytest.raises(AnchorDrift, match="exactly one def absent"):
        WRAP.starts_with(tree, "Box.absent", "pass")


def test_the_command_alone_skips_upstreams_shape() -> None:
    patch = declare(*BEFORE_LOOKUP.edits, upstream_patterns=(Anchor("Box.get", "self._cache.get(__)", expression=True),))
    with pytest.raises(SkipFile, match="upstream's already"):
        patch.command(CodemodContext(filename=PATH)).transform_module(cst.parse_module(UPSTREAM_GET))
    with pytest.raises(AnchorDrift, match="found 0"):
        BEFORE_LOOKUP.command(CodemodContext(filename=PATH)).transform_module(cst.parse_module(UPSTREAM_GET))


# -- placement and naming variants ---------------------------------------------------------------


def test_an_enclosed_piece_and_a_helper_before_its_anchor_named_and_unreported() -> None:
    patch = declare(
        Replace(Anchor("Box.get", "return found", name="the return"), "enclosed", enclosed=True),
        Helper(Anchor("", "class Box: ___", reported=False), "early", before=True),
    )
    after = edited(
        "        return found\n", "        assert self.value  # forkgen: test-patch\n        return found\n",
        edited("    return 1\n\n\nclass Box:", "    return 1\n\n\n# forkgen: test-patch\n_seen = set()\n\n\nclass Box:"),
    )
    check, text = run(patch, MODULE)
    assert (check.detail, text) == ("edit the return and class Box: ___", after)
    assert [(a.name, a.line) for a in check.anchors] == [("the return", 22)]
    again, _ = run(patch, after)
    assert again.present and [(a.name, a.line) for a in again.anchors] == [("the return", 27)]
    assert run(patch, unmarked(after))[0].outcome is Outcome.UPSTREAM
    assert drift(patch, edited("        return found\n", "        return None\n")) == (
        "pkg/mod.py:15: anchor 'the return': expected exactly one `the return` in Box.get; found 0 not replaced and 0 replaced"
    )
    assert "_seen" in drift(patch, MODULE + "\n_seen = None\n")
    with pytest.raises(ValueError, match="an enclosed piece"):
        run(declare(Replace(Anchor("Box.get", "return found"), "early", enclosed=True)), MODULE)


def test_explain_rewords_name_check_drift_and_the_command_alone_names_its_file() -> None:
    def explain(self: DeclaredPatch, sources: Sources, drift: AnchorDrift) -> None:
        raise AnchorDrift(PATH, 1, drift.anchor, "told", "by explain")

    patch = declare(InsertBefore(Anchor("Box.get", "return found"), "rebinds"), explain=explain)
    assert drift(patch, MODULE) == "pkg/mod.py:1: anchor 'Box.get: found': expected told; found by explain"
    told = declare(*BEFORE_LOOKUP.edits, explain=explain)
    with pytest.raises(AnchorDrift) as caught:
        told.command(CodemodContext(filename="/x/pkg/mod.py")).transform_module(cst.parse_module(UPSTREAM_GET))
    assert str(caught.value) == "/x/pkg/mod.py:1: anchor 'found = helper(self.value, __)': expected told; found by explain"


def test_blank_lines_above_an_insertion() -> None:
    patch = declare(InsertAfter(Anchor("Box.__init__", "self.value = __"), "size", blank_lines=1))
    spaced = edited("        self.value = value\n",
                    "        self.value = value\n\n        self.size = len(self.value)  # forkgen: test-patch\n")
    assert run(patch, MODULE)[1] == spaced and run(patch, spaced)[0].present


def test_relied_on_anchors_are_reported_and_checked() -> None:
    relied = Anchor("Box.__init__", "self.ready = False", name="not ready", description="Box starts not ready")
    patch = declare(*WRAP.edits, relies_on=(relied, Anchor("Box", "x = 1", 0)))
    assert [(a.name, a.line, a.description) for a in run(patch, MODULE)[0].anchors] == [
        ("self.ready = True", 21, "in Box.get"), ("not ready", 13, "Box starts not ready")]
    assert drift(patch, edited("self.ready = False", "self.ready = None")) == (
        "pkg/mod.py:11: anchor 'not ready': expected exactly one `not ready` in Box.__init__; found 0")


def test_upstream_shapes_each_with_its_detail() -> None:
    shapes = (("cached upstream", (Anchor("Box.get", "self._cache.get(__)", expression=True),)),
              ("counted upstream", (Anchor("Box.get", "self.lookups += 1", name="the count"),)))
    patch = declare(*BEFORE_LOOKUP.edits, upstream_shapes=shapes)
    assert run(patch, UPSTREAM_GET)[0].detail == "cached upstream"
    counted = edited("        found = helper(self.value, key)\n", "        self.lookups += 1\n")
    check = run(patch, counted)[0]
    assert (check.outcome, check.detail, [(a.name, a.line) for a in check.anchors]) == (
        Outcome.UPSTREAM, "counted upstream", [("the count", 18)])
    # Alone, the command skips an upstream shape even where its anchors are still there.
    both = edited("        return found\n", "        self.lookups += 1\n        return found\n")
    with pytest.raises(SkipFile, match=r"upstream's already \(counted upstream\)"):
        patch.command(CodemodContext(filename=PATH)).transform_module(cst.parse_module(both))


def test_the_command_alone_runs_verify() -> None:
    def verify(self: DeclaredPatch, sources: Sources, analysis: Analysis) -> None:
        raise AnchorDrift(PATH, 2, "verify", "run", "alone too")

    patch = declare(*WRAP.edits, verify=verify)
    with pytest.raises(AnchorDrift, match="^/x/pkg/mod.py:2: anchor 'verify'"):
        patch.command(CodemodContext(filename="/x/pkg/mod.py")).transform_module(cst.parse_module(MODULE))


def test_a_keyword_argument_anchor_and_its_value_replaced() -> None:
    keyword = compile_pattern("size=len(__)", expression=True)
    assert keyword.kind == "Arg" and keyword.match(cst.Arg(cst.Name("x"))) is None
    assert compile_pattern("size == len(__)", expression=True).kind == "Comparison"
    text = "def f(items):\n    report(items, size=len(\n        items\n    ), sep=1)\n"
    template = (
        "def sized(items):\n    report(\n        items,\n        size=(  # forkgen: test-patch\n"
        "            0 if items is None else UPSTREAM\n        ),\n    )\n"
    )
    patch = declare(ReplaceExpression(Anchor("f", "size=len(__)", expression=True), "sized"),
                    template_source=template)
    check, after = run(patch, text)
    # The argument's line is its keyword's; only its value changes, upstream's node for node.
    assert [(a.name, a.line) for a in check.anchors] == [("size=len(__)", 2)]
    assert after == text.replace("size=len(\n        items\n    )", (
        "size=(  # forkgen: test-patch\n            0 if items is None else len(\n        items\n    )\n        )"))
    assert run(patch, after)[0].present and run(patch, unmarked(after))[0].outcome is Outcome.UPSTREAM
    assert "found 0 not replaced and 0 replaced" in drift(patch, text.replace("size=", "count="))


def test_a_prepend_into_another_file_unreported_and_a_report_without_its_file() -> None:
    other = "pkg/other.py"
    texts = {PATH: MODULE, other: "def run(x):\n    # first\n    return x\n"}
    shown = Anchor("run", "return x", path=other)
    patch = declare(Prepend("run", "early", path=other, reported=False), files=(PATH, other),
                    relies_on=(shown, Anchor("run", "return x", path=other, file_shown=False, name="unnamed")))
    tree = Sources(lambda path: texts.get(path))
    check = patch.check(tree)
    assert [(a.name, a.line, a.path) for a in check.anchors] == [("return x", 3, other), ("unnamed", 3, "")]
    patch.apply(tree)
    assert tree.rendered() == {other: "def run(x):\n    # first\n    # forkgen: test-patch\n    _seen = set()\n    return x\n"}


def test_a_prepend_described_with_blank_lines_below_and_unmarked_drift() -> None:
    patch = declare(Prepend("Box.get", "fast", description="a fast path first", blank_lines=1), upstream_forms=False)
    spaced = PREPENDED.replace("            return None\n", "            return None\n\n")
    check, text = run(patch, MODULE)
    assert text == spaced and [(a.name, a.description) for a in check.anchors] == [
        ("Box.get: first statement", "a fast path first")]
    assert run(patch, spaced)[0].present
    assert drift(patch, unmarked(spaced)) == (
        "pkg/mod.py:18: anchor 'Box.get: first statement': expected to edit, or edited by forkgen; "
        "found an edited form without forkgen's marker")


def test_a_moved_file_is_read_edited_and_reported_where_the_tree_has_it() -> None:
    moved = "pkg/moved/mod.py"
    patch = declare(*WRAP.edits, moved={PATH: moved}, relies_on=(Anchor("Box.__init__", "self.ready = False"),))
    tree = Sources(lambda path: MODULE if path == moved else None)
    check = patch.check(tree)
    assert {a.path for a in check.anchors} == {moved}
    patch.apply(tree)
    assert tree.rendered() == {moved: WRAPPED} and patch.matches(tree, Anchor("Box.get", "if not self.ready: ___"))
    # Both there: the declared file; neither: the declared file's drift.
    both = Sources(lambda path: MODULE if path in (PATH, moved) else None)
    assert {a.path for a in patch.check(both).anchors} == {""}
    assert drift(patch, "").startswith(f"{PATH}:")




def test_a_piece_may_rebind_what_upstream_binds_there() -> None:
    patch = declare(InsertBefore(Anchor("Box.get", "return found"), "rebinds", rebinds=("found",)))
    check, text = run(patch, MODULE)
    assert check.outcome is Outcome.APPLIED and "        found = None  # forkgen: test-patch\n" in text


def test_a_builtin_the_inserted_code_reads_may_be_required_unshadowed() -> None:
    size = InsertAfter(Anchor("Box.__init__", "self.value = __"), "size")
    shadowed = MODULE + "\nlen = 3\n"
    assert run(declare(size), shadowed)[0].outcome is Outcome.APPLIED
    assert drift(declare(size, unshadowed_builtins=True), shadowed) == (
        "pkg/mod.py:12: anchor 'len': expected the builtins size reads; found bound at module level")
    assert run(declare(size, unshadowed_builtins=True), MODULE)[0].outcome is Outcome.APPLIED


def test_keep_comments_leaves_upstream_comment_lines_with_their_statement() -> None:
    # Default: the comment above the anchor (the first statement) moves above the inserted code.
    moved = edited("        # find it\n", "        # find it\n        # forkgen: test-patch\n"
                   '        self.lookups = getattr(self, "lookups", 0) + 1\n')
    assert run(declare(InsertBefore(Anchor("Box.get", "found = __"), "count")), MODULE)[1] == moved
    kept = edited("        # find it\n", "        # forkgen: test-patch\n"
                  '        self.lookups = getattr(self, "lookups", 0) + 1\n        # find it\n')
    for edit in (InsertBefore(Anchor("Box.get", "found = __"), "count", keep_comments=True),
                 Prepend("Box.get", "count", keep_comments=True)):
        patch = declare(edit)
        assert run(patch, MODULE)[1] == kept and run(patch, kept)[0].present


def test_an_unreported_prepend() -> None:
    patch = declare(Prepend("Box.get", "fast", reported=False))
    assert patch.check(sources(MODULE)).anchors == ()
    assert run(patch, MODULE)[1] == PREPENDED


# -- a pattern of several statements, metavariables in a piece, reports naming every file ----------

RUN_TEMPLATE = textwrap.dedent(
    '''\
    def guarded(self, key):
        return helper(__value, key) or default  # forkgen: test-patch
    '''
)
RUN = declare(Replace(Anchor("Box.get", "found = helper(__value, key)\nif found is None: return default", name="lookup"),
                      "guarded"), template_source=RUN_TEMPLATE, report_paths=True)
RUN_APPLIED = edited(
    "        found = helper(self.value, key)\n        if found is None:\n            return default\n",
    "        return helper(self.value, key) or default  # forkgen: test-patch\n",
)


def test_a_run_of_statements_replaced_with_the_captured_code() -> None:
    check, after = run(RUN, MODULE)
    assert after == RUN_APPLIED
    # The run's first statement's line; the patch's own file named.
    assert [(a.name, a.line, a.path) for a in check.anchors] == [("lookup", 18, PATH)]
    assert RUN.check(sources(RUN_APPLIED)).present
    # The statements not consecutive: no run.
    apart = edited("            return default\n", "            return default\n        pass\n",
                   MODULE.replace("        if found is None:\n", "        pass\n        if found is None:\n"))
    assert "found 0" in drift(RUN, apart)
    assert compile_pattern("a = 1\nb = __x").following and compile_pattern("a = 1").following == ()
    # A run is replaced or wrapped: an edit whose `UPSTREAM` is a line of its own takes none.
    after_run = InsertAfter(Anchor("Box.get", "a = 1\nb = 2"), "count")
    with pytest.raises(ValueError, match="several statements"):
        declare(after_run).compiled(after_run)


# -- a branch, an unmarked operand, a wrapped body, appended helpers ------------------------------

GATE_MODULE = textwrap.dedent(
    '''\
    from lib import f, flag, g, ready


    def gate(x, y):
        if (x or y) and ready():
            x = f(x)
            y = f(y)
        return x, y


    def tail():
        pass
    '''
)
GATE_TEMPLATE = textwrap.dedent(
    '''\
    def branch(x):
        if UPSTREAM:
            UPSTREAM
        elif y:  # forkgen: test-patch
            x = g(x)


    def operand():
        flag


    def body(x, y):
        # forkgen: test-patch
        done = h(x, y)
        if done is None:
            UPSTREAM
        else:
            x, y = done


    def helpers():
        # forkgen: test-patch
        def h(x, y):
            return None
    '''
)
GATE = "if (__ or __) and ready(): ___"
WALKS = "if (__first or __) and ready():\n    x = f(x)\n    y = f(y)"


def test_a_branch_added_and_an_unmarked_operand_replaced() -> None:
    patch = declare(
        AddElse(Anchor("gate", GATE, name="the gate"), "branch"),
        ReplaceExpression(Anchor("gate", "x", expression=True, within=(GATE, GATE + "\nelif __: ___")), "operand",
                          marked=False),
        template_source=GATE_TEMPLATE, codemod_version="1",
    )
    after = GATE_MODULE.replace("    if (x or y)", "    if (flag or y)").replace(
        "        y = f(y)\n", "        y = f(y)\n    elif y:  # forkgen: test-patch\n        x = g(x)\n")
    check, text = run(patch, GATE_MODULE)
    assert text == after and (check.outcome, check.present) == (Outcome.APPLIED, False)
    assert run(patch, after)[0].present
    assert patch.codemod_versions() == {"TestPatchCommand": "1"}
    # The `x` of the gate's header only (`within`): the body's are not counted.
    assert "found 0" in drift(patch, GATE_MODULE.replace("if (x or y)", "if (y or y)"))
    # The branch rebinds `x`, which the gate binds: no clash; a gate with an else of its own is drift.
    assert "anchor 'the gate'" in drift(patch, GATE_MODULE.replace("    return x, y\n", "    else:\n        pass\n    return x, y\n"))


def test_a_wrapped_body_appended_helpers_and_a_description_of_captures() -> None:
    gate = Anchor("gate", WALKS, alternatives=(WALKS + "\nelif __: ___",), name="walks", reported=False)
    relied = Anchor("gate", GATE.replace("(__ or", "(__first or"), name="gate", description="on `{first}`")
    patch = declare(WrapBody(gate, "body"), Append("helpers"), relies_on=(relied,), template_source=GATE_TEMPLATE)
    after = GATE_MODULE.replace(
        "        x = f(x)\n        y = f(y)\n",
        "        # forkgen: test-patch\n        done = h(x, y)\n        if done is None:\n            x = f(x)\n"
        "            y = f(y)\n        else:\n            x, y = done\n",
    ) + "\n\n# forkgen: test-patch\ndef h(x, y):\n    return None\n"
    check, text = run(patch, GATE_MODULE)
    assert text == after and [(a.name, a.line, a.description) for a in check.anchors] == [("gate", 5, "on `x`")]
    # Applied, the helpers may be anywhere at module level (a later patch appends after them).
    later = after + "\n\nz = 1\n"
    assert run(patch, later)[0].present
    assert "all pieces present or none" in drift(patch, after.split("\n\n# forkgen")[0] + "\n")
    assert "h" in drift(patch, GATE_MODULE + "\n\ndef h():\n    pass\n")
    with pytest.raises(ValueError, match="one `UPSTREAM` line"):
        run(declare(WrapBody(gate, "helpers"), template_source=GATE_TEMPLATE), GATE_MODULE)


def test_a_piece_may_copy_the_anchor_statements_value_and_the_upstream_rule_decides() -> None:
    template = TEMPLATE + "\n\ndef memo(found):\n    _memo[0] = UPSTREAM_VALUE  # forkgen: test-patch\n"
    lookup = InsertBefore(Anchor("Box.get", "return found"), "memo")
    patch = declare(lookup, template_source=template, names={"_memo": "test"}, codemod_version="7")
    check, text = run(patch, MODULE)
    assert check.outcome is Outcome.APPLIED and "        _memo[0] = found  # forkgen: test-patch\n        return found\n" in text
    # In an applied form, UPSTREAM_VALUE stands for any expression.
    assert run(patch, text.replace("_memo[0] = found", "_memo[0] = other"))[0].present
    plain = declare(lookup, template_source=template, names={"_memo": "t"})
    assert (vars(patch.command)["VERSION"], vars(plain.command)["VERSION"]) == ("7", "3")
    ruled = declare(lookup, template_source=template, names={"_memo": "test"}, upstream_rule=lambda self, sources: "by rule")
    assert (ruled.check(sources(MODULE)).outcome, ruled.check(sources(MODULE)).detail) == (Outcome.UPSTREAM, "by rule")


UNWRAP_MODULE = textwrap.dedent(
    """\
    def gate(x):
        y = x
        # why
        if x is not None:  # always
            y = f(x)
            y = g(y)
        return y
    """
)
UNWRAP_TEMPLATE = "def unwrapped():\n    # forkgen: test-patch\n    UPSTREAM\n\n\ndef other():\n    # forkgen: test-patch\n    x = 1\n"


def test_an_unwrapped_body() -> None:
    unwrap = Unwrap(Anchor("gate", "if x is not None: ___"), "unwrapped")
    upstream = Anchor("gate", "y = x\ny = f(x)")
    patch = declare(unwrap, upstream_patterns=(upstream,), template_source=UNWRAP_TEMPLATE)
    after = UNWRAP_MODULE.replace(
        "    if x is not None:  # always\n        y = f(x)\n        y = g(y)\n",
        "    # always\n    # forkgen: test-patch\n    y = f(x)\n    y = g(y)\n",
    )
    check, text = run(patch, UNWRAP_MODULE)
    assert text == after and [(a.name, a.line) for a in check.anchors] == [("if x is not None: ___", 4)]
    assert run(patch, after)[0].present
    # Unmarked, the body is any code: upstream's only by `upstream_patterns`, else drift.
    theirs = after.replace("    # forkgen: test-patch\n", "")
    assert run(patch, theirs)[0].outcome is Outcome.UPSTREAM
    assert "found 0 to unwrap and 0 unwrapped" in drift(declare(unwrap, template_source=UNWRAP_TEMPLATE), theirs)
    assert "found 2 to unwrap" in drift(patch, UNWRAP_MODULE.replace("    return y\n", "    if x is not None:\n        pass\n    return y\n"))
    # A body on the header's line comes out as a line of its own.
    suite = "def gate(x):\n    if x is not None: y = f(x); y = g(y)\n    return y\n"
    assert run(patch, suite)[1] == "def gate(x):\n    # forkgen: test-patch\n    y = f(x); y = g(y)\n    return y\n"
    with pytest.raises(ValueError, match="`UPSTREAM`, the marker above it, then statements"):
        run(declare(Unwrap(unwrap.anchor, "other"), template_source=UNWRAP_TEMPLATE), UNWRAP_MODULE)
    # Statements after `UPSTREAM` follow the unwrapped body (what a mutant of such a patch adds).
    more = UNWRAP_TEMPLATE.replace("    UPSTREAM\n", "    UPSTREAM\n    y = h(y)\n", 1)
    _, text = run(declare(unwrap, template_source=more, names={"h": "test"}), UNWRAP_MODULE)
    assert text == after.replace("    y = g(y)\n", "    y = g(y)\n    y = h(y)\n")


WRAP_RUN_TEMPLATE = '''\
def around(self, key, default):
    if __key is None:  # forkgen: test-patch
        found = None
        return default
    else:
        UPSTREAM
'''
#: Two statements of Box.get, a run; `__key` captured, filled into the piece.
LOOKUP_RUN = "found = helper(self.value, __key)\nif found is None: return default"


def test_a_run_anchor_and_metavariables_filled_in_the_piece() -> None:
    def patch(rebinds: tuple[str, ...] = ("found",), **extra: Any) -> DeclaredPatch:
        return declare(Wrap(Anchor("Box.get", LOOKUP_RUN, alternatives=(
            "found = helper(__key, self.value)\nif found is None: return default",)), "around", rebinds=rebinds),
            template_source=WRAP_RUN_TEMPLATE, **extra)

    named = patch()
    after = edited("""\
        # find it
        found = helper(self.value, key)
        if found is None:
            return default
""", """\
        # find it
        if key is None:  # forkgen: test-patch
            found = None
            return default
        else:
            found = helper(self.value, key)
            if found is None:
                return default
""")
    check, text = run(named, MODULE)
    assert text == after and [(a.name, a.line) for a in check.anchors] == [(LOOKUP_RUN.replace("\n", "; "), 18)]
    assert run(named, after)[0].present
    swapped = edited("helper(self.value, key)", "helper(key, self.value)")
    assert run(named, swapped)[1] == after.replace("helper(self.value, key)", "helper(key, self.value)")
    # The run is its statements one after the other: another statement between them is drift.
    assert "found 0" in drift(named, edited("            return default\n", "            return default\n", edited(
        "        found = helper(self.value, key)\n", "        found = helper(self.value, key)\n        x = 1\n")))
    # Binding a name the function uses is drift unless the edit `rebinds` it.
    assert "expected names free for around; found used" in drift(patch(()), MODULE)

    def fill(self: DeclaredPatch, edit: Edit, captures: Any) -> dict[str, cst.CSTNode]:
        return {"key": cst.Name("other")}

    assert "if other is None:" in run(patch(fill=fill), MODULE)[1]
    with pytest.raises(ValueError, match="a run's `UPSTREAM` goes inside"):
        run(declare(InsertBefore(Anchor("Box.get", LOOKUP_RUN), "count")), MODULE)


def test_an_expression_replaced_with_its_marker_at_the_end_of_the_header_line() -> None:
    template = "def guarded(key):\n    if key is not None and UPSTREAM:  # forkgen: test-patch\n        UPSTREAM\n"
    patch = declare(ReplaceExpression(Anchor("Box.get", "found is None", expression=True), "guarded"),
                    template_source=template)
    check, text = run(patch, MODULE)
    # The test replaced, upstream's node for node; the marker ends the header line; the body stays.
    assert text == edited("        if found is None:\n", "        if key is not None and found is None:  # forkgen: test-patch\n")
    assert [(a.name, a.line) for a in check.anchors] == [("found is None", 19)]
    assert run(patch, text)[0].present and run(patch, unmarked(text))[0].outcome is Outcome.UPSTREAM
    alone = patch.command(CodemodContext(filename=PATH)).transform_module(cst.parse_module(MODULE)).code
    assert alone == text


def test_report_paths_names_the_first_file_for_relied_on_and_upstream_anchors_too() -> None:
    relied = Anchor("Box.__init__", "self.ready = False")
    patch = declare(*WRAP.edits, relies_on=(relied,), upstream_patterns=(Anchor("Box.get", "if not self.ready: ___"),),
                    report_paths=True)
    assert {a.path for a in patch.check(sources(MODULE)).anchors} == {PATH}
    upstream = patch.check(sources(unmarked(WRAPPED)))
    assert upstream.outcome is Outcome.UPSTREAM and [a.path for a in upstream.anchors] == [PATH]


STACK_MODULE = textwrap.dedent(
    '''\
    def f(x):
        # upstream's
        y = slow(x)
        return y


    class C:
        pass
    '''
)
STACK_BASE = textwrap.dedent(
    '''\
    def guard(x):
        if fast_ok(x):
            y = fast(x)
        else:
            UPSTREAM


    def helpers():
        def fast_ok(x):
            return x is not None
    '''
)
STACK_EXTENSION = textwrap.dedent(
    '''\
    def branch(x):
        if UPSTREAM:
            UPSTREAM
        elif (y := other(x)) is not None:
            pass
        else:
            UPSTREAM


    def helpers():
        def other(x):
            return None
    '''
)


def test_unmarked_pieces_and_a_second_patch_on_top() -> None:
    base = declare(Wrap(Anchor("f", "y = slow(x)"), "guard", rebinds=("y",)),
                   Helper(Anchor("", "class C: ___"), "helpers", before=True, anywhere=True),
                   template_source=STACK_BASE, marked=False, names={"fast": "test"})
    extension = declare(AddElse(Anchor("f", "if fast_ok(x):\n    ___\nelse:\n    ___"), "branch"),
                        Helper(Anchor("", "class C: ___"), "helpers", before=True),
                        template_source=STACK_EXTENSION, marked=False, name="test-extension")
    check, once = run(base, STACK_MODULE)
    assert "    # upstream's\n    if fast_ok(x):\n        y = fast(x)\n    else:\n        y = slow(x)\n" in once
    assert "def fast_ok(x):\n    return x is not None\n\n\nclass C:" in once and not check.present
    _, twice = run(extension, once)
    assert "        y = fast(x)\n    elif (y := other(x)) is not None:\n        pass\n    else:\n        y = slow(x)\n" in twice
    assert "return x is not None\n\n\ndef other(x):\n    return None\n\n\nclass C:" in twice
    # No marker, and the base's pieces are still its own with the extension's between and inside them.
    assert "forkgen" not in twice and run(base, twice)[0].present and run(extension, twice)[0].present
    # Part of the base changed: drift, not a second helper or guard.
    assert "anchor 'fast_ok'" in drift(base, twice.replace("    return x is not None\n", "    return True\n"))
    assert "all pieces present or none" in drift(base, twice.replace("        y = fast(x)\n", "        y = 0\n"))
    with pytest.raises(AnchorDrift):
        extension.check(sources(STACK_MODULE))  # nothing to build on


# -- imports the inserted code makes -------------------------------------------------------------

IMPORT_TEMPLATE = textwrap.dedent(
    '''\
    def absolute():
        # forkgen: test-patch
        import torch as _t
        from numpy.linalg import norm as _norm


        def _device():
            from pkg.backend.core import get_device
            return get_device()


    def plain():
        # forkgen: test-patch
        import pkg.backend.core as _core


    def relative(self):
        # forkgen: test-patch
        from .backend.core import get_device as _get_device
        from . import anything as _anything
        from ..outside import thing as _thing
    '''
)
#: The tree of the package `pkg` the test patch edits: the module, its package, and the modules
#: the pieces import (torch and numpy are not in it, and are not looked for).
PACKAGE = {"pkg/__init__.py": "", PATH: MODULE, "pkg/backend/__init__.py": "", "pkg/backend/core.py": "def get_device(): pass\n"}


def imports_patch(piece: str) -> DeclaredPatch:
    edit = Append(piece) if piece != "relative" else InsertBefore(Anchor("Box.get", "return found"), piece)
    return declare(edit, template_source=IMPORT_TEMPLATE)


def import_drift(piece: str, tree: dict[str, str]) -> str:
    with pytest.raises(AnchorDrift) as caught:
        imports_patch(piece).check(Sources(tree.get))
    return str(caught.value)


@pytest.mark.parametrize("piece", ["absolute", "plain"])
def test_a_module_of_the_tree_the_inserted_code_imports_must_be_in_the_tree(piece: str) -> None:
    tree = Sources(PACKAGE.get)
    assert imports_patch(piece).check(tree).outcome is Outcome.APPLIED
    imports_patch(piece).apply(tree)
    assert "pkg.backend.core" in tree.rendered()[PATH]
    # A package, core/__init__.py, is the module too.
    package = {k: v for k, v in PACKAGE.items() if k != "pkg/backend/core.py"} | {"pkg/backend/core/__init__.py": ""}
    assert imports_patch(piece).check(Sources(package.get)).outcome is Outcome.APPLIED
    # The release moved it (to pkg/backend/ops/core.py): drift at the line the piece goes to
    # (appended: below the module's last), naming the module and the files looked for, the
    # import the piece's own or in a def of it.
    moved = {k: v for k, v in PACKAGE.items() if k != "pkg/backend/core.py"} | {"pkg/backend/ops/core.py": ""}
    assert import_drift(piece, moved) == (
        f"pkg/mod.py:{len(MODULE.splitlines()) + 1}: anchor 'pkg.backend.core': expected the module {piece} imports, "
        "pkg/backend/core.py or pkg/backend/core/__init__.py; found neither")


def test_relative_imports_are_resolved_from_the_files_package() -> None:
    # `.` is pkg (its names, `anything`, are not looked for), `..outside` is outside pkg: only
    # `.backend.core`, pkg.backend.core, is looked for.
    tree = {**PACKAGE}
    assert imports_patch("relative").check(Sources(tree.get)).outcome is Outcome.APPLIED
    del tree["pkg/backend/core.py"]
    assert import_drift("relative", tree) == (
        "pkg/mod.py:22: anchor 'pkg.backend.core': expected the module relative imports, pkg/backend/core.py or "
        "pkg/backend/core/__init__.py; found neither")


def test_imports_are_not_looked_for_in_a_tree_without_the_files_package() -> None:
    # Loose modules (a synthetic tree, a file given alone): nothing to look in.
    assert imports_patch("absolute").check(sources(MODULE)).outcome is Outcome.APPLIED
    assert run(imports_patch("absolute"), MODULE)[1] != MODULE
    # Applied already: the piece is in the tree, nothing left to check.
    tree = Sources(PACKAGE.get)
    imports_patch("absolute").apply(tree)
    applied = {k: v for k, v in PACKAGE.items() if k != "pkg/backend/core.py"} | tree.rendered()
    assert imports_patch("absolute").check(Sources(applied.get)).present
