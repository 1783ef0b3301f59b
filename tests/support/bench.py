"""The bench's scripts (tests/bench/*.py) as modules, for the unit tests of their logic."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """tests/bench/<name>.py, executed as a fresh module named forkgen_bench_<name>."""
    spec = importlib.util.spec_from_file_location(f"forkgen_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
