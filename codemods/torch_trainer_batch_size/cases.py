"""What `torch-trainer-batch-size` makes of torch trainer modules shaped like Keras's, how the
patched trainer reads the batch size beside upstream's (both run by
tests/unit/test_patch_cases.py), the breaks of its inserted code the equivalence suite must catch,
and the synthetic files it anchors on, with stand-ins to run them offline.

`FILES` holds a minimal `keras/src/backend/torch/trainer.py` shaped like Keras 3.12-3.15.1's
(`import torch`, `from keras.src import tree`, a `TorchTrainer` whose `train_step` and
`test_step` update the loss tracker with the batch size read through `tree.flatten`), and the
`keras/src/tree/__init__.py` export of `is_nested` (written for these tests; only the anchored
statements follow Keras). `loaded` executes a (patched or not) trainer text against the
`torch` and `tree` stand-ins below, which log what the batch size expression does (the
behaviours at the end).
"""

import collections
import functools
import textwrap
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.engine import AnchorDrift, Case, Mutant, Outcome, Sources, piece_text, run_module
from codemods.torch_trainer_batch_size import PATCH

TRAINER = "keras/src/backend/torch/trainer.py"
TREE_INIT = "keras/src/tree/__init__.py"
TREE_INIT_PY = textwrap.dedent(
    """\
    from keras.src.tree.tree_api import flatten
    from keras.src.tree.tree_api import is_nested
    from keras.src.tree.tree_api import map_structure
    """
)

#: The trainer.py of the series' synthetic tree and of the behaviour tests.
TRAINER_PY = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/backend/torch/trainer.py (train_step and test_step)."""

    import warnings

    import torch

    from keras.src import tree


    class TorchTrainer:
        def __init__(self):
            self.train_function = None

        def train_step(self, data):
            x, y, sample_weight = data

            # Compute predictions
            y_pred = self(x, training=True)
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            self._loss_tracker.update_state(
                loss,
                sample_weight=next(
                    i for i in tree.flatten(x) if i is not None
                ).shape[0],
            )
            if self.optimizer is not None:
                loss = self.optimizer.scale_loss(loss)
            else:
                warnings.warn("no optimizer")
            return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

        def test_step(self, data):
            (
                x,
                y,
                sample_weight,
            ) = data
            y_pred = self(x, training=False)
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
            )
            self._loss_tracker.update_state(
                loss,
                sample_weight=next(
                    i for i in tree.flatten(x) if i is not None
                ).shape[0],
            )
            return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

        def predict_step(self, data):
            x, _, _ = data
            return self(x, training=False)
    '''
)

#: The package markers make setup.py-based trees (3.0's `find_packages`) ship the modules too.
FILES: dict[str, str] = {
    "keras/src/backend/__init__.py": "",
    "keras/src/backend/torch/__init__.py": "",
    TRAINER: TRAINER_PY,
    TREE_INIT: TREE_INIT_PY,
}

ANCHOR = "sample_weight=next(i for i in tree.flatten(x) if i is not None).shape[0]"
UPSTREAM_ARG = (
    "            sample_weight=next(\n"
    "                i for i in tree.flatten(x) if i is not None\n"
    "            ).shape[0],\n"
)
#: The piece's `sample_weight=` argument (its lines inside the call), upstream's expression kept
#: node for node, as it was written, where the piece says `UPSTREAM`.
OUR_ARG = "".join(piece_text(__file__, "loss_tracker_update", " " * 8).splitlines(True)[2:-1]).replace(
    "UPSTREAM", UPSTREAM_ARG.removeprefix("            sample_weight=").removesuffix(",\n"))
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


def trainer_tree(trainer: str, tree_init: str = TREE_INIT_PY) -> dict[str, str]:
    return {TRAINER: trainer, TREE_INIT: tree_init}


def drift(name: str, trainer: str, words: str, tree_init: str = TREE_INIT_PY) -> Case:
    return Case(name, trainer_tree(trainer, tree_init), drift=words)


CASES = (
    Case("both sites get the guard, upstream's expression kept whole", trainer_tree(BEFORE), {TRAINER: AFTER},
         detail="read x.shape[0] for a plain tensor in train_step and test_step",
         anchors=((ANCHOR, 12), (ANCHOR, 23))),
    Case("keras-nightly's isinstance (#23187)", trainer_tree(NIGHTLY), upstream=True),
    # The upstream shape needs no export check: nightly's tree may differ.
    Case("keras-nightly's isinstance, whatever its tree exports", {TRAINER: NIGHTLY}, upstream=True),
    # -- the anchors
    drift("3.2-3.11 form", OLD_FORM, f"{TRAINER}:7: anchor '{ANCHOR}': expected exactly one"),
    drift("another filter", BEFORE.replace("if i is not None", "if i is not None and i", 1), "found 0 not replaced"),
    drift("mixed ours", BEFORE.replace(UPSTREAM_ARG, OUR_ARG, 1), "present or none"),
    drift("mixed nightly", BEFORE.replace(UPSTREAM_ARG, NIGHTLY_ARG, 1), "found 0 not replaced and 0 replaced"),
    drift("our marker, other guard", AFTER.replace("and not tree.is_nested(x)", "", 1), "found 0 not replaced"),
    drift("our guard without our marker", AFTER.replace(OUR_ARG.splitlines(True)[1], "", 1),
          "a replacement without forkgen's marker"),
    drift("other upstream guard", NIGHTLY.replace("isinstance(x, torch.Tensor)", "is_tensor(x)"),
          f"{TRAINER}:1: anchor 'TorchTrainer.train_step': expected exactly one class TorchTrainer; found 0"),
    drift("no sample_weight", BEFORE.replace("sample_weight=next(", "next(", 1), "found 0 not replaced"),
    drift("no update_state", BEFORE.replace("self._loss_tracker.update_state(", "self._loss_tracker.update(", 1),
          "self._loss_tracker.update_state(___, sample_weight=__)` in TorchTrainer.train_step; found 0"),
    drift("two update_state", BEFORE.replace("        return self.compute_metrics(x, y, loss)\n",
                                             "        self._loss_tracker.update_state(loss, sample_weight=1)\n"
                                             "        return self.compute_metrics(x, y, loss)\n", 1),
          "self._loss_tracker.update_state(___, sample_weight=__)` in TorchTrainer.train_step; found 2"),
    drift("no test_step", BEFORE.replace("def test_step(", "def evaluate_step(", 1),
          f"{TRAINER}:6: anchor 'TorchTrainer.test_step': expected exactly one def test_step; found 0"),
    drift("no trainer class", BEFORE.replace("class TorchTrainer(", "class JaxTrainer(", 1),
          "expected exactly one class TorchTrainer; found 0"),
    drift("a Trainer class too", BEFORE + "\n\nclass Trainer:\n    pass\n", f"{TRAINER}:30: anchor 'class Trainer: ___': expected exactly 0"),
    drift("a second TorchTrainer", BEFORE + "\n\nclass TorchTrainer:\n    pass\n",
          "expected exactly one class TorchTrainer; found 2"),
    # -- the names the guard reads must be upstream's
    drift("torch aliased", BEFORE.replace("import torch\n", "import torch as torch\n"),
          "anchor 'import torch': expected exactly one `import torch` at module level; found 0"),
    drift("torch rebound", BEFORE.replace("import torch\n", "import torch\ntorch = None\n"),
          f"{TRAINER}:1: anchor 'module-level torch': expected exactly one module-level binding of torch, "
          "import torch; found line 1, line 2"),
    drift("another tree", BEFORE.replace("from keras.src import tree\n", "from keras.src.utils import tree\n"),
          "anchor 'from keras.src import tree': expected exactly one `from keras.src import tree` at module level; found 0"),
    drift("no tree", BEFORE.replace("from keras.src import tree\n", ""), "anchor 'tree': expected bound where loss_tracker_update goes"),
    drift("a module-level type", BEFORE + "\n\ndef type(x):\n    return x\n",
          f"{TRAINER}:30: anchor 'module-level type': expected no module-level binding of type, the builtin; found line 30"),
    drift("tree parameter", BEFORE.replace("    def test_step(self, data):\n", "    def test_step(self, data, tree=None):\n"),
          f"{TRAINER}:18: anchor 'TorchTrainer.test_step': expected no local binding of torch, tree, type; found `tree` bound"),
    drift("local import", BEFORE.replace("        loss = self._compute_loss(x=x, y=y)\n",
                                         "        loss = self._compute_loss(x=x, y=y)\n        import torch\n", 1),
          f"{TRAINER}:7: anchor 'TorchTrainer.train_step': expected no local binding of torch, tree, type; found `torch` bound"),
    drift("loop over type", BEFORE.replace("        x, y, sample_weight = unpack(data)\n",
                                           "        x, y, sample_weight = unpack(data)\n"
                                           "        for type in ():\n            pass\n", 1),
          "'TorchTrainer.train_step': expected no local binding of torch, tree, type; found `type` bound"),
    # -- the tree must export tree_api's is_nested (before and after the patch)
    *(drift(f"{name}{' (applied)' if trainer is AFTER else ''}", trainer, words, tree_init)
      for trainer in (BEFORE, AFTER) for name, tree_init, words in (
          ("no is_nested", "from keras.src.tree.tree_api import flatten\n",
           f"{TREE_INIT}:1: anchor 'from keras.src.tree.tree_api import is_nested': expected exactly one"),
          ("is_nested aliased", "from keras.src.tree.tree_api import is_nested as is_nested\n",
           "'from keras.src.tree.tree_api import is_nested': expected exactly one `from keras.src.tree.tree_api "
           "import is_nested` at module level; found 0"),
          ("is_nested rebound", TREE_INIT_PY + "is_nested = None\n",
           f"{TREE_INIT}:2: anchor 'from keras.src.tree.tree_api import is_nested': expected exactly one "
           "module-level binding of is_nested, that import; found line 2, line 4"))),
)

MUTANTS = (
    Mutant("the guard forgets tensor types registered as tree nodes",
           "            if type(x) is torch.Tensor and not tree.is_nested(x)\n",
           "            if type(x) is torch.Tensor\n"),
    Mutant("isinstance (reads a proxy's __class__) instead of the exact type",
           "            if type(x) is torch.Tensor and not tree.is_nested(x)\n",
           "            if isinstance(x, torch.Tensor) and not tree.is_nested(x)\n"),
)


# -- stand-ins to run a trainer text offline ------------------------------------------------------

#: What the stand-ins saw, in order: `is_nested(<type>)`, `flatten(<type>)`, `shape(<type>)`.
log: list[str] = []


class Tensor:
    """torch.Tensor's part here: a `shape` (a tuple, as torch.Size is), read through a property."""

    def __init__(self, *shape: int) -> None:
        self._shape = tuple(shape)

    @property
    def shape(self) -> tuple[int, ...]:
        log.append(f"shape({type(self).__name__})")
        return self._shape

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._shape}"


class SubTensor(Tensor):
    """A tensor subclass (as torch.nn.Parameter or a user's subclass are)."""


class Proxy:
    """Not a tensor, but claims to be one through `__class__` (as mocks and lazy proxies do):
    `isinstance(proxy, Tensor)` is True, and reading `__class__` is logged."""

    def __init__(self, *shape: int) -> None:
        self._shape = tuple(shape)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: PLE0307 - the point of the stand-in
        log.append("__class__(Proxy)")
        return Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        log.append("shape(Proxy)")
        return self._shape


def _fake_torch() -> types.ModuleType:
    module = types.ModuleType("torch")
    module.Tensor = Tensor  # type: ignore[attr-defined]
    return module


class Tree:
    """Keras 3.15.1's `tree` semantics on the torch backend, small: lists, tuples, namedtuples
    and dicts (by sorted key) are structures, and so is any type in `nodes` (a type registered as
    a tree node, with its flatten function); `flatten` answers `[s]` at once for a non-nested
    `s`, as tree_api's does. Like torch's pytree, it looks at `type(s)` only, never at
    `s.__class__`."""

    def __init__(self) -> None:
        self.nodes: dict[type, Callable[[Any], list[Any]]] = {}

    def is_nested(self, structure: Any) -> bool:
        log.append(f"is_nested({type(structure).__name__})")
        return self._nested(structure)

    def _nested(self, s: Any) -> bool:
        kind = type(s)
        return kind in (list, tuple, dict) or kind in self.nodes or (issubclass(kind, tuple) and hasattr(kind, "_fields"))

    def flatten(self, structure: Any) -> list[Any]:
        log.append(f"flatten({type(structure).__name__})")
        if not self._nested(structure):
            return [structure]
        return self._flatten(structure)

    def _flatten(self, s: Any) -> list[Any]:
        if not self._nested(s):
            return [s]
        if type(s) in self.nodes:
            children = self.nodes[type(s)](s)
        elif type(s) is dict:
            children = [s[k] for k in sorted(s)]
        else:
            children = list(s)
        return [leaf for child in children for leaf in self._flatten(child)]


tree = Tree()


def loaded(source: str, name: str) -> types.ModuleType:
    """Execute a trainer text (patched or not) with `import torch` and `from keras.src import tree`
    given the stand-ins (`run_module`: nothing outside the module changes)."""
    return run_module(source, name, {"torch": _fake_torch(), "keras.src": types.SimpleNamespace(tree=tree)})


class Model:
    """The `self` that `train_step`/`test_step` run with: records what the loss tracker got."""

    def __init__(self) -> None:
        self.updates: list[tuple[Any, Any]] = []
        self.optimizer = None
        self._loss_tracker = self

    def __call__(self, x: Any, training: bool = False) -> str:
        return "y_pred"

    def _compute_loss(self, **kwargs: Any) -> float:
        return 0.5

    def update_state(self, loss: Any, sample_weight: Any = None) -> None:
        self.updates.append((loss, sample_weight))

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> dict[str, Any]:
        return {"updates": list(self.updates)}


# -- behaviours: the patched trainer reads the batch size as upstream's, without the walk ----------


def _sources(trainer: str, tree_init: str | None = TREE_INIT_PY) -> Sources:
    files = {TRAINER: trainer, TREE_INIT: tree_init}
    return Sources(lambda p: files.get(p))


def the_inserted_text_is_upstream_s_expression_kept_whole() -> None:
    assert BEFORE.count(UPSTREAM_ARG) == 2 and AFTER.count(OUR_ARG) == 2
    # Only the two arguments change: every other line is upstream's, byte for byte.
    assert AFTER.replace(OUR_ARG, UPSTREAM_ARG) == BEFORE
    compile(AFTER, "<after>", "exec")


def outcomes() -> None:
    before = PATCH.check(_sources(BEFORE))
    assert "TorchTrainer.train_step" in before.anchors[0].description
    nightly = PATCH.check(_sources(NIGHTLY))
    assert nightly.outcome is Outcome.UPSTREAM
    assert "Trainer.test_step" in nightly.anchors[1].description
    assert PATCH.since == "3.12.0"


def the_synthetic_tree_files_take_the_patch() -> None:
    synthetic_tree = Sources(lambda p: FILES.get(p))
    first = PATCH.check(synthetic_tree)
    assert first.outcome is Outcome.APPLIED and not first.present
    PATCH.apply(synthetic_tree)
    patched = synthetic_tree.rendered()[TRAINER]
    assert patched.count("# forkgen: torch-trainer-batch-size") == 2
    assert PATCH.check(_sources(patched)).present


def a_tree_without_the_tree_package_is_drift() -> None:
    # (Without the trainer too: test_patch_cases.py's test for every patch.)
    for trainer in (BEFORE, AFTER):
        with pytest.raises(AnchorDrift) as caught:
            PATCH.check(_sources(trainer, None))
        assert caught.value.path == TREE_INIT and "no such file" in str(caught.value)


@functools.cache
def _modules() -> tuple[types.ModuleType, types.ModuleType]:
    """The synthetic trainer as upstream has it and as the patch leaves it, executed once (by the
    first behaviour that runs them)."""
    synthetic_tree = Sources(lambda p: FILES.get(p))
    PATCH.apply(synthetic_tree)
    return (loaded(TRAINER_PY, "torch_trainer_upstream"),
            loaded(synthetic_tree.rendered()[TRAINER], "torch_trainer_patched"))


Point = collections.namedtuple("Point", ["b", "a"])


def run(module: Any, method: str, x: Any) -> tuple[object, ...]:
    """What the loss tracker got from `method` for inputs `x` (or the error), and what was
    done to the inputs themselves (the tree's own calls differ: that is the patch)."""
    log.clear()
    model = Model()
    step = getattr(module.TorchTrainer, method)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = step(model, (x, None, None))
        result: tuple[object, ...] = (out["updates"],)
    except Exception as error:  # the same error, with the same message
        result = ("raised", type(error), str(error))
    return (*result, [e for e in log if not e.startswith(("flatten(", "is_nested("))])


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
def patched_reads_the_batch_size_like_upstream(x: Any, method: str, registered: bool) -> None:
    upstream_module, patched_module = _modules()
    # `registered`: the tensor subclass is a tree node whose leaf is a (2, 7) tensor.
    tree.nodes = {SubTensor: lambda s: [Tensor(2, 7)]} if registered else {}
    try:
        assert run(patched_module, method, x) == run(upstream_module, method, x)
    finally:
        tree.nodes = {}


def a_plain_tensor_skips_the_flatten() -> None:
    upstream_module, patched_module = _modules()
    for method in ("train_step", "test_step"):
        assert run(patched_module, method, Tensor(5, 3)) == run(upstream_module, method, Tensor(5, 3)) == (
            [(0.5, 5)], ["shape(Tensor)"]
        ), method
        # The same calls on x as upstream's (the leaf test, then .shape), without the walk.
        assert log == ["flatten(Tensor)", "shape(Tensor)"], method
        run(patched_module, method, Tensor(5, 3))
        assert log == ["is_nested(Tensor)", "shape(Tensor)"], method


def what_falls_back() -> None:
    upstream_module, patched_module = _modules()
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
        assert run(patched_module, "train_step", x) == run(upstream_module, "train_step", x), name
    assert run(patched_module, "train_step", Tensor())[:2] == ("raised", IndexError)
    assert run(patched_module, "train_step", None)[:2] == ("raised", StopIteration)
    assert run(patched_module, "train_step", {"a": Tensor(1), "b": Tensor(6)}) == ([(0.5, 1)], ["shape(Tensor)"])
    # Upstream never asks a proxy for its __class__: neither does the patch.
    assert run(patched_module, "train_step", Proxy(4)) == ([(0.5, 4)], ["shape(Proxy)"])
    # A registered tensor type is flattened by upstream: the patch must not read its shape.
    tree.nodes = {Tensor: lambda t: [SubTensor(9)]}
    try:
        upstream = run(upstream_module, "test_step", Tensor(2))
        assert upstream == ([(0.5, 9)], ["shape(SubTensor)"]) and run(patched_module, "test_step", Tensor(2)) == upstream
    finally:
        tree.nodes = {}


BEHAVIOURS = (
    the_inserted_text_is_upstream_s_expression_kept_whole,
    outcomes,
    the_synthetic_tree_files_take_the_patch,
    a_tree_without_the_tree_package_is_drift,
    patched_reads_the_batch_size_like_upstream,
    a_plain_tensor_skips_the_flatten,
    what_falls_back,
)
