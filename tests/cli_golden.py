"""Every command's output, text and `--json`, on fixed synthetic inputs: to prove that a refactor
of forkgen/ changes none of what users read (stdout, stderr, exit code, files written).

    git worktree add --detach /tmp/before HEAD
    PYTHONPATH=/tmp/before .venv/bin/python tests/cli_golden.py /tmp/golden-before
    .venv/bin/python tests/cli_golden.py /tmp/golden-after
    diff -r /tmp/golden-before /tmp/golden-after          # no output: identical

Offline: the releases are synthetic Keras-shaped sdists on a file:// index (as in
tests/unit/test_unattended.py), and the verify stage of a rebase is stood in for (passing or
failing), as the unit tests do. Each scenario runs in a fresh directory; its path is written
as `<tmp>`. Writes OUT/<scenario>.txt per scenario.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forkgen import cli, provenance, verify  # noqa: E402
from forkgen import rebase as rebase_mod  # noqa: E402
from forkgen.errors import VerificationError  # noqa: E402
from tests.support.fake_index import FakeIndex, File  # noqa: E402
from tests.support.synthetic import sdist_bytes, sha256, tree_files, write_tree  # noqa: E402
from tests.unit.test_unattended import PYPROJECT, RELEASES, drifted_layer  # noqa: E402


def passing(*args: object, **kwargs: object) -> list[verify.SuiteResult]:
    return [verify.SuiteResult("equivalence", "42 passed"), verify.SuiteResult("parity", "76 arrays bit for bit")]


def failing(*args: object, **kwargs: object) -> list[verify.SuiteResult]:
    raise VerificationError("the equivalence suite failed (exit 1): 1 failed, 41 passed",
                            hint="tests/equivalence/test_patch_x.py::test_y names the patch")


@contextlib.contextmanager
def project(stand_in: Callable[..., list[verify.SuiteResult]] = passing) -> Iterator[Path]:
    """A fresh project pinned to 3.15.1, an index serving the synthetic releases, the verify stage stood in for."""
    saved_env, saved_cwd, saved_verify = dict(os.environ), os.getcwd(), rebase_mod.verify_release
    with tempfile.TemporaryDirectory(prefix="forkgen-golden-") as tmp:
        root = Path(tmp)
        files = [File(f"keras-{v}.tar.gz", make()) for v, make in RELEASES.items()]
        nightly = "3.16.0.dev2026102704"
        projects = {"keras": files, "keras-nightly": [
            File(f"keras_nightly-{nightly}.tar.gz", sdist_bytes(tree_files(version=nightly), top=f"keras_nightly-{nightly}"))]}
        os.environ.update(PIP_INDEX_URL=FakeIndex(projects).write(root / "index").as_uri(), PIP_CONFIG_FILE=os.devnull,
                          FORKGEN_CACHE_DIR=str(root / "cache"), SOURCE_DATE_EPOCH="1700000000")
        for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "FORKGEN_LOCAL_LABEL", "FORKGEN_DEBUG"):
            os.environ.pop(name, None)
        (root / "pyproject.toml").write_text(PYPROJECT.format(version="3.15.1", sha256=sha256(RELEASES["3.15.1"]())))
        os.chdir(root)
        rebase_mod.verify_release = stand_in  # type: ignore[assignment]
        try:
            yield root
        finally:
            rebase_mod.verify_release = saved_verify
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)


def run(root: Path, *argv: str) -> str:
    """One command: its exit code, stdout and stderr, the project's path written `<tmp>`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    text = f"$ forkgen {' '.join(argv)}\nexit {code}\n--- stdout\n{out.getvalue()}--- stderr\n{err.getvalue()}"
    return normal(root, text)


def normal(root: Path, text: str) -> str:
    """`text` with what differs from run to run written alike: the project's path, build
    directories' random names, durations; and the digest of the codemods' sources, which every
    change to codemods/ moves, with the sha256 of each wheel (its provenance records it)."""
    text = text.replace(provenance.codemods_digest(), "<codemods digest>")
    for wheel in root.rglob("*.whl"):
        text = text.replace(hashlib.sha256(wheel.read_bytes()).hexdigest(), f"<sha256 of {wheel.name}>")
    text = text.replace(str(root.resolve()), "<tmp>").replace(str(root), "<tmp>")
    text = re.sub(r"\.build-[0-9a-f]+", ".build-<id>", text)
    return re.sub(r"\b\d+(\.\d+)? s\b", "<n> s", text)


def written(root: Path, *names: str) -> str:
    """Files a command wrote (the rebase summary, the pin), as they read."""
    return normal(root, "".join(f"--- {name}\n{(root / name).read_text()}" for name in names if (root / name).is_file()))


def scenarios() -> dict[str, Callable[[], str]]:
    def analyze() -> str:
        with project() as root:
            src = write_tree(root / "src")
            drifted = write_tree(root / "drifted", tree_files(drifted_layer()))
            return "".join(run(root, *a) for a in (["analyze", str(src)], ["analyze", str(src), "--json"],
                                                   ["analyze", str(drifted)], ["analyze", str(drifted), "--json"]))

    def failures() -> str:
        with project() as root:
            missing, empty = str(root / "missing"), root / "empty"
            empty.mkdir()
            (root / "nopin.toml").write_text("[project]\nname = 'x'\n")
            return "".join(run(root, *a) for a in (
                ["analyze", missing], ["analyze", missing, "--json"], ["analyze", str(empty), "--json"],
                ["report", missing, "--json"], ["report", str(empty)], ["outdated", "--config", str(root / "nopin.toml"), "--json"],
                ["inspect", missing], ["build", "--source", missing], ["series", "--without-patch", "no-such-patch"],
                ["inspect", str(empty)], ["fetch", "--version", "2.15.0"], ["build", "--out-dir", str(root / "pyproject.toml")],
                ["fetch", "--cache-dir", str(root / "pyproject.toml" / "cache")], ["publish", missing, "--index-dir", "/proc/index"]))

    def series() -> str:
        with project() as root:
            return run(root, "series") + run(root, "series", "--json")

    def build_and_inspect() -> str:
        with project() as root:
            text = run(root, "build", "--source", str(write_tree(root / "src")), "--out-dir", str(root / "dist"),
                       "--local-label", "golden.1")
            wheel = next((root / "dist").glob("*.whl"))
            return text + run(root, "inspect", str(wheel)) + run(root, "inspect", str(wheel), "--json")

    def report() -> str:
        with project() as root:
            src = write_tree(root / "src")
            return run(root, "report", str(src)) + run(root, "report", str(src), "--json")

    def outdated() -> str:
        with project() as root:
            return (run(root, "outdated") + run(root, "outdated", "--json")
                    + run(root, "outdated", "--distribution", "keras-nightly", "--json"))

    def rebase(*argv: str, stand_in: Callable[..., list[verify.SuiteResult]] = passing) -> Callable[[], str]:
        def scenario() -> str:
            texts = []
            for as_json in ((), ("--json",)):
                with project(stand_in) as root:
                    texts.append(run(root, "rebase", *argv, *as_json) + written(root, "pyproject.toml", "patched_keras/rebase/summary.md"))
            return "".join(texts)
        return scenario

    return {
        "analyze": analyze,
        "failures": failures,
        "series": series,
        "build-inspect": build_and_inspect,
        "report": report,
        "outdated": outdated,
        "rebase-success": rebase("3.15.2"),
        "rebase-retires": rebase("3.16.0"),
        "rebase-drift": rebase("3.17.0"),
        "rebase-verification-failure": rebase("3.15.2", stand_in=failing),
        "rebase-no-verify": rebase("3.15.2", "--no-verify"),
        "rebase-latest-nightly": rebase("--latest", "--distribution", "keras-nightly"),
        "rebase-contradiction": rebase("3.15.2", "--latest"),
        "rebase-unknown-release": rebase("9.9.9"),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, scenario in scenarios().items():
        text = scenario()
        (out / f"{name}.txt").write_text(text)
        print(f"{name}: {len(text.splitlines())} lines", file=sys.__stderr__)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
