"""The patch series: which patches forkgen carries, in which order, and how a run goes.

Like quilt's `series` file: one entry per patch, applied in this order, each a package under
`codemods/` that declares `PATCH` (a `codemods.engine.Patch`). Adding a patch is adding its
package and one line here.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from codemods.engine import (
    AnchorDrift,
    CallRules,
    Check,
    Outcome,
    Patch,
    Sources,
    Store,
    forget_trees,
    switching,
)

#: The packages of the series, in the order their patches apply.
SERIES_PACKAGES = (
    "codemods.callspec_fast_path",
    "codemods.callspec_training_fast_path",
    "codemods.layer_call_state_writes",
    "codemods.dtype_fast_paths",
    "codemods.memoised_result_type",
    "codemods.torch_convert_to_tensor_device",
    "codemods.input_spec_single_fast_path",
    "codemods.layer_call_single_name_scope",
    "codemods.operation_call_error_info",
    "codemods.torch_tree_leaf_shortcut",
    "codemods.torch_trainer_batch_size",
    "codemods.torch_tree_node_type_fast_path",
    "codemods.layer_call_single_tensor_bookkeeping",
    "codemods.torch_conv_single_copy",
    "codemods.layer_call_training_only_conversion",
    "codemods.global_state_lookup_fast_path",
    "codemods.trainer_symbolic_build_skip",
    "codemods.functional_graph_fast_paths",
    "codemods.torch_max_pool_channels_last",
    "codemods.torch_convert_to_tensor_noop_moves",
    "codemods.layer_call_flat_conversion",
    "codemods.any_symbolic_tensors_leaf_fast_path",
    "codemods.torch_variable_value_fast_path",
    "codemods.torch_tree_flat_fast_paths",
    "codemods.callback_list_idle_batch_end",
    "codemods.functional_graph_run",
    "codemods.torch_ops_plain_tensor_fast_paths",
    "codemods.layer_call_fast_lane",
    "codemods.loss_mean_reduction_fast_path",
    "codemods.torch_mean_metric_fast_paths",
    "codemods.loss_wrapper_tensor_fast_path",
    "codemods.torch_array_batch_fast_path",
    "codemods.torch_flash_probe_compile_skip",
    "codemods.torch_moments_axes_tuple",
    "codemods.torch_train_step_traced_gradients",
    "codemods.torch_compile_dynamic_batch",
    "codemods.standardize_dtype_memo",
    "codemods.dense_kernel_fast_path",
    "codemods.layer_call_proven_steps",
    "codemods.layer_clear_losses_skip_empty",
    "codemods.torch_tree_one_level_flatten",
)

#: The prefix of the wheel's default local label (`<prefix>.<digest of the applied patches>`).
LABEL_PREFIX = "fast"


def load_series() -> tuple[Patch, ...]:
    """Every patch of the series, in order."""
    patches = tuple(importlib.import_module(name).PATCH for name in SERIES_PACKAGES)
    names = [p.name for p in patches]
    assert len(set(names)) == len(names), f"duplicate patch names in the series: {names}"
    for patch in patches:
        unknown = [name for name in (*patch.requires, *patch.tolerates) if name not in names]
        assert not unknown, f"{patch.name} requires or tolerates patches the series does not have: {unknown}"
    return patches


class DeclarationError(LookupError):
    """Not exactly one patch of the series declares an interface a tool reads (`call_rules`)."""


def call_rules(series: Sequence[Patch] | None = None) -> CallRules:
    """The rules `forkgen report` reads: those of the one patch of `series` (None: the whole
    series) that declares `call_rules`; `DeclarationError` when none does, or several."""
    patches = load_series() if series is None else series
    declaring = [(p.name, p.call_rules) for p in patches if p.call_rules is not None]
    if len(declaring) != 1:
        names = ", ".join(name for name, _ in declaring) or "none"
        raise DeclarationError(f"exactly one patch of the series must declare `call_rules` (the rules "
                               f"`forkgen report` reads); declaring them: {names}")
    return declaring[0][1]


class SelectionError(ValueError):
    """A selection names a patch the series does not have, or leaves out one another needs."""


def select(
    series: Sequence[Patch],
    configured: Sequence[str] | None = None,
    only: Sequence[str] = (),
    without: Sequence[str] = (),
) -> tuple[Patch, ...]:
    """The patches a run applies, in series order.

    `configured` ([tool.forkgen] patches; None: the whole series) is the start; `only`
    (`--patch`, repeatable) replaces it; `without` (`--without-patch`) removes from it.
    """
    by_name = {p.name: p for p in series}
    for name in (*(configured or ()), *only, *without):
        if name not in by_name:
            raise SelectionError(f"no patch named {name!r} in the series; the series: {', '.join(by_name)}")
    chosen = set(only) if only else set(configured) if configured is not None else set(by_name)
    chosen -= set(without)
    selected = tuple(p for p in series if p.name in chosen)
    for patch in selected:
        missing = [r for r in patch.requires if r not in chosen]
        if missing:
            raise SelectionError(f"patch {patch.name} needs {', '.join(missing)}, which the selection leaves out")
    return selected


@dataclass(frozen=True)
class PatchResult:
    """One patch's outcome on one tree."""

    patch: Patch
    check: Check
    #: The drift, when the outcome is DRIFT.
    drift: AnchorDrift | None = None

    @property
    def outcome(self) -> Outcome:
        return self.check.outcome

    @property
    def changed(self) -> bool:
        """The patch's code went into the tree in this run."""
        return self.check.outcome is Outcome.APPLIED and not self.check.present


@dataclass
class SeriesResult:
    """What the selected patches did to one tree (in memory: `files` holds the new texts)."""

    release: Version | None
    results: list[PatchResult] = field(default_factory=list)
    #: Patches left out of the selection whose code the tree already carries.
    present_but_unselected: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def unswitched_files(self) -> dict[str, str]:
        """`files` as the patches left them, without the run-time switches (what each patch's own
        texts say; `files` is what is written)."""
        return {path: switching.unswitch(text) for path, text in self.files.items() if path != switching.SWITCHES_PY}

    @property
    def drifts(self) -> list[PatchResult]:
        return [r for r in self.results if r.outcome is Outcome.DRIFT]

    @property
    def applied(self) -> list[PatchResult]:
        return [r for r in self.results if r.outcome is Outcome.APPLIED]

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.results)

    def label(self, prefix: str = LABEL_PREFIX) -> str:
        return series_label(((r.patch.name, r.patch.version) for r in self.applied), prefix)


def series_label(applied: Iterable[tuple[str, str]], prefix: str = LABEL_PREFIX) -> str:
    """The PEP 440 local label of a wheel carrying `applied` (name, version) patches.

    `<prefix>.<8 letters>`, the letters derived from the sorted names and versions and from the
    form of the engine's run-time switches (`switching.FORMAT`), so that it changes whenever the
    set of applied patches, any patch's version or the switches' form does: a wheel of other
    bytes never carries a name already served. Letters only: a numeric segment would be
    normalised (leading zeros dropped) and no longer match.
    """
    lines = [f"{name}=={version}" for name, version in sorted(applied)]
    text = "\n".join([*lines, f"(run-time switches)=={switching.FORMAT}"])
    digest = hashlib.sha256(text.encode()).digest()
    return prefix + "." + "".join(chr(ord("a") + b % 26) for b in digest[:8])


def _parse_release(version: str | None) -> Version | None:
    try:
        return Version(version) if version else None
    except InvalidVersion:
        return None


def run(
    read: Callable[[str], str | None],
    selected: Sequence[Patch],
    *,
    release: str | None = None,
    series: Sequence[Patch] | None = None,
    listing: Callable[[], Iterable[str]] | None = None,
    store: Store | None = None,
) -> SeriesResult:
    """Check and apply the `selected` patches, in order, to the tree `read` gives (in memory).
    `listing` and `store` are handed to the patches (`Sources`): the tree's files, and where a
    patch may keep what it derives from them.

    Every patch is checked on the tree as the patches before it left it. A drift is recorded,
    not raised (the caller reports them all); the patches after a drifted one that share its
    files are still checked, on the tree without it. Patches of `series` left out of the
    selection are checked too, without applying them, to refuse removing code that is there.
    """
    with _without_cyclic_gc():
        try:
            return _run(read, selected, release, series, listing, store)
        finally:
            forget_trees()  # the run's trees go with its Sources (freed while the collector is paused)


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Pause Python's cycle collector (reference counting still frees what a run drops): a run
    keeps hundreds of thousands of libcst nodes alive, which hold no reference cycles, and the
    collector's full passes over them cost up to a tenth of the run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _run(
    read: Callable[[str], str | None], selected: Sequence[Patch], release: str | None, series: Sequence[Patch] | None,
    listing: Callable[[], Iterable[str]] | None = None, store: Store | None = None,
) -> SeriesResult:
    switched: set[str] = set()

    def unswitched(path: str) -> str | None:
        # A tree forkgen switched is read as the series left it (and then found applied).
        text = read(path)
        if text is not None and switching.MARK in text:
            switched.add(path)
            return switching.unswitch(text)
        return text

    sources = Sources(unswitched, listing, store)
    result = SeriesResult(_parse_release(release))
    outcomes: dict[str, Outcome] = {}
    chosen = {p.name for p in selected}
    touched: dict[str, dict[str, set[str]]] = {}
    for patch in series or selected:
        if patch.name not in chosen:
            try:
                if patch.check(sources).present:
                    result.present_but_unselected.append(patch.name)
            except AnchorDrift:
                pass
            continue
        checked = _check(patch, sources, result.release, outcomes)
        outcomes[patch.name] = checked.outcome
        if checked.changed:
            before = sources.rendered()
            try:
                patch.apply(sources)
            except AnchorDrift as error:
                checked = PatchResult(patch, Check(Outcome.DRIFT, str(error)), error)
                outcomes[patch.name] = Outcome.DRIFT
            else:
                after = sources.rendered()
                touched[patch.name] = {
                    path: switching.changed_keys(before.get(path) or unswitched(path) or "", text)
                    for path, text in after.items() if before.get(path) != text
                }
        result.results.append(checked)
    result.files = sources.rendered()
    if result.files and not result.drifts:
        result.files = _switched(unswitched, result.files, touched, [r.patch for r in result.applied])
    return result


def _switched(read: Callable[[str], str | None], files: dict[str, str], touched: dict[str, dict[str, set[str]]],
              carried: Sequence[Patch]) -> dict[str, str]:
    """The series' files with run-time switches (codemods/engine/switching.py), and the switches."""
    groups = switching.switch_groups(touched)
    group_of: dict[str, dict[str, tuple[str, ...]]] = {}
    for group in groups:
        for name in group:
            for path, keys in touched[name].items():
                group_of.setdefault(path, {}).update(dict.fromkeys(keys, group))
    out = {path: switching.switch_module(read(path) or "", text, group_of.get(path, {})) for path, text in files.items()}
    names = {p.name for p in carried}
    out[switching.SWITCHES_PY] = switching.switches_module(
        {p.name: tuple(r for r in p.requires if r in names) for p in carried}, groups)
    return out


def _check(patch: Patch, sources: Sources, release: Version | None, outcomes: dict[str, Outcome]) -> PatchResult:
    if patch.since is not None and release is not None and release < Version(patch.since):
        return PatchResult(patch, Check(Outcome.NOT_APPLICABLE, f"targets code Keras has since {patch.since}"))
    blocked = [r for r in patch.requires if outcomes.get(r) is not Outcome.APPLIED]
    if blocked:
        why = ", ".join(f"{r} {outcomes[r].value if r in outcomes else 'not selected'}" for r in blocked)
        return PatchResult(patch, Check(Outcome.NOT_APPLICABLE, f"builds on {why}"))
    try:
        return PatchResult(patch, patch.check(sources))
    except AnchorDrift as error:
        return PatchResult(patch, Check(Outcome.DRIFT, str(error)), error)
