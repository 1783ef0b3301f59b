"""Patch functional-graph-fast-paths (ours) on synthetic symbolic_arguments.py / functional.py:
the two insertions, what must stay unchanged, drift with file:line/expected/found, idempotence,
and the patched `fill_in` executed against the unpatched one on a stand-in tree."""

from __future__ import annotations

import pytest
from libcst.codemod import CodemodContext, SkipFile

from codemods import series
from codemods.functional_graph_fast_paths import PATCH, FunctionalGraphFastPathsCommand
from codemods.patchlib import AnchorDrift, Outcome, Sources
from tests.support import synthetic_functional_graph_fast_paths as synthetic

SA, FN = synthetic.SYMBOLIC_ARGUMENTS, synthetic.FUNCTIONAL
SA_PY, FN_PY = synthetic.SYMBOLIC_ARGUMENTS_PY, synthetic.FUNCTIONAL_PY
SINGLE = "            return (tensor_dict[id(self._single_positional_tensor)],), {}\n"
FILL_IN_FAST = (
    "        # forkgen: functional-graph-fast-paths (positional KerasTensors only: what convert returns)\n"
    "        if (\n"
    "            type(self.args) is tuple\n"
    "            and type(self.kwargs) is dict\n"
    "            and not self.kwargs\n"
    "            and all(type(x) is KerasTensor for x in self.args)\n"
    "        ):\n"
    "            return tuple(tensor_dict.get(id(x), None) for x in self.args), {}\n"
)
STANDARDIZE_DEF = "    def _standardize_inputs(self, inputs):\n"
STANDARDIZE_FAST = (
    "        # forkgen: functional-graph-fast-paths (one KerasTensor input, a non-nested value)\n"
    "        if (\n"
    "            type(self._inputs_struct) is backend.KerasTensor\n"
    "            and type(self)._maybe_warn_inputs_struct_mismatch is Functional._maybe_warn_inputs_struct_mismatch\n"
    "            and not isinstance(inputs, (list, dict))\n"
    "            and not tree.is_nested(inputs)\n"
    "        ):\n"
    "            return self._adjust_input_rank(self._convert_inputs_to_tensors([inputs]))\n"
)
SA_AFTER = SA_PY.replace(SINGLE, SINGLE + FILL_IN_FAST, 1)
FN_AFTER = FN_PY.replace(STANDARDIZE_DEF, STANDARDIZE_DEF + STANDARDIZE_FAST, 1)


def sources(sa: str = SA_PY, fn: str = FN_PY) -> Sources:
    return Sources({SA: sa, FN: fn}.get)


def applied(sa: str = SA_PY, fn: str = FN_PY) -> dict[str, str]:
    src = sources(sa, fn)
    check = PATCH.check(src)
    assert (check.outcome, check.present) == (Outcome.APPLIED, False)
    PATCH.apply(src)
    return src.rendered()


def drift(sa: str = SA_PY, fn: str = FN_PY) -> str:
    with pytest.raises(AnchorDrift) as error:
        PATCH.check(sources(sa, fn))
    return str(error.value)


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_inserts_both_fast_paths_exactly() -> None:
    rendered = applied()
    assert rendered == {SA: SA_AFTER, FN: FN_AFTER}


def test_patch_is_registered_last_with_both_files() -> None:
    assert series.SERIES_PACKAGES.index("codemods.functional_graph_fast_paths") == 17  # 18th (patch 19 came after)
    assert PATCH.files == (SA, FN)
    assert (PATCH.name, PATCH.version, PATCH.switch, PATCH.since) == ("functional-graph-fast-paths", "1", None, "3.6.0")


def test_rerun_on_patched_tree_is_noop_and_present() -> None:
    src = sources(SA_AFTER, FN_AFTER)
    check = PATCH.check(src)
    assert (check.outcome, check.present) == (Outcome.APPLIED, True)
    assert [a.line for a in check.anchors] == [line_of(SA_AFTER, "if self._single"), line_of(FN_AFTER, "flat_inputs = tree")]


def test_codemod_skips_a_patched_file_and_other_files() -> None:
    import libcst as cst

    for path, text in ((SA, SA_AFTER), (FN, FN_AFTER), ("keras/src/other.py", "x = 1\n")):
        with pytest.raises(SkipFile):
            FunctionalGraphFastPathsCommand(CodemodContext(filename=path)).transform_module(cst.parse_module(text))


def test_half_applied_tree_is_drift() -> None:
    message = drift(SA_AFTER, FN_PY)
    assert "both fast paths or neither" in message and "only the one in SymbolicArguments.fill_in" in message


def test_comments_and_other_methods_unchanged() -> None:
    rendered = applied()
    assert "# the one-tensor case\n" in rendered[SA]
    for text, after in ((SA_PY, rendered[SA]), (FN_PY, rendered[FN])):
        kept = [line for line in text.splitlines() if line]
        assert all(line in after.splitlines() for line in kept)
    assert rendered[SA].count("def convert") == 1 and rendered[FN].count("tree.flatten(inputs)") == 1


@pytest.mark.parametrize(
    ("sa", "fn", "where", "expected", "found"),
    [
        (SA_PY.replace("if self._single_positional_tensor is not None:", "if self._single_positional_tensor:"),
         FN_PY, SA, "exactly one such statement in SymbolicArguments.fill_in", "found 0"),
        (SA_PY.replace("return self.convert(switch_fn)", "return self.convert(switch_fn, True)"),
         FN_PY, SA, "`return self.convert(switch_fn)` as the last statement", "another statement"),
        (SA_PY.replace("kwargs = tree.map_structure(conversion_fn, self.kwargs)", "kwargs = dict(self.kwargs)"),
         FN_PY, SA, "args/kwargs = tree.map_structure", "another body"),
        (SA_PY.replace("return tensor_dict.get(id(x), None)", "return tensor_dict[id(x)]"),
         FN_PY, SA, "one switch_fn returning", "1 switch_fn"),
        (SA_PY.replace("from keras.src.backend import KerasTensor", "from keras.src.backend.common import KerasTensor"),
         FN_PY, SA, "exactly one binding, `from keras.src.backend import KerasTensor`", "line 4: from keras.src.backend.common"),
        (SA_PY.replace("class SymbolicArguments", "tuple = list\n\n\nclass SymbolicArguments"),
         FN_PY, SA, "no binding (the builtin)", "other"),
        (SA_PY, FN_PY.replace("from keras.src import tree\n", "from keras.src import tree\nfrom keras.src import tree as tree\n"),
         FN, "exactly one binding, `from keras.src import tree`", "line 7: from keras.src import tree, line 8: other"),
        (SA_PY, FN_PY.replace("    def _standardize_inputs(self, inputs):\n", "    def _standardize_inputs(self, inputs, type=type):\n"),
         FN, "no local binding of the guard's names", "`type` bound"),
        (SA_PY, FN_PY.replace("flat_inputs = tree.flatten(inputs)", "flat_inputs = tree.flatten(inputs, 1)"),
         FN, "the method ending with flatten", "another ending"),
        (SA_PY, FN_PY.replace("        self._maybe_warn_inputs_struct_mismatch(\n            inputs, raise_exception=raise_exception\n        )\n", ""),
         FN, "exactly one call, right before the flatten", "0 such call(s)"),
        (SA_PY, FN_PY.replace("    def _standardize_inputs", "    def _standardize_inputs_old"),
         FN, "exactly one def _standardize_inputs", "0"),
    ],
)
def test_drift_is_reported_precisely(sa: str, fn: str, where: str, expected: str, found: str) -> None:
    message = drift(sa, fn)
    assert message.startswith(where + ":"), message
    assert expected in message and found in message, message


def test_drift_line_points_at_the_statement() -> None:
    text = SA_PY.replace(
        "        return self.convert(switch_fn)\n",
        "        if self._single_positional_tensor is not None:\n            pass\n        return self.convert(switch_fn)\n",
    )
    message = drift(text)
    assert message.startswith(f"{SA}:{text.count(chr(10)) - 2}:"), message


def test_apply_is_idempotent() -> None:
    once = applied()
    src = sources(once[SA], once[FN])
    assert PATCH.check(src).present
    assert src.rendered() == {}


def test_patched_fill_in_matches_upstream_on_a_stand_in() -> None:
    """Execute both versions of the synthetic class with a tiny tree and KerasTensor."""
    import types

    class KerasTensor:
        pass

    class Sub(KerasTensor):
        pass

    def map_structure(fn, s):
        if isinstance(s, tuple):
            return tuple(map_structure(fn, x) for x in s)
        if isinstance(s, list):
            return [map_structure(fn, x) for x in s]
        if isinstance(s, dict):
            return {k: map_structure(fn, v) for k, v in s.items()}
        return fn(s)

    def load(text: str) -> type:
        body = "\n".join(line for line in text.splitlines() if not line.startswith("from "))
        namespace = {"tree": types.SimpleNamespace(map_structure=map_structure), "KerasTensor": KerasTensor}
        exec(compile(body, "<synthetic>", "exec"), namespace)  # noqa: S102
        return namespace["SymbolicArguments"]

    before, after = load(SA_PY), load(SA_AFTER)
    a, b, c, s = KerasTensor(), KerasTensor(), KerasTensor(), Sub()
    values = {id(a): "A", id(b): "B", id(s): "S"}
    cases = [((a, b), {}), ((a, b, c), {}), ((), {}), ((a, s), {}), ((a, [b]), {}), ((a, b), {"k": c}), ((a, 1), {})]
    fast_hits = 0
    for args, kwargs in cases:
        old, new = before(*args, **kwargs).fill_in(values), after(*args, **kwargs).fill_in(values)
        assert old == new and type(new[0]) is type(old[0]) and type(new[1]) is type(old[1])
        fast_hits += all(type(x) is KerasTensor for x in args) and not kwargs
    assert fast_hits == 3
