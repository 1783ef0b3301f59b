"""What `torch-trainer-batch-size` makes of torch trainer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must catch."""

import textwrap

from codemods.engine import Case, Mutant

TRAINER = "keras/src/backend/torch/trainer.py"
TREE_INIT = "keras/src/tree/__init__.py"
TREE_INIT_PY = textwrap.dedent(
    """\
    from keras.src.tree.tree_api import flatten
    from keras.src.tree.tree_api import is_nested
    from keras.src.tree.tree_api import map_structure
    """
)
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


def tree(trainer: str, tree_init: str = TREE_INIT_PY) -> dict[str, str]:
    return {TRAINER: trainer, TREE_INIT: tree_init}


def drift(name: str, trainer: str, words: str, tree_init: str = TREE_INIT_PY) -> Case:
    return Case(name, tree(trainer, tree_init), drift=words)


CASES = (
    Case("both sites get the guard, upstream's expression kept whole", tree(BEFORE), {TRAINER: AFTER},
         detail="read x.shape[0] for a plain tensor in train_step and test_step",
         anchors=((ANCHOR, 12), (ANCHOR, 23))),
    Case("keras-nightly's isinstance (#23187)", tree(NIGHTLY), upstream=True),
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
