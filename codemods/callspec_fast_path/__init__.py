"""Patch `callspec-fast-path`: `layer(x)` builds its CallSpec without `signature.bind`.

Four edits of `keras/src/layers/layer.py`: the eligibility plan precomputed in `Layer.__init__`
(its helpers before `class CallSpec`), the constructor `CallSpec._fast`, and the guard around the
construction in `Layer.__call__`. The inserted code differs per CallSpec variant (V1-V4): the
patch classifies the tree (`variants.classify`, its domain rule) and then runs the declaration of
that variant, whose pieces are cut from `templates/`. `callspec-training-fast-path` builds on it.
The pieces carry no marker: upstream never made this change, so their applied form is forkgen's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import libcst as cst

from codemods.callspec_fast_path import templates
from codemods.callspec_fast_path.source import CALL_RULES, EXTENSION
from codemods.callspec_fast_path.variants import VARIANTS, Variant, classify
from codemods.engine import (
    LAYER_PY,
    Analysis,
    Anchor,
    AnchorDrift,
    Check,
    DeclaredPatch,
    Details,
    Headers,
    Helper,
    InsertAfter,
    Sources,
    Wrap,
)

SIGNATURE = "self._call_signature = inspect.signature(self.call)"
#: Where each CallSpec patch puts its module-level helpers: right before the class.
CALLSPEC_CLASS = Anchor("", "class CallSpec: ___", reported=False)


class ByVariant(DeclaredPatch):
    """A CallSpec patch: the declaration of the tree's variant does the work (`of`); its outcome's
    detail names the variant."""

    files = (LAYER_PY,)
    switch = "KERAS_CALLSPEC_FAST_PATH"
    marked = False
    details = Details(apply="", present="", upstream="")
    variant: ClassVar[Variant | None] = None
    variants: ClassVar[dict[str, type[ByVariant]]]

    @classmethod
    def declare(cls, variant: Variant) -> dict[str, Any]:
        """The class attributes of `variant`'s declaration."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "variant" in cls.__dict__ or not hasattr(cls, "edits"):
            return
        cls.variants = {name: type(f"{cls.__name__}{name}", (cls,), {
            "variant": v, "codemod": cls.codemod, **cls.declare(v),
            "details": Details(apply=f"CallSpec variant {name}", present=f"CallSpec variant {name}", upstream=""),
        }) for name, v in VARIANTS.items()}

        class Command(cls.command):  # type: ignore[name-defined,misc]
            def transform_module_impl(self, tree: cst.Module) -> cst.Module:
                variant = cls.variants[classify(tree, LAYER_PY, tree.code).name]
                return variant.command(self.context, self._given).transform_module_impl(tree)

        Command.__name__ = Command.__qualname__ = cls.codemod
        cls.command = Command
        cls.codemods = (Command,)

    @classmethod
    def pieces(cls) -> dict[str, tuple[cst.BaseStatement, ...]]:
        raise NotImplementedError

    def variant_of(self, sources: Sources) -> Variant:
        """The tree's CallSpec variant (`classify`), or AnchorDrift."""
        return sources.memoised(
            "callspec:variant", lambda: classify(sources.module(LAYER_PY), LAYER_PY, sources.text(LAYER_PY) or ""))

    def of(self, sources: Sources) -> ByVariant:
        """The declaration of the tree's variant."""
        return self if self.variant is not None else self.variants[self.variant_of(sources).name]()

    def analyze(self, sources: Sources) -> Analysis:
        return super().analyze(sources) if self.variant is not None else self.of(sources).analyze(sources)

    def apply(self, sources: Sources) -> None:
        super().apply(sources) if self.variant is not None else self.of(sources).apply(sources)


class CallSpecFastPath(ByVariant):
    name = "callspec-fast-path"
    version = "2"
    headers = Headers(
        description=(
            "Layer.__call__ builds the CallSpec of layer(x) directly (CallSpec._fast) instead of through "
            "inspect.Signature.bind, apply_defaults and the classification loop, on layers whose call() "
            "signature makes that binding trivial (decided once, in Layer.__init__)."
        ),
        origin="ours",
        bug="https://github.com/keras-team/keras/issues/23271",
        forwarded="https://github.com/keras-team/keras/pull/23646",
        applied_upstream=None,
        last_update="2026-11-30",
    )
    codemod = "CallSpecFastPathCommand"
    # `forkgen report`'s rules: the eligibility of the code both CallSpec patches insert, and what
    # a tree carries of them; the extension's check is read through the series, not imported.
    call_rules = CALL_RULES
    tolerates = (EXTENSION,)
    edits = (
        # The plan's helpers right before `class CallSpec` (after every name they use is bound);
        # the extension's come between them and the class.
        Helper(CALLSPEC_CLASS, "helpers", before=True, blank_lines=0, keep_comments=True, anywhere=True),
        InsertAfter(Anchor("Layer.__init__", SIGNATURE, reported=False, name="call_signature"), "eligibility"),
        # After `__init__`, the only member CallSpec has in every release (`classify`).
        InsertAfter(Anchor("CallSpec", "def __init__(___): ___", reported=False), "fast"),
        # Only the construction in `__call__`: those in compute_output_spec and stateless_call keep binding.
        Wrap(Anchor("Layer.__call__", "call_spec = CallSpec(___)", reported=False, name="callspec_construction"),
             "guard", rebinds=("call_spec",)),
    )

    @classmethod
    def declare(cls, variant: Variant) -> dict[str, Any]:
        construction = f"call_spec = CallSpec({variant.construction})"
        guard = cls.edits[3]
        return {
            "edits": (*cls.edits[:3], Wrap(Anchor("Layer.__call__", construction, reported=False,
                                                  name="callspec_construction"), guard.piece, rebinds=guard.rebinds)),
            "relies_on": (
                Anchor("", "class Layer: ___", name="layer_class", description="class Layer"),
                Anchor("Layer", "def __call__(self, *args, **kwargs): ___", name="Layer.__call__", reported=False),
                Anchor("Layer.__init__", SIGNATURE, name="call_signature", description=f"{SIGNATURE} in Layer.__init__"),
                Anchor("Layer.__call__", construction, name="callspec_construction",
                       description="call_spec = CallSpec(...) in Layer.__call__"),
                Anchor("Layer.__call__", "CallSpec(___)", expression=True, name="callspec_construction", reported=False),
                Anchor("", "class CallSpec: ___", name="callspec_class", description=f"class CallSpec, variant {variant.name}"),
            ),
            "pieces": classmethod(lambda _: templates.base_pieces(variant.name)),
        }

    def check(self, sources: Sources) -> Check:
        # The variant goes into the wheel's provenance (`forkgen inspect`).
        return dataclasses.replace(super().check(sources), facts={"callspec_variant": self.variant_of(sources).name})

    def verify(self, sources: Sources, analysis: Analysis) -> None:
        # The plan's attributes and `_fast` must be new to unpatched code (forkgen never edits upstream's).
        todo = {o.edit.piece for f in analysis.files for o in f.todo}
        foreign(sources, analysis, "fast" in todo, "_fast", "fast_constructor")
        text = sources.text(LAYER_PY) or ""
        at = text.find("._call_spec_fast_")
        if at >= 0 and todo:
            line = text.count("\n", 0, at) + 1
            raise AnchorDrift(LAYER_PY, line, "eligibility", "no `_call_spec_fast_*` attribute in unpatched code",
                              f"one at line {line}")


def foreign(sources: Sources, analysis: Analysis, todo: bool, method: str, anchor: str) -> None:
    """Drift when `CallSpec.<method>` is there while the patch's piece is still to insert."""
    callspec = [s for s in analysis.files[0].module.body if isinstance(s, cst.ClassDef) and s.name.value == "CallSpec"]
    body = callspec[0].body.body if callspec and isinstance(callspec[0].body, cst.IndentedBlock) else ()
    if todo and any(isinstance(s, cst.FunctionDef) and s.name.value == method for s in body):
        raise AnchorDrift(LAYER_PY, 1, anchor, f"`CallSpec.{method}` as this forkgen version writes it", f"a different `{method}`")


PATCH = CallSpecFastPath()
CallSpecFastPathCommand = PATCH.command
