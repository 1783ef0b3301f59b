"""The anchor analysis: a corpus of upstream drifts that must be refused, and harmless ones."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from codemods.callspec_fast_path import PATCH
from codemods.callspec_fast_path.source import analyze_source, patch_source
from codemods.engine import LAYER_PY, AnchorDrift, Sources
from tests.support.synthetic import LAYER_V4, load_layer


@dataclass(frozen=True)
class Mutation:
    name: str
    old: str
    new: str
    count: int = 1

    def apply(self, source: str) -> str:
        assert source.count(self.old) == self.count, f"{self.name}: {self.old!r} not found {self.count}x"
        return source.replace(self.old, self.new)


SIG = "        self._call_signature = inspect.signature(self.call)\n"
CONSTRUCTION = (
    "        call_spec = CallSpec(\n"
    "            self._call_signature, self._call_context_args, args, kwargs\n"
    "        )\n"
    "        self.last_call_spec = call_spec\n"
)

# (mutation, anchor named in the diagnostic, line named in the diagnostic)
REFUSED = [
    (Mutation("call_signature removed", SIG, ""), "call_signature", 11),
    (Mutation("call_signature duplicated", SIG, SIG + SIG), "call_signature", 14),
    (Mutation("call_signature made conditional", SIG, "        if True:\n    " + SIG), "call_signature", 14),
    (
        Mutation(
            "call_signature moved into a helper",
            SIG,
            "        self._init_signature()\n\n    def _init_signature(self):\n" + SIG,
        ),
        "call_signature",
        16,
    ),
    (
        Mutation("call_signature of another function", SIG, SIG.replace("self.call)", "self.forward)")),
        "call_signature",
        11,  # the engine names the scope (def __init__) when an anchor is found 0 times
    ),
    (
        Mutation("call_signature reassigned elsewhere", "        self.last_call_spec = call_spec\n",
                 "        self.last_call_spec = call_spec\n        self._call_signature = None\n"),
        "call_signature",
        40,
    ),
    (Mutation("CallSpec renamed", "CallSpec", "CallSignatureSpec", count=4), "class CallSpec", 1),
    (Mutation("CallSpec defined twice", "\n\ndef get_shapes_dict", "\n\nclass CallSpec:\n    pass\n\n\ndef get_shapes_dict"), "class CallSpec", 205),
    (
        Mutation("a ninth attribute", "        self.first_arg = arg_dict[arg_names[0]]\n",
                 "        self.first_arg = arg_dict[arg_names[0]]\n        self.ninth = 9\n"),
        "CallSpec.__init__",
        190,
    ),
    (Mutation("an attribute dropped", "        self.tensor_arguments_names = tensor_arg_names\n", ""), "CallSpec.__init__", 152),
    (
        Mutation("a new __init__ parameter", "def __init__(self, signature, call_context_args, args, kwargs):",
                 "def __init__(self, signature, call_context_args, args, kwargs, strict):"),
        "CallSpec.__init__",
        152,
    ),
    (
        Mutation("the pre-3.10 constructor", "def __init__(self, signature, call_context_args, args, kwargs):",
                 "def __init__(self, signature, args, kwargs):"),
        "CallSpec.__init__",
        152,
    ),
    (
        Mutation("nested test without len()", "elif tree.is_nested(value) and len(value) > 0:", "elif tree.is_nested(value):"),
        "CallSpec.__init__",
        152,
    ),
    (
        Mutation("CallSpec built twice in __call__", CONSTRUCTION,
                 CONSTRUCTION + "        again = CallSpec(self._call_signature, self._call_context_args, args, kwargs)\n"),
        "callspec_construction",
        36,  # the first of the two
    ),
    (
        Mutation("CallSpec built with keyword arguments", "self._call_signature, self._call_context_args, args, kwargs\n        )\n        self.last",
                 "signature=self._call_signature, call_context_args=self._call_context_args, args=args, kwargs=kwargs\n        )\n        self.last"),
        "callspec_construction",
        22,
    ),
    (Mutation("CallSpec not built in __call__", CONSTRUCTION, "        call_spec = None\n"), "callspec_construction", 22),
    (
        Mutation("the tensor-check helper removed",
                 "def is_backend_tensor_or_symbolic(x, allow_none=False):\n    if allow_none and x is None:\n        return True\n"
                 "    return backend.is_tensor(x) or isinstance(x, backend.KerasTensor)\n", ""),
        "is_backend_tensor_or_symbolic",  # the engine's name check: each name, where the code using it goes
        147,
    ),
    (
        Mutation("the tensor-check helper without allow_none",
                 "def is_backend_tensor_or_symbolic(x, allow_none=False):\n    if allow_none and x is None:\n        return True\n",
                 "def is_backend_tensor_or_symbolic(x):\n"),
        "is_backend_tensor_or_symbolic",
        145,
    ),
    (Mutation("tree no longer imported", "from keras.src import tree\n", ""), "tree", 150),
    (Mutation("Layer renamed", "class Layer:", "class BaseLayer:"), "class Layer", 1),
    (Mutation("__call__ without **kwargs", "def __call__(self, *args, **kwargs):", "def __call__(self, *args):"), "Layer.__call__", 10),
]

HARMLESS = [
    Mutation("reformatted construction", CONSTRUCTION,
             "        call_spec = CallSpec(self._call_signature,\n                             self._call_context_args,\n"
             "                             args, kwargs)\n        self.last_call_spec = call_spec\n"),
    Mutation("comments added", SIG, "        # Where the signature comes from.\n" + SIG.rstrip("\n") + "  # noqa\n"),
    Mutation("lines shifted", "import inspect\n", "import inspect\n\n\n\n\nSOMETHING = 1\n"),
    Mutation("an extra Layer method", "    def call(self, *args, **kwargs):", "    def extra(self):\n        return 1\n\n    def call(self, *args, **kwargs):"),
    Mutation("an unrelated local renamed", "for arg in tree.flatten(args):\n                if not is_backend_tensor_or_symbolic(arg,",
             "for positional in tree.flatten(args):\n                if not is_backend_tensor_or_symbolic(positional,"),
    Mutation("a decorator elsewhere", "    def compute_output_spec(self", "    @staticmethod\n    def helper():\n        return 0\n\n    def compute_output_spec(self"),
    Mutation("CallSpec docstring", "class CallSpec:\n", 'class CallSpec:\n    """What a call was given."""\n\n'),
]


@pytest.mark.parametrize(("mutation", "anchor", "line"), REFUSED, ids=[m.name for m, _, _ in REFUSED])
def test_drift_is_refused_with_file_line_and_anchor(mutation: Mutation, anchor: str, line: int) -> None:
    source = mutation.apply(LAYER_V4)
    with pytest.raises(AnchorDrift) as caught:
        patch_source(source, "keras/src/layers/layer.py")
    error = caught.value
    assert (error.anchor, error.line) == (anchor, line), str(error)
    assert str(error).startswith(f"keras/src/layers/layer.py:{line}: anchor '{anchor}': expected ")


def test_refused_corpus_is_large_enough() -> None:
    assert len(REFUSED) >= 12 and len(HARMLESS) >= 6


@pytest.mark.parametrize("mutation", HARMLESS, ids=[m.name for m in HARMLESS])
def test_harmless_drift_still_applies(mutation: Mutation) -> None:
    source = mutation.apply(LAYER_V4)
    result = patch_source(source)
    assert result.changed and analyze_source(result.source).fully_applied
    module = load_layer(result.source)
    assert hasattr(module.CallSpec, "_fast")


def test_reports_every_anchor_with_its_line() -> None:
    analysis = analyze_source(LAYER_V4)
    assert analysis.variant == "V4"
    check = PATCH.check(Sources(lambda path: LAYER_V4 if path == LAYER_PY else None))
    assert [(a.name, a.line) for a in check.anchors] == [
        ("layer_class", 10),
        ("call_signature", 13),
        ("callspec_construction", 36),
        ("callspec_class", 151),
    ]
    assert not any(analysis.applied.values()) and not check.present


def test_syntax_error_is_drift() -> None:
    with pytest.raises(AnchorDrift) as caught:
        analyze_source("def broken(:\n")
    assert caught.value.anchor == "module"


@pytest.mark.parametrize("variant", ["V1", "V2", "V3", "V4"])
def test_every_variant_is_classified_and_patched(variant: str) -> None:
    from tests.support.synthetic import LAYERS

    source = LAYERS[variant]
    assert analyze_source(source).variant == variant
    result = patch_source(source)
    assert result.variant == variant and analyze_source(result.source).fully_applied
    assert patch_source(result.source).source == result.source  # idempotent
    # The construction of compute_output_spec is left as upstream wrote it.
    construction = "self._call_signature, self._call_context_args, args, kwargs" if variant == "V4" else "self._call_signature, args, kwargs"
    assert f"call_spec = CallSpec(\n            {construction}\n        )\n        return call_spec.first_arg" in result.source


def test_a_variant_with_a_changed_statement_names_the_closest_variant() -> None:
    from tests.support.synthetic import LAYERS

    source = LAYERS["V3"].replace(
        'if "training" in kwargs and "training" not in signature.parameters:', 'if "training" in kwargs:'
    )
    assert source != LAYERS["V3"]
    with pytest.raises(AnchorDrift) as caught:
        patch_source(source)
    assert "closest known variant" in caught.value.expected
