"""`forkgen report`'s static verdicts against the installed patched Keras's own (nox -s smoke).

The report parses the installed `keras/src` tree; the patched `Layer.__init__` decides
eligibility from `inspect.signature(self.call)`. For every public layer that can be built
without arguments, both must agree: `layer(x)` fast exactly when `_call_spec_fast_plan` is
set or the extension's `CallSpec._fast_bound` builds its CallSpec, and the report's arities
(the n for which `layer(x1, ..., xn)` is fast) exactly those `_fast_bound` binds.
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
    result: dict[str, Any] = report.report(site_packages).to_json()
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
        bindings = getattr(layer, "_call_spec_fast_bindings", None)
        top = max(2, sum(p["kind"] in ("positional_only", "positional_or_keyword") for p in row["parameters"]))
        runtime_arities = bound_arities(layer, bindings, top)
        runtime_fast = layer._call_spec_fast_plan is not None or 1 in runtime_arities
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
        static = row["arities"] or []
        if runtime_arities != static:
            failures.append(f"{key} {row['signature']}: arities at run time {runtime_arities}, in the report {static}")
        seen.add((layer._call_spec_fast_plan is not None, tuple(runtime_arities)))
    print(f"forkgen report cross-check: {len(checked)} public layers checked against keras {keras.__version__}")
    assert not failures, "\n".join(failures)
    assert len(checked) >= MIN_CHECKED, f"only {len(checked)} layers could be built and checked: {checked}"
    if extension:  # layers with and without a plan for layer(x) met, and arities beyond 1
        assert {planned for planned, _ in seen} == {True, False}, seen
        assert any(len(arities) > 1 for _, arities in seen), seen


def bound_arities(layer: Any, bindings: Any, top: int) -> list[int]:
    """The n in 1..top for which the extension's `CallSpec._fast_bound` builds the CallSpec
    of `layer(x1, ..., xn)` (None: the call does not bind)."""
    if bindings is None:
        return []
    from keras.src.layers.layer import CallSpec

    x = keras.ops.ones((2, 2))
    return [n for n in range(1, top + 1) if CallSpec._fast_bound(bindings, layer, (x,) * n, {}) is not None]


def test_extension_presence_matches_the_installed_layer_class(document: dict[str, Any]) -> None:
    dense = keras.layers.Dense(2)
    assert document["patched"]["base"] is True
    assert document["patched"]["extension"] is hasattr(dense, "_call_spec_fast_bindings")
