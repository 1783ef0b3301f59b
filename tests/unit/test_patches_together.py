"""What no single patch's proof can show: a patch beside the others and in the series.

Each patch's own proof is in its package (`codemods/<patch>/cases.py`: its cases and its
behaviours, run by test_patch_cases.py). A patch's modules import only the engine and the patches
it `requires` (test_imports.py), so what needs the series (`codemods.series`: release ranges,
places, a re-run) or another patch's own check and apply (two patches on one file, in either or
in series order) is here, one section per patch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codemods import series
from codemods.callspec_fast_path import PATCH as CALLSPEC
from codemods.callspec_training_fast_path import PATCH as CALLSPEC_TRAINING
from codemods.engine import Outcome, Patch, Sources
from codemods.functional_graph_fast_paths import PATCH as FUNCTIONAL_GRAPH
from codemods.functional_graph_fast_paths import cases as functional_graph
from codemods.global_state_lookup_fast_path import PATCH as GLOBAL_STATE
from codemods.global_state_lookup_fast_path import cases as global_state
from codemods.layer_call_flat_conversion import PATCH as FLAT_CONVERSION
from codemods.layer_call_flat_conversion import cases as flat_conversion
from codemods.layer_call_training_only_conversion import PATCH as TRAINING_ONLY
from codemods.torch_conv_single_copy import PATCH as CONV
from codemods.torch_conv_single_copy import cases as conv
from codemods.torch_convert_to_tensor_device import PATCH as DEVICE
from codemods.torch_convert_to_tensor_noop_moves import PATCH as NOOP_MOVES
from codemods.torch_convert_to_tensor_noop_moves import cases as noop_moves
from codemods.torch_max_pool_channels_last import PATCH as MAX_POOL
from codemods.torch_max_pool_channels_last import cases as max_pool
from codemods.torch_tree_leaf_shortcut import PATCH as LEAF_SHORTCUT
from codemods.torch_tree_node_type_fast_path import PATCH as NODE_TYPE
from codemods.torch_tree_node_type_fast_path import cases as node_type
from codemods.torch_variable_value_fast_path import PATCH as VARIABLE_VALUE
from codemods.torch_variable_value_fast_path import cases as variable_value
from codemods.trainer_symbolic_build_skip import PATCH as SYMBOLIC_BUILD
from codemods.trainer_symbolic_build_skip import cases as symbolic_build
from tests.support.fake_backend import Tensor
from tests.support.synthetic import LAYER_V4, load_layer, patch_files

NN = "keras/src/backend/torch/nn.py"
CORE = "keras/src/backend/torch/core.py"
TORCHTREE = "keras/src/tree/torchtree_impl.py"
LAYER = "keras/src/layers/layer.py"


def on(path: str, text: str) -> Sources:
    """A tree of one file."""
    return Sources(lambda p: text if p == path else None)


def applied(sources: Sources, patches: Sequence[Patch]) -> Sources:
    """`patches` checked (applicable, not present) and applied in turn on `sources`."""
    for patch in patches:
        first = patch.check(sources)
        assert first.outcome is Outcome.APPLIED and not first.present, (patch.name, first)
        patch.apply(sources)
    return sources


# -- trainer-symbolic-build-skip --------------------------------------------------------------


def test_trainer_symbolic_build_skip_runs_in_the_series_and_older_releases_are_not_applicable() -> None:
    result = series.run(symbolic_build.files().get, [SYMBOLIC_BUILD], release="3.15.1")
    assert result.results[0].changed and result.unswitched_files[symbolic_build.TRAINER_PY] == symbolic_build.AFTER
    again = series.run(symbolic_build.files(symbolic_build.AFTER).get, [SYMBOLIC_BUILD], release="3.15.1")
    assert [r.outcome for r in again.results] == [Outcome.APPLIED] and not again.changed and again.files == {}
    for release in ("3.5.0", "3.4.1"):
        old = series.run(symbolic_build.files().get, [SYMBOLIC_BUILD], release=release)
        assert old.results[0].outcome is Outcome.NOT_APPLICABLE
        assert old.results[0].check.detail == "targets code Keras has since 3.6.0"


# -- torch-max-pool-channels-last beside torch-conv-single-copy on one nn.py -------------------


def test_the_synthetic_nn_py_takes_both_the_conv_and_the_max_pool_patch() -> None:
    # One synthetic nn.py for the patches of nn.py: max pool's extends the conv patch's, and
    # torch-flash-probe-compile-skip's cases add its probe below.
    assert patch_files()[NN].startswith(max_pool.BEFORE)
    patched = applied(Sources(lambda p: max_pool.FILES.get(p)), (CONV, MAX_POOL)).rendered()[NN]
    assert patched.count("# forkgen: torch-max-pool-channels-last") == 3
    assert patched.count("# forkgen: torch-conv-single-copy") == 2
    for patch in (CONV, MAX_POOL):
        assert patch.check(on(NN, patched)).present
    # The conv patch's own synthetic file still takes it (its max_pool is not this one's).
    assert CONV.check(on(NN, conv.NN_PY)).outcome is Outcome.APPLIED


# -- layer-call-flat-conversion with layer-call-training-only-conversion ----------------------


def test_flat_conversion_composes_with_training_only_conversion_both_ways() -> None:
    path = flat_conversion.LAYER
    src = on(path, flat_conversion.BEFORE.replace("tree = None\n", "tree = None\nfrom keras.src import dtype_policies\n"))
    TRAINING_ONLY.apply(src)
    first = src.text(path) or ""
    assert "kwargs_may_need_convert" in first
    src = on(path, first)
    FLAT_CONVERSION.apply(src)
    both = src.text(path) or ""
    assert "if flat_converted is None:" in both and "elif kwargs and self._convert_input_args:" in both
    assert both.index("def _layer_call_kwargs_may_need_convert") < both.index("_LAYER_CALL_FLAT_SCALARS = ")
    # Both patches recognise the result as theirs (a re-run of the series is a no-op).
    assert TRAINING_ONLY.check(on(path, both)).present
    result = FLAT_CONVERSION.check(on(path, both))
    assert result.present and result.anchors[0].description.startswith("a `kwargs_may_need_convert` gate")


# -- layer-call-training-only-conversion on the CallSpec patches' layer.py ---------------------

TRAINING_ONLY_MARK = "# forkgen: layer-call-training-only-conversion"


def test_training_only_conversion_anchors_in_layer_v4_with_and_without_the_callspec_patches() -> None:
    fresh = TRAINING_ONLY.check(on(LAYER, LAYER_V4))
    assert fresh.outcome is Outcome.APPLIED and not fresh.present
    assert [a.name for a in fresh.anchors] == ["original_kwargs = kwargs", "maybe_convert", "conversion gate",
                                              "dtype_policies"]
    sources = applied(on(LAYER, LAYER_V4), (CALLSPEC, CALLSPEC_TRAINING))
    assert not TRAINING_ONLY.check(sources).present
    TRAINING_ONLY.apply(sources)
    patched = sources.rendered()[LAYER]
    assert TRAINING_ONLY.check(on(LAYER, patched)).present and patched.count(TRAINING_ONLY_MARK) == 3
    layer_class = load_layer(patched, "layer_v4_training_only").Layer

    class Dense(layer_class):  # type: ignore[misc,valid-type]
        def call(self, x: Any, training: Any = None) -> Any:
            return (x, training)

    x = Tensor(1.0)
    assert Dense()(x, training=True) == (x, True)
    assert Dense()(x) == (x, None)


# -- torch-tree-node-type-fast-path with torch-tree-leaf-shortcut -----------------------------


def test_node_type_composes_with_the_leaf_shortcut_in_either_order() -> None:
    text = node_type.TORCHTREE_PY
    ours_last = applied(on(TORCHTREE, text), (LEAF_SHORTCUT, NODE_TYPE)).rendered()[TORCHTREE]
    ours_first = applied(on(TORCHTREE, text), (NODE_TYPE, LEAF_SHORTCUT)).rendered()[TORCHTREE]
    assert ours_last == ours_first
    for patch in (NODE_TYPE, LEAF_SHORTCUT):
        assert patch.check(on(TORCHTREE, ours_last)).present
    assert "# forkgen: torch-tree-leaf-shortcut" in ours_last and "# forkgen: torch-tree-node-type-fast-path" in ours_last


# -- global-state-lookup-fast-path: the series run twice --------------------------------------


def test_global_state_lookup_series_run_twice_changes_nothing_the_second_time() -> None:
    path = global_state.PATH
    first = series.run({path: global_state.BEFORE}.get, (GLOBAL_STATE,))
    assert first.unswitched_files == {path: global_state.AFTER} and first.changed
    second = series.run({path: global_state.AFTER}.get, (GLOBAL_STATE,))
    assert second.files == {} and not second.changed and second.results[0].check.present


# -- functional-graph-fast-paths: its place in the series -------------------------------------


def test_functional_graph_fast_paths_is_registered_with_both_files() -> None:
    assert series.SERIES_PACKAGES.index("codemods.functional_graph_fast_paths") == 17  # 18th (patch 19 came after)
    assert FUNCTIONAL_GRAPH.files == (functional_graph.SYMBOLIC_ARGUMENTS, functional_graph.FUNCTIONAL)
    assert (FUNCTIONAL_GRAPH.name, FUNCTIONAL_GRAPH.version, FUNCTIONAL_GRAPH.switch, FUNCTIONAL_GRAPH.since) == (
        "functional-graph-fast-paths", "1", None, "3.6.0")


# -- torch-convert-to-tensor-noop-moves after torch-convert-to-tensor-device ------------------

NOOP_MARK = "# forkgen: torch-convert-to-tensor-noop-moves"


def test_noop_moves_release_range_and_no_requirement() -> None:
    assert NOOP_MOVES.since == "3.12.0" and NOOP_MOVES.requires == ()
    names = [p.name for p in series.load_series()]
    assert names.index(NOOP_MOVES.name) > names.index(DEVICE.name)
    old = series.run(lambda p: noop_moves.CORE_PY if p == CORE else None, [NOOP_MOVES], release="3.11.3")
    assert old.results[0].outcome is Outcome.NOT_APPLICABLE


def test_the_synthetic_core_py_takes_noop_moves_alone_and_after_the_device_patch() -> None:
    for patches in ([NOOP_MOVES], [DEVICE, NOOP_MOVES]):
        patched = applied(Sources(lambda p: noop_moves.FILES.get(p)), patches).rendered()[CORE]
        assert patched.count(NOOP_MARK) == 6
        assert NOOP_MOVES.check(on(CORE, patched)).present
    # The behaviours' core.py after the device patch is the one it renders.
    assert applied(Sources(lambda p: noop_moves.FILES.get(p)), [DEVICE]).rendered()[CORE] == noop_moves.DEVICE_APPLIED_PY


# -- torch-variable-value-fast-path among the patches of torch's core -------------------------


def test_variable_value_release_range_and_no_requirement() -> None:
    before = variable_value.CORE_PY
    assert VARIABLE_VALUE.since == "3.5.0" and VARIABLE_VALUE.requires == ()
    assert VARIABLE_VALUE.name in [p.name for p in series.load_series()]
    old = series.run(lambda p: before if p == CORE else None, [VARIABLE_VALUE], release="3.4.1")
    assert old.results[0].outcome is Outcome.NOT_APPLICABLE
    new = series.run(lambda p: before if p == CORE else None, [VARIABLE_VALUE], release="3.5.0")
    assert new.results[0].outcome is Outcome.APPLIED


def test_the_synthetic_core_py_takes_variable_value_after_the_other_torch_core_patches() -> None:
    sources = Sources(lambda p: variable_value.FILES.get(p))
    for patch in series.load_series():
        # The patches of torch's core alone (standardize-dtype-memo edits variables.py too).
        if CORE in patch.files and all(variable_value.FILES.get(path) is not None for path in patch.files):
            assert patch.check(sources).outcome is Outcome.APPLIED, patch.name
            patch.apply(sources)
    patched = sources.rendered()[CORE]
    assert patched.count("# forkgen: torch-variable-value-fast-path") == 2 and NOOP_MARK in patched
    assert VARIABLE_VALUE.check(on(CORE, patched)).present


def test_on_nightlys_layout_the_analysis_names_the_file_it_patched(tmp_path: Any) -> None:
    """keras-nightly keeps the torch core in backend/torch/ops/core.py: the outcome (and so the
    wheel's provenance, which hashes every file an applied patch names) must name that file,
    not the declared 3.15 path the tree lacks (a nightly build failed on it)."""
    from forkgen.patch import analyze_series
    from tests.support.synthetic import write_tree

    root = write_tree(tmp_path)
    nightly = root / "keras/src/backend/torch/ops/core.py"
    nightly.parent.mkdir(parents=True, exist_ok=True)
    (root / CORE).rename(nightly)
    # The device patch is upstream on the real nightly; its synthetic core is 3.15.1's shape.
    selected = [p for p in series.load_series() if p.name != DEVICE.name]
    analysis = analyze_series(root, selected)
    outcomes = {p.name: p for p in analysis.patches}
    for name in (VARIABLE_VALUE.name, NOOP_MOVES.name):
        assert outcomes[name].outcome == "applied", outcomes[name]
        assert outcomes[name].files == ("keras/src/backend/torch/ops/core.py",), outcomes[name].files
    for patch in analysis.applied:
        for relative in patch.files:
            assert (root / relative).is_file(), (patch.name, relative)
    assert "keras/src/backend/torch/ops/core.py" in analysis.files
