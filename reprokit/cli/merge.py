"""``reprokit merge``: one run from the stages of several."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

import reprokit
from reprokit.cli.app import (
    CasesOpt,
    TemplatesOpt,
    out,
    passed,
    reports_errors,
)
from reprokit.cli.progress import closing_line


@reports_errors
def merge_(
    runs: Annotated[list[Path], typer.Argument(help="run folders of the same cases")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the merged run folder")],
    cases: CasesOpt = None,
    templates: TemplatesOpt = None,
) -> None:
    """One run from the stages of several (the CPU side run here, the TPU side there, each
    with --stages): comparisons and verdicts computed anew; the report shows each machine.
    Exit 0: every variant as its case expects; 1: some not; 2: runs that cannot be merged."""
    start = time.monotonic()
    summary = reprokit.merge(runs, out_dir=output, cases=cases or [], templates=templates or [],
                             argv=sys.argv)  # fmt: skip
    out.print(closing_line(summary, output, time.monotonic() - start), highlight=False)
    raise typer.Exit(passed(summary))
