"""Synthetic modules and source trees shaped like Keras's, written for these tests.

`LAYER_V4` has the shape of `keras/src/layers/layer.py` in Keras 3.10-3.15.1
(CallSpec variant V4) reduced to what the codemods anchor on, and it runs
against `tests.support.fake_backend`, so the patched result can be executed.
No Keras code is copied here: the statements are those the CallSpec contract
in docs/keras-releases.md describes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import textwrap
import types
from pathlib import Path

from codemods.engine import Patch, Sources

LAYER_V4 = textwrap.dedent(
    '''\
    """Synthetic stand-in for keras/src/layers/layer.py (CallSpec variant V4)."""

    import inspect

    from tests.support.fake_backend import KerasTensor
    from tests.support.fake_backend import backend
    from tests.support.fake_backend import tree


    class Layer:
        def __init__(self, *, name=None):
            self.name = name
            self._call_signature = inspect.signature(self.call)
            self.call_signature_parameters = [
                p.name for p in self._call_signature.parameters.values()
            ]
            self._call_context_args = {"training"}

        def call(self, *args, **kwargs):
            raise NotImplementedError

        def __call__(self, *args, **kwargs):
            original_args = args
            original_kwargs = kwargs
            def maybe_convert(x):
                return self.dtype_policy.convert_input(x, self.autocast, self.input_dtype)
            if (kwargs or len(args) != 1) and self._convert_input_args:
                args = tree.map_structure(maybe_convert, args)
                kwargs = tree.map_structure(maybe_convert, kwargs)
            if not self._allow_non_tensor_positional_args:
                for arg in tree.flatten(args):
                    if not is_backend_tensor_or_symbolic(arg, allow_none=True):
                        raise ValueError("Only input tensors may be passed as positional arguments.")

            # Caches info about `call()` signature, args, kwargs.
            call_spec = CallSpec(
                self._call_signature, self._call_context_args, args, kwargs
            )
            self.last_call_spec = call_spec
            self._assert_input_compatibility(call_spec.first_arg)
            if len(call_spec.tensor_arguments_dict) == 1:
                if "mask" in call_spec.argument_names and call_spec.arguments_dict["mask"] is None:
                    kwargs["mask"] = backend.get_keras_mask(call_spec.first_arg)
            elif len(call_spec.tensor_arguments_dict) > 1:
                for name, value in call_spec.tensor_arguments_dict.items():
                    if f"{name}_mask" in call_spec.argument_names and call_spec.arguments_dict[f"{name}_mask"] is None:
                        kwargs[f"{name}_mask"] = backend.get_keras_mask(value)
            if "mask" in kwargs and kwargs["mask"] is not None:
                previous_mask = kwargs["mask"]
            else:
                previous_mask = tree.map_structure(backend.get_keras_mask, call_spec.first_arg)
            self._called = True
            with self._open_name_scope():
                self._maybe_build(call_spec)
            outputs = self.call(*args, **kwargs)
            if self.supports_masking:
                self._set_mask_metadata(call_spec.first_arg, outputs, previous_mask)
            elif any(m is not None for m in tree.flatten(previous_mask)):
                self._masks_dropped = getattr(self, "_masks_dropped", 0) + 1
            if any_symbolic_tensors(original_args, original_kwargs):
                self._symbolic_calls = getattr(self, "_symbolic_calls", 0) + 1
            self.built = True
            return outputs

        def compute_output_spec(self, *args, **kwargs):
            call_spec = CallSpec(
                self._call_signature, self._call_context_args, args, kwargs
            )
            return call_spec.first_arg

        built = False

        def _maybe_build(self, call_spec):
            if self.built:
                return

        def _open_name_scope(self):
            return _NameScope()

        _allow_non_tensor_positional_args = False
        _input_spec = None
        supports_masking = False

        @property
        def input_spec(self):
            return self._input_spec

        def _assert_input_compatibility(self, arg_0):
            if self.input_spec is not None:
                raise ValueError("the synthetic layers check no input spec")

        def compute_mask(self, inputs, previous_mask):
            return previous_mask

        def _set_mask_metadata(self, inputs, outputs, previous_mask):
            flat_outputs = tree.flatten(outputs)
            mask_already_computed = all(backend.get_keras_mask(x) is not None for x in flat_outputs)
            if mask_already_computed:
                return
            output_masks = self.compute_mask(inputs, previous_mask)
            if output_masks is None:
                return
            for tensor, mask in zip(flat_outputs, tree.flatten(output_masks)):
                if backend.get_keras_mask(tensor) is None and mask is not None:
                    backend.set_keras_mask(tensor, mask)


    def is_backend_tensor_or_symbolic(x, allow_none=False):
        if allow_none and x is None:
            return True
        return backend.is_tensor(x) or isinstance(x, backend.KerasTensor)


    class CallSpec:
        def __init__(self, signature, call_context_args, args, kwargs):
            # Context args the call() does not accept are popped before binding.
            call_args = {
                context_arg: kwargs.pop(context_arg)
                for context_arg in call_context_args
                if context_arg in kwargs and context_arg not in signature.parameters
            }
            bound_args = signature.bind(*args, **kwargs)
            self.user_arguments_dict = {**call_args, **bound_args.arguments}
            bound_args.apply_defaults()
            arg_dict = {}
            arg_names = []
            tensor_arg_dict = {}
            tensor_arg_names = []
            nested_tensor_arg_names = []
            for name, value in bound_args.arguments.items():
                arg_dict[name] = value
                arg_names.append(name)
                if is_backend_tensor_or_symbolic(value):
                    tensor_arg_names.append(name)
                    tensor_arg_dict[name] = value
                elif tree.is_nested(value) and len(value) > 0:
                    flat_values = tree.flatten(value)
                    if all(
                        is_backend_tensor_or_symbolic(x, allow_none=True)
                        for x in flat_values
                    ):
                        tensor_arg_names.append(name)
                        tensor_arg_dict[name] = value
                        nested_tensor_arg_names.append(name)
                    elif any(is_backend_tensor_or_symbolic(x) for x in flat_values):
                        raise ValueError(f"mixed tensors and non-tensors: {name}={value}")
            self.arguments_dict = arg_dict
            self.argument_names = arg_names
            self.tensor_arguments_dict = tensor_arg_dict
            self.tensor_arguments_names = tensor_arg_names
            self.nested_tensor_argument_names = nested_tensor_arg_names
            self.first_arg = arg_dict[arg_names[0]]
            self.eager = all(
                backend.is_tensor(x) for x in self.tensor_arguments_dict.values()
            )


    def any_symbolic_tensors(args=None, kwargs=None):
        return any(isinstance(x, KerasTensor) for x in tree.flatten((args, kwargs)))


    class input_spec:
        # Stands for `from keras.src.layers import input_spec`.
        class InputSpec:
            pass


    def get_shapes_dict(call_spec):
        return {k: None for k in call_spec.tensor_arguments_dict}


    class _NameScope:
        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            return False


    class dtype_policies:
        # Stands for `from keras.src import dtype_policies`; never reached here.
        DTypePolicy = None


    # The synthetic layers never convert their inputs (the tests count the fake tree's calls).
    Layer._convert_input_args = False
    '''
)

_V4_BINDING = """\
        # Context args the call() does not accept are popped before binding.
        call_args = {
            context_arg: kwargs.pop(context_arg)
            for context_arg in call_context_args
            if context_arg in kwargs and context_arg not in signature.parameters
        }
        bound_args = signature.bind(*args, **kwargs)
        self.user_arguments_dict = {**call_args, **bound_args.arguments}
"""
_OLD_BINDING = """\
        # A `training` the call() does not take is dropped before binding.
        if "training" in kwargs and "training" not in signature.parameters:
            kwargs.pop("training")
            bound_args = signature.bind(*args, **kwargs)
        else:
            bound_args = signature.bind(*args, **kwargs)
        self.user_arguments_dict = {k: v for k, v in bound_args.arguments.items()}
"""
_ALL_OR_NONE = """\
                if all(
                    is_backend_tensor_or_symbolic(x, allow_none=True)
                    for x in flat_values
                ):
"""
_ALL = """\
                if all(is_backend_tensor_or_symbolic(x) for x in flat_values):
"""


def _older(variant: str) -> str:
    """LAYER_V4 turned into the shape of an older CallSpec variant (docs/keras-releases.md)."""
    source = LAYER_V4.replace("(CallSpec variant V4)", f"(CallSpec variant {variant})")
    source = replace_once(source, _V4_BINDING, _OLD_BINDING)
    source = replace_once(
        source,
        "def __init__(self, signature, call_context_args, args, kwargs):",
        "def __init__(self, signature, args, kwargs):",
    )
    construction = "self._call_signature, self._call_context_args, args, kwargs"
    assert source.count(construction) == 2
    source = source.replace(construction, "self._call_signature, args, kwargs")
    if variant in ("V1", "V2"):
        source = replace_once(source, _ALL_OR_NONE, _ALL)
    if variant == "V1":
        source = replace_once(source, "elif tree.is_nested(value) and len(value) > 0:", "elif tree.is_nested(value):")
    return source


VERSION_PY = textwrap.dedent(
    '''\
    # Synthetic stand-in for keras/src/version.py.
    __version__ = "3.15.1"


    def version():
        return __version__
    '''
)

PYPROJECT = textwrap.dedent(
    """\
    [build-system]
    requires = ["setuptools >=61.0"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "keras"
    description = "Synthetic Keras-shaped tree for forkgen's tests"
    readme = "README.md"
    requires-python = ">=3.11"
    dynamic = ["version"]

    [tool.setuptools.dynamic]
    version = {attr = "keras.src.version.__version__"}

    [tool.setuptools.package-dir]
    "" = "."
    "keras" = "keras/api"
    "keras.src" = "keras/src"
    """
)


def assert_applies_once(patch: Patch, path: str, before: str, after: str) -> None:
    """`patch` applied to `before` (the only file, at `path`) renders `after`; checked on `after`,
    it finds itself present and rewrites nothing."""
    sources = Sources(lambda p: before if p == path else None)
    patch.apply(sources)
    assert sources.rendered() == {path: after}
    again = Sources(lambda p: after if p == path else None)
    assert patch.check(again).present
    assert again.rendered() == {}


def replace_once(text: str, old: str, new: str) -> str:
    """`text` with its only occurrence of `old` replaced (fails if not exactly one)."""
    assert text.count(old) == 1, f"expected exactly one occurrence of:\n{old}"
    return text.replace(old, new)


def load_module(source: str, name: str = "synthetic_layer") -> types.ModuleType:
    """Execute `source` as a fresh module (the synthetic layer.py, patched or not)."""
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


#: A synthetic layer.py of each CallSpec variant.
LAYERS = {"V1": _older("V1"), "V2": _older("V2"), "V3": _older("V3"), "V4": LAYER_V4}


def patch_files() -> dict[str, str]:
    """Every synthetic file the series' patches anchor on outside layer.py, found by each
    package's name (a new patch's come with it, nothing to list): the `FILES` of its `cases`
    module, else of `tests/support/synthetic_<package>.py`."""
    import importlib

    from codemods.series import SERIES_PACKAGES

    files: dict[str, str] = {}
    for package in SERIES_PACKAGES:
        for name in (f"{package}.cases", f"tests.support.synthetic_{package.rsplit('.', 1)[1]}"):
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as missing:
                if missing.name != name:
                    raise
                continue
            if hasattr(module, "FILES"):
                files.update(module.FILES)
                break
    return files


def tree_files(layer: str = LAYER_V4, version: str = "3.15.1") -> dict[str, str]:
    """The files of a minimal, buildable Keras-shaped sdist tree (every patch of the series
    finds its anchors in it)."""
    return {
        **patch_files(),
        "pyproject.toml": PYPROJECT,
        "README.md": "Synthetic Keras-shaped tree.\n",
        "PKG-INFO": f"Metadata-Version: 2.1\nName: keras\nVersion: {version}\n",
        "keras/api/__init__.py": "from keras.src.version import __version__ as __version__\n",
        "keras/src/__init__.py": "",
        "keras/src/version.py": VERSION_PY.replace("3.15.1", version),
        "keras/src/layers/__init__.py": "",
        "keras/src/layers/layer.py": layer,
        # Modules the series' inserted code imports and no patch anchors in (the engine looks for
        # each module of the tree an inserted import names: `DeclaredPatch.check_imports`).
        "keras/src/backend/common/masking.py": "def get_keras_mask(x):\n    return getattr(x, \"_keras_mask\", None)\n",
        "keras/src/backend/common/stateless_scope.py": "def in_stateless_scope():\n    return False\n",
    }


def write_tree(root: Path, files: dict[str, str] | None = None) -> Path:
    """Write a Keras-shaped source tree at `root`; return `root`."""
    for relative, text in (files or tree_files()).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def sdist_bytes(files: dict[str, str] | None = None, top: str = "keras-3.15.1") -> bytes:
    """A .tar.gz sdist of the tree, the same bytes for the same files (the gzip header's time too)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for relative, text in sorted((files or tree_files()).items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"{top}/{relative}")
            info.size = len(data)
            info.mtime = 1_700_000_000
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
