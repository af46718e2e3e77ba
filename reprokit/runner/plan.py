"""What of a variant runs: its stage DAG, ``--stages``, and what the executor can run, planned.

Pure: nothing here probes a device, starts a process or warns. The scheduler hands in what it
learnt (the stages the script declared, the backends its executor finds missing) and gets a
:class:`Plan` back: the stages with their device counts, those that run, those skipped and
why, and the notes an old template earns. Planning this way can be tested in milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reprokit.records import Stage, StageResult, Status
from reprokit.runner.dag import blocked, needed

NOT_ASKED = "not in --stages"


@dataclass(frozen=True)
class Skipped:
    """A stage that will not run, and why (in the words its record keeps)."""

    stage: Stage
    reason: str

    def result(self) -> StageResult:
        """Its record: skipped, with the reason."""
        return StageResult(self.stage.name, self.stage.backend, Status.SKIPPED, reason=self.reason)


@dataclass(frozen=True)
class Plan:
    """One variant's stages as the scheduler will run them."""

    stages: tuple[Stage, ...]  # the DAG, each stage with its device count
    runs: tuple[str, ...]  # the stages that run once their needs end well, in DAG order
    skipped: tuple[Skipped, ...]  # the others: not asked for, no backend, a need skipped
    notes: tuple[str, ...] = ()  # what to change in an older template (warnings to give)

    @property
    def compares(self) -> bool:
        """Whether a stage names a reference: its verdict will compare tensors."""
        return any(stage.reference for stage in self.stages)


def plan(
    stages: Sequence[Stage],
    *,
    asked: Sequence[str] = (),
    unavailable: Mapping[str, str] | None = None,
    params: Mapping[str, Any] | None = None,
    template: str = "",
) -> Plan:
    """Plan ``stages``: ``asked`` are the names ``--stages`` gave (none: every stage),
    ``unavailable`` maps a backend the executor cannot run to why (empty for an executor that
    finds its own backends, as Ray does), ``params`` and ``template`` are the variant's (an
    older template's SPMD stages take their device count from its ``spmd_devices``)."""
    with_counts, notes = with_devices(stages, params or {}, template)
    chosen = selected(stages, asked)
    unasked = NOT_ASKED
    if not chosen:  # a typo, or a case without those stages: say which it has
        unasked = f"--stages names none of its stages ({', '.join(s.name for s in stages)})"
    missing = unavailable or {}
    skipped: dict[str, StageResult] = {}
    for stage in stages:
        why = unasked if stage.name not in chosen else missing.get(stage.backend)
        if why:
            skipped[stage.name] = StageResult(stage.name, stage.backend, Status.SKIPPED, reason=why)
    skipped |= blocked(with_counts, skipped)
    by_name = {stage.name: stage for stage in with_counts}
    return Plan(
        tuple(with_counts),
        tuple(stage.name for stage in with_counts if stage.name not in skipped),
        tuple(Skipped(by_name[name], result.reason or "") for name, result in skipped.items()),
        tuple(notes),
    )


def selected(stages: Sequence[Stage], names: Iterable[str]) -> set[str]:
    """The stages ``--stages NAME,...`` runs: those named and every stage they need, however
    indirectly; all of them when none is named."""
    known = [stage.name for stage in stages]
    names = list(names)
    return needed(list(stages), [name for name in names if name in known] if names else known)


def with_devices(
    stages: Sequence[Stage], params: Mapping[str, Any], template: str
) -> tuple[list[Stage], list[str]]:
    """Stages with their device counts, and a note for each SPMD stage of an older template
    that names none: it gets the ``spmd_devices`` parameter, and the note says what to change."""
    legacy = params.get("spmd_devices")
    if not isinstance(legacy, int):
        return list(stages), []
    found, notes = [], []
    for stage in stages:
        if stage.backend == "xla_spmd" and stage.devices is None:
            notes.append(
                f'{template}: stage {stage.name!r} gives no "devices"; reprokit read the '
                f'spmd_devices parameter ({legacy}). Add "devices": SPMD_DEVICES to the '
                "stage in STAGES: reading a parameter by its name is going away."
            )
            stage = replace(stage, devices=legacy)
        found.append(stage)
    return found, notes
