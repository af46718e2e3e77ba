"""``reprokit bisect``: the torch_xla release where the outcome changed."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

import reprokit
from reprokit.cli.app import (
    CasesOpt,
    JobsOpt,
    RunDirOpt,
    SetOpt,
    TemplatesOpt,
    TimeoutOpt,
    err,
    out,
    reports_errors,
)
from reprokit.environment.releases import releases as release_list
from reprokit.errors import ExitCode
from reprokit.generate.variants import parse_sets
from reprokit.run_flags import build_options
from reprokit.runner.options import TIMEOUT, default_run_dir, jobs


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
