"""How every command prints its result: one convention, text for a person or one JSON document.

A command's result is an object with `to_text()` (the lines a person reads) and `to_json()` (the
document `--json` prints); `emit` prints one or the other. A command that fails before it has a
result prints `failure(...)` under `--json`, the one failure document, and its error on stderr
(`error`: `error: ...`, then `hint: ...`), as every failure is reported.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Protocol

from forkgen.errors import ForkgenError


class Rendered(Protocol):
    def to_text(self) -> str: ...

    def to_json(self) -> Any: ...


def emit(result: Rendered, as_json: bool, *, sort_keys: bool = False) -> None:
    """Print `result`: its text, or (`as_json`) its JSON document."""
    print(json.dumps(result.to_json(), indent=2, sort_keys=sort_keys) if as_json else result.to_text())


def failure(error: ForkgenError, **context: str) -> dict[str, Any]:
    """The JSON document of a command that failed before it had a result (`context`: what it was
    given, such as its `source`)."""
    return {**context, "ok": False, "exit_code": error.exit_code, "error": error.message}


def emit_failure(error: ForkgenError, as_json: bool, **context: str) -> None:
    """Under `--json`, the failure document (the error itself goes to stderr, by `error`)."""
    if as_json:
        print(json.dumps(failure(error, **context), indent=2))


def error(message: str, hint: str | None) -> None:
    """A failure as every command reports it on stderr: `error: ...`, then `hint: ...`."""
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
