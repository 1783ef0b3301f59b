"""README.md and docs/*.md: every relative link resolves (files and #anchors as GitHub renders
them) and every `forkgen COMMAND` they show exists (`forkgen COMMAND --help` exits 0)."""

from __future__ import annotations

import re
import tomllib
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

from forkgen import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: [text](target) outside code; images too. Targets with a scheme are not checked.
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
COMMAND = re.compile(r"(?:^|[$(|;&]\s*|python3? -m )forkgen[ \t]+([a-z][a-z-]*)", re.M)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (links there are not links)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else INLINE_CODE.sub("", line))
    return "\n".join(lines)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, punctuation removed
    (letters, digits, `-`, `_` and spaces kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = text.strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    result: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not match:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def _links() -> list[tuple[Path, str]]:
    found = []
    for page in PAGES:
        for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...
                continue
            found.append((page, target))
    return found


def _code(text: str) -> str:
    """What the page shows as code: fenced blocks and inline code spans."""
    parts, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif fenced:
            parts.append(line)
        else:
            parts.extend(match.group(0).strip("`") for match in INLINE_CODE.finditer(line))
    return "\n".join(parts)


def _commands() -> list[tuple[Path, str]]:
    """Every `forkgen COMMAND` shown as code, where a shell would run it: at the start of a line
    or a code span, after `$`, `(`, `|`, `;`, `&`, or as `python -m forkgen` (prose, paths and
    messages such as "carries no forkgen provenance" are not commands)."""
    found = set()
    for page in PAGES:
        for name in COMMAND.findall(_code(page.read_text(encoding="utf-8"))):
            found.add((page, name))
    return sorted(found)


def test_pages_exist() -> None:
    assert (ROOT / "README.md").is_file()
    assert len(PAGES) > 5, "docs/ holds the reference pages"


def test_slugs_as_github_renders_them() -> None:
    assert github_slug("The extension: every call that binds") == "the-extension-every-call-that-binds"
    assert github_slug("`forkgen report`") == "forkgen-report"
    assert github_slug("Test gates (fail closed)") == "test-gates-fail-closed"
    assert github_slug("Benchmark (`nox -s bench`)") == "benchmark-nox--s-bench"


@pytest.mark.parametrize(("page", "target"), _links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_relative_link_resolves(page: Path, target: str) -> None:
    path_part, _, fragment = target.partition("#")
    destination = (page.parent / unquote(path_part)).resolve() if path_part else page
    assert destination.exists(), f"{page.relative_to(ROOT)}: link {target!r}: {destination} does not exist"
    if fragment:
        assert destination.suffix == ".md", f"{page.relative_to(ROOT)}: {target!r}: an anchor into a non-Markdown file"
        assert fragment in anchors(destination), (
            f"{page.relative_to(ROOT)}: link {target!r}: no heading with anchor #{fragment} in "
            f"{destination.relative_to(ROOT)} (it has: {', '.join(sorted(anchors(destination)))})"
        )


def test_links_found() -> None:
    assert any(target.startswith("docs/") for page, target in _links() if page.name == "README.md")


@pytest.mark.parametrize(("page", "command"), _commands(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_shown_command_exists(page: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0, f"{page.relative_to(ROOT)} shows `forkgen {command}`, which does not exist"
    assert command in capsys.readouterr().out


# --- What a user reads must be current: labels, patch counts, install commands, README's shape ---

#: The pages a user reads, and the wheel's own description (the overlay README, before filling).
CURRENT_PAGES = [
    *PAGES,
    ROOT / "COMPATIBILITY.md",
    ROOT / "patched_keras" / "README.md",
    ROOT / "patched_keras" / "overlay" / "README.md",
]
#: A wheel label: the series' own (`fast.` + 8 letters) or the one before the series (`fastcallspec.N`).
LABEL = re.compile(r"\bfast\.[a-z]{8}\b|\bfastcallspec\.\d+\b")
#: A count of the series' patches: "38 patches", "38 performance patches", "the 38-patch series",
#: "one performance patch".
PATCH_COUNT = re.compile(r"\b(\d+)(?:\s+performance)?\s+patches\b|\b(\d+)-patch\s+series\b|\b(one)\s+performance\s+patch\b")
#: What makes a paragraph (or a table row) a record of its day: an ISO date (YYYY-MM-DD).
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
#: What makes a whole page the record of one bench run: the generator's comment at its top.
BENCH_RECORD = re.compile(r"<!--\s*generated by .*nox -s bench", re.I)


def current_series() -> tuple[str, int]:
    """(the label `forkgen build` gives the pinned release's wheel, the number of patches in the series).

    The label names the patches applied to the pinned release (COMPATIBILITY.md's row of it; every
    patch when the page has no such row) at their current versions, or [tool.forkgen] local-label.
    """
    from codemods.series import load_series, series_label

    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["forkgen"]
    series = load_series()
    if "local-label" in table:
        return str(table["local-label"]), len(series)
    applied = {p.name for p in series}
    lines = (ROOT / "COMPATIBILITY.md").read_text(encoding="utf-8").splitlines()
    header = next((line for line in lines if line.startswith("| release |")), None)
    row = next((line for line in lines if line.startswith(f"| {table['distribution']} {table['version']} |")), None)
    if header and row:
        columns = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")], strict=False))
        outcomes = {p.name: columns.get(f"P{i}") for i, p in enumerate(series, 1)}
        if all(outcomes.values()):
            applied = {name for name, outcome in outcomes.items() if outcome == "applied"}
    return series_label((p.name, p.version) for p in series if p.name in applied), len(series)


def units(text: str) -> list[tuple[int, str]]:
    """A page cut where a record's date applies: paragraphs, each table row alone, each fenced
    block whole; (first line number, text)."""
    found: list[tuple[int, str]] = []
    current: list[str] = []
    start, fenced = 0, False

    def flush() -> None:
        if current:
            found.append((start, "\n".join(current)))
            current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            if not fenced:
                flush()
                start = number
            current.append(line)
            fenced = not fenced
            if not fenced:
                flush()
            continue
        if fenced:
            current.append(line)
        elif not line.strip():
            flush()
        elif line.lstrip().startswith("|"):
            flush()
            found.append((number, line))
        else:
            if not current:
                start = number
            current.append(line)
    flush()
    return found


def stale_mentions(text: str, name: str, label: str, count: int) -> list[str]:
    """Every label and patch count of the page `text` that is not the current series', outside records.

    The rule: a paragraph or table row that carries an ISO date (YYYY-MM-DD) is a record of its
    day and may name the series it measured (its label, its patch count); so may a page that a
    bench run generates (`<!-- generated by ... nox -s bench ... -->` at its top), the record of
    that run. Everywhere else a label or count must be the current series': write `<label>` in
    examples (`forkgen build` prints the wheel with it) rather than a literal that goes stale.
    """
    if BENCH_RECORD.search("\n".join(text.splitlines()[:5])):
        return []
    stale = []
    for number, unit in units(text):
        if DATE.search(unit):
            continue
        where = f"{name}:{number}"
        stale += [f"{where}: label {m.group(0)} (current: {label})" for m in LABEL.finditer(unit) if m.group(0) != label]
        for m in PATCH_COUNT.finditer(unit):
            n = m.group(1) or m.group(2)
            if (int(n) if n else 1) != count:
                stale.append(f"{where}: {m.group(0)!r} (the series has {count} patches)")
    return stale


@pytest.mark.parametrize("page", CURRENT_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_names_only_the_current_label_and_patch_count(page: Path) -> None:
    label, count = current_series()
    stale = stale_mentions(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)), label, count)
    assert not stale, "stale text (use `<label>`, or date the record):\n" + "\n".join(stale)


def test_stale_mentions_rule() -> None:
    cases = {
        "keras-3.15.1+fast.abcdefgh\n": 1,  # another label
        "`fastcallspec.2`\n": 1,
        "keras-3.15.1+fast.currentx\n": 0,  # the current one
        "keras-3.15.1+<label>, fast.<8 letters>\n": 0,
        "with the 20 patches of the series\n": 1,
        "for one performance patch\n": 1,
        "the 7 patches\n": 0,
        "The 29-patch series (2026-12-05): 26 min\n": 0,  # a dated record
        "On 2026-12-05 the wheel\nkeras-3.15.1+fast.abcdefgh (36 patches)\n": 0,  # the date covers its paragraph
        "On 2026-12-05 the wheel\n\nkeras-3.15.1+fast.abcdefgh\n": 1,  # ... not the next one
        "| 2026-12-05 | fast.abcdefgh |\n| today | fast.abcdefgh |\n": 1,  # a table row alone
        "```\nfast.abcdefgh\n\nfast.abcdefgh\n```\n": 2,  # a code block is one unit
        "<!-- generated by tests/bench/run.py (`nox -s bench`) -->\nfast.abcdefgh\n": 0,  # a bench run's record
    }
    for text, expected in cases.items():
        found = stale_mentions(text, "probe.md", "fast.currentx", 7)
        assert len(found) == expected, (text, found)


def test_current_series_label_is_what_the_series_gives() -> None:
    from codemods.series import LABEL_PREFIX, load_series

    label, count = current_series()
    assert re.fullmatch(rf"{LABEL_PREFIX}\.[a-z]{{8}}", label) or "local-label" in (ROOT / "pyproject.toml").read_text()
    assert count == len(load_series())


README_LIMIT = 160


def test_readme_starts_with_the_two_commands_and_stays_short() -> None:
    """README.md opens with building the fork and running the tests (.ci/run's command), each
    working on a fresh machine, and stays under 160 lines: the patch table lives in docs/patches.md."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_LIMIT, f"README.md has {len(lines)} lines; keep it under {README_LIMIT}"
    body = [line for line in lines[1:] if line.strip()]
    assert lines[0].startswith("# ") and FENCE.match(body[0]), "README.md must start with a code block of commands"
    block = body[1 : body.index(body[0], 1)]
    commands = [re.sub(r"\s+#.*$", "", line).strip() for line in block]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    assert commands[0].endswith("nox -s build_fork"), commands
    assert commands[1:] == ci, f"README's second command must be what .ci/run runs: {ci}"
    assert not any(re.match(r"^\| \d+ \| `", line) for line in lines), "the patch table belongs in docs/patches.md"


def test_the_patch_table_is_in_patches_md() -> None:
    from codemods.series import load_series

    text = (ROOT / "docs" / "patches.md").read_text(encoding="utf-8")
    for number, patch in enumerate(load_series(), 1):
        assert re.search(rf"^\| {number} \| `{re.escape(patch.name)}` \|", text, re.M), f"docs/patches.md lacks {patch.name}"


def test_every_documented_install_command_is_run_by_the_publish_session() -> None:
    """Each keras install command README.md and docs/serving.md show (pip, uv pip, uv sync) is
    marked, so that tests/publish/test_documented_installs.py runs it with the real client."""
    from tests.support.documented_installs import PAGES as INSTALL_PAGES
    from tests.support.documented_installs import documented_installs, is_keras_install

    marked = {(d.page, d.command) for d in documented_installs()}
    assert {d.installer for d in documented_installs()} == {"pip", "uv"}
    for page in INSTALL_PAGES:
        shown = [line.strip() for line in _code(page.read_text(encoding="utf-8")).splitlines() if is_keras_install(line)]
        assert shown, f"{page.relative_to(ROOT)} shows no install command"
        unmarked = [line for line in shown if (str(page.relative_to(ROOT)), line) not in marked]
        assert not unmarked, f"{page.relative_to(ROOT)}: install commands no test runs (mark their block): {unmarked}"


def test_documented_installs_name_the_pinned_release() -> None:
    """Every `keras==V` (or `keras==V+<label>`) that README.md and docs/serving.md tell users to
    install is the pinned release: after a rebase moves the pin, this says which lines to update
    (the publish session would otherwise install upstream's V, or nothing, from them)."""
    from tests.support.documented_installs import PAGES as INSTALL_PAGES

    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["forkgen"]["version"]
    named = []
    for page in INSTALL_PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            named += [(f"{page.relative_to(ROOT)}:{number}", v) for v in re.findall(r"\bkeras==([0-9][^\s+\"'`,]*)", line)]
    assert named, "no page names the release to install"
    stale = [f"{where}: keras=={version}" for where, version in named if version != pinned]
    assert not stale, f"the pin is {pinned}; these lines name another release: {stale}"


def test_install_commands_are_recognised() -> None:
    from tests.support.documented_installs import is_keras_install

    assert is_keras_install("pip install --index-url http://x/simple keras==3.15.1")
    assert is_keras_install("uv pip install -r requirements.txt")
    assert is_keras_install("uv sync")
    assert is_keras_install("$ python -m pip install keras")
    assert not is_keras_install("python3 -m pip install nox && nox -s build_fork     # builds keras-3.15.1+...")
    assert not is_keras_install("python -m pip install -e .")


# --- The wheel's own description: the overlay README, filled in from the series at build time ---

OVERLAY_README = ROOT / "patched_keras" / "overlay" / "README.md"


def provenance_of(applied: list[tuple[str, str]], aside: list[tuple[str, str]], version: str) -> dict[str, object]:
    return {
        "fork_version": version,
        "upstream": {"distribution": "keras", "version": version.partition("+")[0]},
        "patches": [{"name": n, "version": v, "outcome": "applied", "origin": "ours"} for n, v in applied]
        + [{"name": n, "version": v, "outcome": o, "origin": "upstream"} for n, o, v in ((n, o, "1") for n, o in aside)],
    }


def test_the_overlay_readme_describes_the_series_it_is_built_with() -> None:
    """The committed overlay names no series; filled in, it names this series' label, count and patches."""
    from codemods.series import load_series, series_label
    from forkgen import overlay

    patches = [(p.name, p.version) for p in load_series()]
    label = series_label(patches)
    filled = overlay.fill(OVERLAY_README.read_text(encoding="utf-8"), provenance_of(patches, [], f"3.15.1+{label}"))
    assert "{{" not in filled and "}}" not in filled
    assert f"3.15.1+{label}" in filled and f"{len(patches)} performance patches" in filled
    assert all(f"- `{name}` {version} " in filled for name, version in patches)
    assert stale_mentions(filled, "the wheel's description", label, len(patches)) == []
    assert "CallSpec fast path (built by forkgen)" not in filled.splitlines()[0]  # the old title: one patch


def test_the_overlay_readme_counts_what_was_applied() -> None:
    from forkgen import overlay

    one = overlay.fill("{{applied_patches}}; {{label}}\n{{patch_list}}",
                       provenance_of([("a", "2")], [("b", "upstream")], "3.14.1+fast.abcdefgh"))
    assert one.startswith("1 performance patch; fast.abcdefgh\n- `a` 2 (origin: ours)")
    assert "`b` (upstream)" in one


def test_an_unknown_overlay_placeholder_is_refused() -> None:
    from forkgen import overlay
    from forkgen.errors import UsageError

    with pytest.raises(UsageError, match=r"\{\{lable\}\}"):
        overlay.fill("{{lable}}", provenance_of([], [], "3.15.1+x.1"))


def test_a_built_wheels_long_description_is_the_filled_overlay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`forkgen build` with the committed overlay: the METADATA (what `pip show` and index pages
    show) names the wheel's own version and patch count, and no placeholder."""
    import zipfile
    from email.parser import HeaderParser

    from forkgen.provenance import PROVENANCE_PY, parse_module
    from tests.support.synthetic import write_tree

    src = write_tree(tmp_path / "src")
    config = tmp_path / "pyproject.toml"
    pin = 'distribution = "keras"\nversion = "3.15.1"\nsha256 = "' + "0" * 64 + '"\n'
    config.write_text(f'[tool.forkgen]\n{pin}overlay = "{OVERLAY_README.parent}"\n')
    code = cli.main(["build", "--source", str(src), "--out-dir", str(tmp_path / "dist"), "--config", str(config)])
    out, err = capsys.readouterr()
    assert code == 0, err
    wheel = Path(out.strip().splitlines()[-1])
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        provenance = parse_module(archive.read(PROVENANCE_PY).decode())
    description = HeaderParser().parsestr(metadata).get_payload()
    applied = [p["name"] for p in provenance["patches"] if p["outcome"] == "applied"]
    assert "{{" not in description and provenance["fork_version"] in description.splitlines()[0]
    assert f"{len(applied)} performance patch" in description and all(f"`{n}`" in description for n in applied)
