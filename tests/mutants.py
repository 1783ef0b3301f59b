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
TORCH_DEVICE = "codemods/torch_convert_to_tensor_device/inserted.py"
INPUT_SPEC = "codemods/input_spec_single_fast_path/inserted.py"
NAME_SCOPE = "codemods/layer_call_single_name_scope/inserted.py"
MASK_METADATA = "codemods/layer_call_single_tensor_bookkeeping/inserted.py"
SYMBOLIC_BUILD = "codemods/trainer_symbolic_build_skip/inserted.py"
ANY_SYMBOLIC = "codemods/any_symbolic_tensors_leaf_fast_path/inserted.py"

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
        "torch-convert-to-tensor-device: the moved tensor is detached",
        TORCH_DEVICE,
        "    UPSTREAM\n",
        "    UPSTREAM\n    x = x.detach()\n",
    ),
    (
        "input-spec-single-fast-path: min_ndim is off by one",
        INPUT_SPEC,
        "        if spec.min_ndim is not None and ndim < spec.min_ndim:\n",
        "        if spec.min_ndim is not None and ndim < spec.min_ndim - 1:\n",
    ),
    (
        "input-spec-single-fast-path: a None input passes a spec that is not optional",
        INPUT_SPEC,
        "        if x is None and spec.optional:\n",
        "        if x is None:\n",
    ),
    (
        "layer-call-single-name-scope: a layer that is not built builds outside its scope",
        NAME_SCOPE,
        '    if self.built and backend.backend() != "tensorflow":  # forkgen: layer-call-single-name-scope\n',
        '    if backend.backend() != "tensorflow":  # forkgen: layer-call-single-name-scope\n',
    ),
    (
        "a single output is never given its computed mask",
        MASK_METADATA,
        "        flat_outputs = [outputs]\n",
        "        flat_outputs = []\n",
    ),
    (
        "a single output without a mask returns early",
        MASK_METADATA,
        "        if get_keras_mask(outputs) is not None:\n",
        "        if get_keras_mask(outputs) is None:\n",
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
        "any-symbolic-tensors-leaf-fast-path: tuples taken for plain leaves (a KerasTensor in a tuple missed)",
        ANY_SYMBOLIC,
        "    _forkgen_any_symbolic_plain_types = (bool, int, float, str)\n",
        "    _forkgen_any_symbolic_plain_types = (bool, int, float, str, tuple)\n",
    ),
    (
        "any-symbolic-tensors-leaf-fast-path: every leaf class learnt as a certain leaf, tensor or not",
        ANY_SYMBOLIC,
        "            _forkgen_any_symbolic_leaf_types[type(x)] = not tree.is_nested(x) and bool(is_tensor(x))\n",
        "            _forkgen_any_symbolic_leaf_types[type(x)] = not tree.is_nested(x)\n",
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
