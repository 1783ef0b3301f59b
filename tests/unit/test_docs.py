"""README.md and docs/*.md: every relative link resolves (files and #anchors as GitHub renders
them) and every `forkgen COMMAND` they show exists (`forkgen COMMAND --help` exits 0)."""

from __future__ import annotations

import re
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
