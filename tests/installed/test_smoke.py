"""Smoke test of the built wheel, installed with torch in a fresh environment (nox -s smoke)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")

from keras.src.layers import layer as layer_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PIN = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["forkgen"]


@contextmanager
def count_slow() -> Iterator[list[Any]]:
    calls: list[Any] = []
    original = layer_module.CallSpec.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(args)
        original(self, *args, **kwargs)

    with mock.patch.object(layer_module.CallSpec, "__init__", counting):
        yield calls


def test_version_carries_the_local_label() -> None:
    from keras.src import forkgen_provenance

    # The series' label (it names the applied patches and their versions) unless one was given.
    label = os.environ.get("FORKGEN_LOCAL_LABEL") or forkgen_provenance.PROVENANCE["series_label"]
    assert keras.__version__ == f"{PIN['version']}+{label}"
    assert keras.backend.backend() == "torch"


def test_provenance_names_the_pinned_sdist() -> None:
    from keras.src import forkgen_provenance

    provenance = forkgen_provenance.PROVENANCE
    assert provenance["upstream"] == {**provenance["upstream"], "version": PIN["version"], "sdist_sha256": PIN["sha256"]}
    layer_py = Path(layer_module.__file__).read_bytes()
    assert provenance["patched_files"]["keras/src/layers/layer.py"] == hashlib.sha256(layer_py).hexdigest()


def test_dense_takes_the_fast_path() -> None:
    dense = keras.layers.Dense(4)
    assert dense._call_spec_fast_path is True
    x = torch.ones((2, 4))
    with count_slow() as slow:
        y = dense(x)
        dense(x)
    assert slow == []
    assert tuple(y.shape) == (2, 4)


def test_multi_input_layer_takes_the_extension() -> None:
    class Blend(keras.layers.Layer):
        def call(self, a, b, training=None):  # type: ignore[no-untyped-def]
            return a + 2 * b if training else a - b

    layer = Blend()
    # No plan for layer(x) (b is required), but bindings for layer(a, b): the flag is
    # True whenever some call of the layer may take a fast path.
    assert layer._call_spec_fast_plan is None
    assert layer._call_spec_fast_bindings is not None
    assert layer._call_spec_fast_path is True
    a, b = torch.ones((2, 3)), torch.full((2, 3), 2.0)
    with count_slow() as slow:
        trained = layer(a, b, training=True)
        inferred = layer(a, b)
    assert slow == []
    assert float(trained.sum()) == 30.0 and float(inferred.sum()) == -6.0
    layer._call_spec_fast_path = False
    with count_slow() as slow:
        assert torch.equal(layer(a, b, training=True), trained)
    assert len(slow) == 1


def test_star_args_layer_takes_the_extension_and_works() -> None:
    class Twice(keras.layers.Layer):
        def call(self, *args):  # type: ignore[no-untyped-def]
            return args[0] * 2

    layer = Twice()
    assert layer._call_spec_fast_plan is None and layer._call_spec_fast_path is True
    with count_slow() as slow:
        y = layer(torch.ones((2, 3)))
    assert slow == []
    assert float(y.sum()) == 12.0


def test_positional_only_training_is_ineligible_and_works() -> None:
    class Gate(keras.layers.Layer):
        def call(self, inputs, training=None, /):  # type: ignore[no-untyped-def]
            return inputs * 2

    layer = Gate()
    assert layer._call_spec_fast_path is False
    with count_slow() as slow:
        y = layer(torch.ones((2, 3)))
    assert len(slow) == 1
    assert float(y.sum()) == 12.0


MODEL_SCRIPT = textwrap.dedent(
    """
    import hashlib, numpy as np, keras
    from keras.src.layers import layer
    fast_calls = []
    for name in ("_fast", "_fast_bound"):
        original = getattr(layer.CallSpec, name).__func__
        setattr(layer.CallSpec, name, classmethod(lambda cls, *a, original=original: fast_calls.append(1) or original(cls, *a)))
    keras.utils.set_random_seed(7)
    inputs = keras.Input((8,))
    x = keras.layers.Dense(16, activation="relu")(inputs)
    x = keras.layers.LayerNormalization()(x)
    x = keras.layers.Dropout(0.5)(x)
    outputs = keras.layers.Dense(3)(x)
    model = keras.Model(inputs, outputs)
    data = np.random.default_rng(0).normal(size=(5, 8)).astype("float32")
    results = [model(data), model(data, training=False), model(data, training=True), keras.layers.Dense(2)(data)]
    arrays = [np.asarray(keras.ops.convert_to_numpy(r)) for r in results]
    print(hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest(), len(fast_calls))
    """
)


def run_model(kill_switch: str) -> tuple[str, int]:
    env = {**os.environ, "KERAS_BACKEND": "torch", "KERAS_CALLSPEC_FAST_PATH": kill_switch}
    result = subprocess.run([sys.executable, "-c", MODEL_SCRIPT], capture_output=True, text=True, env=env, check=True)
    digest, fast_calls = result.stdout.strip().splitlines()[-1].split()
    return digest, int(fast_calls)


def test_outputs_are_bit_identical_with_the_kill_switch() -> None:
    fast_digest, fast_calls = run_model("1")
    slow_digest, slow_calls = run_model("0")
    assert fast_calls > 0 and slow_calls == 0
    assert fast_digest == slow_digest


def test_kill_switch_disables_every_layer() -> None:
    script = (
        "import keras; print(keras.layers.Dense(2)._call_spec_fast_path, "
        "keras.layers.MultiHeadAttention(2, 4)._call_spec_fast_path)"
    )
    env = {**os.environ, "KERAS_CALLSPEC_FAST_PATH": "0"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.strip() == "False False"


def test_per_layer_switch_gives_identical_outputs() -> None:
    dense = keras.layers.Dense(3)
    x = torch.randn((4, 5))
    fast = dense(x)
    dense._call_spec_fast_path = False
    with count_slow() as slow:
        slow_out = dense(x)
    assert len(slow) == 1
    assert torch.equal(fast, slow_out)


def test_wheel_holds_upstream_files_plus_provenance(tmp_path: Path) -> None:
    wheel = Path(os.environ["FORKGEN_WHEEL"])
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest", str(tmp_path),
         f"{PIN['distribution']}=={PIN['version']}"],
        check=True, capture_output=True,
    )
    (upstream,) = tmp_path.glob("*.whl")

    def contents(path: Path) -> dict[str, bytes]:
        with zipfile.ZipFile(path) as archive:
            return {n: archive.read(n) for n in archive.namelist() if ".dist-info/" not in n}

    ours, theirs = contents(wheel), contents(upstream)
    # The provenance and the run-time switches (codemods/engine/switching.py) are the files added.
    assert sorted(set(ours) - set(theirs)) == ["keras/src/forkgen_provenance.py", "keras/src/forkgen_switches.py"]
    assert set(theirs) <= set(ours)
    changed = sorted(name for name in theirs if ours[name] != theirs[name])
    from keras.src import forkgen_provenance

    # Exactly the files the applied patches rewrote, and the version.
    patched = forkgen_provenance.PROVENANCE["patched_files"]
    assert "keras/src/forkgen_switches.py" in patched
    assert changed == sorted([*(f for f in patched if f in theirs), "keras/src/version.py"])
