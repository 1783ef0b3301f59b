"""Provenance: where a fork wheel came from, embedded in it and readable back."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import pprint
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from forkgen.errors import UsageError, VerificationError

#: The module the fork adds to the Keras tree; importable as `keras.src.forkgen_provenance`.
PROVENANCE_PY = "keras/src/forkgen_provenance.py"

_HEADER = '''"""Provenance of this Keras build: upstream Keras patched by forkgen.

Written by forkgen at build time; `forkgen inspect WHEEL` prints it.
"""

'''


def render_module(provenance: dict[str, Any]) -> str:
    """The source of the provenance module: a docstring and one literal dict."""
    literal = pprint.pformat(provenance, indent=4, width=88, sort_dicts=True)
    source = f"{_HEADER}PROVENANCE = {literal}\n"
    if ast.literal_eval(literal) != provenance:
        raise ValueError("provenance must be made of plain literals")
    return source


def parse_module(source: str) -> dict[str, Any]:
    """The PROVENANCE dict of a provenance module, read without executing it."""
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "PROVENANCE"
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, dict):
                return value
    raise ValueError("no PROVENANCE dict")


def read_wheel(path: Path) -> dict[str, Any]:
    """Provenance and metadata of the wheel at `path`."""
    if path.is_dir():
        wheels = sorted(path.glob("*.whl"))
        raise UsageError(
            f"{path} is a directory; a wheel file (.whl) is expected",
            hint=f"give the wheel's own path, e.g. {wheels[0]}" if wheels
            else "give the path of a .whl file (`forkgen build` prints the one it built)",
        )
    if not path.is_file():
        raise UsageError(f"{path} does not exist")
    try:
        with zipfile.ZipFile(path) as wheel:
            names = wheel.namelist()
            metadata_names = [n for n in names if n.endswith(".dist-info/METADATA")]
            if len(metadata_names) != 1:
                raise UsageError(f"{path} is not a wheel (no single .dist-info/METADATA)")
            metadata = HeaderParser().parsestr(wheel.read(metadata_names[0]).decode("utf-8"))
            if PROVENANCE_PY not in names:
                raise UsageError(
                    f"{path} carries no forkgen provenance ({PROVENANCE_PY} missing)",
                    hint="it is not a wheel built by forkgen",
                )
            provenance = parse_module(wheel.read(PROVENANCE_PY).decode("utf-8"))
    except zipfile.BadZipFile:
        raise UsageError(f"{path} is not a wheel (not a zip archive)") from None
    except (ValueError, SyntaxError) as error:
        raise UsageError(f"{path}: unreadable provenance: {error}") from None
    return {"wheel": {"name": metadata["Name"], "version": metadata["Version"]}, **provenance}


def codemods_digest() -> str:
    """sha256 over every module of the `codemods` package (codemods and inserted templates),
    path by path: the wheel records it, and a session compares it with its checkout's."""
    import codemods

    package = Path(codemods.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def stale_problems(wheel: Path) -> list[str]:
    """Why `wheel` is not a fork wheel built by this checkout's codemods (empty when it is)."""
    try:
        data = read_wheel(wheel)
    except UsageError as error:
        return [error.message]
    recorded, current = data.get("codemods_digest"), codemods_digest()
    if recorded != current:
        return [
            f"{wheel.name} was built from other codemods or templates than this checkout's "
            f"(codemods digest {recorded or 'not recorded'}, checkout {current}): it is stale"
        ]
    return []


def require_current(wheel: Path) -> None:
    """VerificationError unless `wheel` is a fork wheel built by this checkout's codemods."""
    problems = stale_problems(wheel)
    if problems:
        raise VerificationError("; ".join(problems), hint="rebuild it: `nox -s build_fork` (or `forkgen build`)")


def installed_provenance() -> tuple[Path | None, dict[str, Any] | None]:
    """The `keras` package this interpreter imports and its forkgen provenance (None when it has
    none, i.e. upstream Keras), read from the files without importing Keras."""
    spec = importlib.util.find_spec("keras")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    package = Path(next(iter(spec.submodule_search_locations)))
    module = package.parent / PROVENANCE_PY
    return package, parse_module(module.read_text(encoding="utf-8")) if module.is_file() else None


def installed_problems(wheel: Path) -> list[str]:
    """Why the `keras` this interpreter imports is not `wheel` installed (empty when it is)."""
    package, ours = installed_provenance()
    if package is None:
        return ["no keras is installed"]
    if ours is None:
        version = importlib.metadata.version("keras") if _has_distribution("keras") else "unknown"
        return [f"the installed keras {version} ({package}) is not patched: it has no {PROVENANCE_PY}"]
    try:
        expected = read_wheel(wheel)
    except UsageError as error:
        return [error.message]
    if ours != {k: v for k, v in expected.items() if k != "wheel"}:
        return [f"the installed keras ({package}) is a fork wheel, but not {wheel.name}: its provenance differs"]
    return []


def _has_distribution(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class Inspection:
    """What `forkgen inspect` prints: a wheel's provenance (`read_wheel`)."""

    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.data

    def to_text(self) -> str:
        data = self.data
        upstream = data.get("upstream", {})
        training = data.get("training_fast_path")
        lines = [
            f"wheel:            {data['wheel']['name']} {data['wheel']['version']}",
            f"upstream:         {upstream.get('distribution')} {upstream.get('version')}",
            f"sdist:            {upstream.get('sdist')}",
            f"sdist sha256:     {upstream.get('sdist_sha256')}",
            f"CallSpec variant: {data.get('callspec_variant')}",
            "training fast path: " + ("yes" if training else "no" if training is False
                                      else "not recorded (built before forkgen 0.2)"),
            "patches:",
            *(line for item in data.get("patches", [])
              for line in (f"  {item['name']} {item['version']}: {item['outcome']}  (origin: {item['origin']})",
                           *(f"    {key}: {value}" for key, value in sorted(item.get("facts", {}).items())))),
            *([f"series label:     {data['series_label']}"] if "series_label" in data else []),
            "codemods:",
            *(f"  {name} {version}" for name, version in sorted(data.get("codemods", {}).items())),
            f"forkgen:          {data.get('forkgen_version')}",
            f"codemods digest:  {data.get('codemods_digest', 'not recorded (built before forkgen 0.3)')}",
            f"file times:       {data.get('build_timestamp')} (SOURCE_DATE_EPOCH {data.get('source_date_epoch')}, "
            + ("the newest file of the sdist" if upstream.get("sdist") else "fixed for a wheel built from a local tree")
            + "; when the wheel was built is not recorded: the build is reproducible)",
            *(f"patched:          {path} sha256 {digest}" for path, digest in sorted(data.get("patched_files", {}).items())),
        ]
        return "\n".join(lines)
