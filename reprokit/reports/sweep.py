"""A sweep's part of the report (``reprokit sweep``): one row per model and dtype (outcome,
first divergence, its op, the triage label, a link to the model's own report), the findings
of ``--minimize``, and each model's own report, written under RUN_DIR/models/NAME/.

Read from summary.json and sweep.json (reprokit.records.sweep), as every report is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from reprokit.records import Outcome, RunSummary, VariantResult
from reprokit.records.folder import SCRIPT
from reprokit.records.sweep import Sweep, SweptModel, read_sweep
from reprokit.reports.model import Cell, Table

MODELS = "models"  # RUN_DIR/models/NAME/report.md: each model's own report
_DTYPE = re.compile(r"\b(?:torch\.)?(bool|u?int\d+|float\d+|bfloat16|complex\d+)\b")


@dataclass(frozen=True)
class Divergence:
    """A variant's first divergence, classified: the tensor, its op, the dtypes, its kind."""

    target: str
    tensor: str
    op: str
    dtypes: str
    kind: str  # values, dtype, NaN, shape (what differs first)

    @property
    def key(self) -> tuple[str, str, str]:
        """What the divergence is, whatever model shows it: one finding per key."""
        return (self.op, self.dtypes, self.kind)


def divergence(variant: VariantResult) -> Divergence | None:
    """The first divergence of the variant's first target stage that has one."""
    target, tensor = next(((t, n) for t, n in variant.first_divergence.items() if n),
                          (None, None))  # fmt: skip
    if target is None or tensor is None:
        return None
    c = next((c for c in variant.comparisons if c.target == target and c.tensor == tensor), None)
    stage = next((s for s in variant.stages if s.name == target), None)
    info = (stage.described.get(tensor) if stage is not None else None) or {}
    op = str(info.get("op") or tensor.rpartition(".")[2] or tensor)
    if c is None:
        return Divergence(target, tensor, op, "?", "values")
    if c.shape is None or "shape" in c.note:
        kind = "shape"
    elif "dtype" in c.note:
        kind = "dtype"
    elif c.nan[0] != c.nan[1]:
        kind = "NaN"
    else:
        kind = "values"
    # the tensor's dtypes (the run's dtype where an operation keeps it): a bool cumsum is one
    # divergence in a float32 run and in a bfloat16 one
    found = list(dict.fromkeys(_DTYPE.findall(c.note))) if kind == "dtype" else []
    return Divergence(target, tensor, op, " vs ".join(found) or (c.dtype or "?"), kind)


def triage(variant: VariantResult) -> str:
    """The triage label the trust tools give a variant (a ``triage`` field), if any."""
    found = getattr(variant, "triage", None)
    if found is None or found == "":
        return ""
    return str(getattr(found, "label", found))


def shown(model: SweptModel) -> str:
    """The model as a table names it: ``hf:gpt2``, or a factory's file by its name only."""
    file, _, function = model.model.rpartition(":")
    return f"{Path(file).name}:{function}" if file.endswith(".py") else model.model


def model_folder(model: SweptModel) -> str:
    """The model's own report's folder, below the run folder."""
    return f"{MODELS}/{model.case}"


def sweep_tables(summary: RunSummary, run_dir: Path) -> tuple[Table, ...]:
    """The sweep's table and, with --minimize, its findings; none for a run that is no sweep."""
    sweep = read_sweep(run_dir)
    if sweep is None:
        return ()
    tables = [sweep_table(summary, sweep)]
    if sweep.minimized:
        tables.append(findings_table(sweep))
    return tuple(tables)


_TONES = {Outcome.MATCH: "good", Outcome.SKIPPED: ""}


def sweep_table(summary: RunSummary, sweep: Sweep) -> Table:
    """One row per model and dtype, in the sweep's order; a refused model in one row."""
    by_case: dict[str, list[VariantResult]] = {}
    for v in summary.variants:
        by_case.setdefault(v.case, []).append(v)
    rows = []
    for model in sweep.models:
        if model.case is None:
            why = Cell(_short(model.refused or "refused", 160))
            rows.append((Cell(shown(model), code=True), Cell("-"), Cell("refused", tone="bad"),
                         why, Cell(""), Cell(""), Cell("")))  # fmt: skip
            continue
        for v in by_case.get(model.case, []):
            found = divergence(v)
            tone = _TONES.get(v.outcome, "bad")
            first = Cell(found.tensor, code=True) if found else Cell(_short(v.reason or ""))
            rows.append((
                Cell(shown(model), code=True), Cell(_dtype(v)),
                Cell(v.outcome.value, tone=tone), first,
                Cell(found.op, code=True) if found else Cell(""), Cell(triage(v)),
                Cell("report", link=f"{model_folder(model)}/report"),
            ))  # fmt: skip
    header = ("model", "dtype", "outcome", "first divergence", "op", "triage", "its report")
    models, dtypes = len(sweep.models), len(sweep.dtypes)
    title = f"Sweep: {models} model{'s' * (models != 1)} x {dtypes} dtype{'s' * (dtypes != 1)}"
    return Table(header, tuple(rows), title=title)


def _dtype(variant: VariantResult) -> str:
    """The variant's dtype, and its environment when it ran in one (--env)."""
    dtype = str(variant.variant.get("dtype", ""))
    return f"{dtype} @{variant.env.name}" if variant.env else dtype


def _short(reason: str, limit: int = 90) -> str:
    """A failed variant's reason, in a table's cell: its first words (the rest is in its
    report)."""
    reason = " ".join(reason.split())
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def findings_table(sweep: Sweep) -> Table:
    """--minimize: each divergence once, its witnesses, and where its short repro is."""
    rows = []
    for f in sweep.findings:
        shrunk = f"{f.operations[0]} -> {f.operations[1]}" if f.operations else ""
        repro = Cell(f"{f.minimized}/{SCRIPT}", code=True) if f.minimized else Cell("")
        rows.append((Cell(f.op, code=True), Cell(f.dtypes), Cell(f.kind),
                     Cell(str(len(f.witnesses))), Cell(", ".join(f.witnesses)), Cell(shrunk),
                     repro))  # fmt: skip
    header = ("op", "dtypes", "differs in", "witnesses", "variants", "operations", "short repro")
    count = len(sweep.findings)
    title = f"Findings: {count} divergence{'' if count == 1 else 's'}, each with its witnesses"
    return Table(header, tuple(rows), title=title)


def model_summaries(summary: RunSummary, run_dir: Path) -> list[tuple[str, RunSummary]]:
    """Each captured model's part of the run (its folder below the run folder, its variants),
    as a summary its own report is built from."""
    sweep = read_sweep(run_dir)
    if sweep is None:
        return []
    parts = []
    for model in sweep.models:
        mine = tuple(v for v in summary.variants if v.case == model.case)
        if model.case is not None and mine:
            parts.append((model_folder(model), replace(summary, variants=mine)))
    return parts
