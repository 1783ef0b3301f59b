"""What `torch-moments-axes-tuple` makes of torch nn modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), the breaks of its inserted code the equivalence suite must
catch, and what the series' synthetic nn.py gets at its end (`TREE_APPENDS`: a `moments`
shaped like Keras 3.0-3.15's, below the probe of `torch-flash-probe-compile-skip`'s cases;
written for these tests, only the anchored statement follows Keras)."""

from codemods.engine import Case, Mutant, piece_text

NN_PY = "keras/src/backend/torch/nn.py"
NIGHTLY_NN_PY = "keras/src/backend/torch/ops/nn.py"
HEAD = '''\
import torch


def moments(x, axes, keepdims=False, synchronized=False):
'''
BODY = '''\
    if synchronized:
        raise NotImplementedError("No synchronized moments on torch.")
    mean = torch.mean(x, dim=axes, keepdim=True)
    variance = torch.mean(torch.square(x), dim=axes, keepdim=True) - torch.square(mean)
    if not keepdims:
        mean = torch.squeeze(mean, axes)
        variance = torch.squeeze(variance, axes)
    return mean, variance
'''
BEFORE = HEAD + BODY
AFTER = HEAD + piece_text(__file__, "axes_tuple", "    ") + "\n" + BODY

CASES = (
    Case("a tuple of axes first in moments", BEFORE, AFTER, anchors=(("def moments", 4),)),
    Case("keras-nightly's torch/ops/nn.py takes it too", {NIGHTLY_NN_PY: BEFORE}, {NIGHTLY_NN_PY: AFTER}),
    Case("a release whose moments reduces otherwise",
         BEFORE.replace("torch.mean(x, dim=axes, keepdim=True)", "torch.mean(x, axes, keepdim=True)"),
         drift="mean = torch.mean(x, dim=axes, keepdim=True)"),
    Case("no moments in the module", BEFORE.replace("def moments", "def statistics"), drift="moments"),
)

MUTANTS = (
    Mutant("only the first axis while compiling", "        axes = tuple(axes)", "        axes = tuple(axes)[:1]"),
    Mutant("a list subclass (BatchNormalization's TrackedList) passed on as it is",
           "    if isinstance(axes, list) and", "    if type(axes) is list and"),
)
#: Not a mutant: the tuple made in eager calls too. torch reduces over a tuple of dims exactly as
#: over the list, so no test can tell (the patch makes it while compiling only to leave eager
#: calls upstream's code, not because the tuple would differ).

#: What the series' synthetic nn.py (the torch nn patches' `FILES`) gets at its end.
TREE_APPENDS = {NN_PY: BEFORE.replace("import torch\n\n\n", "", 1)}
