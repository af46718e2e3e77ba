"""``reprokit minimize``: a case shrunk to the smallest variant (or program) that shows its
outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

import reprokit
from reprokit.cli.app import (
    CasesOpt,
    SetOpt,
    TemplatesOpt,
    TimeoutOpt,
    XlaDeviceOpt,
    jobs_option,
    out,
    reports_errors,
)
from reprokit.errors import ExitCode
from reprokit.generate.selection import load_variant
from reprokit.generate.variants import parse_sets
from reprokit.records.folder import SCRIPT
from reprokit.records.minimize import GraphShrink
from reprokit.run_flags import build_options
from reprokit.runner.options import TIMEOUT, jobs

CandidatesOpt = jobs_option("candidates")


@reports_errors
def minimize_(
    case: Annotated[str, typer.Argument(help="a case name or .toml path")],
    set_: SetOpt = None,
    n: CandidatesOpt = "1",
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
