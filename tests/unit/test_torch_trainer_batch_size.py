"""Patch torch-trainer-batch-size (keras-team/keras#23187) on a synthetic torch trainer module."""

from __future__ import annotations

import collections
import textwrap
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodTest

from codemods.patchlib import AnchorDrift, Outcome, Sources
from codemods.torch_trainer_batch_size import PATCH, ReadBatchSizeCommand
from tests.support import synthetic_torch_trainer_batch_size as synthetic

TRAINER = synthetic.TRAINER
TREE_INIT = synthetic.TREE_INIT
ANCHOR = "sample_weight=next(i for i in tree.flatten(x) if i is not None).shape[0]"
UPSTREAM_ARG = (
    "            sample_weight=next(\n"
    "                i for i in tree.flatten(x) if i is not None\n"
    "            ).shape[0],\n"
)
OUR_ARG = (
    "            sample_weight=(\n"
    "                # forkgen: torch-trainer-batch-size (keras#23187: a leaf tensor is its batch)\n"
    "                x.shape[0]\n"
    "                if type(x) is torch.Tensor and not tree.is_nested(x)\n"
    "                else next(\n"
    "                i for i in tree.flatten(x) if i is not None\n"
    "            ).shape[0]\n"
    "            ),\n"
)
# keras-nightly since #23187 (its class is `Trainer` there).
NIGHTLY_ARG = (
    "            sample_weight=(\n"
    "                x.shape[0]\n"
    "                if isinstance(x, torch.Tensor)\n"
    "                else next(i for i in tree.flatten(x) if i is not None).shape[0]\n"
    "            ),\n"
)

BEFORE = textwrap.dedent(
    """\
    import torch

    from keras.src import tree


    class TorchTrainer(base_trainer.Trainer):
        def train_step(self, data):
            x, y, sample_weight = unpack(data)
            loss = self._compute_loss(x=x, y=y)
            self._loss_tracker.update_state(
                loss,
                sample_weight=next(
                    i for i in tree.flatten(x) if i is not None
                ).shape[0],
            )
            return self.compute_metrics(x, y, loss)

        def test_step(self, data):
            x, y, sample_weight = unpack(data)
            loss = self._compute_loss(x=x, y=y)
            self._loss_tracker.update_state(
                loss,
                sample_weight=next(
                    i for i in tree.flatten(x) if i is not None
                ).shape[0],
            )
            return self.compute_metrics(x, y, loss)
    """
)
AFTER = BEFORE.replace(UPSTREAM_ARG, OUR_ARG)
NIGHTLY = BEFORE.replace(UPSTREAM_ARG, NIGHTLY_ARG).replace("class TorchTrainer(base_trainer.Trainer)",
                                                            "class Trainer(BaseTrainer)")
# Keras 3.2.0-3.11.3: the first leaf, None or not.
OLD_FORM = BEFORE.replace(UPSTREAM_ARG, "            sample_weight=tree.flatten(x)[0].shape[0],\n")


def sources(trainer: str, tree_init: str = synthetic.TREE_INIT_PY) -> Sources:
    files = {TRAINER: trainer, TREE_INIT: tree_init}
    return Sources(lambda p: files.get(p))


def check(trainer: str, tree_init: str = synthetic.TREE_INIT_PY) -> Any:
    return PATCH.check(sources(trainer, tree_init))


class TestReadBatchSize(CodemodTest):
    TRANSFORM = ReadBatchSizeCommand

    def test_both_sites_get_the_guard(self) -> None:
        self.assertCodemod(BEFORE, AFTER)

    def test_noop_when_already_applied(self) -> None:
        self.assertCodemod(AFTER, AFTER, expected_skip=True)

    def test_noop_on_the_upstream_shape(self) -> None:
        self.assertCodemod(NIGHTLY, NIGHTLY, expected_skip=True)


def test_the_inserted_text_is_upstream_s_expression_kept_whole() -> None:
    assert BEFORE.count(UPSTREAM_ARG) == 2 and AFTER.count(OUR_ARG) == 2
    # Only the two arguments change: every other line is upstream's, byte for byte.
    assert AFTER.replace(OUR_ARG, UPSTREAM_ARG) == BEFORE
    compile(AFTER, "<after>", "exec")


def test_outcomes() -> None:
    before = check(BEFORE)
    assert before.outcome is Outcome.APPLIED and not before.present
    assert [(a.name, a.line) for a in before.anchors] == [(ANCHOR, 12), (ANCHOR, 23)]
    assert "TorchTrainer.train_step" in before.anchors[0].description
    present = check(AFTER)
    assert present.outcome is Outcome.APPLIED and present.present
    nightly = check(NIGHTLY)
    assert nightly.outcome is Outcome.UPSTREAM
    assert "Trainer.test_step" in nightly.anchors[1].description
    # The upstream shape needs no export check: nightly's tree may differ.
    assert check(NIGHTLY, "").outcome is Outcome.UPSTREAM
    assert PATCH.since == "3.12.0"


def test_apply_then_check_again_is_present_and_byte_identical() -> None:
    tree = sources(BEFORE)
    PATCH.apply(tree)
    assert tree.rendered() == {TRAINER: AFTER}
    again = sources(AFTER)
    assert PATCH.check(again).present
    assert again.rendered() == {}


def test_the_synthetic_tree_files_take_the_patch() -> None:
    tree = Sources(lambda p: synthetic.FILES.get(p))
    first = PATCH.check(tree)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(tree)
    patched = tree.rendered()[TRAINER]
    assert patched.count("# forkgen: torch-trainer-batch-size") == 2
    assert PATCH.check(sources(patched)).present


def _drift(trainer: str, tree_init: str = synthetic.TREE_INIT_PY) -> AnchorDrift:
    with pytest.raises(AnchorDrift) as caught:
        check(trainer, tree_init)
    return caught.value


@pytest.mark.parametrize(
    ("source", "anchor", "found", "line"),
    [
        (OLD_FORM, ANCHOR, "found another expression", 12),
        (BEFORE.replace("if i is not None", "if i is not None and i", 1), ANCHOR, "another expression", 12),
        (BEFORE.replace(UPSTREAM_ARG, OUR_ARG, 1), ANCHOR,
         "found train_step: forkgen's guard, test_step: upstream's flatten", 28),
        (BEFORE.replace(UPSTREAM_ARG, NIGHTLY_ARG, 1), ANCHOR,
         "found train_step: keras-nightly's isinstance, test_step: upstream's flatten", 25),
        (AFTER.replace("and not tree.is_nested(x)", "", 1), ANCHOR, "forkgen's marker on another expression", 12),
        (NIGHTLY.replace("isinstance(x, torch.Tensor)", "is_tensor(x)"), ANCHOR, "another expression", 12),
        (BEFORE.replace("sample_weight=next(", "next(", 1), ANCHOR, "found 0", 7),
        (BEFORE.replace("self._loss_tracker.update_state(", "self._loss_tracker.update(", 1),
         "self._loss_tracker.update_state(...)", "found 0", 7),
        (BEFORE.replace("        return self.compute_metrics(x, y, loss)\n",
                        "        self._loss_tracker.update_state(loss)\n"
                        "        return self.compute_metrics(x, y, loss)\n", 1),
         "self._loss_tracker.update_state(...)", "found 2", 7),
        (BEFORE.replace("def test_step(", "def evaluate_step(", 1), "TorchTrainer.test_step", "found 0", 1),
        (BEFORE.replace("class TorchTrainer(", "class JaxTrainer(", 1), "class TorchTrainer", "found 0", 1),
        (BEFORE + "\n\nclass Trainer:\n    pass\n", "class TorchTrainer", "found 2", 6),
        (BEFORE + "\n\nclass TorchTrainer:\n    pass\n", "class TorchTrainer", "found 2", 6),
    ],
    ids=["3.2-3.11 form", "another filter", "mixed ours", "mixed nightly", "our marker, other guard",
         "other upstream guard", "no sample_weight", "no update_state", "two update_state",
         "no test_step", "no trainer class", "two trainer classes", "a second TorchTrainer"],
)
def test_drift(source: str, anchor: str, found: str, line: int) -> None:
    drift = _drift(source)
    assert drift.anchor == anchor and found in str(drift), str(drift)
    assert (drift.path, drift.line) == (TRAINER, line)


@pytest.mark.parametrize(
    ("source", "anchor", "expected", "found", "line"),
    [
        (BEFORE.replace("import torch\n", "import torch as torch\n"), "module-level torch", "`import torch`",
         "line 1 (another binding)", 1),
        (BEFORE.replace("import torch\n", "import torch\ntorch = None\n"), "module-level torch", "`import torch`",
         "line 1, line 2 (another binding)", 1),
        (BEFORE.replace("from keras.src import tree\n", "from keras.src.utils import tree\n"), "module-level tree",
         "`from keras.src import tree`", "(another binding)", 3),
        (BEFORE.replace("from keras.src import tree\n", ""), "module-level tree", "`from keras.src import tree`",
         "found none", 1),
        (BEFORE + "\n\ndef type(x):\n    return x\n", "module-level type", "no binding", "line 30", 30),
        (BEFORE.replace("    def test_step(self, data):\n", "    def test_step(self, data, tree=None):\n"),
         "TorchTrainer.test_step", "no local binding", "`tree` bound", 18),
        (BEFORE.replace("        loss = self._compute_loss(x=x, y=y)\n",
                        "        loss = self._compute_loss(x=x, y=y)\n        import torch\n", 1),
         "TorchTrainer.train_step", "no local binding", "`torch` bound", 10),
        (BEFORE.replace("        x, y, sample_weight = unpack(data)\n",
                        "        x, y, sample_weight = unpack(data)\n"
                        "        for type in ():\n            pass\n", 1),
         "TorchTrainer.train_step", "no local binding", "`type` bound", 9),
    ],
    ids=["torch aliased", "torch rebound", "another tree", "no tree", "a module-level type", "tree parameter",
         "local import", "loop over type"],
)
def test_names_the_guard_reads_must_be_upstream_s(source: str, anchor: str, expected: str, found: str,
                                                  line: int) -> None:
    drift = _drift(source)
    assert drift.anchor == anchor and expected in drift.expected and found in str(drift), str(drift)
    assert (drift.path, drift.line) == (TRAINER, line)


@pytest.mark.parametrize(
    ("tree_init", "found"),
    [
        ("from keras.src.tree.tree_api import flatten\n", "0 binding(s)"),
        ("from keras.src.tree.tree_api import is_nested as is_nested\n", "1 binding(s)"),
        (synthetic.TREE_INIT_PY + "is_nested = None\n", "2 binding(s)"),
    ],
    ids=["no is_nested", "aliased", "rebound"],
)
def test_tree_must_export_tree_api_s_is_nested(tree_init: str, found: str) -> None:
    for trainer in (BEFORE, AFTER):
        drift = _drift(trainer, tree_init)
        assert drift.path == synthetic.TREE_INIT and drift.anchor.endswith("import is_nested") and found in str(drift)


def test_a_tree_without_the_torch_trainer_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == TRAINER and "no such file" in str(caught.value)


# -- behaviour: the synthetic upstream and patched modules, side by side -----------------------

def _patched() -> str:
    tree = Sources(lambda p: synthetic.FILES.get(p))
    PATCH.apply(tree)
    return tree.rendered()[TRAINER]


UPSTREAM_MODULE = synthetic.loaded(synthetic.TRAINER_PY, "torch_trainer_upstream")
PATCHED_MODULE = synthetic.loaded(_patched(), "torch_trainer_patched")
Tensor, SubTensor, Proxy = synthetic.Tensor, synthetic.SubTensor, synthetic.Proxy
Point = collections.namedtuple("Point", ["b", "a"])


def run(module: Any, method: str, x: Any) -> tuple[object, ...]:
    """What the loss tracker got from `method` for inputs `x` (or the error), and what was
    done to the inputs themselves (the tree's own calls differ: that is the patch)."""
    synthetic.log.clear()
    model = synthetic.Model()
    step = getattr(module.TorchTrainer, method)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = step(model, (x, None, None))
        result: tuple[object, ...] = (out["updates"],)
    except Exception as error:  # the same error, with the same message
        result = ("raised", type(error), str(error))
    return (*result, [e for e in synthetic.log if not e.startswith(("flatten(", "is_nested("))])


def tensors() -> st.SearchStrategy[Any]:
    shapes = st.lists(st.integers(0, 4), max_size=3).map(tuple)
    return st.one_of(shapes.map(lambda s: Tensor(*s)), shapes.map(lambda s: SubTensor(*s)),
                     shapes.map(lambda s: Proxy(*s)))


leaves = st.one_of(tensors(), st.none(), st.integers(), st.text(max_size=2))
structures = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
        st.tuples(inner, inner).map(lambda t: Point(*t)),
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(x=structures, method=st.sampled_from(["train_step", "test_step"]), registered=st.booleans())
def test_patched_reads_the_batch_size_like_upstream(x: Any, method: str, registered: bool) -> None:
    # `registered`: the tensor subclass is a tree node whose leaf is a (2, 7) tensor.
    synthetic.tree.nodes = {SubTensor: lambda s: [Tensor(2, 7)]} if registered else {}
    try:
        assert run(PATCHED_MODULE, method, x) == run(UPSTREAM_MODULE, method, x)
    finally:
        synthetic.tree.nodes = {}


@pytest.mark.parametrize("method", ["train_step", "test_step"])
def test_a_plain_tensor_skips_the_flatten(method: str) -> None:
    assert run(PATCHED_MODULE, method, Tensor(5, 3)) == run(UPSTREAM_MODULE, method, Tensor(5, 3)) == (
        [(0.5, 5)], ["shape(Tensor)"]
    )
    # The same calls on x as upstream's (the leaf test, then .shape), without the walk.
    assert synthetic.log == ["flatten(Tensor)", "shape(Tensor)"]
    run(PATCHED_MODULE, method, Tensor(5, 3))
    assert synthetic.log == ["is_nested(Tensor)", "shape(Tensor)"]


def test_what_falls_back() -> None:
    cases = {
        "a 0-d tensor": Tensor(),
        "a subclass": SubTensor(4),
        "None": None,
        "a list led by None": [None, Tensor(3)],
        "a dict whose first key is not the batch": {"a": Tensor(1), "b": Tensor(6)},
        "an int": 3,
        "a proxy claiming to be a tensor": Proxy(4),
    }
    for name, x in cases.items():
        assert run(PATCHED_MODULE, "train_step", x) == run(UPSTREAM_MODULE, "train_step", x), name
    assert run(PATCHED_MODULE, "train_step", Tensor())[:2] == ("raised", IndexError)
    assert run(PATCHED_MODULE, "train_step", None)[:2] == ("raised", StopIteration)
    assert run(PATCHED_MODULE, "train_step", {"a": Tensor(1), "b": Tensor(6)}) == ([(0.5, 1)], ["shape(Tensor)"])
    # Upstream never asks a proxy for its __class__: neither does the patch.
    assert run(PATCHED_MODULE, "train_step", Proxy(4)) == ([(0.5, 4)], ["shape(Proxy)"])
    # A registered tensor type is flattened by upstream: the patch must not read its shape.
    synthetic.tree.nodes = {Tensor: lambda t: [SubTensor(9)]}
    try:
        upstream = run(UPSTREAM_MODULE, "test_step", Tensor(2))
        assert upstream == ([(0.5, 9)], ["shape(SubTensor)"]) and run(PATCHED_MODULE, "test_step", Tensor(2)) == upstream
    finally:
        synthetic.tree.nodes = {}
