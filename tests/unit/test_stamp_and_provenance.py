"""Version stamping of keras/src/version.py and the provenance module."""

from __future__ import annotations

import pytest

from codemods.engine import AnchorDrift
from codemods.stamp_version import read_version, stamp_version
from forkgen.build import fork_version
from forkgen.errors import BuildError
from forkgen.provenance import parse_module, render_module
from tests.support.synthetic import VERSION_PY


def test_stamp_keeps_everything_but_the_string() -> None:
    stamped = stamp_version(VERSION_PY, "3.15.1", "3.15.1+fastcallspec.1")
    assert stamped == VERSION_PY.replace('"3.15.1"', '"3.15.1+fastcallspec.1"')
    assert read_version(stamped) == "3.15.1+fastcallspec.1"


def test_stamp_keeps_single_quotes() -> None:
    source = "__version__ = '3.0.0'\n"
    assert stamp_version(source, "3.0.0", "3.0.0+x.1") == "__version__ = '3.0.0+x.1'\n"


def test_stamp_noop_on_other_text() -> None:
    source = "# nothing else\nX = 1\n__version__ = '3.0.0'\n"
    assert stamp_version(source, "3.0.0", "3.0.0") == source


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("__version__ = '3.14.0'\n", 1),
        ("\n\n# c\n__version__ = '3.14.0'\n", 4),
        ("VERSION = '3.15.1'\n", 1),
        ("__version__ = '3.15.1'\n__version__ = '3.15.1'\n", 1),
    ],
)
def test_stamp_refuses_an_unexpected_version_file(source: str, line: int) -> None:
    with pytest.raises(AnchorDrift) as caught:
        stamp_version(source, "3.15.1", "3.15.1+x.1")
    assert caught.value.line == line and caught.value.anchor == "__version__"


def test_fork_version_is_pep440_local() -> None:
    assert fork_version("3.15.1", "fastcallspec.1") == "3.15.1+fastcallspec.1"
    assert fork_version("3.16.0.dev2026102704", "fastcallspec.1") == "3.16.0.dev2026102704+fastcallspec.1"
    with pytest.raises(BuildError):
        fork_version("3.15.1", "not valid!")


def test_provenance_module_round_trips() -> None:
    provenance = {"upstream": {"version": "3.15.1", "sdist_sha256": None}, "codemods": {"A": "1"}, "epoch": 5}
    source = render_module(provenance)
    assert parse_module(source) == provenance
    namespace: dict[str, object] = {}
    exec(source, namespace)
    assert namespace["PROVENANCE"] == provenance
