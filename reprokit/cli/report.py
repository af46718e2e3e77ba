"""``reprokit report``: a run folder's issue-ready report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import reprokit
from reprokit.cli.app import (
    out,
    reports_errors,
)
from reprokit.reports import headline


@reports_errors
def report_(
    run_dir: Annotated[Path, typer.Argument(help="the folder `reprokit run` wrote")],
    format_: Annotated[str, typer.Option("--format", help="md, html, json or all")] = "all",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write here")] = None,
) -> None:
    """report.md (issue-ready), report.html (with plots), bundle.zip (to attach)."""
    reports = reprokit.report(run_dir, formats=format_, out_dir=output)
    summary = reports.summary  # a minimize folder expects its mismatch; an ops folder has no
    if summary.minimized is None and summary.variants:  # variants (its title says): no news
        out.print(headline(summary), highlight=False)
    for path in reports.written:
        out.print(f"wrote {path} ({path.stat().st_size:,} bytes)", highlight=False, markup=False)
    if reports.title:  # a bug to file, else what report.md says instead (no issue to paste)
        said = "issue title" if reports.kind == "bug" else "no issue to paste"
        out.print(f"{said}: {reports.title}", highlight=False, markup=False)
    if reports.known:
        out.print(reports.known, highlight=False, markup=False)
    if reports.next_step:
        out.print(f"for a short repro to paste: {reports.next_step}", highlight=False, markup=False)
