"""The `forkgen` command: chains the stages, prints results, maps errors to exit codes."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

import forkgen
from codemods import series as series_mod
from codemods.engine import Patch
from codemods.stamp_version import VERSION_PY, read_version
from forkgen import config as config_mod
from forkgen import effects as effects_mod
from forkgen import outdated as outdated_mod
from forkgen import patch, pipeline, provenance, render, requirements, verify
from forkgen import publish as publish_mod
from forkgen import rebase as rebase_mod
from forkgen import report as report_mod
from forkgen.cmd import log
from forkgen.errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_OUTDATED,
    ForkgenError,
    UsageError,
)
from forkgen.fetch import default_cache_dir, fetch
from forkgen.model import Pin

EPILOG = """\
exit codes:
  0   success
  2   usage: bad arguments or configuration, a directory that cannot be written, output already present
  3   fetch: the sdist could not be downloaded (no such version, index unreachable)
  4   integrity: sha256 mismatch, corrupt or unsafe archive
  5   upstream drift: an anchor is missing, not unique, or of an unknown shape
  6   build: the wheel could not be built
  7   verification: a test passes with upstream Keras and fails with the patched wheel
  10  outdated: the index serves a release newer than the pin (`forkgen outdated`; not a failure)
  70  internal error (a bug in forkgen; set FORKGEN_DEBUG=1 for the traceback)
"""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="pyproject.toml with [tool.forkgen] (default: nearest one from the current directory up)")


def _no_config(parser: argparse.ArgumentParser) -> None:
    # Accepted so that `--config` never fails as an unknown option, then refused with the reason.
    parser.add_argument("--config", type=Path, help="not used by this command (refused)")


#: Why `--config` means nothing to these commands: they read only what they are given.
CONFIG_IGNORED = {
    "report": "it reports on the tree SRC as it is, patched or not, whatever the pin",
    "effects": "it analyses the tree SRC as it is, patched or not, whatever the pin",
    "inspect": "it reads only the wheel's own provenance",
    "publish": "the index directory and the wheels are all it uses",
    "compare-tests": "it compares two JUnit XML files",
}


def _release(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--version", dest="release",
        help="upstream release, or `latest` for the newest the index serves (default: the pinned one; "
        "with --distribution other than the pinned one: latest)",
    )
    parser.add_argument("--distribution", choices=config_mod.DISTRIBUTIONS, help="upstream distribution (default: the pinned one)")
    parser.add_argument("--sha256", help="expected sha256 of the sdist (default: the pin, for the pinned release)")
    parser.add_argument("--cache-dir", type=Path, help="download cache (default: $FORKGEN_CACHE_DIR or ~/.cache/forkgen)")


EXTENSION = "callspec-training-fast-path"


def _selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--patch", dest="patches", action="append", default=[], metavar="NAME",
        help="apply only the named patches (repeatable; default: [tool.forkgen] patches, else the whole series)",
    )
    parser.add_argument(
        "--without-patch", dest="without", action="append", default=[], metavar="NAME",
        help="leave out the named patch (repeatable)",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--no-training-fast-path",
        dest="training_fast_path",
        action="store_false",
        default=None,
        help=f"the same as --without-patch {EXTENSION} (default: [tool.forkgen] training-fast-path, true)",
    )
    group.add_argument(
        "--training-fast-path", dest="training_fast_path", action="store_true",
        help=f"keep {EXTENSION} even when the configuration says training-fast-path = false",
    )


def _selected(args: argparse.Namespace, cfg: config_mod.Config) -> tuple[Patch, ...]:
    """The patches of this run: the configuration's, then the command line's."""
    without = list(args.without)
    keep_extension = cfg.training_fast_path if args.training_fast_path is None else bool(args.training_fast_path)
    if not keep_extension:
        without.append(EXTENSION)
    configured = list(cfg.patches) if cfg.patches is not None else None
    if configured is not None and args.training_fast_path and EXTENSION not in configured:
        configured.append(EXTENSION)
    return patch.selection(configured, args.patches, without)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forkgen",
        description="Carry a series of performance patches on top of upstream Keras and build a drop-in keras wheel.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # `forkgen --version` (before any command) is forkgen's own; a command's `--version` is the Keras release.
    parser.add_argument("-V", "--version", "--forkgen-version", action="version", version=f"forkgen {forkgen.__version__}",
                        help="print forkgen's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("fetch", help="download, verify and unpack the sdist; print the source directory")
    _common(p)
    _release(p)

    p = sub.add_parser("analyze", help="report every anchor of the patch in a source tree")
    _common(p)
    p.add_argument("src", type=Path, metavar="SRC", help="root of an unpacked Keras sdist")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _selection(p)

    p = sub.add_parser("series", help="list the patch series with its DEP-3 headers, as quilt series does")
    _common(p)
    _selection(p)
    p.add_argument("--json", action="store_true", help="print the series as JSON")

    p = sub.add_parser("report", help="every Layer subclass, its call() signature and which call shapes take the fast path")
    _no_config(p)
    p.add_argument("src", type=Path, metavar="SRC", help="root of an unpacked Keras sdist, or a site-packages directory holding keras")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("effects", help="per Layer subclass, which steps of Layer.__call__ its call() provably never reads")
    _no_config(p)
    p.add_argument("src", type=Path, metavar="SRC", help="root of an unpacked Keras sdist, or a site-packages directory holding keras")
    p.add_argument("--backend", choices=effects_mod.BACKENDS, default="torch", help="the backend whose modules the analysis follows (default: torch)")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")

    p = sub.add_parser("apply", help="write the patched copy of a source tree to DIR, atomically")
    _common(p)
    p.add_argument("src", type=Path, metavar="SRC", help="root of an unpacked Keras sdist")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory (must not exist)")
    _selection(p)

    p = sub.add_parser("build", help="fetch, analyze, apply and build the wheel; print its path")
    _common(p)
    _release(p)
    p.add_argument("--source", type=Path, metavar="SRC", help="build from this unpacked tree instead of fetching")
    p.add_argument("--out-dir", type=Path, metavar="DIR", help="where the wheel goes (default: patched_keras/dist/)")
    p.add_argument("--local-label", help="PEP 440 local label (default: the pin's, or $FORKGEN_LOCAL_LABEL)")
    p.add_argument("--isolated-build", action="store_true", help="build in an isolated environment (downloads the build backend)")
    _selection(p)

    p = sub.add_parser("rebase", help="prove the fork on another release, then move the pin to it")
    _common(p)
    p.add_argument(
        "target", metavar="VERSION", nargs="?", default=None,
        help="the upstream release to move to (default: `latest`, the newest the index serves)",
    )
    p.add_argument(
        "--latest", action="store_true",
        help="rebase onto the newest release the index serves (what `forkgen outdated` reports; "
        "for keras-nightly the newest nightly); the same as VERSION `latest`",
    )
    p.add_argument(
        "--summary", type=Path, metavar="PATH",
        help="write the Markdown summary (a pull-request body) here (default: patched_keras/rebase/summary.md)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON document")
    p.add_argument("--distribution", choices=config_mod.DISTRIBUTIONS, help="upstream distribution (default: the pinned one)")
    p.add_argument("--sha256", help="expected sha256 of its sdist (default: trust what the index serves, and pin that)")
    p.add_argument("--cache-dir", type=Path, help="download cache (default: $FORKGEN_CACHE_DIR or ~/.cache/forkgen)")
    p.add_argument("--torch-spec", default=None, help="torch requirement of the equivalence run (default: $FORKGEN_TORCH_SPEC or torch==2.13.0)")
    p.add_argument("--no-verify", action="store_true", help="stop after building; do not run the equivalence suite nor move the pin")
    _selection(p)

    p = sub.add_parser(
        "outdated",
        help=f"compare the pin with the newest release on the index: exit 0 if current, {EXIT_OUTDATED} if newer",
    )
    _common(p)
    p.add_argument(
        "--distribution", choices=config_mod.DISTRIBUTIONS,
        help="compare with this distribution's newest release (default: the pinned one; keras-nightly: the newest nightly)",
    )
    p.add_argument("--json", action="store_true", help="print the answer as one JSON document")

    p = sub.add_parser("compare-tests", help="compare two JUnit XML runs of a suite: upstream wheel vs patched wheel")
    _no_config(p)
    p.add_argument("upstream", type=Path, metavar="UPSTREAM_XML")
    p.add_argument("patched", type=Path, metavar="PATCHED_XML")
    p.add_argument("--label", default="", help="what ran (backend and test packages), for the report")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as JSON")
    p.add_argument(
        "--suspects", type=Path, metavar="FILE",
        help="first pass: write the would-be regressions' test keys to FILE (one a line) and exit 0",
    )
    p.add_argument(
        "--rerun", type=Path, action="append", default=[], metavar="XML",
        help="JUnit XML of a rerun of the suspects with the patched wheel (repeatable): a suspect that "
        "passed in every rerun is reported as flaky, not as a regression",
    )

    p = sub.add_parser(
        "verify",
        help="prove a fork wheel: the equivalence suite against the unpatched release, Keras's own tests and parity",
    )
    _common(p)
    p.add_argument("suite", choices=["equivalence", "upstream", "all"],
                   help="equivalence: tests/equivalence; upstream: Keras's own tests (where the release ships them) "
                   "and whole-model parity, upstream wheel vs fork; all: both")
    p.add_argument("--wheel", type=Path, required=True, metavar="WHEEL", help="the fork wheel to prove")
    p.add_argument("--backend", action="append", choices=["torch", "jax", "tensorflow", "numpy"], default=[],
                   help="Keras backend (repeatable; default torch)")
    p.add_argument("--upstream-src", type=Path, metavar="DIR",
                   help="the unpatched source tree of the wheel's release (default: fetched, verified, from the cache)")
    p.add_argument("--cache-dir", type=Path, help="download cache (default: $FORKGEN_CACHE_DIR or ~/.cache/forkgen)")
    p.add_argument("--reports", type=Path, metavar="DIR", help="JUnit, JSON and parity reports (default: patched_keras/verify/)")
    p.add_argument("--work-dir", type=Path, metavar="DIR",
                   help="where the environments go (default: a temporary directory, removed afterwards unless FORKGEN_KEEP_VENVS=1)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--tests", dest="tests", action="store_true", default=None,
                       help="upstream: insist on Keras's own tests (default: run them where the release ships them)")
    group.add_argument("--no-tests", dest="tests", action="store_false", help="upstream: parity only")
    p.set_defaults(pytest_args=[])  # what follows `--` goes to pytest (main() splits it off)

    p = sub.add_parser("inspect", help="print the provenance of a wheel built by forkgen")
    _no_config(p)
    p.add_argument("wheel", type=Path, metavar="WHEEL")
    p.add_argument("--json", action="store_true", help="print the provenance as JSON")
    p.add_argument(
        "--check-current", action="store_true",
        help="exit 7 unless the wheel was built by this forkgen's codemods and templates (not stale)",
    )

    p = sub.add_parser(
        "publish",
        help="add wheels to a static PEP 503/691/658 index directory; print the index's simple/ directory",
    )
    _no_config(p)
    p.add_argument("wheels", type=Path, nargs="+", metavar="WHEEL")
    p.add_argument("--index-dir", type=Path, required=True, help="the index directory (created if missing)")
    return parser


def _version(requested: str | None, distribution: str | None, cfg: config_mod.Config) -> str | None:
    """The release asked for, validated; `latest` (asked, or implied by naming another
    distribution than the pinned one without a version) resolved on the index."""
    pinned = cfg.pin.distribution if cfg.pin else None
    if requested is None and distribution is not None and distribution != pinned:
        requested = config_mod.LATEST
    if requested is None:
        return None
    if requested.strip().lower() != config_mod.LATEST:
        return config_mod.validate_version(requested, "--version")
    from forkgen import index  # only when asked: it reads pip's configuration

    dist = distribution or pinned or "keras"
    resolved = index.latest_version(dist)
    log(f"newest {dist} on the index: {resolved}; pinning that release (trust on first use unless --sha256)")
    return resolved


def _pin(args: argparse.Namespace, cfg: config_mod.Config, *, version: str | None = None) -> Pin:
    return config_mod.resolve_pin(
        cfg,
        distribution=args.distribution,
        version=_version(args.release, args.distribution, cfg) or version,
        sha256=args.sha256,
        local_label=getattr(args, "local_label", None),
    )


def _workspace(cfg: config_mod.Config) -> Path:
    return (cfg.path.parent if cfg.path else Path.cwd()) / "patched_keras"


def _checked_workspace(cfg: config_mod.Config) -> Path:
    """The workspace, checked as a directory this run writes into, before it downloads or analyzes anything."""
    return config_mod.validate_dir(_workspace(cfg), "the workspace (patched_keras/ beside the configuration)")


def _cache_dir(args: argparse.Namespace) -> Path:
    """The download cache of this run (`--cache-dir`, else the default one), checked."""
    if args.cache_dir is not None:
        return config_mod.validate_dir(args.cache_dir, "--cache-dir")
    return config_mod.validate_dir(
        default_cache_dir(), "the download cache",
        hint="pass --cache-dir, or set FORKGEN_CACHE_DIR, to a directory you can write to",
    )


def cmd_fetch(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    cache_dir = _cache_dir(args)
    source = fetch(_pin(args, cfg), cache_dir)
    print(source.root)
    return EXIT_OK


def cmd_analyze(args: argparse.Namespace) -> int:
    selected = _selected(args, config_mod.load(args.config))
    try:
        analysis = patch.analyze_series(args.src, selected)
    except ForkgenError as failure:
        render.emit_failure(failure, args.json, source=str(args.src))
        raise
    result = patch.AnalysisReport(str(args.src), analysis, patch.drift_error(analysis))
    render.emit(result, args.json)
    if result.error is not None:
        raise result.error
    return EXIT_OK


def cmd_series(args: argparse.Namespace) -> int:
    selected = {p.name for p in _selected(args, config_mod.load(args.config))}
    render.emit(patch.SeriesListing(series_mod.load_series(), frozenset(selected)), args.json)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    try:
        result = report_mod.report(args.src)
    except ForkgenError as error:
        render.emit_failure(error, args.json, source=str(args.src))
        raise
    render.emit(result, args.json)
    return EXIT_OK


def cmd_effects(args: argparse.Namespace) -> int:
    try:
        result = effects_mod.effects(args.src, args.backend, progress=not args.quiet and sys.stderr.isatty())
    except ForkgenError as error:
        render.emit_failure(error, args.json, source=str(args.src))
        raise
    render.emit(result, args.json)
    return EXIT_OK


def cmd_apply(args: argparse.Namespace) -> int:
    selected = _selected(args, config_mod.load(args.config))
    if not (args.out.exists() or args.out.is_symlink()):  # one that exists is refused by `patch.apply`
        config_mod.validate_dir(args.out, "--out")
    tree = patch.apply(args.src, args.out, selected)
    if not tree.changed:
        print("already patched: nothing changed", file=sys.stderr)
    print(tree.root)
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    workspace = _checked_workspace(cfg)
    out_dir = config_mod.validate_dir(args.out_dir, "--out-dir") if args.out_dir else workspace / "dist"
    cache_dir = _cache_dir(args) if args.source is None else None  # a local tree is not fetched
    version = None
    if args.source is not None and args.release is None:
        version_py = args.source / VERSION_PY
        if version_py.is_file():
            version = read_version(version_py.read_text(encoding="utf-8"))
    pin = _pin(args, cfg, version=version)
    built = pipeline.build_fork(
        pin,
        cache_dir=cache_dir,
        workspace=workspace,
        out_dir=out_dir,
        source_root=args.source,
        overlay=cfg.overlay,
        isolated=args.isolated_build,
        selected=_selected(args, cfg),
    )
    print(built.wheel.path)
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    wheel = provenance.Inspection(provenance.read_wheel(args.wheel))
    if args.check_current:
        provenance.require_current(args.wheel)
    render.emit(wheel, args.json, sort_keys=True)
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    result = publish_mod.publish(args.wheels, config_mod.validate_dir(args.index_dir, "--index-dir"))
    print(result.index_dir / "simple")
    return EXIT_OK


def cmd_rebase(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    if cfg.path is None or cfg.pin is None:
        raise UsageError("rebase needs the pyproject.toml whose [tool.forkgen] pin it moves", hint="run it from the forkgen checkout or pass --config")
    requested = args.target or config_mod.LATEST
    if args.latest and requested.strip().lower() != config_mod.LATEST:
        raise UsageError(f"--latest and VERSION {args.target} contradict each other", hint="give one of them")
    summary_path = args.summary or _workspace(cfg) / "rebase" / "summary.md"
    distribution = args.distribution or cfg.pin.distribution
    try:
        workspace = _checked_workspace(cfg)
        cache_dir = _cache_dir(args)
        version = _version(requested, args.distribution, cfg)
        target = config_mod.resolve_pin(cfg, distribution=args.distribution, version=version, sha256=args.sha256)
        summary = rebase_mod.rebase(
            target,
            cfg.pin,
            cfg.path,
            cache_dir=cache_dir,
            workspace=workspace,
            overlay=cfg.overlay,
            torch_spec=args.torch_spec or os.environ.get("FORKGEN_TORCH_SPEC", requirements.TORCH_SPEC),
            verify=not args.no_verify,
            selected=_selected(args, cfg),
        )
    except UsageError as error:  # bad arguments: nothing is written
        render.emit_failure(error, args.json)
        raise
    except ForkgenError as error:  # the release could not be resolved: the rebase did not begin
        summary = rebase_mod.RebaseSummary(distribution, cfg.pin, stage="resolve").failed(error)
    try:
        summary = summary.write(summary_path)
    except OSError as error:
        log(f"warning: could not write the summary to {summary_path}: {error}")
    render.emit(summary, args.json)
    if not summary.ok:
        render.error(summary.error or "", summary.hint)
        return summary.exit_code
    if not args.json and summary.wheel is not None:
        print(summary.wheel.path)
    return EXIT_OK


def cmd_outdated(args: argparse.Namespace) -> int:
    try:
        cfg = config_mod.load(args.config)
        if cfg.pin is None:
            raise UsageError(
                "outdated compares the [tool.forkgen] pin with the index, and there is no pin here",
                hint="run it from the forkgen checkout or pass --config",
            )
        status = outdated_mod.check(cfg.pin, args.distribution)
    except ForkgenError as error:
        render.emit_failure(error, args.json)
        raise
    render.emit(status, args.json)
    return status.exit_code


def cmd_verify(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    if not args.wheel.is_file():
        raise UsageError(f"{args.wheel} does not exist", hint="build it: `forkgen build` (or `nox -s build_fork`)")
    reports = config_mod.validate_dir(args.reports, "--reports") if args.reports else config_mod.validate_dir(_workspace(cfg) / "verify", "the reports directory")
    if args.work_dir is not None:
        config_mod.validate_dir(args.work_dir, "--work-dir")
    upstream_src = args.upstream_src
    if upstream_src is None:
        release = verify.release_of(args.wheel)
        if release.sdist_sha256 is None:
            raise UsageError(f"{args.wheel.name} was built from a local tree", hint="give that tree with --upstream-src")
        upstream_src = fetch(Pin(release.distribution, release.version, release.sdist_sha256), _cache_dir(args)).root
    suites = ["equivalence", "upstream"] if args.suite == "all" else [args.suite]
    keep = os.environ.get("FORKGEN_KEEP_VENVS") == "1"
    with contextlib.ExitStack() as stack:
        work = args.work_dir
        if work is None:
            work = Path(tempfile.mkdtemp(prefix="forkgen-verify-") if keep
                        else stack.enter_context(tempfile.TemporaryDirectory(prefix="forkgen-verify-")))
            if keep:
                log(f"FORKGEN_KEEP_VENVS=1: the environments stay in {work}")
        results = verify.verify_release(
            args.wheel.resolve(), project=_project_root(cfg), upstream_src=upstream_src, work=work, reports=reports,
            backends=args.backend or ["torch"], suites=suites, tests=args.tests, pytest_args=args.pytest_args,
        )
    for result in results:
        print(f"{result.name}: passed ({result.summary})")
    return EXIT_OK


def _project_root(cfg: config_mod.Config) -> Path:
    """The forkgen checkout whose tests prove the wheel (the one holding the configuration)."""
    root = cfg.path.parent if cfg.path else Path.cwd()
    if not (root / "tests" / "equivalence").is_dir():
        raise UsageError(f"{root} is not a forkgen checkout (no tests/equivalence)", hint="run it from the forkgen checkout or pass --config")
    return root


def cmd_compare_tests(args: argparse.Namespace) -> int:
    if args.suspects is not None and args.rerun:
        raise UsageError("--suspects and --rerun do not go together", hint="--suspects is the first pass, --rerun the second")
    verify.compare_files(
        args.label or str(args.patched), args.upstream, args.patched, args.json, reruns=args.rerun, suspects_file=args.suspects
    )
    return EXIT_OK


COMMANDS = {
    "series": cmd_series,
    "rebase": cmd_rebase,
    "outdated": cmd_outdated,
    "compare-tests": cmd_compare_tests,
    "verify": cmd_verify,
    "fetch": cmd_fetch,
    "analyze": cmd_analyze,
    "report": cmd_report,
    "effects": cmd_effects,
    "apply": cmd_apply,
    "build": cmd_build,
    "inspect": cmd_inspect,
    "publish": cmd_publish,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see EPILOG)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser()
    # `forkgen verify ... -- PYTEST_ARG...`: argparse would take the words after `--` as the
    # command's positionals, so they are split off first (other commands parse as they always did).
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    if args.command == "verify":
        args.pytest_args = argv[cut + 1 :]
    elif cut < len(argv):
        args = parser.parse_args(argv)
    try:
        if args.command in CONFIG_IGNORED and args.config is not None:
            raise UsageError(
                f"--config does not apply to `forkgen {args.command}`: {CONFIG_IGNORED[args.command]}",
                hint=f"drop --config; `forkgen {args.command} --help` lists what it takes",
            )
        return COMMANDS[args.command](args)
    except ForkgenError as error:
        render.error(error.message, error.hint)
        return error.exit_code
    except KeyboardInterrupt:
        render.error("interrupted", None)
        return 130
    except Exception as error:  # noqa: BLE001 - the one place that turns bugs into an exit code
        if os.environ.get("FORKGEN_DEBUG"):
            traceback.print_exc()
        render.error(f"internal error: {type(error).__name__}: {error}",
                     "this is a bug in forkgen; rerun with FORKGEN_DEBUG=1 and report the traceback")
        return EXIT_INTERNAL

