"""The `forkgen` command: chains the stages, prints results, maps errors to exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import forkgen
from codemods.anchors import BASE_PIECES
from codemods.stamp_version import VERSION_PY, read_version
from forkgen import config as config_mod
from forkgen import patch, pipeline, provenance, verify
from forkgen import publish as publish_mod
from forkgen import rebase as rebase_mod
from forkgen import report as report_mod
from forkgen.cmd import log
from forkgen.errors import EXIT_INTERNAL, EXIT_OK, ForkgenError, UsageError, VerificationError
from forkgen.fetch import default_cache_dir, fetch
from forkgen.model import Anchors, Pin

EPILOG = """\
exit codes:
  0   success
  2   usage: bad arguments or configuration, output already present
  3   fetch: the sdist could not be downloaded (no such version, index unreachable)
  4   integrity: sha256 mismatch, corrupt or unsafe archive
  5   upstream drift: an anchor is missing, not unique, or of an unknown shape
  6   build: the wheel could not be built
  7   verification: a test passes with upstream Keras and fails with the patched wheel
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


def _extension(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--no-training-fast-path",
        dest="training_fast_path",
        action="store_false",
        default=None,
        help="leave out the extension: calls with several positional tensors or training=<bool> keep the slow path "
        "(default: [tool.forkgen] training-fast-path, true)",
    )
    group.add_argument("--training-fast-path", dest="training_fast_path", action="store_true", help="add the extension (the default)")


def _training_fast_path(args: argparse.Namespace, cfg: config_mod.Config) -> bool:
    return cfg.training_fast_path if args.training_fast_path is None else bool(args.training_fast_path)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forkgen",
        description="Carry the CallSpec fast path on top of upstream Keras and build a drop-in keras wheel.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--forkgen-version", action="version", version=f"forkgen {forkgen.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("fetch", help="download, verify and unpack the sdist; print the source directory")
    _common(p)
    _release(p)

    p = sub.add_parser("analyze", help="report every anchor of the patch in a source tree")
    _common(p)
    p.add_argument("src", type=Path, metavar="SRC", help="root of an unpacked Keras sdist")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _extension(p)

    p = sub.add_parser("report", help="every Layer subclass, its call() signature and which call shapes take the fast path")
    _no_config(p)
    p.add_argument("src", type=Path, metavar="SRC", help="root of an unpacked Keras sdist, or a site-packages directory holding keras")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("apply", help="write the patched copy of a source tree to DIR, atomically")
    _common(p)
    p.add_argument("src", type=Path, metavar="SRC", help="root of an unpacked Keras sdist")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory (must not exist)")
    _extension(p)

    p = sub.add_parser("build", help="fetch, analyze, apply and build the wheel; print its path")
    _common(p)
    _release(p)
    p.add_argument("--source", type=Path, metavar="SRC", help="build from this unpacked tree instead of fetching")
    p.add_argument("--out-dir", type=Path, metavar="DIR", help="where the wheel goes (default: patched_keras/dist/)")
    p.add_argument("--local-label", help="PEP 440 local label (default: the pin's, or $FORKGEN_LOCAL_LABEL)")
    p.add_argument("--isolated-build", action="store_true", help="build in an isolated environment (downloads the build backend)")
    _extension(p)

    p = sub.add_parser("rebase", help="prove the fork on another release, then move the pin to it")
    _common(p)
    p.add_argument(
        "target", metavar="VERSION", nargs="?", default=config_mod.LATEST,
        help="the upstream release to move to (default: `latest`, the newest the index serves)",
    )
    p.add_argument("--distribution", choices=config_mod.DISTRIBUTIONS, help="upstream distribution (default: the pinned one)")
    p.add_argument("--sha256", help="expected sha256 of its sdist (default: trust what the index serves, and pin that)")
    p.add_argument("--cache-dir", type=Path, help="download cache (default: $FORKGEN_CACHE_DIR or ~/.cache/forkgen)")
    p.add_argument("--torch-spec", default=None, help="torch requirement of the equivalence run (default: $FORKGEN_TORCH_SPEC or torch==2.13.0)")
    p.add_argument("--no-verify", action="store_true", help="stop after building; do not run the equivalence suite nor move the pin")
    _extension(p)

    p = sub.add_parser("compare-tests", help="compare two JUnit XML runs of a suite: upstream wheel vs patched wheel")
    _no_config(p)
    p.add_argument("upstream", type=Path, metavar="UPSTREAM_XML")
    p.add_argument("patched", type=Path, metavar="PATCHED_XML")
    p.add_argument("--label", default="", help="what ran (backend and test packages), for the report")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as JSON")

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


def cmd_fetch(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    source = fetch(_pin(args, cfg), args.cache_dir or default_cache_dir())
    print(source.root)
    return EXIT_OK


def _anchors_json(anchors: Anchors) -> dict[str, Any]:
    return {
        "source": str(anchors.root),
        "file": anchors.path,
        "variant": anchors.variant,
        "status": _status(anchors),
        "anchors": [
            {"name": a.name, "file": anchors.path, "line": a.line, "description": a.description}
            for a in anchors.anchors
        ],
        "applied": anchors.applied,
        "required_names": list(anchors.required_names),
    }


def _status(anchors: Anchors) -> str:
    """"patched" when the base patch is complete (the extension is reported on its own)."""
    if all(anchors.applied[p] for p in BASE_PIECES):
        return "patched"
    if any(anchors.applied.values()):
        return "partially patched"
    return "unpatched"


def cmd_analyze(args: argparse.Namespace) -> int:
    try:
        extension = _training_fast_path(args, config_mod.load(args.config))
        anchors = patch.analyze(args.src)
    except ForkgenError as error:
        if args.json:
            print(json.dumps({"source": str(args.src), "ok": False, "exit_code": error.exit_code, "error": error.message}, indent=2))
        raise
    if args.json:
        print(json.dumps({"ok": True, **_anchors_json(anchors)}, indent=2))
        return EXIT_OK
    print(f"{anchors.path}: CallSpec variant {anchors.variant}")
    for a in anchors.anchors:
        print(f"  {anchors.path}:{a.line}: {a.name}: {a.description}")
    print(f"  names the inserted code uses, all bound: {', '.join(anchors.required_names)}")
    pieces = ", ".join(f"{k} {'present' if v else 'absent'}" for k, v in anchors.applied.items())
    print(f"  patch: {_status(anchors)} ({pieces})")
    if _status(anchors) != "patched":
        print("the patch can be applied" + ("" if extension else " (without the extension, as configured)"))
    elif not anchors.applied["extension"]:
        print(
            "the base patch is applied; the extension (several positional tensors, training=<bool>) can be added"
            if extension else "the base patch is applied; the extension is left out, as configured"
        )
    else:
        print("the patch is already applied, with the extension")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    try:
        result = report_mod.report(args.src)
    except ForkgenError as error:
        if args.json:
            print(json.dumps({"source": str(args.src), "ok": False, "exit_code": error.exit_code, "error": error.message}, indent=2))
        raise
    if args.json:
        print(json.dumps({"ok": True, **report_mod.to_json(result)}, indent=2))
        return EXIT_OK
    print(report_mod.format_text(result))
    return EXIT_OK


def cmd_apply(args: argparse.Namespace) -> int:
    tree = patch.apply(args.src, args.out, extension=_training_fast_path(args, config_mod.load(args.config)))
    if not tree.changed:
        print("already patched: nothing changed", file=sys.stderr)
    print(tree.root)
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    version = None
    if args.source is not None and args.release is None:
        version_py = args.source / VERSION_PY
        if version_py.is_file():
            version = read_version(version_py.read_text(encoding="utf-8"))
    pin = _pin(args, cfg, version=version)
    workspace = _workspace(cfg)
    built = pipeline.build_fork(
        pin,
        cache_dir=args.cache_dir or default_cache_dir(),
        workspace=workspace,
        out_dir=args.out_dir or workspace / "dist",
        source_root=args.source,
        overlay=cfg.overlay,
        isolated=args.isolated_build,
        extension=_training_fast_path(args, cfg),
    )
    print(built.wheel.path)
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    data = provenance.read_wheel(args.wheel)
    if args.check_current:
        problems = provenance.stale_problems(args.wheel)
        if problems:
            raise VerificationError("; ".join(problems), hint="rebuild it: `nox -s build_fork` (or `forkgen build`)")
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return EXIT_OK
    upstream = data.get("upstream", {})
    print(f"wheel:            {data['wheel']['name']} {data['wheel']['version']}")
    print(f"upstream:         {upstream.get('distribution')} {upstream.get('version')}")
    print(f"sdist:            {upstream.get('sdist')}")
    print(f"sdist sha256:     {upstream.get('sdist_sha256')}")
    print(f"CallSpec variant: {data.get('callspec_variant')}")
    training = data.get("training_fast_path")
    print(f"training fast path: {'yes' if training else 'no' if training is False else 'not recorded (built before forkgen 0.2)'}")
    print("codemods:")
    for name, version in sorted(data.get("codemods", {}).items()):
        print(f"  {name} {version}")
    print(f"forkgen:          {data.get('forkgen_version')}")
    print(f"codemods digest:  {data.get('codemods_digest', 'not recorded (built before forkgen 0.3)')}")
    print(f"built at:         {data.get('build_timestamp')} (SOURCE_DATE_EPOCH {data.get('source_date_epoch')})")
    for path, digest in sorted(data.get("patched_files", {}).items()):
        print(f"patched:          {path} sha256 {digest}")
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    result = publish_mod.publish(args.wheels, args.index_dir)
    print(result.index_dir / "simple")
    return EXIT_OK


def cmd_rebase(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    if cfg.path is None or cfg.pin is None:
        raise UsageError("rebase needs the pyproject.toml whose [tool.forkgen] pin it moves", hint="run it from the forkgen checkout or pass --config")
    version = _version(args.target, args.distribution, cfg)
    target = config_mod.resolve_pin(cfg, distribution=args.distribution, version=version, sha256=args.sha256)
    result = rebase_mod.rebase(
        target,
        cfg.pin,
        cfg.path,
        cache_dir=args.cache_dir or default_cache_dir(),
        workspace=_workspace(cfg),
        overlay=cfg.overlay,
        torch_spec=args.torch_spec or os.environ.get("FORKGEN_TORCH_SPEC", rebase_mod.DEFAULT_TORCH_SPEC),
        verify=not args.no_verify,
        extension=_training_fast_path(args, cfg),
    )
    print(result.wheel.path)
    return EXIT_OK


def cmd_compare_tests(args: argparse.Namespace) -> int:
    verify.compare_files(args.label or str(args.patched), args.upstream, args.patched, args.json)
    return EXIT_OK


COMMANDS = {
    "rebase": cmd_rebase,
    "compare-tests": cmd_compare_tests,
    "fetch": cmd_fetch,
    "analyze": cmd_analyze,
    "report": cmd_report,
    "apply": cmd_apply,
    "build": cmd_build,
    "inspect": cmd_inspect,
    "publish": cmd_publish,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see EPILOG)."""
    args = make_parser().parse_args(argv)
    try:
        if args.command in CONFIG_IGNORED and args.config is not None:
            raise UsageError(
                f"--config does not apply to `forkgen {args.command}`: {CONFIG_IGNORED[args.command]}",
                hint=f"drop --config; `forkgen {args.command} --help` lists what it takes",
            )
        return COMMANDS[args.command](args)
    except ForkgenError as error:
        print(f"error: {error.message}", file=sys.stderr)
        if error.hint:
            print(f"hint: {error.hint}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - the one place that turns bugs into an exit code
        if os.environ.get("FORKGEN_DEBUG"):
            traceback.print_exc()
        print(f"error: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        print("hint: this is a bug in forkgen; rerun with FORKGEN_DEBUG=1 and report the traceback", file=sys.stderr)
        return EXIT_INTERNAL

