"""Provenance: where a fork wheel came from, embedded in it and readable back."""

from __future__ import annotations

import ast
import pprint
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from forkgen.errors import UsageError

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
