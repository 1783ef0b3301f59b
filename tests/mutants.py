"""Prove the equivalence suite can fail: build forks with one-line breaks in the inserted code.

Run by `nox -s mutants` (not part of CI: it builds one wheel per mutant). For each
mutant, a copy of this project with one line of the template changed builds a wheel,
which is installed over the current environment's Keras; the equivalence suite must
then fail. Prints which test caught each mutant; exits 1 if any survived.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMON = "codemods/callspec_fast_path/templates/callspec_common.py"
V3_V4 = "codemods/callspec_fast_path/templates/callspec_v3.py"  # the rule of the pinned release's variant (V4)
BOUND = "codemods/callspec_fast_path/templates/callspec_bound_common.py"  # the extension
BOUND_V4 = "codemods/callspec_fast_path/templates/callspec_bound_v4.py"
DTYPES = "codemods/dtype_fast_paths/inserted.py"
RESULT_TYPE = "codemods/memoised_result_type/inserted.py"
TORCH_DEVICE = "codemods/torch_convert_to_tensor_device/inserted.py"
ERROR_INFO = "codemods/operation_call_error_info/inserted.py"
TORCH_TREE = "codemods/torch_tree_leaf_shortcut/inserted.py"
TRAINER_BATCH = "codemods/torch_trainer_batch_size/inserted.py"
NODE_TYPE = "codemods/torch_tree_node_type_fast_path/inserted.py"
CONV_SINGLE_COPY = "codemods/torch_conv_single_copy/inserted.py"
TRAINING_ONLY = "codemods/layer_call_training_only_conversion/inserted.py"
FLAT_CONVERSION = "codemods/layer_call_flat_conversion/inserted.py"
GLOBAL_STATE = "codemods/global_state_lookup_fast_path/inserted.py"
SYMBOLIC_BUILD = "codemods/trainer_symbolic_build_skip/inserted.py"
FUNCTIONAL_GRAPH = "codemods/functional_graph_fast_paths/inserted.py"
MAX_POOL_VIEW = "codemods/torch_max_pool_channels_last/inserted.py"
NOOP_MOVES = "codemods/torch_convert_to_tensor_noop_moves/inserted.py"
VARIABLE_VALUE = "codemods/torch_variable_value_fast_path/inserted.py"
FLAT_TREE = "codemods/torch_tree_flat_fast_paths/inserted.py"

#: (name, template file, the lines to change, their replacement)
MUTANTS = [
    (
        "share the plan's argument_names between calls",
        COMMON,
        "        self.argument_names = list(plan.argument_names)\n",
        "        self.argument_names = plan.argument_names\n",
    ),
    (
        "drop the tensor check from the guard",
        COMMON,
        "            and is_backend_tensor_or_symbolic(args[0])\n",
        "            and args[0] is not None\n",
    ),
    (
        "arguments_dict aliases user_arguments_dict",
        COMMON,
        "        arguments_dict = {name: first_arg}\n",
        "        arguments_dict = self.user_arguments_dict\n",
    ),
    (
        "eager always True",
        COMMON,
        "        self.eager = not isinstance(first_arg, KerasTensor)\n",
        "        self.eager = True\n",
    ),
    (
        "tensor defaults count as plain",
        V3_V4,
        "        if is_backend_tensor_or_symbolic(value):\n            return False\n",
        "        if False:\n            return False\n",
    ),
    (
        "positional-only training allowed",
        COMMON,
        "            and parameter.kind is inspect.Parameter.POSITIONAL_ONLY\n",
        "            and parameter.kind is None\n",
    ),
    # The extension (v2, CallSpec._fast_bound): each a one-line break the field matrix or
    # the models catch.
    (
        "extension: the **kwargs dict is the call's kwargs dict",
        BOUND,
        "                    extra = {}\n",
        "                    extra = kwargs\n",
    ),
    (
        "extension: keyword-bound arguments in kwargs order, not signature order",
        BOUND,
        "        self.user_arguments_dict = user_arguments\n",
        "        self.user_arguments_dict = {**{n: user_arguments[n] for n in kwargs if n in user_arguments},"
        " **user_arguments}\n",
    ),
    (
        "extension (V4): popped call-context arguments kept last in user_arguments_dict",
        BOUND_V4,
        "    return {**popped, **user_arguments}\n",
        "    return {**user_arguments, **popped}\n",
    ),
    (
        "extension: call-context arguments call() does not take are not popped from kwargs",
        BOUND,
        "            popped = {name: kwargs.pop(name) for name in popped_names}\n",
        "            popped = {name: kwargs[name] for name in popped_names}\n",
    ),
    (
        "extension (V4): call-context arguments popped even when call() takes them",
        BOUND_V4,
        "        if name in kwargs and name not in bindings.parameter_names\n",
        "        if name in kwargs\n",
    ),
    (
        "extension (V4): training popped even when it is no longer a call-context argument",
        BOUND_V4,
        "        for name in layer._call_context_args\n",
        '        for name in {"training"} | set(layer._call_context_args)\n',
    ),
    (
        "extension: an unbound *args is [] instead of ()",
        BOUND,
        "                    value = ()\n",
        "                    value = []\n",
    ),
    (
        "extension: an unbound **kwargs is one {} shared by every call",
        BOUND,
        "                value = {}\n",
        "                value = _callspec_fast_bindings.__dict__\n",
    ),
    (
        "extension: an argument passed positionally and as a keyword binds",
        BOUND,
        "                    return None  # also passed as a keyword\n",
        "                    pass  # also passed as a keyword\n",
    ),
    (
        "extension: a missing required argument binds",
        BOUND,
        "                    return None  # a required argument is missing\n",
        "                    value = default  # a required argument is missing\n",
    ),
    (
        "extension: too many positional arguments bind (the extra one dropped)",
        BOUND,
        "        if count > positional_count and bindings.var_positional is None:\n",
        "        if count > positional_count + 1 and bindings.var_positional is None:\n",
    ),
    (
        "extension: eager ignores nested tensor arguments",
        BOUND,
        "                nested_names.append(name)\n                eager = False\n",
        "                nested_names.append(name)\n                eager = eager\n",
    ),
    (
        "extension: the tensor class cache records every class as not symbolic",
        BOUND,
        "                tensor_types[value.__class__] = symbolic\n",
        "                tensor_types[value.__class__] = False\n",
    ),
    (
        "extension (V4): a nested value mixing tensors and non-tensors is plain",
        BOUND_V4,
        "        if any(is_backend_tensor_or_symbolic(x) for x in flat_values):\n            return None\n",
        "        if any(is_backend_tensor_or_symbolic(x) for x in flat_values):\n            return False\n",
    ),
    (
        "extension: lists are plain values",
        BOUND,
        "_CALLSPEC_FAST_PLAIN_TYPES = (bool, int, float, str)\n",
        "_CALLSPEC_FAST_PLAIN_TYPES = (bool, int, float, str, list)\n",
    ),
    (
        "extension: first_arg is the first positional argument",
        BOUND,
        "        self.first_arg = arguments[bindings.first_name]\n",
        "        self.first_arg = args[0] if args else arguments[bindings.first_name]\n",
    ),
    # The backports: a one-line break of each patch's inserted code.
    (
        "dtype-fast-paths: the fast path accepts str subclasses",
        DTYPES,
        "    if type(dtype) is str and dtype in dtypes.ALLOWED_DTYPES_SET:  # forkgen: dtype-fast-paths\n",
        "    if isinstance(dtype, str) and dtype in dtypes.ALLOWED_DTYPES_SET:  # forkgen: dtype-fast-paths\n",
    ),
    (
        "memoised-result-type: the memo key ignores floatx",
        RESULT_TYPE,
        "        key = [config.floatx()]\n",
        '        key = ["float32"]\n',
    ),
    (
        "torch-convert-to-tensor-device: the moved tensor is detached",
        TORCH_DEVICE,
        "    UPSTREAM\n",
        "    UPSTREAM\n    x = x.detach()\n",
    ),
    (
        "operation-call-error-info: the arguments described are those of call(), not of the function called",
        ERROR_INFO,
        "            e, call_fn, args, kwargs, object_name=OBJECT_NAME\n",
        "            e, self.call, args, kwargs, object_name=OBJECT_NAME\n",
    ),
    (
        "operation-call-error-info: a falsy flag no longer counts as described",
        ERROR_INFO,
        '    if hasattr(e, "_keras_call_info_injected"):\n',
        '    if getattr(e, "_keras_call_info_injected", False):\n',
    ),
    (
        "torch-tree-leaf-shortcut: tuples are handed back unrebuilt, as nightly's rewrite does",
        TORCH_TREE,
        "    if _tree_is_leaf(structure):\n",
        "    if _tree_is_leaf(structure) or type(structure) is tuple:\n",
    ),
    (
        "torch-tree-leaf-shortcut: dict-like nodes (OrderedDict, TrackedDict) count as leaves",
        TORCH_TREE,
        "    if _tree_is_leaf(structure):\n",
        "    if _tree_is_leaf(structure, is_leaf=lambda x: isinstance(x, dict)):\n",
    ),
    (
        "torch-trainer-batch-size: the guard forgets tensor types registered as tree nodes",
        TRAINER_BATCH,
        "            if type(x) is torch.Tensor and not tree.is_nested(x)\n",
        "            if type(x) is torch.Tensor\n",
    ),
    (
        "torch-trainer-batch-size: isinstance (reads a proxy's __class__) instead of the exact type",
        TRAINER_BATCH,
        "            if type(x) is torch.Tensor and not tree.is_nested(x)\n",
        "            if isinstance(x, torch.Tensor) and not tree.is_nested(x)\n",
    ),
    (
        "torch-tree-node-type-fast-path: the node type read from __class__ (a mock's or proxy's claim)",
        NODE_TYPE,
        "        node_type = type(structure)\n",
        "        node_type = structure.__class__\n",
    ),
    (
        "torch-tree-node-type-fast-path: namedtuples and tuple subclasses take the fast path too",
        NODE_TYPE,
        "        if not issubclass(node_type, tuple):\n",
        "        if True:\n",
    ),
    (
        "torch-conv-single-copy: conv gets the caller's memory while autograd records",
        CONV_SINGLE_COPY,
        "            if dense and not torch.is_grad_enabled():\n",
        "            if dense:\n",
    ),
    (
        "torch-conv-single-copy: one-channel inputs take the single copy",
        CONV_SINGLE_COPY,
        "        if not view.is_contiguous() and sizes[1] != 1 and any(size != 1 for size in sizes[2:]):\n",
        "        if not view.is_contiguous() and any(size != 1 for size in sizes[2:]):\n",
    ),
    (
        "torch-conv-single-copy: any stride of a size-1 axis counts as dense",
        CONV_SINGLE_COPY,
        "                dense = dense and stride == expected\n",
        "                dense = dense and (stride == expected or size == 1)\n",
    ),
    (
        "layer-call-flat-conversion: a None kwarg is not passed to maybe_convert",
        FLAT_CONVERSION,
        "            if value is None and not none_visited:\n",
        "            if value is None:\n",
    ),
    (
        "copy the kwargs of every unconverted call (#23296's `elif kwargs:`)",
        TRAINING_ONLY,
        "    elif kwargs and self._convert_input_args:  # forkgen: layer-call-training-only-conversion\n",
        "    elif kwargs:  # forkgen: layer-call-training-only-conversion\n",
    ),
    (
        "global-state-lookup-fast-path: the names a threading.local answers itself are read from its dict",
        GLOBAL_STATE,
        "    if type(tracker) is _forkgen_local_type and type(name) is str and name not in _forkgen_local_names:\n",
        "    if type(tracker) is _forkgen_local_type and type(name) is str:\n",
    ),
    (
        "global-state-lookup-fast-path: a missing name answers the default (set_to_default then stores nothing)",
        GLOBAL_STATE,
        "        attr = tracker.__dict__.get(name)\n",
        "        attr = tracker.__dict__.get(name, default)\n",
    ),
    (
        "trainer-symbolic-build-skip: the held ParameterDict's values compared by key only, not identity",
        SYMBOLIC_BUILD,
        "        if held_key != key or key_order != key or held_value is not value:\n",
        "        if held_key != key or key_order != key:\n",
    ),
    (
        "trainer-symbolic-build-skip: a _track_variables override no longer stops the skip",
        SYMBOLIC_BUILD,
        '    if "_track_variables" in state or _forkgen_defining_class(cls, "_track_variables") is not owner:\n',
        '    if "_track_variables" in state:\n',
    ),
    (
        "functional-graph-fast-paths: fill_in's fast path also taken with keyword arguments (they are dropped)",
        FUNCTIONAL_GRAPH,
        "        and not self.kwargs\n",
        "",
    ),
    (
        "functional-graph-fast-paths: _standardize_inputs' fast path takes a list subclass the tree calls a leaf",
        FUNCTIONAL_GRAPH,
        "        and not isinstance(inputs, (list, dict))\n",
        "        and not isinstance(inputs, dict)\n",
    ),
    (
        "torch-max-pool-channels-last: the output made contiguous with .contiguous() (keeps a 1x1 output's strides)",
        MAX_POOL_VIEW,
        "        outputs = outputs.clone(memory_format=torch.contiguous_format)\n",
        "        outputs = outputs.contiguous()\n",
    ),
    (
        "torch-max-pool-channels-last: the view also pooled while autograd records",
        MAX_POOL_VIEW,
        "        or (inputs.requires_grad and torch.is_grad_enabled())\n",
        "",
    ),
    (
        "torch-max-pool-channels-last: a view that is contiguous already (one channel) pooled and re-laid out too",
        MAX_POOL_VIEW,
        "    if view.is_contiguous():\n        return None\n",
        "",
    ),
    (
        "torch-max-pool-channels-last: bfloat16 pooled in place too (its kernel writes another NaN)",
        MAX_POOL_VIEW,
        "        or inputs.dtype not in (torch.float32, torch.float64, torch.float16)\n",
        "        or inputs.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16)\n",
    ),
    (
        "memoised-result-type: the memo used while torch.compile traces (version 1)",
        RESULT_TYPE,
        '        if torch is not None and getattr(getattr(torch, "compiler", None), "is_compiling", bool)():\n',
        "        if False:\n",
    ),
    (
        "torch-convert-to-tensor-noop-moves: a device's index ignored (\"cpu:0\" taken for \"cpu\", no copy)",
        NOOP_MOVES,
        "        parsed = torch.device(device)\n",
        "        parsed = torch.device(device.split(\":\")[0])\n",
    ),
    (
        "torch-convert-to-tensor-noop-moves: the cast skipped under a torch-function mode too",
        NOOP_MOVES,
        "        or torch._C._is_torch_function_mode_enabled()\n        or x.dtype is not _forkgen_dtype\n",
        "        or x.dtype is not _forkgen_dtype\n",
    ),
    (
        "torch-variable-value-fast-path: the autocast scope ignored (an autocast variable returned uncast)",
        VARIABLE_VALUE,
        "            if fast_state.get(\"stateless_scope\") is None and (\n"
        "                not self._autocast or fast_state.get(\"autocast_scope\") is None\n"
        "            ):\n",
        "            if fast_state.get(\"stateless_scope\") is None:\n",
    ),
    (
        "torch-tree-flat-fast-paths: flatten takes namedtuples and tuple subclasses for leaves",
        FLAT_TREE,
        "            if issubclass(item_type, tuple) or item_type in nodes:\n",
        "            if item_type in nodes:\n",
    ),
    (
        "torch-tree-flat-fast-paths: map_structure sorts a dict's keys (torch keeps insertion order)",
        FLAT_TREE,
        "            keys = list(structure.keys()) if kind is dict else None\n",
        "            keys = sorted(structure.keys()) if kind is dict else None\n",
    ),
]



def declared_mutants() -> list[tuple[str, str, str, str]]:
    """The mutants the series' packages declare (`MUTANTS` of each package's `cases` module), as
    (name, template file, old, new), in series order, each name prefixed with its patch's."""
    import importlib

    from codemods.patchlib import examples
    from codemods.series import SERIES_PACKAGES

    found = []
    for package in SERIES_PACKAGES:
        patch = importlib.import_module(package).PATCH
        found += [(f"{patch.name}: {mutant.description}", f"{package.replace('.', '/')}/{mutant.file}", mutant.old, mutant.new)
                  for mutant in examples(package)[1]]
    return found


MUTANTS += declared_mutants()

#: pytest-xdist workers for each mutant's equivalence run (FORKGEN_PYTEST_WORKERS, default 2; 0: none).
WORKERS = [] if os.environ.get("FORKGEN_PYTEST_WORKERS", "2") == "0" else ["-n", os.environ.get("FORKGEN_PYTEST_WORKERS", "2")]


def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, text=True, capture_output=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def build_mutant(index: int, template_path: str, old: str, new: str, work: Path, release: list[str]) -> Path:
    copy = work / f"project-{index}"
    for name in ("forkgen", "codemods", "patched_keras/overlay"):
        shutil.copytree(ROOT / name, copy / name)
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    template = copy / template_path
    text = template.read_text()
    assert text.count(old) == 1, f"mutant does not apply: {old!r}"
    template.write_text(text.replace(old, new))
    result = run(
        [sys.executable, "-m", "forkgen", "build", *release, "--out-dir", str(work / f"dist-{index}"), "--local-label", f"mutant.{index}"],
        cwd=copy, env={**os.environ, "PYTHONPATH": str(copy)},
    )
    if result.returncode != 0:
        raise SystemExit(f"building mutant {index} failed:\n{result.stderr[-2000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """`python tests/mutants.py [--distribution D] [--version V] [SUBSTRING ...]`: every mutant,
    or those whose name holds one of the substrings (numbered as in the full list), built on the
    pinned release or on the one named (e.g. `--distribution keras-nightly`: its newest)."""
    release: list[str] = []
    while argv and argv[0] in ("--distribution", "--version"):
        release += argv[:2]
        argv = argv[2:]
    selected = [(index, mutant) for index, mutant in enumerate(MUTANTS, start=1)
                if not argv or any(part in mutant[0] for part in argv)]
    if not selected:
        raise SystemExit(f"no mutant's name holds any of {argv}")
    survivors = []
    env = {k: v for k, v in os.environ.items() if k != "FORKGEN_WHEEL"}
    if "FORKGEN_UPSTREAM_SRC" not in env:  # the equivalence tests' oracle: the pinned release, unpatched
        fetched = run([sys.executable, "-m", "forkgen", "fetch", *release], cwd=ROOT)
        if fetched.returncode != 0:
            raise SystemExit(f"forkgen fetch failed:\n{fetched.stderr[-2000:]}")
        env["FORKGEN_UPSTREAM_SRC"] = fetched.stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for index, (name, template_path, old, new) in selected:
            wheel = build_mutant(index, template_path, old, new, work, release)
            # keras and keras-nightly both own keras/: the one installed goes first.
            run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "keras", "keras-nightly"])
            installed = run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", str(wheel)])
            if installed.returncode != 0:
                raise SystemExit(installed.stderr)
            tests = run(
                [sys.executable, "-m", "pytest", "tests/equivalence", "-q", "-x", "-p", "no:cacheprovider", *WORKERS,
                 "-W", "ignore::UserWarning", "-W", "ignore::DeprecationWarning"],
                # No FORKGEN_WHEEL: a mutant is built from other templates on purpose, which the
                # fail-closed gate (tests/support/gate.py) would refuse before any test ran.
                cwd=ROOT, env=env,
            )
            failed = re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", tests.stdout, flags=re.MULTILINE)
            caught = tests.returncode != 0 and failed
            print(f"mutant {index}: {name}: " + (f"caught by {failed[0]}" if caught else "SURVIVED"), flush=True)
            if not caught:
                print("\n".join(tests.stdout.splitlines()[-15:]), flush=True)
            if not caught:
                survivors.append(name)
    print(f"{len(selected) - len(survivors)} of {len(selected)} mutants caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
