"""`python -m forkgen` is the `forkgen` command."""

from __future__ import annotations

from forkgen.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
