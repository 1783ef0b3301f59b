"""forkgen: carry a series of performance patches on top of upstream Keras, without a textual diff."""

from __future__ import annotations

__version__ = "0.2.0"
