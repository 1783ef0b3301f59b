"""Patch layer-call-flat-conversion on a synthetic Keras-shaped layer module: the codemod on
the three gate shapes (3.15.1's, as layer-call-training-only-conversion leaves it, keras-nightly's),
idempotence, drift, and the patched helper executed against fake tree implementations shaped
like optree (sorted visit, None visited, original key order) and torch's pytree (insertion order,
None not visited)."""

from __future__ import annotations

import ast
import textwrap
import types
from typing import Any

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodContext, SkipFile

from codemods.layer_call_flat_conversion import PATCH
from codemods.layer_call_flat_conversion.flat_conversion import FlatConversionCommand, analyze
from codemods.layer_call_training_only_conversion import PATCH as TRAINING_ONLY
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support.synthetic import load_module, replace_once

LAYER = "keras/src/layers/layer.py"

BEFORE = textwrap.dedent(
    '''\
    """A Keras-shaped layer module for the unit tests of layer-call-flat-conversion."""

    tree = None
    dtype_policies = None


    class Layer:
        _convert_input_args = True

        def __call__(self, *args, **kwargs):
            original_args = args
            original_kwargs = kwargs

            def maybe_convert(x):
                return self.dtype_policy.convert_input(x, True, "float32")

            # Used to avoid expensive `tree` operations in the most common case.
            if (
                kwargs
                or len(args) != 1
                or not is_backend_tensor_or_symbolic(args[0], allow_none=False)
            ) and self._convert_input_args:
                args = tree.map_structure(maybe_convert, args)
                kwargs = tree.map_structure(maybe_convert, kwargs)

            return args, kwargs


    class Tensor:
        pass


    def is_backend_tensor_or_symbolic(x, allow_none=False):
        if allow_none and x is None:
            return True
        return isinstance(x, Tensor)
    '''
)
UPSTREAM_BODY = (
    "            args = tree.map_structure(maybe_convert, args)\n"
    "            kwargs = tree.map_structure(maybe_convert, kwargs)\n"
)
NIGHTLY = replace_once(
    replace_once(
        BEFORE,
        "        if (\n            kwargs\n",
        "        kwargs_may_need_convert = bool(kwargs) and not (\n"
        "            len(kwargs) == 1 and \"training\" in kwargs\n        )\n"
        "        if (\n            kwargs_may_need_convert\n",
    ),
    UPSTREAM_BODY,
    UPSTREAM_BODY + "        else:\n            kwargs = dict(kwargs)\n",
)


def transform(source: str) -> str:
    """The codemod's output; a module it skips (already patched) comes back unchanged."""
    command = FlatConversionCommand(CodemodContext(filename=LAYER))
    try:
        return command.transform_module(cst.parse_module(source)).code
    except SkipFile as skipped:
        assert "present" in str(skipped)
        return source


def sources(text: str) -> Sources:
    return Sources(lambda path: text if path == LAYER else None)


def check(text: str) -> Any:
    return PATCH.check(sources(text))


def test_fresh_gate_is_rewritten_and_everything_else_is_kept() -> None:
    after = transform(BEFORE)
    assert "flat_converted = _layer_call_convert_flat(maybe_convert, args, kwargs)" in after
    assert "            if flat_converted is None:\n" + UPSTREAM_BODY.replace("            ", "                ") in after
    assert "            else:\n                args, kwargs = flat_converted\n" in after
    # Upstream's module is a prefix of the patched one, apart from the gate body.
    head, tail = BEFORE.split(UPSTREAM_BODY)
    assert after.startswith(head) and tail in after
    assert after.count("# forkgen: layer-call-flat-conversion") == 2
    result = check(BEFORE)
    assert result.outcome is Outcome.APPLIED and not result.present
    assert [a.name for a in result.anchors] == ["conversion gate"]
    assert result.anchors[0].line == BEFORE.splitlines().index("        if (") + 1


def test_rerun_is_a_no_op_and_reports_present() -> None:
    after = transform(BEFORE)
    assert transform(after) == after
    result = check(after)
    assert result.outcome is Outcome.APPLIED and result.present
    assert analyze(cst.parse_module(after), ast.parse(after)).state == "present"


def test_nightly_shape_is_patched_in_its_body_only() -> None:
    after = transform(NIGHTLY)
    assert "        else:\n            kwargs = dict(kwargs)\n" in after
    assert "if flat_converted is None:" in after
    assert transform(after) == after


def test_composes_with_training_only_conversion_both_ways() -> None:
    src = sources(BEFORE.replace("tree = None\n", "tree = None\nfrom keras.src import dtype_policies\n"))
    TRAINING_ONLY.apply(src)
    first = src.text(LAYER)
    assert "kwargs_may_need_convert" in first
    src = sources(first)
    PATCH.apply(src)
    both = src.text(LAYER)
    assert "if flat_converted is None:" in both and "elif kwargs and self._convert_input_args:" in both
    # Both patches recognise the result as theirs (a re-run of the series is a no-op).
    assert TRAINING_ONLY.check(sources(both)).present
    assert PATCH.check(sources(both)).present


def test_drift_on_another_gate_body() -> None:
    text = replace_once(BEFORE, UPSTREAM_BODY, UPSTREAM_BODY + "            print(args)\n")
    with pytest.raises(AnchorDrift) as raised:
        check(text)
    message = str(raised.value)
    assert "conversion gate body" in message and "another body" in message
    assert f"{LAYER}:{BEFORE.splitlines().index('        if (') + 1}" in message


def test_drift_on_two_gates() -> None:
    gate = BEFORE[BEFORE.index("        if (\n"): BEFORE.index("        return args, kwargs")]
    text = replace_once(BEFORE, "        return args, kwargs", gate + "        return args, kwargs")
    with pytest.raises(AnchorDrift, match=r"exactly one `if \(kwargs or \.\.\.\) and self\._convert_input_args:`.*found 2"):
        check(text)


def test_drift_when_a_helper_name_is_taken() -> None:
    text = BEFORE + "\n\ndef _layer_call_convert_flat():\n    pass\n"
    with pytest.raises(AnchorDrift, match="_layer_call_convert_flat already bound"):
        check(text)


def test_drift_when_a_used_name_is_unbound() -> None:
    text = replace_once(BEFORE, "tree = None\n", "")
    with pytest.raises(AnchorDrift, match="tree unbound"):
        check(text)


# --- the patched helper, executed against fake trees ----------------------------------------


class FakeTree:
    """A tree of tuples/lists/dicts with a configurable visit order."""

    def __init__(self, sorted_visit: bool, none_visited: bool, rebuild_sorted: bool = False) -> None:
        self.sorted_visit, self.none_visited, self.rebuild_sorted = sorted_visit, none_visited, rebuild_sorted

    def is_nested(self, x: Any) -> bool:
        return type(x) in (tuple, list, dict)

    def map_structure(self, f: Any, s: Any) -> Any:
        if type(s) in (tuple, list):
            return type(s)(self.map_structure(f, v) for v in s)
        if type(s) is dict:
            keys = sorted(s) if self.sorted_visit else list(s)
            done = {k: self.map_structure(f, s[k]) for k in keys}
            return {k: done[k] for k in (sorted(s) if self.rebuild_sorted else s)}
        if s is None and not self.none_visited:
            return None
        return f(s)


def patched(fake: FakeTree) -> types.ModuleType:
    module = load_module(transform(BEFORE), "synthetic_flat_layer")
    module.tree = fake
    return module


TREES = [FakeTree(True, True), FakeTree(False, False), FakeTree(True, False), FakeTree(False, True)]


def test_probe_finds_each_tree_shape() -> None:
    for fake in TREES:
        assert patched(fake)._layer_call_flat_tree() == (fake.sorted_visit, fake.none_visited)
    assert patched(FakeTree(True, True, rebuild_sorted=True))._layer_call_flat_tree() is False


leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=2), st.floats(allow_nan=False))
value = st.one_of(leaf, st.lists(leaf, max_size=2), st.dictionaries(st.sampled_from("qp"), leaf, max_size=2))


@settings(max_examples=150, deadline=None)
@given(
    args=st.lists(value, max_size=3).map(tuple),
    kwargs=st.dictionaries(st.sampled_from(["mask", "cache", "b", "a", "z"]), value, max_size=4),
    which=st.integers(0, 4),
    fail_on=st.one_of(st.none(), st.integers(1, 6)),
)
def test_helper_matches_map_structure(args: Any, kwargs: Any, which: int, fail_on: Any) -> None:
    fake = [*TREES, FakeTree(True, True, rebuild_sorted=True)][which]
    module = patched(fake)

    def recorder() -> tuple[list[Any], Any]:
        calls: list[Any] = []

        def f(x: Any) -> Any:
            calls.append(x)
            if len(calls) == fail_on:
                raise KeyError(len(calls))
            return ("c", x)

        return calls, f

    ref_calls, ref_f = recorder()
    calls, f = recorder()
    try:
        expected: Any = (fake.map_structure(ref_f, args), fake.map_structure(ref_f, kwargs))
    except KeyError as error:
        expected = ("raised", error.args)
    try:
        got = module._layer_call_convert_flat(f, args, kwargs)
        if got is None:
            flat = all(type(v) not in (list, dict, tuple) for v in (*args, *kwargs.values()))
            assert not flat or which == 4
            got = (fake.map_structure(f, args), fake.map_structure(f, kwargs))
    except KeyError as error:
        got = ("raised", error.args)
    assert calls == ref_calls
    assert got == expected
    if expected[0] != "raised":
        assert list(got[1]) == list(expected[1]) and got[1] is not kwargs and type(got[0]) is tuple


def test_tensors_are_leaves_unless_the_tree_nests_them() -> None:
    fake = FakeTree(False, False)
    module = patched(fake)
    t = module.Tensor()
    out = module._layer_call_convert_flat(lambda x: ("c", x), (t,), {"mask": t})
    assert out == ((("c", t),), {"mask": ("c", t)})
    fake.is_nested = lambda x: isinstance(x, module.Tensor) or type(x) in (tuple, list, dict)  # type: ignore[method-assign]
    assert patched(fake)._layer_call_convert_flat(lambda x: x, (t,), {}) is None
    # Subclasses of the scalar types are left to the tree walk.
    assert module._layer_call_convert_flat(lambda x: x, (), {"a": type("S", (str,), {})("s")}) is None
