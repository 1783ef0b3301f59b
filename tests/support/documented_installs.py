"""The install commands README.md and docs/serving.md give, as the pages mark them.

A fenced block right after `<!-- tested-install ... -->` holds install commands, one a line,
that `nox -s publish` (tests/publish/test_documented_installs.py) runs as written; one after
`<!-- tested-install-file: NAME -->` holds a file (requirements.txt, pyproject.toml) that the
commands of the page's next tested-install block find in their working directory. In them:

- `http://127.0.0.1:8080/simple` is the fork's index (`forkgen publish` + `python -m http.server`);
- `https://pypi.org/simple` is PyPI (in the test: a second index serving upstream's keras);
- `<label>` is the wheel's local label.

tests/unit/test_docs.py checks that every keras install command the pages show is marked, so
none goes unrun.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The pages whose install commands must work as written, with pip and with uv.
PAGES = (ROOT / "README.md", ROOT / "docs" / "serving.md")
FORK_INDEX = "http://127.0.0.1:8080/simple"
PYPI_INDEX = "https://pypi.org/simple"
LABEL = "<label>"
MARK = re.compile(r"^<!--\s*tested-install(?:-file:\s*(?P<file>[\w.-]+))?(?:\s[^>]*)?-->\s*$")
FENCE = re.compile(r"^(```|~~~)")
#: A shell line that installs keras, or syncs a project: what must be marked.
INSTALL = re.compile(r"^(?:\$\s*)?(?:python3?\s+-m\s+)?(?:pip|uv\s+pip)\s+install\b|^(?:\$\s*)?uv\s+(?:sync|add|lock)\b")


@dataclass(frozen=True)
class Documented:
    """One documented install command, with the files its block uses."""

    page: str
    line: int
    command: str
    files: tuple[tuple[str, str], ...] = ()

    @property
    def installer(self) -> str:
        words = self.command.split()
        return "uv" if words[0] == "uv" else "pip"

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.command}"


def is_keras_install(line: str) -> bool:
    """A command line that installs keras (a package list naming it, a requirements file, a uv project)."""
    line = re.sub(r"\s+#.*$", "", line.strip())  # a shell comment is not part of the command
    if not INSTALL.search(line):
        return False
    return "keras" in line or " -r " in f" {line} " or bool(re.match(r"^(?:\$\s*)?uv\s+(?:sync|lock|add)\b", line))


def _fenced(lines: list[str], start: int, page: str) -> tuple[list[tuple[int, str]], int]:
    """The lines of the fenced block opening at `start` (1-based numbers) and the index after it."""
    if start >= len(lines) or not FENCE.match(lines[start].strip()):
        raise ValueError(f"{page}:{start}: a tested-install marker must be followed by a fenced block")
    body: list[tuple[int, str]] = []
    i = start + 1
    while i < len(lines) and not FENCE.match(lines[i].strip()):
        body.append((i + 1, lines[i]))
        i += 1
    if i == len(lines):
        raise ValueError(f"{page}:{start + 1}: the fenced block is not closed")
    return body, i + 1


def documented_installs(pages: tuple[Path, ...] = PAGES) -> list[Documented]:
    """Every marked install command of `pages`, in page order."""
    found: list[Documented] = []
    for path in pages:
        page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        lines = path.read_text(encoding="utf-8").splitlines()
        files: list[tuple[str, str]] = []
        i = 0
        while i < len(lines):
            mark = MARK.match(lines[i].strip())
            if not mark:
                i += 1
                continue
            body, i = _fenced(lines, i + 1, page)
            if mark.group("file"):
                files.append((mark.group("file"), "".join(text + "\n" for _, text in body)))
                continue
            for number, text in body:
                command = text.strip()
                if not command or command.startswith("#"):
                    continue
                found.append(Documented(page, number, command, tuple(files)))
            files = []
    return found
