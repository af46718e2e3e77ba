"""``reprokit sweep``: models x dtypes x the matrix, into one run folder."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

import reprokit
from reprokit.cli.app import (
    JobsOpt,
    RunDirOpt,
    SetOpt,
    err,
    out,
    passed,
    reports_errors,
    with_run_options,
)
from reprokit.cli.progress import closing_line, reporter
from reprokit.errors import ExitCode
from reprokit.generate.variants import parse_sets
from reprokit.reports import build_report
from reprokit.reports.model import Cell, Names
from reprokit.reports.model import Table as ReportTable
from reprokit.run_flags import build_options, environments
from reprokit.runner.options import default_run_dir, jobs
from reprokit.runner.processes import signals


@reports_errors
@with_run_options(at="set_")
def sweep_(
    models: Annotated[
        list[str], typer.Argument(help="named models (hf:gpt2 timm:convnext_atto) or TOML lists")
    ],
    dtypes: Annotated[
        str | None,
        typer.Option("--dtypes", help="each model in each: float32,bfloat16 (a list's own)"),
    ] = None,
    n: JobsOpt = "1",
    output: RunDirOpt = None,
    minimize: Annotated[
        bool, typer.Option("--minimize", help="each divergence once, one witness minimized")
    ] = False,
    budget: Annotated[
        int, typer.Option("--budget", min=1, help="most candidate runs per minimization")
    ] = 40,
    set_: SetOpt = None,
    **run_options: Any,
) -> None:
    """Models x dtypes x the matrix: each named model captured (random weights, inputs of its
    family), then run in every dtype into one run folder, with one table (model, dtype,
    outcome, first divergence, op, triage) in the console, report.md and report.html, and
    each model's own report in RUN_DIR/models/NAME/.

    Exit 0: every variant matched; 1: some did not, or a model was refused; 2: bad input;
    130: interrupted.
    """
    options = build_options(run_options, jobs=jobs(n))
    run_dir = output or default_run_dir()
    start = time.monotonic()
    try:
        found = reprokit.sweep(
            models, run_dir=run_dir, dtypes=[d for d in (dtypes or "").split(",") if d] or None,
            options=options, sets=parse_sets(set_ or []), envs=environments(run_options),
            minimize=minimize, budget=budget, watch=lambda total: reporter(out, total),
            argv=sys.argv, announce=lambda line: err.print(escape(line), highlight=False),
        )  # fmt: skip
        signals.ignore()
    except reprokit.Interrupted as stopped:
        line = closing_line(stopped.summary, run_dir, time.monotonic() - start)
        out.print(line, highlight=False)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    summary, written = reprokit.report(run_dir)
    wide = out if out.is_terminal else Console(width=200)  # a log is not wrapped: rows whole
    for shown in build_report(summary, run_dir).sweep:
        wide.print(_rich(shown))
    out.print(closing_line(summary, run_dir, time.monotonic() - start), highlight=False)
    out.print(f"report: {escape(str(written[0]))}; each model's: {escape(str(run_dir))}/models/")
    refused = any(m.refused for m in found.sweep.models)
    raise typer.Exit(ExitCode.FAILED if refused else passed(summary))


def _rich(found: ReportTable) -> Table:
    """A table of the report model, in the console: bad outcomes in red, good in green."""
    table = Table(*(Column(h, overflow="fold") for h in found.header), title=found.title)
    for row in found.rows:
        table.add_row(*map(_rich_cell, row))
    return table


_TONES = {"bad": "bold red", "good": "green"}


def _rich_cell(value: Cell | Names) -> str:
    if isinstance(value, Names):
        return escape(", ".join(value.items) or value.empty)
    text = escape(f"{value.link}.md" if value.link else value.text)  # a path, in a console
    return f"[{_TONES[value.tone]}]{text}[/]" if value.tone in _TONES else text
