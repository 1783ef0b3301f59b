"""What `layer-clear-losses-skip-empty` makes of Layer modules shaped like Keras's (run by
tests/unit/test_patch_cases.py), and the breaks of its inserted code the equivalence suite must
catch. The series' synthetic layer.py (`LAYER_V4`) has a `_clear_losses` of this shape."""

from codemods.engine import Case, Mutant, piece_text

HEAD = '''\
from keras.src import backend
from keras.src.utils import tracking


class Layer:
    def _clear_losses(self):
        if backend.in_stateless_scope():
            scope = backend.get_stateless_scope()
            if scope.collect_losses:
                scope.losses[:] = [x for x in scope.losses if id(x) not in self._loss_ids]
'''
CLEARS = '''\
        self._losses.clear()
        self._loss_ids.clear()
'''
TAIL = '''\
        for layer in self._layers:
            layer._clear_losses()
'''
BEFORE = HEAD + CLEARS + TAIL
WRAPPED = (piece_text(__file__, "losses_clear", "        ", upstream="self._losses.clear()\n")
           + piece_text(__file__, "loss_ids_clear", "        ", upstream="self._loss_ids.clear()\n"))
AFTER = HEAD + WRAPPED + TAIL + "\n\n" + piece_text(__file__, "helpers", "")

CASES = (
    Case("both clears of _clear_losses wrapped, the check appended", BEFORE, AFTER,
         anchors=(("self._losses.clear()", 11), ("self._loss_ids.clear()", 12))),
    Case("a release that clears the losses otherwise",
         BEFORE.replace("        self._losses.clear()\n", "        self._losses[:] = []\n"),
         drift="self._losses.clear()"),
    Case("a release whose layer.py does not import tracking",
         BEFORE.replace("from keras.src.utils import tracking\n", ""),
         drift="anchor 'tracking'"),
    Case("no _clear_losses in the module", BEFORE.replace("def _clear_losses", "def _reset_losses"),
         drift="Layer._clear_losses"),
)

MUTANTS = (
    Mutant("a non-empty _losses is not cleared", "    if self._losses or not", "    if not"),
    Mutant("a _loss_ids of a class with its own clear is not cleared",
           "    if self._loss_ids or not _clear_losses_empty_noop(self._loss_ids):",
           "    if self._loss_ids:"),
    Mutant("an instance's own clear is not looked at",
           '            and "clear" not in vars(container)\n', ""),
    Mutant("a class whose clear was replaced still counts as a no-op",
           "            and cls.clear is _CLEAR_LOSSES_EMPTY_NOOPS[cls]\n", ""),
)
