"""`forkgen report`'s static verdicts against the installed patched Keras's own (nox -s smoke).

The report parses the installed `keras/src` tree; the patched `Layer.__init__` decides
eligibility from `inspect.signature(self.call)`. For every public layer that can be built
without arguments, both must agree: `layer(x)` fast exactly when `_call_spec_fast_plan` is
set, and the extension's arities exactly those of `_call_spec_fast_bindings`.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

keras = pytest.importorskip("keras")

from forkgen import report  # noqa: E402 - installed by the smoke session: an ImportError must fail, not skip

#: Fewer layers built than this means the check is not checking much (3.15.1 builds 85).
MIN_CHECKED = 60
#: Constructor arguments of a few layers that need some, so that the check also meets
#: layers whose `layer(x)` is slow (a second required tensor) and several arities.
ARGUMENTS: dict[str, dict[str, Any]] = {
    "MultiHeadAttention": {"num_heads": 2, "key_dim": 2},
    "GroupQueryAttention": {"head_dim": 2, "num_query_heads": 2, "num_key_value_heads": 1},
    "LSTMCell": {"units": 2},
    "GRUCell": {"units": 2},
    "SimpleRNNCell": {"units": 2},
    "LSTM": {"units": 2},
    "GRU": {"units": 2},
    "Dense": {"units": 2},
    "EinsumDense": {"equation": "ab,bc->ac", "output_shape": 2},
    "Conv2D": {"filters": 2, "kernel_size": 3},
    "Embedding": {"input_dim": 3, "output_dim": 2},
    "Dropout": {"rate": 0.5},
    "Reshape": {"target_shape": (2,)},
    "Lambda": {"function": abs},
}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    site_packages = Path(keras.__file__).resolve().parents[1]
    result: dict[str, Any] = report.to_json(report.report(site_packages))
    return result


def public_layers() -> list[tuple[str, type[Any]]]:
    """Every layer class `keras.layers` exports, and the two model classes (`**kwargs` in 3.15)."""
    layers = [
        (f"layers.{name}", obj)
        for name, obj in sorted(vars(keras.layers).items())
        if inspect.isclass(obj) and issubclass(obj, keras.layers.Layer) and obj is not keras.layers.Layer
    ]
    return [*layers, ("Sequential", keras.Sequential), ("Model", keras.Model)]


def test_report_agrees_with_the_installed_fast_path(document: dict[str, Any]) -> None:
    rows = {f"{row['module']}.{row['class']}": row for row in document["layers"]}
    extension = document["patched"]["extension"]
    checked: list[str] = []
    failures: list[str] = []
    seen: set[tuple[bool, tuple[int, ...]]] = set()
    for name, cls in public_layers():
        try:
            layer = cls(**ARGUMENTS.get(cls.__name__, {}))
        except Exception:  # noqa: BLE001 - a layer that needs arguments is not checked
            continue
        key = f"{cls.__module__}.{cls.__qualname__}"
        row = rows.get(key)
        if row is None:
            failures.append(f"keras.{name} ({key}) is not in the report")
            continue
        checked.append(name)
        runtime_fast = layer._call_spec_fast_plan is not None
        static_fast = row["shapes"]["layer(x)"]["fast"]
        if runtime_fast != static_fast:
            reason = row["shapes"]["layer(x)"]["reason"]
            failures.append(
                f"{key} {row['signature']}: layer(x) fast at run time {runtime_fast}, in the report {static_fast} ({reason})"
            )
        if not hasattr(layer, "_call_spec_fast_bindings"):
            if extension:
                failures.append(f"{key}: no _call_spec_fast_bindings, but the report says the extension is in the tree")
            continue
        bindings = layer._call_spec_fast_bindings
        for field in ("arities", "training_arities"):
            runtime = sorted(getattr(bindings, field)) if bindings is not None else []
            static = row[field] or []
            if runtime != static:
                failures.append(f"{key} {row['signature']}: {field} at run time {runtime}, in the report {static}")
        seen.add((runtime_fast, tuple(sorted(bindings.arities)) if bindings is not None else ()))
    print(f"forkgen report cross-check: {len(checked)} public layers checked against keras {keras.__version__}")
    assert not failures, "\n".join(failures)
    assert len(checked) >= MIN_CHECKED, f"only {len(checked)} layers could be built and checked: {checked}"
    if extension:  # both verdicts of `layer(x)` met, and arities beyond 1
        assert {fast for fast, _ in seen} == {True, False}, seen
        assert any(len(arities) > 1 for _, arities in seen), seen


def test_extension_presence_matches_the_installed_layer_class(document: dict[str, Any]) -> None:
    dense = keras.layers.Dense(2)
    assert document["patched"]["base"] is True
    assert document["patched"]["extension"] is hasattr(dense, "_call_spec_fast_bindings")
