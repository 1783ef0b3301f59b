"""The patch engine: a patch declares its anchors and edits, the engine finds, edits and decides.

A patch written on the engine is a `DeclaredPatch` subclass (its package's `__init__.py`) plus
the code it inserts (`inserted.py`, one template function per piece, as before). It declares:

- its `Patch` headers (`name`, `version`, `headers`, `files`, `requires`, `since`, `switch`) and
  `tolerates`: the patches of the series whose applied form it must recognise, read through the
  engine (`applied_piece`: such a patch's piece as applied, from its `inserted.py`; `tolerated`:
  that patch, for its check), never imported;
- `edits`: what it changes, each an edit of a closed set anchored on a code pattern:

      Wrap(anchor, piece)           the anchor statement goes where the piece says `UPSTREAM`
      InsertBefore(anchor, piece)   the piece's statements right before the anchor statement
      InsertAfter(anchor, piece)    ... right after it
      Prepend(scope, piece)         ... first in the body of function `scope` (after a docstring;
                                    optionally `path=` another file, `reported=False`,
                                    `description` for reports, `blank_lines` below the piece,
                                    `rebinds` for a parameter the piece reassigns)
      Replace(anchor, piece)        the piece instead of the anchor statement (`UPSTREAM` in the
                                    piece, if any, keeps the anchor there)
      ReplaceExpression(anchor, piece)  the piece's expression instead of the anchor expression
                                    (`UPSTREAM` in it keeps the anchor there); for a keyword
                                    argument anchor, the piece is a call with that argument,
                                    whose value replaces the anchor's (`UPSTREAM`: its value);
                                    a piece `if <expression>:  # marker` over an `UPSTREAM`
                                    body puts its marker at the end of the header line of
                                    the statement holding the anchor
      Helper(anchor, piece)         module-level statements right after a module-level anchor
                                    (`before=True`: right before it; `anywhere=True`: applied,
                                    they may be anywhere at module level)
      Append(piece)                 module-level statements at the end of the module (a Helper
                                    without anchor; applied, they may be anywhere at module level;
                                    `path=` another file than the patch's first)
      AddElse(anchor, piece)        an `elif`/`else:` attached to the anchor `if` (which has
                                    none): the piece is `if UPSTREAM: UPSTREAM` with that branch;
                                    a branch ending `else: UPSTREAM` goes before the anchor's
                                    own `else:`
      WrapBody(anchor, piece)       the piece becomes the body of the anchor compound statement,
                                    its old body's statements where the piece says `UPSTREAM`
      Unwrap(anchor, piece)         the anchor compound statement (no `else`) gives way to its
                                    body's statements, one level out; the piece is `UPSTREAM`
                                    with the marker above it (statements after it follow the
                                    body). Applied, the body may be any
                                    code: a statement with the marker above it in the anchor's
                                    scope is forkgen's form, and upstream's change is told only
                                    by `upstream_patterns`

- `details`: the one-line detail of each outcome (`Details`);
- `marked = False` for a patch whose pieces carry no marker (an applied form is forkgen's: a
  change upstream never made in those words), and `pieces()` for code not kept as one
  `inserted.py` (the CallSpec patches cut theirs from per-variant templates);
- optionally `upstream_patterns` (anchors whose presence means the release carries the change;
  count 0 for one that must be absent, `reported=False` for one left out of the outcome's
  anchors) and `upstream_shapes` (other such sets, each with its own detail), `relies_on`
  (anchors the patch needs but does not edit: checked, and reported after the edits'),
  `upstream_forms = True` (an unmarked applied form is upstream's: by default it is drift), `report_paths`
  (the anchors of the patch's first file are reported with their file too: the edits', the
  upstream patterns' and the relied-on ones'),
  `names` (names the inserted code uses that the patch binds itself, with how), `fill` (what
  takes the place of a piece's metavariables, by default the anchor's captures), `moved` (a
  declared file -> where some releases have it instead: a tree with only that one is read,
  edited and reported there), `unshadowed_builtins` (a builtin the inserted code reads, bound
  at module level, is drift), `codemod` (the
  name of its libcst command), `codemod_version` (its version, default the patch's) and the
  escape hatches, for a truly semantic rule: `verify` (a
  check of its own) and `explain` (a more telling word for drift, in the series and in the
  command run alone), with `matches` and `starts_with` to read the tree. A piece is the body of
  its template function, or (`enclosed=True`) the block of the one statement that body holds;
  `blank_lines` puts blank lines above what InsertBefore, InsertAfter and Helper insert;
  `rebinds` names what a piece binds that upstream's code binds there too (no clash);
  `form_line=True` reports an applied form at its own first line (by default: the line of the
  anchor inside it); `template_source` gives the template's text instead of the package's file
  (for tests).
  `keep_comments=True` keeps upstream's comment lines above the anchor statement (for Prepend,
  the function's first statement) with it, below the inserted code, instead of moving them
  above; `Prepend(..., reported=False)` leaves the function out of the outcome's anchors.
  `UPSTREAM_VALUE` in a piece is a copy of the value of the anchor statement (`return <value>`,
  `x = <value>`), matched as any expression in an applied form; `upstream_rule` is the escape
  hatch for an *upstream* outcome no pattern can tell (a detail, or None).

An `Anchor` is a scope (`""` for the module, `"Class"`, `"Class.method"`, `"function"`) and a
pattern written as Python source, a statement or (`expression=True`) an expression, with an
expected count (exactly one by default), and optionally `alternatives` (the same code in another
release's words, matched in its place; an expression pattern may be a keyword argument,
`name=<expression>`, which matches that argument of a call, its line the keyword's), a `name`
(what reports and drift call it), `file_shown=False` (reports leave its file unnamed, as when it
is the patch's first),
`reported=False` (left out of the outcome's anchors) and, for an expression, `within` (statement
patterns: only the headers of the statements matching one are searched, for the anchor and for
its applied form). A ReplaceExpression with `marked=False` inserts no marker: its expression is
forkgen's when the statement holding it carries the patch's marker (another edit's, such as an
AddElse's branch). A relied-on anchor's `description` may name its pattern's captures,
`{name}`: the code captured (a pattern without captures: the description as written); an edit's
may name `{state}`: its piece's, "absent" (to apply), "ours" or "theirs". In a function the pattern is looked for in every
statement of its body, nested blocks included; in a class or the module, among its direct
statements. The pattern is compiled once to libcst matchers (`compile_pattern`): names, strings,
numbers and operators must be as written; whitespace, comments and parentheses are ignored;
wildcards stand for code that may be anything:

    __        any one expression, argument, element, parameter or statement
    ___       any number of them, where a sequence goes: `f(___)`, `[___]`, a body `___`
    __name    like `__`, and kept under `name` in the match's captures (two underscores and a
              lower-case name that does not end with two underscores: dunders are plain names)

A pattern of several statements is a *run*: that many consecutive statements of one block, each
matching its own (`alternatives` are runs of the same length, matched statement by statement);
the anchor's line is its first statement's, and an unnamed run is called by its statements
joined with "; ". A `Replace` of a run takes the place of them all; `UPSTREAM` in its piece or in
a `Wrap`'s, inside one of the piece's statements, stands for the whole run, node for node (an
edit whose `UPSTREAM` is a line of the template's own, InsertBefore, InsertAfter or Helper, takes
no run). A metavariable `__name` in a piece is filled at each anchor by `DeclaredPatch.fill`
(default: the code the anchor's pattern captured as `__name`, node for node); in the applied
form it matches any code.

A header a pattern leaves out matches anything: `def f(___): ___` matches any decorators and
return annotation, `class C: ___` any bases. An `else:` it leaves out means no `else`. A body on
the header's line (`if a: b()`) also matches the same body as an indented block.

A `Wrap` piece `if ...: ... else: UPSTREAM` stays recognised when a later patch adds `elif`
branches before its `else` (an `AddElse` of its own).

Layout: the inserted code is the piece's, comments included; upstream's statements are kept node
for node; upstream's comment lines above an anchor statement move above the code inserted at it
(the old `fill` helper did the same).

What the engine derives from the declaration, the same way for every patch:

- *Where each edit goes*, and the line of each anchor, from codegen of the module's statements
  (each rendered once, as far as the last node needed, and kept while unchanged: `lines`): no
  second finder, no `ast` predicate.
- *Drift*, worded by the engine: an anchor matching other than its expected count, a scope not
  found exactly once, forkgen's piece present beside a piece missing (a partial presence), a
  name the inserted code uses that nothing binds, a name it binds already in use, a module of
  the tree it imports that the tree does not have (`check_imports`).
- *The outcome* (`DeclaredPatch.check`): each piece is *to apply*, *forkgen's* (its applied form,
  which is the piece with the anchor in place of `UPSTREAM`, is there with its
  `# forkgen: <patch>` marker) or *upstream's* (that same applied form without the marker).
  All upstream's, or every upstream pattern matching, is *upstream*; all present is *applied,
  present*; forkgen's beside to-apply is drift, and so is upstream's beside to-apply unless the
  patch declares `upstream_per_piece` (independent pieces upstream made one at a time).
  *Not applicable* comes from `since` and `requires`, which the series reads
  (`codemods/series.py`).
- *The libcst command* (`command`, named `codemod`): one per patch, a `DeclaredCommand` whose
  single path-limited transformer visits only the statements leading to the edits; the package
  exposes it (`Name = PATCH.command`) so `python -m libcst.tool codemod <package>.<Name> FILE`
  runs it.

The engine is this package; its face is what it exports here (`from codemods.engine import ...`),
the only import a patch makes besides the patches it `requires`. Its modules, one job each:

    patch       what a patch of the series is (`Patch`, `Headers`, `Sources`, `Check`, `Outcome`,
                `AnchorDrift`)
    tree        reading trees: the `# forkgen: <patch>` marker, walks over nodes and statements
    keras       the paths of Keras modules that several patches read
    pattern     patterns with wildcards compiled to libcst matchers
    edits       anchors, the closed set of edits, `Details`, the pieces of a template
    linemap     line numbers from codegen
    finding     what an analysis finds (`Occurrence`, `FileAnalysis`, `Analysis`)
    names       names code binds and reads, modules it imports
    splicing    an edit compiled and spliced into upstream's statements
    declared    `DeclaredPatch`
    command     `DeclaredCommand`, the libcst command of a declared patch
    cases       a patch's examples (`Case`), behaviours (`behaviours`, `run_module`) and
                mutants (`Mutant`), `piece_text`
    switching   the run-time switches the engine makes for every patch once the series has run
                (`KERAS_FORKGEN_DISABLE`; `from codemods.engine import switching`)
    report      what a patch may offer `forkgen report`: its call rules (`CallRules`)
"""


from __future__ import annotations

from codemods.engine.cases import (
    Behaviour,
    Case,
    Mutant,
    applied_piece,
    behaviours,
    examples,
    piece_text,
    replace_once,
    run_module,
)
from codemods.engine.codeindex import Class as CodeClass
from codemods.engine.codeindex import Tree as CodeTree
from codemods.engine.codeindex import analysed
from codemods.engine.command import DeclaredCommand
from codemods.engine.declared import DeclaredPatch
from codemods.engine.edits import (
    AddElse,
    Anchor,
    Append,
    Details,
    Edit,
    Helper,
    InsertAfter,
    InsertBefore,
    Prepend,
    Replace,
    ReplaceExpression,
    Unwrap,
    Wrap,
    WrapBody,
    template_pieces,
)
from codemods.engine.finding import Analysis, FileAnalysis, Occurrence, State
from codemods.engine.keras import (
    DTYPES_PY,
    LAYER_PY,
    LOSS_PY,
    NIGHTLY_TORCH_CORE_PY,
    NIGHTLY_TORCH_NN_PY,
    REDUCTION_METRICS_PY,
    TORCH_CORE_MOVED,
    TORCH_CORE_PY,
    TORCH_NN_PY,
    TORCH_TRAINER_PY,
    TORCHTREE_PY,
    VARIABLES_PY,
)
from codemods.engine.linemap import lines
from codemods.engine.names import imports_of, names_of
from codemods.engine.patch import (
    TREE_CACHES,
    AnchorDrift,
    AnchorReport,
    Check,
    Headers,
    Outcome,
    Patch,
    Sources,
    Store,
    forget_trees,
)
from codemods.engine.pattern import MANY, ONE, VALUE, Pattern, compile_either, compile_pattern
from codemods.engine.report import (
    KEYWORD_ONLY,
    POSITIONAL_ONLY,
    POSITIONAL_OR_KEYWORD,
    VAR_KEYWORD,
    VAR_POSITIONAL,
    CallRules,
    LayerAnalysis,
    Parameter,
)
from codemods.engine.tree import PLACEHOLDER, block, marker, statements, walk
from codemods.engine.verdicts import (
    STEP_BITS,
    STEPS,
    ClassVerdict,
    ProvenClass,
    StepVerdict,
    Verdicts,
    deep,
    proven_cached,
)
from codemods.engine.verdicts import analyse as analyse_effects

__all__ = [
    "STEP_BITS", "STEPS", "ClassVerdict", "CodeClass", "CodeTree", "ProvenClass", "StepVerdict", "Verdicts", "analyse_effects",
    "analysed", "deep", "proven_cached",
    "DTYPES_PY", "LAYER_PY", "LOSS_PY", "NIGHTLY_TORCH_NN_PY", "REDUCTION_METRICS_PY", "TORCH_NN_PY", "TORCH_TRAINER_PY",
    "TORCHTREE_PY", "VARIABLES_PY",
    "MANY", "NIGHTLY_TORCH_CORE_PY", "ONE", "PLACEHOLDER", "TORCH_CORE_MOVED", "TORCH_CORE_PY", "TREE_CACHES", "VALUE",
    "AddElse", "Analysis", "applied_piece", "block", "Anchor", "AnchorDrift", "AnchorReport", "Append", "Case", "Check", "DeclaredCommand",
    "DeclaredPatch", "Details", "Edit", "FileAnalysis", "Headers", "Helper", "InsertAfter", "InsertBefore", "Mutant",
    "Occurrence", "Outcome", "Patch", "Pattern", "Prepend", "Replace", "ReplaceExpression", "Sources", "State", "Store", "Unwrap",
    "Wrap", "WrapBody", "compile_either", "compile_pattern", "examples", "forget_trees", "imports_of", "lines", "marker",
    "names_of", "piece_text", "replace_once", "statements", "Behaviour", "behaviours", "run_module", "template_pieces", "walk",
    "KEYWORD_ONLY", "POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_KEYWORD", "VAR_POSITIONAL", "CallRules",
    "LayerAnalysis", "Parameter",
]
