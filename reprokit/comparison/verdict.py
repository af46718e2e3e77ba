"""The verdict of one variant: its outcome, from its stages and its comparisons.

Outcome (docs/contract.md, "Outcomes"): the first failing stage's (error, crash, timeout), in DAG
order so that ``-n 1`` and ``-n 2`` agree; else skipped when a backend is missing here; else
mismatch when a tensor is outside tolerance; else match. The comparisons come from pairs.py
(reprokit.comparison.tensors, the engine ``reprokit diff`` uses too); torch is imported only
when a variant has tensors to compare, so that the runner starts without it.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from reprokit.comparison import roots, trust
from reprokit.comparison.pairs import COMPARE, Compared
from reprokit.environment.machine import versions
from reprokit.infra.caching import Store, file_digest
from reprokit.infra.offload import Offload, here
from reprokit.records import (
    Comparison,
    Outcome,
    Stage,
    StageResult,
    Status,
    VariantResult,
)
from reprokit.records.folder import VariantFolder

if TYPE_CHECKING:
    from reprokit.generate.variants import Variant


def verdict(
    variant: Variant,
    stages: list[Stage],
    results: dict[str, StageResult],
    folder: Path,
    seconds: float,
    reason: str | None = None,
    *,
    cached: bool = False,
    xla_device: str = "CPU",
    offload: Offload = here,
) -> VariantResult:
    """The variant's result once every stage has one; ``reason`` overrides the failure's.
    ``cached``: comparisons of tensors compared before are reused (see :func:`compare_stages`);
    ``xla_device``: where the XLA stages ran, which picks the case's expectation; ``offload``:
    where the comparing is done (infra/offload.py)."""
    ordered = tuple(results[stage.name] for stage in stages)
    compared = compare_stages(variant, stages, results, folder, cached=cached, offload=offload)
    judged = trust.judged(stages, compared.comparisons)
    outcome, reason = _outcome(ordered, compared, judged, reason)
    expected, expected_from, observed = variant.case.expected(xla_device)
    result = VariantResult(
        case=variant.case.name,
        label=variant.label,
        variant=dict(variant.params),
        outcome=outcome,
        expected=expected,
        seconds=round(seconds, 3),
        stages=ordered,
        comparisons=tuple(compared.comparisons),
        first_divergence=trust.accumulated(stages, compared.divergence),
        reason=reason,
        title=variant.case.title,
        description=variant.case.description,
        changed=variant.changed,
        expected_from=expected_from,
        observed=observed,
        env=variant.env,
        variables=variant.variables,
        case_variables=variant.case_variables,
        expected_triage=variant.case.expected_triage(xla_device),
        fusion_sensitive=trust.fusion_sensitive(stages, compared.comparisons, compared.fusion),
        fusion=tuple(compared.fusion),
        own_divergence=trust.own(stages, compared.divergence),
        fusion_nodes=trust.narrowed(stages, results, compared.comparisons),
    )
    return replace(result, roots=roots.found(result)) if outcome is Outcome.MISMATCH else result


def _outcome(
    ordered: tuple[StageResult, ...],
    compared: Compared,
    judged: list[Comparison],
    reason: str | None,
) -> tuple[Outcome, str | None]:
    """How the variant ended, and why: the first failed stage, else a comparison that could not
    be made, a skipped stage, the judged comparisons (an isolated stage's are only told)."""
    failed = next((r for r in ordered if r.failed), None)
    skipped = next((r for r in ordered if r.status is Status.SKIPPED), None)
    if failed is not None:
        outcome = failed.status.outcome
        assert outcome is not None  # a failed status always names an outcome
        return outcome, reason or f"{failed.name} {failed.ended()}"
    if not ordered:  # nothing ran, so nothing agreed: never a match
        return Outcome.ERROR, reason or "no stage ran"
    if compared.problem is not None:
        return Outcome.ERROR, compared.problem
    if skipped is not None:
        return Outcome.SKIPPED, f"{skipped.name} {skipped.ended()}"
    if bad := [c for c in judged if not c.allclose]:
        return Outcome.MISMATCH, f"{len(bad)} of {len(judged)} tensors outside tolerance"
    return Outcome.MATCH, None


def compare_stages(
    variant: Variant,
    stages: list[Stage],
    results: dict[str, StageResult],
    folder: Path,
    *,
    cached: bool = False,
    offload: Offload = here,
) -> Compared:
    """Each stage that ran ok against its reference stage, with the case's tolerances; with
    ``[compare] method = "fp64"``, judged against the stage's float64 arbiter.

    ``cached``: the same tensor files compared the same way before give the same comparisons,
    read back from the cache without importing torch (which takes seconds: in a re-run whose
    stages all came from the results cache, most of the time left)."""
    ok = {name for name, result in results.items() if result.status is Status.OK}
    pairs = [s for s in stages if s.reference and {s.reference, s.name} <= ok]
    if not pairs:
        return Compared()
    judges = {
        s.name: s.arbiter if variant.method == "fp64" and s.arbiter in ok else None for s in pairs
    }
    request = {
        "pairs": [s.to_json() for s in pairs],
        "judges": judges,
        "tolerances": variant.tolerances,
        "folder": str(folder),
    }
    if not cached:
        return Compared.from_json(offload(COMPARE, request))
    store, key = Store("comparisons"), _key(variant, pairs, judges, folder)
    data = store.get_json(key)
    with contextlib.suppress(KeyError, TypeError, ValueError):  # another version's
        if isinstance(data, dict):
            return Compared.from_json(data)
    found = offload(COMPARE, request)
    store.put_json(key, found)
    return Compared.from_json(found)


def _key(variant: Variant, pairs: list[Stage], judges: dict[str, str | None], folder: Path) -> str:
    """The bytes of every tensors.pt compared, how they are compared, and the code comparing."""
    names = {n for s in pairs for n in (s.name, s.reference, judges[s.name]) if n}
    tensors = {n: file_digest(VariantFolder(folder).stage(n).tensors) for n in sorted(names)}
    how = [[s.name, s.reference, judges[s.name], s.role, s.of] for s in pairs]
    return Store.key(comparing_code(), tensors, how, variant.tolerances, versions())


@functools.cache
def comparing_code() -> dict[str, str | None]:
    """The comparison code's files, hashed once a process: the code this run compares with
    (its warm servers start with the run). A cached verdict is keyed by it, here and in the
    minimizer's cache: a fix to the comparison is not hidden by results judged before it."""
    comparing = ("pairs.py", "trust.py", "tensors.py", "checkpoints.py", "reading.py", "formats.py")
    return {name: file_digest(Path(__file__).parent / name) for name in comparing}
