"""Patch torch-trainer-batch-size (keras-team/keras#23187) on a synthetic torch trainer module."""

from __future__ import annotations

import collections
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import AnchorDrift, Outcome, Sources
from codemods.torch_trainer_batch_size import PATCH
from codemods.torch_trainer_batch_size import cases as synthetic
from codemods.torch_trainer_batch_size.cases import AFTER, BEFORE, NIGHTLY, OUR_ARG, UPSTREAM_ARG

TRAINER = synthetic.TRAINER
TREE_INIT = synthetic.TREE_INIT


def sources(trainer: str, tree_init: str | None = synthetic.TREE_INIT_PY) -> Sources:
    files = {TRAINER: trainer, TREE_INIT: tree_init}
    return Sources(lambda p: files.get(p))


def test_the_inserted_text_is_upstream_s_expression_kept_whole() -> None:
    assert BEFORE.count(UPSTREAM_ARG) == 2 and AFTER.count(OUR_ARG) == 2
    # Only the two arguments change: every other line is upstream's, byte for byte.
    assert AFTER.replace(OUR_ARG, UPSTREAM_ARG) == BEFORE
    compile(AFTER, "<after>", "exec")


def test_outcomes() -> None:
    before = PATCH.check(sources(BEFORE))
    assert "TorchTrainer.train_step" in before.anchors[0].description
    nightly = PATCH.check(sources(NIGHTLY))
    assert nightly.outcome is Outcome.UPSTREAM
    assert "Trainer.test_step" in nightly.anchors[1].description
    assert PATCH.since == "3.12.0"


def test_the_synthetic_tree_files_take_the_patch() -> None:
    tree = Sources(lambda p: synthetic.FILES.get(p))
    first = PATCH.check(tree)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(tree)
    patched = tree.rendered()[TRAINER]
    assert patched.count("# forkgen: torch-trainer-batch-size") == 2
    assert PATCH.check(sources(patched)).present


def test_a_tree_without_the_torch_trainer_or_its_tree_package_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        PATCH.check(Sources(lambda p: None))
    assert caught.value.path == TRAINER and "no such file" in str(caught.value)
    for trainer in (BEFORE, AFTER):
        with pytest.raises(AnchorDrift) as caught:
            PATCH.check(sources(trainer, None))
        assert caught.value.path == TREE_INIT and "no such file" in str(caught.value)


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
