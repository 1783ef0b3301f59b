"""`DeclaredPatch`: a patch written as a declaration (see the package's docstring)."""

from __future__ import annotations

import functools
import importlib
import importlib.resources
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, cast

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext

from codemods.engine.command import DeclaredCommand
from codemods.engine.edits import (
    AddElse,
    Anchor,
    Append,
    Details,
    Edit,
    Helper,
    Prepend,
    Replace,
    ReplaceExpression,
    Unwrap,
    WrapBody,
    _above,
    template_pieces,
)
from codemods.engine.finding import (
    _STATE_WORDS,
    Analysis,
    FileAnalysis,
    Occurrence,
    State,
    _blocks,
    _count,
    _direct,
    _expressions,
    _in_scope,
    _Scopes,
    _statement_hits,
)
from codemods.engine.linemap import lines
from codemods.engine.names import _BUILTINS, imports_of, names_of
from codemods.engine.patch import AnchorDrift, AnchorReport, Check, Outcome, Patch, Sources
from codemods.engine.pattern import (
    VALUE,
    _is_placeholder_line,
    _metavariable,
    _preparse,
    compile_pattern,
)
from codemods.engine.splicing import (
    _add,
    _Anchors,
    _append,
    _Applied,
    _attach,
    _comment,
    _compile_edit,
    _Compiled,
    _docstring,
    _fill,
    _fill_value,
    _header,
    _prepend,
    _rebody,
    _splice,
    _unwrap,
)
from codemods.engine.tree import PLACEHOLDER, ancestors, marker, statement_ancestors, walk


class DeclaredPatch(Patch):
    """A patch written as a declaration (see the module's docstring)."""

    edits: ClassVar[tuple[Edit, ...]]
    details: ClassVar[Details]
    #: Anchors that, all found with their counts, show the release carries the change.
    upstream_patterns: ClassVar[tuple[Anchor, ...]] = ()
    #: Other shapes of the change upstream, each (its detail, its patterns), tried in turn.
    upstream_shapes: ClassVar[tuple[tuple[str, tuple[Anchor, ...]], ...]] = ()
    #: Anchors the patch relies on without editing them: each found its expected count (else
    #: drift), and shown after the edits' among the outcome's anchors.
    relies_on: ClassVar[tuple[Anchor, ...]] = ()
    #: A piece upstream made may stand beside pieces still to apply (they are independent).
    upstream_per_piece: ClassVar[bool] = False
    #: An applied form without forkgen's marker is upstream's (a backport whose upstream change
    #: has the piece's own words); by default it is drift (upstream's change, if any, having
    #: another shape, told by `upstream_patterns`), as for most patches.
    upstream_forms: ClassVar[bool] = False
    #: The pieces carry the `# forkgen: <patch>` marker (False: none, and an applied form is
    #: forkgen's, for a patch upstream never made in its words).
    marked: ClassVar[bool] = True
    #: Names the inserted code reads that the patch binds itself: name -> how.
    names: ClassVar[Mapping[str, str]] = {}
    #: A builtin the inserted code reads, bound at module level of its file, is drift.
    unshadowed_builtins: ClassVar[bool] = False
    #: Reports name the file of every anchor, the patch's first file too (default: only the
    #: others); the edits' anchors even with `file_shown=False`.
    report_paths: ClassVar[bool] = False
    #: The template module beside the declaration, or its text (`template_source`).
    template: ClassVar[str] = "inserted.py"
    template_source: ClassVar[str | None] = None
    #: A declared file -> where some releases have it instead (read, edited and reported there
    #: when the tree has only that one).
    moved: ClassVar[Mapping[str, str]] = {}
    #: The name of the patch's libcst command (default: from the patch's name).
    codemod: ClassVar[str]
    #: The version of its libcst command (default: the patch's).
    codemod_version: ClassVar[str | None] = None
    command: ClassVar[type[DeclaredCommand]]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "edits"):
            return  # a base of declarations, not one
        name = cls.__dict__.get("codemod") or "".join(p.title() for p in cls.name.split("-")) + "Command"
        namespace = {"DESCRIPTION": cls.headers.description, "VERSION": cls.codemod_version or cls.version, "PATCH": cls(),
                     "__module__": cls.__module__, "__qualname__": name}
        cls.codemod = name
        cls.command = cast(type[DeclaredCommand], type(name, (DeclaredCommand,), namespace))
        cls.codemods = (cls.command,)

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        """The escape hatch: a rule too semantic for a pattern (raise `AnchorDrift`). Runs on
        every tree the patch applies to (present or not), after the engine's own checks."""

    def upstream_rule(self, sources: Sources) -> str | None:
        """The escape hatch for the *upstream* outcome: a rule too semantic for patterns that the
        release carries the change, and its detail (None: it does not). Tried after
        `upstream_patterns` and `upstream_shapes`; its outcome reports no anchors."""
        return None

    def explain(self, sources: Sources, drift: AnchorDrift) -> None:
        """The escape hatch for drift: an anchor drifted (or a name check failed) and the tree is
        not upstream's either; may raise a more telling `AnchorDrift` (default: `drift` is raised).
        Not asked when the tree lacks the file: "no such file" is said as it is."""

    def fill(self, edit: Edit, captures: Mapping[str, cst.CSTNode]) -> Mapping[str, cst.CSTNode]:
        """What takes the place of each metavariable `__name` of `edit`'s piece at one anchor, by
        name (default: what the anchor's pattern captured under that name)."""
        return captures

    def starts_with(self, sources: Sources, scope: str, pattern: str, path: str | None = None) -> bool:
        """Whether the first statement of function `scope` (after a docstring) matches `pattern`."""
        path = self.located(sources, path or self.files[0])
        body = _direct(_Scopes(sources.module(path), path).get(scope))
        first = body[_docstring(body):][:1]
        return bool(first) and compile_pattern(pattern).match(first[0]) is not None

    def matches(self, sources: Sources, anchor: Anchor) -> list[tuple[cst.CSTNode, int]]:
        """Each match of `anchor` in the tree with its line (drift when its scope is not found
        exactly once; none when its file is absent)."""
        path = self.located(sources, self.file_of(anchor))
        if not sources.exists(path):
            return []
        module = sources.module(path)
        scope = _Scopes(module, path).get(anchor.scope)
        if anchor.expression:
            hits = [n for s in _in_scope(scope) if anchor.holds(s) for n in _expressions(s)
                    if anchor.compiled.match(n) is not None]
        else:
            hits = [s for s, _, _ in _statement_hits(scope, anchor.compiled)]
        at = lines(module, hits)
        return [(n, at[id(n)]) for n in hits]

    # -- the pieces

    def compiled(self, edit: Edit) -> _Compiled:
        return _compile_edit(type(self), edit)

    @classmethod
    def pieces(cls) -> Mapping[str, tuple[cst.BaseStatement, ...]]:
        """The code the patch inserts, by piece name (default: the template module's functions)."""
        package = importlib.import_module(cls.__module__).__package__ or cls.__module__
        return template_pieces(package, cls.template, cls.template_source)

    def file_of(self, anchor: Anchor) -> str:
        return anchor.path or self.files[0]

    def located(self, sources: Sources, path: str) -> str:
        """Where the tree has the declared file `path`: there, or at its `moved` place when only that exists."""
        other = self.moved.get(path)
        return other if other and not sources.exists(path) and sources.exists(other) else path

    # -- finding

    def analyze_module(self, module: cst.Module, path: str, shown: str | None = None,
                       declared: str | None = None) -> FileAnalysis:
        """Where the edits of file `path` go in `module`, or went; drift when an anchor is not found
        its expected number of times (`shown`: the path drift messages name; `declared`: the
        declared file `path` stands for, `moved`)."""
        shown = shown or path
        scopes = _Scopes(module, shown)
        found: list[tuple[Edit, cst.CSTNode, _Anchors, _Applied]] = []
        wanted: list[cst.CSTNode] = []
        for edit in self.edits:
            if self.file_of(edit.anchor) == (declared or path):
                scope = scopes.get(edit.anchor.scope)
                anchors, applied = self._find(module, edit, scope)
                found.append((edit, scope, anchors, applied))
                wanted += [scope, *(a[0] for a in anchors), *(form[0] for form, _, _ in applied)]
        at = lines(module, wanted)
        occurrences: list[Occurrence] = []
        for edit, scope, anchors, applied in found:
            within = [{id(n) for s in form for n in walk(s)} for form, _, _ in applied]
            bare = [a for a in anchors if not any(id(a[0]) in ids for ids in within)]
            expected = edit.anchor.count
            if len(bare) + len(applied) != expected:
                # The first of them, as upstream's code has them; else the scope's line.
                line = min([at[id(a[0])] for a in anchors] or [at[id(f[0])] for f, _, _ in applied] or [at[id(scope)]])
                words = edit.words or ("to edit", "edited", "")
                got = f"{len(bare)} {words[0]} and {len(applied)} {words[1]}" if edit.words or applied else f"{len(bare)}"
                source = edit.anchor.title
                raise AnchorDrift(shown, line, source, f"exactly {_count(expected)} `{source}` {edit.anchor.where}", got)
            occurrences += [Occurrence(edit, State.TODO, n, at[id(n)], s, scope, c, f) for n, c, s, f in bare]
            for (form, ours, statement), ids in zip(applied, within, strict=True):
                inner = [a for a in anchors if id(a[0]) in ids]
                line = at[id(inner[0][0])] if inner and not edit.form_line else at[id(form[0])]
                if not ours and not self.upstream_forms:
                    words = edit.words or ("to edit", "edited", "an edited form")
                    raise AnchorDrift(shown, at[id(form[0])], edit.name if isinstance(edit, Prepend) else edit.anchor.title,
                                      f"{words[0]}, or {words[1]} by forkgen", f"{words[2]} without forkgen's marker")
                occurrences.append(Occurrence(edit, State.OURS if ours else State.THEIRS, form[0], line, statement,
                                              scope, inner[0][1] if inner else {}))
        self._helper_names_free(module, shown, found)
        return FileAnalysis(path, shown, module, tuple(occurrences))

    def _find(self, module: cst.Module, edit: Edit, scope: cst.CSTNode) -> tuple[_Anchors, _Applied]:
        """`edit`'s anchors in `scope` and its applied forms there."""
        compiled = self.compiled(edit)
        matchers, kinds = compiled.matchers, compiled.kinds
        tag = marker(self.name) if self.marked else ""
        anchors: _Anchors = []
        applied: _Applied = []
        if isinstance(edit, Prepend):
            if not isinstance(scope, cst.FunctionDef):
                raise ValueError(f"{self.name}: Prepend needs a function, not {edit.anchor.scope}")
            body = _direct(scope)
            form = list[cst.CSTNode](body[_docstring(body):][:len(matchers)])
            if len(form) == len(matchers) and all(m.matches(s, x) for s, x in zip(form, matchers, strict=True)):
                applied.append((list[cst.CSTNode](form), tag in module.code_for_node(form[0]), None))
            else:
                anchors.append((scope, {}, None, ()))
            return anchors, applied
        if isinstance(edit, Helper) and edit.anywhere:
            body = module.body
            matchers = tuple(x for x, t in zip(matchers, compiled.template, strict=True) if not _is_placeholder_line(t))
            k = len(matchers)
            for i in range(len(body) - k + 1):
                form = list[cst.CSTNode](body[i:i + k])
                if all(m.matches(s, x) for s, x in zip(form, matchers, strict=True)):
                    applied.append((form, tag in module.code_for_node(form[0]), None))
            if not applied and isinstance(edit, Append):
                anchors.append((module, {}, None, ()))
            elif not applied:
                anchors += [(s, c, None, f) for s, c, f in _statement_hits(scope, edit.anchor.compiled)]
            return anchors, applied
        pattern = edit.anchor.compiled
        if isinstance(edit, ReplaceExpression):
            for statement in _in_scope(scope):
                if not edit.anchor.holds(statement):
                    continue
                for node in _expressions(statement):
                    captures = pattern.match(node)
                    if captures is not None:
                        anchors.append((node, captures, statement, ()))
                    elif type(node).__name__ == kinds[0] and m.matches(node, matchers[0]):
                        applied.append(([node], tag in module.code_for_node(statement), statement))
            return anchors, applied
        anchors += [(statement, captures, None, following) for statement, captures, following in _statement_hits(scope, pattern)]
        if isinstance(edit, Unwrap):
            # The unwrapped body may be any code: the marker above its first statement tells it.
            applied += [([s], True, None) for block in _blocks(scope) for s in block
                        if any(line.comment and tag in line.comment.value for line in _above(s))]
            return anchors, applied
        k = len(matchers)
        for block in _blocks(scope):
            for i in range(len(block) - k + 1):
                if kinds[0] is not None and type(block[i]).__name__ != kinds[0]:
                    continue
                form = list[cst.CSTNode](block[i:i + k])
                if all(m.matches(s, x) for s, x in zip(form, matchers, strict=True)):
                    # forkgen's when the first statement it inserted carries its marker.
                    mine = [s for s, t in zip(form, compiled.template, strict=True) if not _is_placeholder_line(t)]
                    applied.append((form, bool(mine) and tag in module.code_for_node(mine[0]), None))
        return anchors, applied

    def _helper_names_free(self, module: cst.Module, shown: str,
                           found: Sequence[tuple[Edit, cst.CSTNode, _Anchors, _Applied]]) -> None:
        """Drift when a name a Helper binds is bound at module level other than by that helper."""
        for edit, _, _, applied in found:
            if not isinstance(edit, Helper):
                continue
            own = names_of(self.compiled(edit).piece, into_defs=False)[1]
            template = [t for t in self.compiled(edit).template if not (edit.anywhere and _is_placeholder_line(t))]
            helpers = {id(s) for form, _, _ in applied for s, t in zip(form, template, strict=True)
                       if not _is_placeholder_line(t)}
            for statement in module.body:
                clash = sorted(own & names_of([statement], into_defs=False)[1]) if id(statement) not in helpers else []
                if clash:
                    line = lines(module, [statement])[id(statement)]
                    raise AnchorDrift(shown, line, ", ".join(clash), f"names free for {edit.piece} (forkgen's helper)",
                                      "already bound")

    # -- deciding

    def analyze(self, sources: Sources) -> Analysis:
        """The patch's analysis of the tree (memoised until a patch changes a file)."""
        _preparse_patch(type(self))
        return sources.memoised(f"{self.name}:engine", lambda: self._analyze(sources))

    def _analyze(self, sources: Sources) -> Analysis:
        paths = list(dict.fromkeys(self.file_of(e.anchor) for e in self.edits))
        try:
            located = [(self.located(sources, p), p) for p in paths]
            files = tuple(self.analyze_module(sources.module(q), q, declared=p) for q, p in located)
        except AnchorDrift as drift:
            # The anchors may be gone because upstream made the change.
            upstream = self._upstream(sources)
            if upstream is None:
                if not drift.missing_file:
                    self.explain(sources, drift)
                raise
            return Analysis((), Check(Outcome.UPSTREAM, *upstream))
        reports = tuple(self.report(f, o) for f in files for o in f.occurrences if o.edit.anchor.reported)
        if not any(o.state is State.OURS for f in files for o in f.occurrences):
            upstream = self._upstream(sources)
            if upstream is not None:
                return Analysis(files, Check(Outcome.UPSTREAM, *upstream))
        try:
            if self.decide(files) is Outcome.UPSTREAM:
                return Analysis(files, Check(Outcome.UPSTREAM, self.details.upstream, reports))
            for f in files:
                self.check_names(f)
                self.check_imports(sources, f)
            relied = (self._relied_on(sources, anchor) for anchor in self.relies_on)
            reports += tuple(r for r in relied if r is not None)
        except AnchorDrift as drift:
            self.explain(sources, drift)
            raise
        todo = list(dict.fromkeys(o.edit.name for f in files for o in f.todo))
        detail = self.details.apply.format(todo=" and ".join(todo)) if todo else self.details.present
        analysis = Analysis(files, Check(Outcome.APPLIED, detail, reports, present=not todo))
        self.verify(sources, analysis)
        return analysis

    def report(self, analysis: FileAnalysis, occurrence: Occurrence) -> AnchorReport:
        """How `forkgen analyze` shows one occurrence's anchor (`{state}` in its description: the
        piece's state, `_STATE_WORDS`)."""
        edit = occurrence.edit
        name = edit.name if isinstance(edit, Prepend) else edit.anchor.title
        description = (edit.anchor.description or edit.anchor.where).replace("{state}", _STATE_WORDS[occurrence.state])
        return AnchorReport(name, occurrence.line, description,
                            self._shown(edit.anchor, analysis.path) or (analysis.path if self.report_paths else ""))

    def _upstream(self, sources: Sources) -> tuple[str, tuple[AnchorReport, ...]] | None:
        """The detail and reports of the first upstream shape whose patterns are each found their
        expected number of times (`upstream_patterns`, then `upstream_shapes`)."""
        shapes = ((self.details.upstream, self.upstream_patterns),) if self.upstream_patterns else ()
        for detail, patterns in (*shapes, *self.upstream_shapes):
            reports = []
            for anchor in patterns:
                path = self.located(sources, self.file_of(anchor))
                try:
                    hits = self.matches(sources, anchor)
                except AnchorDrift:
                    break
                if not sources.exists(path) or len(hits) != anchor.count:
                    break
                if anchor.reported and hits:
                    reports.append(AnchorReport(anchor.title, hits[0][1], anchor.description or anchor.where,
                                                self._shown(anchor, path)))
            else:
                return detail, tuple(reports)
        rule = self.upstream_rule(sources)
        return None if rule is None else (rule, ())

    def _relied_on(self, sources: Sources, anchor: Anchor) -> AnchorReport | None:
        """The report of an anchor the patch relies on (if shown); drift unless found its count."""
        path = self.located(sources, self.file_of(anchor))
        hits = self.matches(sources, anchor)
        if len(hits) != anchor.count:
            scope = _Scopes(sources.module(path), path).get(anchor.scope)
            line = hits[0][1] if hits else lines(sources.module(path), [scope])[id(scope)]
            raise AnchorDrift(path, line, anchor.title, f"exactly {_count(anchor.count)} `{anchor.title}` {anchor.where}",
                              f"{len(hits)}")
        if not (anchor.reported and hits):
            return None
        description = anchor.description or anchor.where
        captures = anchor.compiled.match(hits[0][0]) if anchor.compiled.captures else None
        if captures:
            module = sources.module(path)
            description = description.format_map({k: module.code_for_node(v) for k, v in captures.items()})
        return AnchorReport(anchor.title, hits[0][1], description, self._shown(anchor, path))

    def _shown(self, anchor: Anchor, path: str) -> str:
        """The file a report names: the anchor's, unless the patch's first (without `report_paths`)
        or `file_shown=False`."""
        return path if (path != self.files[0] or self.report_paths) and anchor.file_shown else ""

    def decide(self, files: Sequence[FileAnalysis]) -> Outcome:
        """UPSTREAM when every piece is upstream's, else APPLIED; drift for a partial presence."""
        found = [(f, o) for f in files for o in f.occurrences]
        todo, ours, theirs = ([(f, o) for f, o in found if o.state is s] for s in (State.TODO, State.OURS, State.THEIRS))
        if theirs and not todo and not ours:
            return Outcome.UPSTREAM
        if todo and (ours or theirs and not self.upstream_per_piece):
            done = ours or theirs
            f, o = todo[0]
            raise AnchorDrift(
                f.shown, o.line, self.name, "all pieces present or none" if ours else "all pieces upstream's or none",
                f"{', '.join(dict.fromkeys(x.edit.name for _, x in done))} {done[0][1].state.value}, "
                f"{', '.join(dict.fromkeys(x.edit.name for _, x in todo))} missing",
            )
        return Outcome.APPLIED

    def check_names(self, analysis: FileAnalysis) -> None:
        """Drift when code to insert reads a name nothing binds where it goes (the function it
        goes into, the module, the builtins, the patch's helpers and declared `names`), or binds
        a name that function already uses."""
        declared = set(self.names) | _BUILTINS
        for edit in self.edits:
            if isinstance(edit, Helper):
                declared |= names_of(self.compiled(edit).piece, into_defs=False)[1]
        module_names: set[str] | None = None
        for o in analysis.todo:
            compiled = self.compiled(o.edit)
            used, bound = names_of([compiled.expression] if compiled.expression is not None else compiled.piece)
            if isinstance(o.edit, Replace):
                bound -= names_of([o.node])[1]  # what the replaced statement bound is the piece's to bind
            free = {n for n in used - bound - declared - {PLACEHOLDER, VALUE} if not _metavariable(n)}
            if self.unshadowed_builtins and (used - bound - set(self.names)) & _BUILTINS:
                module_names = module_names or names_of(analysis.module.body, into_defs=False)[1]
                shadowed = sorted((used - bound - set(self.names)) & _BUILTINS & module_names)
                if shadowed:
                    raise AnchorDrift(analysis.shown, o.line, ", ".join(shadowed),
                                      f"the builtins {o.edit.piece} reads", "bound at module level")
            if isinstance(o.edit, (AddElse, WrapBody, Unwrap)):
                bound -= names_of([o.node])[1]  # rebinding what the anchor statement binds
            if isinstance(o.scope, cst.FunctionDef) and not isinstance(o.edit, Helper):
                free -= names_of([o.scope.params])[1]
                if free or bound:
                    scope_used, scope_bound = names_of([o.scope.body], into_defs=False)
                    free -= scope_bound
                    clash = sorted((bound - set(o.edit.rebinds)) & (scope_used | scope_bound))
                    if clash:
                        raise AnchorDrift(analysis.shown, o.line, f"{o.edit.anchor.scope}: {', '.join(clash)}",
                                          f"names free for {o.edit.piece}", "used")
            if free and module_names is None:
                module_names = names_of(analysis.module.body, into_defs=False)[1]
            missing = sorted(free - (module_names or set()))
            if missing:
                raise AnchorDrift(analysis.shown, o.line, ", ".join(missing),
                                  f"bound where {o.edit.piece} goes ({o.edit.anchor.where} or at module level)",
                                  "not bound")

    def check_imports(self, sources: Sources, analysis: FileAnalysis) -> None:
        """Drift when code to insert imports a module of the tree being patched (one of the package
        the file is in, `keras` for `keras/src/losses/loss.py`; relative imports resolved from the
        file's package) that the tree does not have, as `a/b.py` or `a/b/__init__.py`: checked
        here, not found missing when the wheel runs. `import a.b.c` and `from a.b.c import d`
        need `a.b.c` (`d` may be any name). Every import of the piece counts, at any depth (in
        functions too); other packages' modules (torch, numpy) are not looked for. The line is
        where the piece goes (an appended one: below the module's last line). A tree without
        the file's own package (`__init__.py`: the loose modules of a synthetic tree, a file
        alone) has no packages to look in: nothing is checked."""
        package = analysis.path.split("/")[:-1]
        if not package or not analysis.todo or not sources.exists("/".join([*package, "__init__.py"])):
            return
        for o in analysis.todo:
            for level, name in imports_of(self.compiled(o.edit).piece):
                parts = (package[:len(package) + 1 - level] if level else []) + [p for p in name.split(".") if p]
                if len(parts) < 2 or parts[0] != package[0] or level > len(package):
                    continue  # another package's module, or the tree's root package itself
                wanted = ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"]))
                if not any(sources.exists(path) for path in wanted):
                    # An appended piece goes below the module's last line.
                    line = analysis.module.code.count("\n") + 1 if isinstance(o.edit, Append) else o.line
                    raise AnchorDrift(analysis.shown, line, ".".join(parts),
                                      f"the module {o.edit.piece} imports, {wanted[0]} or {wanted[1]}", "neither")

    # -- the Patch interface

    def check(self, sources: Sources) -> Check:
        return self.analyze(sources).check

    def apply(self, sources: Sources) -> None:
        for analysis in self.analyze(sources).files:
            if analysis.todo:
                command = self.command(CodemodContext(filename=analysis.path), analysis, self)
                sources.replace(analysis.path, command.transform_module(sources.module(analysis.path)))

    # -- editing

    def plan(self, analysis: FileAnalysis) -> tuple[set[int], dict[int, Callable[[Any], Any]]]:
        """(the ids of the nodes to visit, what to do on leaving each node edited)."""
        plan: dict[int, Callable[[Any], Any]] = {}
        targets: list[cst.CSTNode] = []
        extra: set[int] = set()
        for o in analysis.todo:
            compiled = self.compiled(o.edit)
            if isinstance(o.edit, ReplaceExpression):
                assert o.statement is not None and compiled.expression is not None
                fill = _fill_value if isinstance(o.node, cst.Arg) else _fill
                _add(plan, o.node, functools.partial(fill, compiled.expression, values=self.fill(o.edit, o.captures)))
                header = getattr(compiled.piece[0], "body", None)
                if o.edit.marked and isinstance(header, cst.IndentedBlock):
                    _add(plan, o.statement, functools.partial(_header, header.header))
                elif o.edit.marked:
                    _add(plan, o.statement, functools.partial(_comment, _above(compiled.piece[0])))
                targets.append(o.statement)
                extra |= ancestors(o.statement, o.node)
            elif isinstance(o.edit, Append):
                _add(plan, o.node, functools.partial(_append, compiled.template))
            elif isinstance(o.edit, AddElse):
                assert compiled.branch is not None
                _add(plan, o.node, functools.partial(_attach, compiled.branch))
                targets.append(o.node)
            elif isinstance(o.edit, WrapBody):
                _add(plan, o.node, functools.partial(_rebody, compiled.piece))
                targets.append(o.node)
            elif isinstance(o.edit, Unwrap):
                _add(plan, o.node, functools.partial(_unwrap, compiled.piece))
                targets.append(o.node)
            elif isinstance(o.edit, Prepend):
                block = cast(cst.FunctionDef, o.node).body
                _add(plan, block, functools.partial(_prepend, compiled.template, o.edit.blank_lines, o.edit.keep_comments))
                targets.append(o.node)
                extra.add(id(block))
            else:
                _add(plan, o.node, functools.partial(_splice, compiled.template, o.edit.keep_comments,
                                                     self.fill(o.edit, o.captures), o.following))
                targets.append(o.node)
                for statement in o.following:  # a run: its first statement takes the rest along
                    _add(plan, statement, lambda _: cst.RemovalSentinel.REMOVE)
        return statement_ancestors(analysis.module, targets) | extra, plan


@functools.cache
def _preparse_patch(patch: type[DeclaredPatch]) -> None:
    """Every statement pattern of `patch`'s anchors parsed in one batch (`_preparse`)."""
    shapes = tuple(a for _, anchors in patch.upstream_shapes for a in anchors)
    anchors = (*(e.anchor for e in patch.edits if not isinstance(e, (Prepend, Append))), *patch.relies_on,
               *patch.upstream_patterns, *shapes)
    _preparse(source for a in anchors if not a.expression for source in (a.pattern, *a.alternatives))
