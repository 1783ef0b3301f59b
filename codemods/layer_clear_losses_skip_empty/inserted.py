"""What `layer-clear-losses-skip-empty` puts into keras/src/layers/layer.py.

Parsed by the engine, never imported. `losses_clear` and `loss_ids_clear` wrap the two clears
of `Layer._clear_losses` (`UPSTREAM` is each clear, unchanged); `helpers` is appended to the
module (its docstrings are indented here as they read once at module level).
"""
# ruff: noqa


def losses_clear(self):
    if self._losses or not _clear_losses_empty_noop(self._losses):  # forkgen: layer-clear-losses-skip-empty
        UPSTREAM


def loss_ids_clear(self):
    if self._loss_ids or not _clear_losses_empty_noop(self._loss_ids):  # forkgen: layer-clear-losses-skip-empty
        UPSTREAM


def helpers():
    # forkgen: layer-clear-losses-skip-empty
    #: Keras's tracked containers, each with the `clear` that does nothing to an empty one.
    _CLEAR_LOSSES_EMPTY_NOOPS = {
        tracking.TrackedList: tracking.TrackedList.clear,
        tracking.TrackedSet: tracking.TrackedSet.clear,
    }

    def _clear_losses_empty_noop(container):
        """Whether `container.clear()` does nothing when `container` is empty:
    exactly a `list` or a `set` (whose `clear` cannot be replaced, nor set on an
    instance), or one of `_CLEAR_LOSSES_EMPTY_NOOPS` whose class still has that
    `clear` and whose instance has none of its own."""
        cls = type(container)
        if cls is list or cls is set:
            return True
        return (
            cls in _CLEAR_LOSSES_EMPTY_NOOPS
            and cls.clear is _CLEAR_LOSSES_EMPTY_NOOPS[cls]
            and "clear" not in vars(container)
        )
