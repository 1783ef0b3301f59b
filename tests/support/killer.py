"""Run the forkgen CLI and die (SIGKILL, as `kill -9` would) or stall in the middle of a stage.

    python -m tests.support.killer STAGE ACTION forkgen-arguments...

STAGE is `download` (the archive is downloaded, not yet moved into the cache), `unpack` (the
archive is extracted, not yet renamed into the cache), `apply` (the patched tree is copied, not
yet renamed into place) or `build` (the wheel is built, not yet moved to the output directory);
ACTION is `kill` (SIGKILL itself: no `finally`, no `atexit`, nothing of forkgen's clean-up runs)
or `stall` (print `stalled` on stderr and sleep, holding whatever the stage holds, until the test
kills it). The concurrency tests use it to leave what a killed run leaves, at a known point.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from typing import Any


def _stop(action: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    print("stalled", file=sys.stderr, flush=True)
    time.sleep(3600)


def _after(function: Callable[..., Any], action: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        _stop(action)
        return result

    return wrapper


def arm(stage: str, action: str) -> None:
    """Make the forkgen of this process stop (`action`) in the middle of `stage`."""
    from forkgen import build, fetch, index, patch

    if stage == "download":
        index.download = _after(index.download, action)
    elif stage == "unpack":
        fetch._extract = _after(fetch._extract, action)
    elif stage == "apply":
        write = patch.write

        def write_then_stop(*args: Any, **kwargs: Any) -> Any:
            # The first copy patch.write makes is the patched tree's, in its staging directory.
            shutil.copytree = _after(shutil.copytree, action)  # type: ignore[assignment]
            return write(*args, **kwargs)

        patch.write = write_then_stop
    elif stage == "build":
        build.run = _after(build.run, action)  # `python -m build` has written the wheel
    else:
        raise SystemExit(f"unknown stage {stage!r}")


def main() -> int:
    stage, action, *argv = sys.argv[1:]
    arm(stage, action)
    from forkgen.cli import main as forkgen_main

    return forkgen_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
