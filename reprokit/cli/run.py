"""``reprokit run``: render and run cases, in parallel, into a run folder."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer
from rich.markup import escape

import reprokit
from reprokit.cli.app import (
    CasesOpt,
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
from reprokit.errors import ExitCode, ReprokitError
from reprokit.generate.variants import parse_sets
from reprokit.records import RunSummary
from reprokit.run_flags import build_options, environments
from reprokit.runner.keywords import select
from reprokit.runner.options import default_run_dir, jobs
from reprokit.runner.processes import signals


@reports_errors
@with_run_options(at="cases", last=("templates",))
def run_(
    case: Annotated[list[str] | None, typer.Argument(help="case names or .toml paths")] = None,
    n: JobsOpt = "1",
    output: RunDirOpt = None,
    keyword: Annotated[
        str | None, typer.Option("-k", help="variants whose label matches, e.g. 'spmd and not x'")
    ] = None,
    set_: SetOpt = None,
    cases: CasesOpt = None,
    **run_options: Any,
) -> None:
    """Render and run cases (all of them by default), in parallel; write RUN_DIR/summary.json.

    Exit 0: every variant ended as its case expects; 1: some did not; 2: bad input;
    130: interrupted.
    """
    found = reprokit.load_cases(case or [], sets=parse_sets(set_ or []), cases=cases or [],
                                templates=run_options["templates"] or [],
                                envs=environments(run_options))  # fmt: skip
    chosen = select(found, keyword, lambda v: v.label)
    if not chosen:
        hint = "`reprokit list` shows every case and its variants."
        raise ReprokitError(f"no variant matches -k {keyword!r}", hint=hint)
    if not case:  # say what "everything" is before minutes go by
        count = len({v.case.name for v in chosen})
        err.print(f"running {len(chosen)} variants of {count} cases (all; name cases to run fewer)")
    options = build_options(run_options, jobs=jobs(n))
    run_dir = output or default_run_dir()
    start = time.monotonic()
    try:
        with reporter(out, len(chosen)) as shown:
            summary = reprokit.run(
                chosen, run_dir=run_dir, options=options, reporter=shown, argv=sys.argv,
                announce=lambda line: err.print(line, highlight=False),  # an environment built
            )  # fmt: skip
        signals.ignore()  # summary.json is whole and the exit code decided
    except reprokit.Interrupted as stopped:  # the first signal left the others ignored
        line = closing_line(stopped.summary, run_dir, time.monotonic() - start)
        out.print(line, highlight=False)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    for line in triage_lines(summary):
        out.print(line, highlight=False)
    out.print(closing_line(summary, run_dir, time.monotonic() - start), highlight=False)
    raise typer.Exit(passed(summary))


def triage_lines(summary: RunSummary) -> list[str]:
    """``PASS  case  triage: the mismatch goes away in float32 (...)``, a line a triaged
    variant, after the variants' own lines: their verdict, now with the triage."""
    from reprokit.records import Triage

    marks = {"pass": "[green]PASS[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]SKIP[/]"}
    return [
        f"{marks[v.mark]}  {escape(v.label)}  triage: the mismatch {Triage(v.triage).said}"
        + (f" (expected {v.expected_triage})" if v.expected_triage else "")
        for v in summary.variants
        if v.triage
    ]
