"""The run-time switches the engine makes for every patch (codemods/engine/switching.py): the
switched text of a module, what runs with a patch on and off, the switches module's rule, and the
series' switched tree (idempotent, each dependency honoured)."""

from __future__ import annotations

import importlib
import types
import warnings
from collections.abc import Iterable
from typing import Any

import pytest

from codemods import series
from codemods.engine import switching

UPSTREAM = '''"""A module."""
from __future__ import annotations

import functools

REGISTRY = []


def register(f):
    REGISTRY.append(f.__name__ + ":" + f.__doc__)
    return f


@register
def f(x):
    """upstream"""
    return x + 1


LIMIT = 3


class Base:
    def g(self):
        return "base"


class C(Base):
    """C."""

    a = 1

    @property
    def k(self):
        return 1

    @k.setter
    def k(self, v):
        self.v = v

    def g(self):
        return "c+" + super().g()
'''

#: UPSTREAM as the series leaves it: p1 changes f and C.g, p2 adds a helper C.k calls, p3 LIMIT.
PATCHED = (
    UPSTREAM.replace('    """upstream"""\n', '    """patched"""\n    if x == 0:  # forkgen: p1\n        return 1\n')
    .replace("LIMIT = 3\n", "def _forkgen_helper():  # forkgen: p2\n    return 3\n\n\nLIMIT = 4  # forkgen: p3\n")
    .replace("        return 1\n\n    @k.setter", "        return _forkgen_helper()  # forkgen: p2\n\n    @k.setter")
    .replace('return "c+" + super().g()', 'return "fast+" + super().g()  # forkgen: p1')
)
#: Which patch changed what (as the series records it: the keys of `changed_keys`).
TOUCHED = {"p1": {"m.py": {"f", "C.g"}}, "p2": {"m.py": {"_forkgen_helper", "C.k"}}, "p3": {"m.py": {":LIMIT = 3\n", ":LIMIT = 4  # forkgen: p3\n"}}}


def switched(groups: Iterable[tuple[str, ...]] | None = None) -> str:
    groups = list(groups or switching.switch_groups(TOUCHED))
    group_of = {key: group for group in groups for name in group for key in TOUCHED[name]["m.py"]}
    return switching.switch_module(UPSTREAM, PATCHED, group_of)


def load(text: str, disabled: set[str]) -> dict[str, Any]:
    """`text` run as a module whose switches say `disabled`."""
    stand_in = types.SimpleNamespace(on=lambda *names: disabled.isdisjoint(names))
    source = text.replace(f"from keras.src import forkgen_switches as {switching.ALIAS}", f"{switching.ALIAS} = _stand_in")
    namespace: dict[str, Any] = {"_stand_in": stand_in, "__name__": "m"}
    exec(compile(source, "m.py", "exec"), namespace)
    return namespace


def test_a_patch_changes_the_keys_of_what_it_changed() -> None:
    assert switching.changed_keys(UPSTREAM, PATCHED) == {"f", "_forkgen_helper", ":LIMIT = 3\n", ":LIMIT = 4  # forkgen: p3\n",
                                                         "C.k", "C.g"}


def test_the_switched_text_is_the_series_text_plus_forkgen_lines_only() -> None:
    text = switched()
    assert switching.unswitch(text) == PATCHED
    # The series' lines are all there, in order, as they were, but for the runs it only added
    # (forkgen's code, now under its condition).
    lines = iter(text.splitlines())
    added = 'def _forkgen_helper():  # forkgen: p2\n    return 3\n'
    assert all(any(line == mine for mine in lines) for line in PATCHED.replace(added, "").splitlines())
    assert text.count(switching.MARK) == 1 + 4 + 1  # the import, four runs changed, one added
    assert 'if not _forkgen_switches.on("p1"):  # forkgen: switch\n    @register\n    def f(x):\n        """upstream"""' in text
    assert 'if _forkgen_switches.on("p2"):  # forkgen: switch\n    def _forkgen_helper():' in text
    assert text.index(switching.ALIAS + " ") > text.index("from __future__")


@pytest.mark.parametrize("disabled", [set(), {"p1"}, {"p2"}, {"p3"}, {"p1", "p2", "p3"}])
def test_each_patch_runs_its_statements_or_upstream_s(disabled: set[str]) -> None:
    module = load(switched(), disabled)
    upstream, patched = load(UPSTREAM, set()), load(PATCHED, set())
    c = module["C"]()
    assert module["f"](0) == (1 if "p1" not in disabled else 1)
    assert module["f"].__doc__ == ("upstream" if "p1" in disabled else "patched")
    assert c.g() == ("c+base" if "p1" in disabled else "fast+base")  # super() in a method defined under `if`
    assert c.k == (1 if "p2" in disabled else 3)
    c.k = 5  # the setter decorates whichever property is bound
    assert c.v == 5
    assert module["LIMIT"] == (3 if "p3" in disabled else 4)
    assert ("_forkgen_helper" in module) is ("p2" not in disabled)
    # A decorator that registers runs for each definition: upstream's is the last one it sees.
    assert module["REGISTRY"][-1] == ("f:upstream" if "p1" in disabled else "f:patched")
    if not disabled:
        assert module["REGISTRY"] == patched["REGISTRY"]
    if disabled == {"p1", "p2", "p3"}:
        assert module["REGISTRY"][-1] == upstream["REGISTRY"][-1]


def test_patches_that_share_a_statement_are_switched_together() -> None:
    touched = {"a": {"x.py": {"f"}}, "b": {"x.py": {"g"}}, "c": {"x.py": {"g", "h"}, "y.py": {"f"}}, "d": {"y.py": {"k"}}}
    assert switching.switch_groups(touched) == [("a",), ("b", "c"), ("d",)]
    groups = [("p1",), ("p2", "p3")]
    text = switched(groups)
    assert 'on("p2", "p3")' in text and 'on("p1")' in text
    module = load(text, {"p2", "p3"})
    assert module["LIMIT"] == 3 and module["C"]().k == 1


def switches(value: str, requires: dict[str, tuple[str, ...]], groups: list[tuple[str, ...]]) -> types.ModuleType:
    module = types.ModuleType("forkgen_switches")
    text = switching.switches_module(requires, groups)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(switching.VARIABLE, value)
        exec(compile(text, "forkgen_switches.py", "exec"), module.__dict__)
    return module


REQUIRES = {"a": (), "b": ("a",), "c": ("b",), "d": (), "e": ()}
GROUPS = [("a",), ("b",), ("c",), ("d", "e")]


@pytest.mark.parametrize(("value", "off"), [
    ("", set()), ("all", set(REQUIRES)), ("a", {"a", "b", "c"}), ("b", {"b", "c"}), ("c", {"c"}),
    ("d", {"d", "e"}), (" c , e ", {"c", "d", "e"}),
])
def test_the_switches_module_disables_the_named_their_dependants_and_their_group(value: str, off: set[str]) -> None:
    module = switches(value, REQUIRES, GROUPS)
    assert module.DISABLED == off == switching.closure(
        {n.strip() for n in value.split(",") if n.strip()} & set(REQUIRES) if value != "all" else set(REQUIRES),
        REQUIRES, GROUPS)
    assert module.on("a", "d") is ("a" not in off and "d" not in off)
    assert switching.read_switches(switching.switches_module(REQUIRES, GROUPS)) == (REQUIRES, tuple(GROUPS))


def test_an_unknown_name_warns_and_disables_nothing_else() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = switches("nosuch,c", REQUIRES, GROUPS)
    assert module.DISABLED == {"c"}
    assert any("nosuch" in str(w.message) for w in caught)


def series_requirements() -> list[tuple[str, str]]:
    patches = series.load_series()
    return [(p.name, needed) for p in patches for needed in p.requires]


@pytest.mark.parametrize(("dependant", "required"), series_requirements(), ids=lambda v: v)
def test_disabling_a_required_patch_disables_its_dependants(dependant: str, required: str) -> None:
    """Each `requires` of the series: the switches of a tree carrying both turn the dependant off
    with the patch it requires (and not the other way round unless they are switched together)."""
    requires = {p.name: tuple(p.requires) for p in series.load_series()}
    groups = [(name,) for name in requires]
    module = switches(required, requires, groups)
    assert dependant in module.DISABLED
    assert required not in switches(dependant, requires, groups).DISABLED


def test_the_series_switches_a_tree_once() -> None:
    from tests.support.synthetic import tree_files

    files = tree_files()
    patches = series.load_series()
    first = series.run(files.get, patches, release="3.15.1")
    assert not first.drifts and switching.SWITCHES_PY in first.files
    switched_files = {**files, **first.files}
    requires, groups = switching.read_switches(first.files[switching.SWITCHES_PY])
    assert set(requires) == {r.patch.name for r in first.applied}
    for path, text in first.files.items():
        if path != switching.SWITCHES_PY:
            compile(text, path, "exec")
            assert text.count(switching.MARK) >= 2, path
    again = series.run(switched_files.get, patches, release="3.15.1")
    assert not again.drifts and again.files == {}
    assert all(r.check.present for r in again.applied)
    importlib.invalidate_caches()
