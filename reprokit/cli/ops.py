"""``reprokit ops``: parsing and printing; the sweep is reprokit.tools.ops.sweep_ops."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from reprokit.cli.app import err, out, reports_errors
from reprokit.errors import ExitCode, ReprokitError
from reprokit.runner.options import Options, default_run_dir, jobs
from reprokit.tools.ops import ALL_DTYPES, DTYPES, Interrupted, Progress, sweep_ops

EVERY = 5.0  # seconds between progress lines


@reports_errors
def ops_(
    names: Annotated[
        list[str] | None, typer.Argument(help="OpInfo names: mean nn.functional.softplus")
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="every OpInfo (with --edge's samples)")
    ] = False,
    dtypes: Annotated[str, typer.Option("--dtypes", help=f"of {','.join(ALL_DTYPES)}")] = ",".join(
        DTYPES
    ),
    grad: Annotated[bool, typer.Option("--grad", help="the gradients too")] = False,
    backends: Annotated[
        str, typer.Option("--backends", help="xla (torchax: see docs/ops.md)")
    ] = "xla",
    edge: Annotated[bool, typer.Option("--edge", help="edge values too (docs/ops.md)")] = False,
    inplace: Annotated[
        bool, typer.Option("--inplace", help="each op's in-place variant too (x.abs_())")
    ] = False,
    n: Annotated[str, typer.Option("-n", help="workers at once: N or auto")] = "1",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="the folder")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds a sample may take")] = 30.0,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="judge every sample anew")] = False,
    cold: Annotated[
        bool, typer.Option("--cold", help="workers and repros in fresh interpreters, not forked")
    ] = False,
) -> None:
    """Every sample of torch's OpInfo database (the ops named, or --all) on XLA against CPU and
    float64: ops.json, report.md and a repro_<group>.py per divergence, each run alone.

    Exit 0: no divergence; 1: some (each a group); 2: bad input; 130: interrupted (what
    finished is kept)."""
    if not names and not every:
        raise ReprokitError(
            "name OpInfos or give --all", hint="reprokit ops mean nn.functional.softplus"
        )
    chosen = tuple(d for d in dtypes.split(",") if d)
    wrong = [d for d in chosen if d not in ALL_DTYPES]
    if wrong:
        raise ReprokitError(f"dtype {wrong[0]!r} is not swept", hint=f"Use {','.join(ALL_DTYPES)}.")
    folder = output or default_run_dir()
    shown = [0.0]

    def progress(p: Progress) -> None:
        now = time.monotonic()
        if now - shown[0] < EVERY and p.tasks_done < p.tasks:
            return
        shown[0] = now
        eta = p.eta()
        left = f", about {eta:,.0f} s left" if eta is not None else ""
        err.print(
            f"ops: {p.tasks_done}/{p.tasks} op-dtypes, {p.samples:,} samples, "
            f"{p.seconds:,.0f} s{left}",
            highlight=False,
        )

    try:
        swept = sweep_ops(
            [] if every else list(names or []),
            out_dir=folder,
            dtypes=chosen,
            grad=grad,
            edge=edge or every,
            inplace=inplace,
            backends=tuple(b for b in backends.split(",") if b),
            options=Options(jobs=jobs(n), warm=not cold),
            cache=not no_cache,
            timeout=timeout,
            argv=sys.argv,
            progress=progress,
            announce=lambda line: err.print(escape(line), highlight=False),
        )
    except Interrupted as stopped:
        out.print(
            f"interrupted: kept what finished in {escape(str(folder))}/ops.json "
            f"({len(stopped.sweep.records):,} samples)",
            highlight=False,
        )
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    from reprokit.reports.ops import headline

    out.print(headline(swept), highlight=False)
    for g in swept.groups:
        alone = {True: "reproduces alone", False: "does not reproduce alone", None: "not run"}
        repro = g.repro or f"no repro: {g.why_no_repro}"
        out.print(
            f"  {g.op}{'.' + g.variant if g.variant else ''} {'/'.join(g.dtypes)} "
            f"{g.passed} {g.kind}: {escape(repro)} "
            f"({alone[g.reproduces_alone]})",
            highlight=False,
        )
    out.print(f"report: {escape(str(folder))}/report.md", highlight=False)
    raise typer.Exit(ExitCode.FAILED if swept.groups else ExitCode.OK)
