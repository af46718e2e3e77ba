"""``reprokit diff``: two checkpoints compared tensor by tensor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Column, Table

import reprokit
from reprokit.cli.app import (
    JsonOpt,
    out,
    reports_errors,
)
from reprokit.errors import ExitCode
from reprokit.records import Comparison, DiffSummary


@reports_errors
def diff_(
    reference: Annotated[Path, typer.Argument(help="checkpoint A: the reference")],
    target: Annotated[Path, typer.Argument(help="checkpoint B: compared with A")],
    rtol: Annotated[float | None, typer.Option(help="relative tolerance [the dtype's]")] = None,
    atol: Annotated[float | None, typer.Option(help="absolute tolerance [the dtype's]")] = None,
    as_json: JsonOpt = False,
    every: Annotated[bool, typer.Option("--all", help="a row for equal tensors too")] = False,
) -> None:
    """Tensor-by-tensor diff of two checkpoints: torch.save, xser, distributed checkpoint
    folder or safetensors, in any pairing. Exit 0 all close, 1 some differ, 2 bad input."""
    comparisons = reprokit.compare(reference, target, rtol=rtol, atol=atol)
    summary = DiffSummary.of(comparisons)
    if as_json:
        data = {"reference": str(reference), "target": str(target), "summary": summary.to_json()}
        typer.echo(json.dumps(data | {"comparisons": [c.to_json() for c in comparisons]}, indent=2))
        raise typer.Exit(_differ(summary))
    rows = [c for c in comparisons if c.shape is not None]
    shown = [c for c in rows if every or c.cells()["verdict"] != "equal"]
    longest = max((len(c.tensor) for c in shown), default=6)
    tensor = Column("tensor", min_width=min(longest, 16), overflow="fold")  # folded, never cut
    table = Table(tensor, "shape", "dtype", "max abs", "max rel", "mismatched", "")
    for c in shown:
        table.add_row(*_diff_row(c))
    if shown:
        out.print(table)
    if hidden := len(rows) - len(shown):
        out.print(f"{hidden} equal tensors not shown (--all shows every row)", highlight=False)
    for c in comparisons:
        if not c.allclose and c.shape is not None:
            out.print(escape(c.describe()), highlight=False)
    for path, names in ((reference, summary.only_in_reference), (target, summary.only_in_target)):
        if names:
            out.print(f"only in {escape(str(path))}: {escape(', '.join(names))}", highlight=False)
    counts = f"{summary.tensors} tensors: {summary.equal} equal, {summary.close} close"
    counts += f", {summary.differ} differ; {summary.divergence}"
    out.print(escape(counts), highlight=False)
    raise typer.Exit(_differ(summary))


def _differ(summary: DiffSummary) -> ExitCode:
    return ExitCode.OK if summary.allclose else ExitCode.FAILED


_COLOURS = {"equal": "green", "close": "green", "differ": "red"}


def _diff_row(c: Comparison) -> list[str]:
    cells = c.cells()
    mark = f"[{_COLOURS[cells['verdict']]}]{cells['verdict']}[/]"
    if any(c.nan):  # NaNs in the same places count as equal: flagged all the same
        mark += f" [yellow]NaN {c.nan[0]:,}/{c.nan[1]:,}[/]"
    keys = ("shape", "dtype", "max_abs", "max_rel", "mismatched")
    return [escape(c.tensor), *(cells[k] for k in keys), mark]
