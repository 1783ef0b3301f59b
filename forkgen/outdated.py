"""`forkgen outdated`: is there a release newer than the pin on the configured index?

The answer is an exit code (0 current, `EXIT_OUTDATED` newer) so that a scheduled job can
branch on it without parsing; the text and JSON say which release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from forkgen import index
from forkgen.errors import EXIT_OK, EXIT_OUTDATED
from forkgen.model import Pin


@dataclass(frozen=True)
class Status:
    """The pin against the newest release of `distribution` the index serves."""

    pin: Pin
    #: The distribution compared with (the pinned one unless --distribution named another).
    distribution: str
    newest: str

    @property
    def outdated(self) -> bool:
        return Version(self.newest) > Version(self.pin.version)

    @property
    def cross_distribution(self) -> bool:
        """The pin is one distribution (keras) and the comparison is with another (keras-nightly)."""
        return self.distribution != self.pin.distribution

    @property
    def exit_code(self) -> int:
        """0 when the pin is current, `EXIT_OUTDATED` when the index serves a newer release."""
        return EXIT_OUTDATED if self.outdated else EXIT_OK

    def to_text(self) -> str:
        pinned = f"{self.pin.distribution} {self.pin.version}"
        newest = f"{self.distribution} {self.newest}"
        across = (
            f" (the pin is {self.pin.distribution} itself; compared with the newest {self.distribution})"
            if self.cross_distribution else ""
        )
        if self.outdated:
            return f"newer release: {newest} is newer than the pin {pinned}{across}"
        if Version(self.newest) == Version(self.pin.version) and not self.cross_distribution:
            return f"up to date: the pin {pinned} is the newest {self.distribution} on the index"
        return f"up to date: the pin {pinned} is newer than {newest}, the newest on the index{across}"

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "exit_code": self.exit_code,
            "pin": {"distribution": self.pin.distribution, "version": self.pin.version},
            "distribution": self.distribution,
            "newest": self.newest,
            "outdated": self.outdated,
            "cross_distribution": self.cross_distribution,
            "message": self.to_text(),
        }


def check(pin: Pin, distribution: str | None = None, config: index.IndexConfig | None = None) -> Status:
    """Compare `pin` with the newest release of `distribution` (default: the pinned one):
    pre-releases count only for keras-nightly (see `index.latest_version`)."""
    dist = distribution or pin.distribution
    return Status(pin=pin, distribution=dist, newest=index.latest_version(dist, config))
