"""What a patch may offer `forkgen report`: the interface of its call rules (`CallRules`).

`forkgen report` gives, for every `Layer` subclass of a tree, whether each call shape takes a
fast path, and why not. It knows no patch: it reads the rules through this interface, from the
one patch of the series that declares them (`Patch.call_rules`, found by
`codemods.series.call_rules`). The records exchanged (`Parameter`, the parameter kinds) are the
engine's; the rules themselves, and what a tree carries, are the declaring patch's.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

#: Parameter kinds, named as `inspect.Parameter` names them.
POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD, VAR_POSITIONAL, KEYWORD_ONLY, VAR_KEYWORD = (
    "positional_only", "positional_or_keyword", "var_positional", "keyword_only", "var_keyword"
)


@dataclass(frozen=True)
class Parameter:
    """One parameter of `call()` (without `self`) and how the patch classifies its default."""

    name: str
    kind: str
    default: str | None  # the default's source text; None when there is none
    plain: bool
    why: str | None = None  # why a default is not plain
    assumed: bool = False  # not a literal: assumed plain


class LayerAnalysis(Protocol):
    """What a `layer.py` text carries of the patches whose rules these are."""

    @property
    def variant(self) -> str:
        """The release's form of the code the rules are about (e.g. the CallSpec variant)."""

    @property
    def applied(self) -> Mapping[str, bool]:
        """Piece name -> whether the text carries it: each of `CallRules.base_pieces`, and
        "extension" (the patch that builds on them, as a whole)."""


class CallRules(Protocol):
    """The eligibility rules of a fast path for `Layer.__call__`, read from a `call()` signature
    written in source, and what a tree's `layer.py` carries of the code they describe."""

    @property
    def base_pieces(self) -> tuple[str, ...]:
        """The pieces of `LayerAnalysis.applied` that together are the base patch."""

    def analyze_source(self, source: str, path: str) -> LayerAnalysis:
        """What the `layer.py` text `source` (at `path` in the tree) carries; `AnchorDrift` when
        the code the rules are about is not as expected."""

    def call_parameters(self, fn: ast.FunctionDef, variant: str) -> list[Parameter]:
        """The parameters `inspect.signature(layer.call)` shows for the def `fn`, their defaults
        classified by `variant`'s rule."""

    def plan_reason(self, params: list[Parameter]) -> str | None:
        """Why `layer(x)` gets no plan of the base patch; None when it gets one."""

    def bindings_reason(self, params: list[Parameter]) -> str | None:
        """Why the layer gets no binding plan of the extension; None when it gets one (every
        call that binds is then fast)."""

    def unbound_reason(
        self, params: list[Parameter], n: int, keywords: frozenset[str] = frozenset()
    ) -> str | None:
        """Why `layer(x1, ..., xn, **keywords)` does not bind; None when it binds."""
