"""The overlay's README, filled in at build time from the series the wheel carries.

`patched_keras/overlay/README.md` (committed) becomes the wheel's long description (`pip show`,
index pages). What changes with the series (the fork's version and label, how many patches it
carries and which) is not written there but generated: each `{{name}}` placeholder is replaced
from the wheel's provenance, so the description can never name another series' label or count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from forkgen.errors import UsageError

#: The file of the overlay that is filled in (the wheel's README, its long description).
README = "README.md"
PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}es" if noun.endswith("ch") else f"{n} {noun}s"


def values(provenance: Mapping[str, Any]) -> dict[str, str]:
    """What each placeholder stands for, from a wheel's provenance (forkgen.build.make_provenance)."""
    patches = list(provenance["patches"])
    applied = [p for p in patches if p["outcome"] == "applied"]
    aside = [p for p in patches if p["outcome"] != "applied"]
    fork_version = str(provenance["fork_version"])
    listed = "\n".join(f"- `{p['name']}` {p['version']} (origin: {p['origin']})" for p in applied)
    if aside:
        listed += "\n\nIn the series but not applied to this release: " + ", ".join(
            f"`{p['name']}` ({p['outcome']})" for p in aside) + "."
    return {
        "fork_version": fork_version,
        "label": fork_version.partition("+")[2],
        "upstream_version": str(provenance["upstream"]["version"]),
        "distribution": str(provenance["upstream"]["distribution"]),
        "applied_patches": _count(len(applied), "performance patch"),
        "patch_list": listed or "- (none)",
    }


def fill(text: str, provenance: Mapping[str, Any], where: str = README) -> str:
    """`text` with every `{{name}}` replaced; an unknown name is refused, never left in."""
    known = values(provenance)
    unknown = sorted({m.group(1) for m in PLACEHOLDER.finditer(text)} - known.keys())
    if unknown:
        raise UsageError(
            f"{where} in the overlay has unknown placeholders: {', '.join('{{' + u + '}}' for u in unknown)}",
            hint=f"the overlay's README may use {', '.join('{{' + k + '}}' for k in sorted(known))}",
        )
    return PLACEHOLDER.sub(lambda m: known[m.group(1)], text)
