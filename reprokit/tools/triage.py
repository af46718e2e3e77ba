"""Precision triage: a captured program's mismatch run again more precisely, and what it did.

"Why does XLA differ from CPU?" is most often answered by precision: XLA's default matmul
precision, a half type's passes. So a mismatch is run again, as a variant of its own
(:meth:`Variant.with_params`) through the ordinary runner: first at
``matmul_precision = "highest"``; if it is still there and the variant ran in a half type
(its ``dtype``, or the captured program's, as its comparisons show), in ``float32`` at highest
precision. The label says what was observed (docs/verdicts.md), not whose bug it is:
``highest`` or ``float32`` (it went away so: a precision effect, with what to set and what it
costs), or ``persists`` (worth a closer look, likely worth filing). A rerun that ends in an
error does not make a mismatch go away.

Which mismatches: those whose case asks (``[expect] triage = ...``), or all with
``every`` (``reprokit run --triage``). The reruns go under ``RUN_DIR/triage/LABEL/STEP``; the
results cache gives a rerun made before at no cost. summary.json is written again with each
triaged variant's ``triage``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from reprokit.generate.variants import Variant
from reprokit.records import Outcome, RunSummary, Triage, VariantResult, write_summary
from reprokit.records.run import EXPORTED
from reprokit.runner.options import Options
from reprokit.runner.scheduler import run

TEMPLATE = EXPORTED  # the template whose variants have a dtype and a precision
HALF = ("float16", "bfloat16")
FOLDER = "triage"  # under the run folder: one run folder per variant and step


def triage_summary(
    summary: RunSummary,
    variants: Iterable[Variant],
    *,
    run_dir: Path,
    options: Options | None = None,
    every: bool = False,
    announce: Callable[[str], None] | None = None,
) -> RunSummary:
    """``summary`` with each mismatch that asks for it triaged (all of them with ``every``),
    written again into RUN_DIR/summary.json when any was."""
    by_label = {v.label: v for v in variants}
    say = announce or (lambda _line: None)
    found, changed = [], False
    for result in summary.variants:
        variant = by_label.get(result.label)
        if variant is not None and wanted(variant, result, every=every):
            say(f"triage: {result.label}: its mismatch run again more precisely")
            label = triage(variant, result, run_dir=Path(run_dir), options=options)
            result, changed = replace(result, triage=label.value), True
        found.append(result)
    if not changed:
        return summary
    summary = summary.with_variants(found)
    write_summary(summary, Path(run_dir))
    return summary


def wanted(variant: Variant, result: VariantResult, *, every: bool) -> bool:
    """A captured program's mismatch, whose case asks for triage or every one is asked."""
    asked = every or result.expected_triage is not None
    return asked and result.outcome is Outcome.MISMATCH and variant.template.name == TEMPLATE


def triage(
    variant: Variant, result: VariantResult, *, run_dir: Path, options: Options | None = None
) -> Triage:
    """The label of one mismatch: each rerun of :func:`steps` in turn, until one matches."""
    for label, params in steps(variant.params, result):
        folder = run_dir / FOLDER / result.label / label.value
        rerun = run([variant.with_params(params)], run_dir=folder, options=options)
        if all(v.outcome is Outcome.MATCH for v in rerun.variants):
            return label
    return Triage.PERSISTS


def steps(params: dict[str, Any], result: VariantResult) -> list[tuple[Triage, dict[str, Any]]]:
    """The reruns, in order, each with the label it earns by matching: highest precision
    (unless it ran so), then float32 at highest precision (when it ran in a half type)."""
    highest = {**params, "matmul_precision": "highest"}
    found = []
    if params.get("matmul_precision") != "highest":
        found.append((Triage.HIGHEST, highest))
    if ran_in_half(params, result):
        found.append((Triage.FLOAT32, {**highest, "dtype": "float32"}))
    return found


def ran_in_half(params: dict[str, Any], result: VariantResult) -> bool:
    """Whether the variant ran in float16 or bfloat16: its ``dtype``, or, as captured, the
    dtype of a tensor that diverged."""
    if params.get("dtype") in HALF:
        return True
    diverged = [c.dtype for c in result.comparisons if not c.allclose]
    return params.get("dtype", "captured") == "captured" and any(d in HALF for d in diverged)
