"""The verdict of one variant: its outcome, from its stages and its comparisons.

Outcome (DESIGN.md "Outcomes"): the first failing stage's (error, crash, timeout), in DAG
order so that ``-n 1`` and ``-n 2`` agree; else skipped when a backend is missing here; else
mismatch when a tensor is outside tolerance; else match. The comparisons come from
reprokit.compare, the engine ``reprokit diff`` and the reports use too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.cases import Outcome, Variant
from reprokit.errors import ReprokitError
from reprokit.procs import Status
from reprokit.records import StageResult, VariantResult

if TYPE_CHECKING:
    from reprokit.compare import Comparison
    from reprokit.dag import Stage

_FAILED = {
    Status.TIMEOUT: Outcome.TIMEOUT,
    Status.CRASH: Outcome.CRASH,
    Status.ERROR: Outcome.ERROR,
}


def verdict(
    variant: Variant,
    stages: list[Stage],
    results: dict[str, StageResult],
    folder: Path,
    seconds: float,
    reason: str | None = None,
) -> VariantResult:
    """The variant's result once every stage has one; ``reason`` overrides the failure's."""
    ordered = [results[stage.name] for stage in stages]
    comparisons, divergence, problem = compare_stages(variant, stages, results, folder)
    failed = next((r for r in ordered if r.status in _FAILED), None)
    skipped = next((r for r in ordered if r.status is Status.SKIPPED), None)
    if failed is not None:
        outcome, reason = _FAILED[failed.status], reason or f"{failed.name} {failed.ended()}"
    elif problem is not None:
        outcome, reason = Outcome.ERROR, problem
    elif skipped is not None:
        outcome, reason = Outcome.SKIPPED, f"{skipped.name} {skipped.ended()}"
    elif bad := [c for c in comparisons if not c.allclose]:
        outcome = Outcome.MISMATCH
        reason = f"{len(bad)} of {len(comparisons)} tensors outside tolerance"
    else:
        outcome, reason = Outcome.MATCH, None
    return VariantResult(
        case=variant.case.name,
        label=variant.label,
        variant=dict(variant.params),
        outcome=outcome,
        expected=variant.case.expect,
        seconds=round(seconds, 3),
        stages=tuple(ordered),
        comparisons=tuple(comparisons),
        first_divergence=divergence,
        reason=reason,
    )


def compare_stages(
    variant: Variant, stages: list[Stage], results: dict[str, StageResult], folder: Path
) -> tuple[list[Comparison], dict[str, str | None], str | None]:
    """Each stage that ran ok against its reference stage, with the case's tolerances.

    Returns the comparisons, the first divergence per target stage, and a line saying why
    a tensors.pt could not be read (a crash mid-save, or a pickle that would run code).
    """
    ok = {name for name, result in results.items() if result.status is Status.OK}
    pairs = [(s.reference, s.name) for s in stages if s.reference and {s.reference, s.name} <= ok]
    if not pairs:
        return [], {}, None
    from reprokit.compare import compare_tensors, first_divergence, load_tensors  # imports torch

    loaded: dict[str, Any] = {}
    comparisons: list[Comparison] = []
    divergence: dict[str, str | None] = {}
    try:
        for reference, target in pairs:
            for name in (reference, target):
                if name not in loaded:
                    loaded[name] = load_tensors(folder / "stages" / name / "tensors.pt")
            found = compare_tensors(
                loaded[reference],
                loaded[target],
                **variant.tolerances,
                reference=reference,
                target=target,
            )
            comparisons += found
            first = first_divergence(found)
            divergence[target] = first.tensor if first else None
    except ReprokitError as exc:
        return comparisons, divergence, str(exc).split("\n")[0]
    return comparisons, divergence, None
