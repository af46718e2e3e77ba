"""The commands that run stages: run, minimize, merge, bisect, wrap, sweep (registered on the app
by reprokit/cli/__init__.py, in the order help lists them)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

import reprokit
from reprokit.cli.app import (
    CasesOpt,
    RunDirOpt,
    SetOpt,
    TemplatesOpt,
    TimeoutOpt,
    XlaDeviceOpt,
    err,
    out,
    reports_errors,
    run_option,
    with_run_options,
)
from reprokit.environment.releases import releases as release_list
from reprokit.errors import ExitCode, ReprokitError
from reprokit.generate.selection import load_variant
from reprokit.generate.variants import parse_sets
from reprokit.records import RunSummary
from reprokit.records.folder import SCRIPT
from reprokit.records.minimize import GraphShrink
from reprokit.reports import build_report
from reprokit.reports.model import Cell, Names
from reprokit.reports.model import Table as ReportTable
from reprokit.runner import progress, signals
from reprokit.runner.keywords import select
from reprokit.runner.options import TIMEOUT, default_run_dir, jobs
from reprokit.runner.run_options import build_options, environments

JobsOpt = Annotated[str, typer.Option("-n", help="stages at once: N or auto (one per CPU)")]
WrapHloOpt = run_option("dump_hlo", help="save XLA's graphs as HLO text")
WrapTimeoutOpt = run_option("timeout", help="seconds it may run")


def _passed(summary: RunSummary) -> ExitCode:
    return ExitCode.FAILED if summary.count(False) else ExitCode.OK


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
        with progress.reporter(out, len(chosen)) as shown:
            summary = reprokit.run(
                chosen, run_dir=run_dir, options=options, reporter=shown, argv=sys.argv,
                announce=lambda line: err.print(line, highlight=False),  # an environment built
            )  # fmt: skip
        signals.ignore()  # summary.json is whole and the exit code decided
    except reprokit.Interrupted as stopped:  # the first signal left the others ignored
        line = progress.closing_line(stopped.summary, run_dir, time.monotonic() - start)
        out.print(line, highlight=False)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    for line in triage_lines(summary):
        out.print(line, highlight=False)
    out.print(progress.closing_line(summary, run_dir, time.monotonic() - start), highlight=False)
    raise typer.Exit(_passed(summary))


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


@reports_errors
def minimize_(
    case: Annotated[str, typer.Argument(help="a case name or .toml path")],
    set_: SetOpt = None,
    n: Annotated[str, typer.Option("-n", help="candidates at once: N or auto")] = "1",
    budget: Annotated[int, typer.Option("--budget", min=1, help="most candidate runs")] = 40,
    output: Annotated[Path, typer.Option("-o", "--output", help="the output folder")] = Path(
        "minimized"
    ),
    timeout: TimeoutOpt = TIMEOUT,
    xla_device: XlaDeviceOpt = None,
    cases: CasesOpt = None,
    templates: TemplatesOpt = None,
    root: Annotated[
        str,
        typer.Option("--root", help="a captured program's root to keep (its name or op)"),
    ] = "",
) -> None:
    """Shrink a case to the smallest variant that still shows the same outcome.

    Writes OUTPUT/minimal.toml and OUTPUT/repro.py, and a run folder that `reprokit report`
    reads (summary.json holds the search: run.minimized). A captured program (template
    exported_program) shrinks to the few operations that still show the outcome: also
    OUTPUT/minimal.pt2, and a repro.py of aten calls that needs neither reprokit nor the .pt2;
    each other root (where a difference is born) that reaches an output gets its own, in
    OUTPUT/roots/NAME (--root NAME: only that one). Exit 0 done (or budget spent), 130
    interrupted.
    """
    variant = load_variant(case, sets=parse_sets(set_ or []), cases=cases or [],
                           templates=templates or [])  # fmt: skip
    given = {"timeout": timeout, "xla_device": xla_device, "templates": templates}
    options = build_options(given, jobs=jobs(n))
    found = reprokit.minimize(variant, out_dir=output, options=options, budget=budget, root=root)
    table = Table("", "before", "after", title=f"Minimized: {escape(found.target or '')}")
    for what, before, after in found.graph.rows() if found.graph else []:
        table.add_row(what, before, after)
    for change in found.changes:
        table.add_row(change.param, repr(change.before), repr(change.after))
    out.print(table)
    if found.graph.removed_nothing if found.graph else not found.changes:
        out.print(found.describe(), highlight=False)  # says so plainly
    wrote = _wrote(found.graph)
    out.print(
        f"script {found.lines[0]} -> {found.lines[1]} lines; {found.candidate_runs}, "
        f"{found.cache_hits} cache hits, {found.seconds} s ({found.stopped}); "
        f"wrote {wrote} into {output}",
        highlight=False,
    )
    for other in found.graph.others if found.graph else ():
        out.print(f"also differs, independently (not in this repro): {other}", highlight=False)
    for folder in found.graph.elsewhere if found.graph else ():
        out.print(f"its own short repro: {output / folder / SCRIPT}", highlight=False)
    raise typer.Exit(ExitCode.INTERRUPTED if found.stopped == "interrupted" else ExitCode.OK)


def _wrote(graph: GraphShrink | None) -> str:
    """The files minimize wrote, and where the short repro's inputs come from."""
    if graph is None:
        return "minimal.toml and repro.py"
    why = graph.short_inputs.removeprefix("stored").strip(" ()")
    said = {"random": "seeded random inputs: they show it too", "literals": "", "": ""}
    inputs = said.get(graph.short_inputs, f"it reads inputs.pt{': ' + why if why else ''}")
    notes = ["the gradient by torch.autograd"] * graph.by_autograd + [inputs] * bool(inputs)
    shown = f" ({'; '.join(notes)})" if notes else ""
    return (
        f"minimal.pt2, minimal.toml, repro.py{shown}, what it printed run alone (repro.out) "
        "and repro_stages.py"
    )


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
    out.print(progress.closing_line(summary, output, time.monotonic() - start), highlight=False)
    raise typer.Exit(_passed(summary))


@reports_errors
def bisect_(
    case: Annotated[list[str], typer.Argument(help="case names or .toml paths")],
    releases: Annotated[
        str, typer.Option("--releases", help="torch_xla releases: 2.5..2.9, or 2.5,2.7,2.9")
    ],
    output: RunDirOpt = None,
    set_: SetOpt = None,
    n: JobsOpt = "1",
    timeout: TimeoutOpt = TIMEOUT,
    cases: CasesOpt = None,
    templates: TemplatesOpt = None,
) -> None:
    """The torch_xla release where the cases' outcome changed: runs the first and the last
    release, then bisects. Each release is a uv environment (torch_xla and its torch).
    Exit 0: a change found (printed, and in OUT/bisect.json); 1: the same outcome at both
    ends; 2: bad input; 130: interrupted."""
    from reprokit.tools.bisect import describe

    given = {"timeout": timeout, "templates": templates, "xla_device": "CPU"}  # no --xla-device
    options = build_options(given, jobs=jobs(n))
    run_dir = output or default_run_dir()
    try:
        found = reprokit.bisect(
            case, releases=release_list(releases), out_dir=run_dir, options=options,
            sets=parse_sets(set_ or []), cases=cases or [], templates=templates or [],
            announce=lambda line: err.print(line),
        )  # fmt: skip
    except reprokit.Interrupted:
        out.print(f"[bold red]interrupted[/]: what ran is in {escape(str(run_dir))}")
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    for line in describe(found):
        out.print(escape(line), highlight=False)
    out.print(f"wrote {escape(str(run_dir / 'bisect.json'))}", highlight=False)
    raise typer.Exit(ExitCode.OK if found.changed else ExitCode.FAILED)


# Everything after the command is the command's own: its options are not reprokit's.
WRAP_SETTINGS = {"allow_interspersed_args": False, "ignore_unknown_options": True}


@reports_errors
def wrap_(
    command: Annotated[list[str], typer.Argument(help="the command: -- python train.py ARGS")],
    output: RunDirOpt = None,
    dump_hlo: WrapHloOpt = False,
    timeout: WrapTimeoutOpt = TIMEOUT,
    xla_device: XlaDeviceOpt = None,
) -> None:
    """Your own script under torch_xla's debug settings, as one stage of a run that
    `reprokit report` turns into an issue; the exit code is the script's."""
    from reprokit.tools.wrap import exit_code

    given = {"timeout": timeout, "xla_device": xla_device, "dump_hlo": dump_hlo}
    run_dir = output or default_run_dir()
    summary = reprokit.wrap(command, run_dir=run_dir, options=build_options(given))
    (variant,) = summary.variants
    out.print(progress.variant_line(variant), highlight=False)
    out.print(f"run folder: {escape(str(run_dir))}; next: reprokit report {escape(str(run_dir))}")
    raise typer.Exit(exit_code(summary))


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
            minimize=minimize, budget=budget, watch=lambda total: progress.reporter(out, total),
            argv=sys.argv, announce=lambda line: err.print(escape(line), highlight=False),
        )  # fmt: skip
        signals.ignore()
    except reprokit.Interrupted as stopped:
        line = progress.closing_line(stopped.summary, run_dir, time.monotonic() - start)
        out.print(line, highlight=False)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    summary, written = reprokit.report(run_dir)
    wide = out if out.is_terminal else Console(width=200)  # a log is not wrapped: rows whole
    for shown in build_report(summary, run_dir).sweep:
        wide.print(_rich(shown))
    out.print(progress.closing_line(summary, run_dir, time.monotonic() - start), highlight=False)
    out.print(f"report: {escape(str(written[0]))}; each model's: {escape(str(run_dir))}/models/")
    refused = any(m.refused for m in found.sweep.models)
    raise typer.Exit(ExitCode.FAILED if refused else _passed(summary))


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
