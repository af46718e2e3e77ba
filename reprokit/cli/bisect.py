"""``reprokit bisect``: the torch_xla release where the outcome changed."""

from __future__ import annotations

from pathlib import Path
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
    run_option,
)
from reprokit.environment.releases import releases as release_list
from reprokit.errors import ExitCode, ReprokitError
from reprokit.generate.variants import parse_sets
from reprokit.records.since import BISECT
from reprokit.run_flags import build_options
from reprokit.runner.options import TIMEOUT, Options, default_run_dir, jobs

NoCacheOpt = run_option("no_cache", help="run every stage and repro, cached or not")


@reports_errors
def bisect_(
    case: Annotated[
        list[str],
        typer.Argument(
            help="case names or .toml paths; or repros: a repro file (exit 1 shows, 0 not), a "
            "minimize folder, a run folder with root repros, a `reprokit ops` folder"
        ),
    ],
    releases: Annotated[
        str, typer.Option("--releases", help="torch_xla releases: 2.5..2.9, or 2.5,2.7,2.9")
    ],
    output: RunDirOpt = None,
    all_releases: Annotated[
        bool, typer.Option("--all-releases", help="repros: run on every release, no bisection")
    ] = False,
    no_cache: NoCacheOpt = False,
    set_: SetOpt = None,
    n: JobsOpt = "1",
    timeout: TimeoutOpt = TIMEOUT,
    cases: CasesOpt = None,
    templates: TemplatesOpt = None,
) -> None:
    """The torch_xla release where the cases' outcome (or a repro's verdict) changed: runs
    the first and the last release, then bisects. Each release is a uv environment (torch_xla
    and its torch). Repros: each one's `since` in OUT/bisect.json (OUT: the folder given),
    ops.json and summary.json. Exit 0: a change found (printed, and in OUT/bisect.json); 1:
    the same outcome at both ends; 2: bad input; 130: interrupted."""
    from reprokit.tools.bisect import describe

    given = {"timeout": timeout, "templates": templates, "xla_device": "CPU", "no_cache": no_cache}
    options = build_options(given, jobs=jobs(n))
    if are_repros(case):
        raise typer.Exit(_bisect_repros(case, releases, output, options, all_releases))
    if all_releases:
        raise ReprokitError("--all-releases is for repros", hint="Give repro files or folders.")
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
    out.print(f"wrote {escape(str(run_dir / BISECT))}", highlight=False)
    raise typer.Exit(ExitCode.OK if found.changed else ExitCode.FAILED)


def are_repros(arguments: list[str]) -> bool:
    """Repros rather than cases: every argument a folder or a .py file that is there."""
    paths = [Path(a) for a in arguments]
    return all(p.is_dir() or (p.is_file() and p.suffix == ".py") for p in paths)


def _bisect_repros(
    paths: list[str], releases: str, output: Path | None, options: Options, every: bool
) -> ExitCode:
    from reprokit.tools.since import bisect_repros, describe

    try:
        found = bisect_repros(
            [Path(p) for p in paths], release_list(releases), output, options=options,
            all_releases=every, announce=lambda line: err.print(escape(line), highlight=False),
        )  # fmt: skip
    except reprokit.Interrupted:
        out.print("[bold red]interrupted[/]: the releases tried are cached; run it again")
        return ExitCode.INTERRUPTED
    for line in describe(found):
        out.print(escape(line), highlight=False)
    where = output or (Path(paths[0]) if Path(paths[0]).is_dir() else Path(paths[0]).parent)
    out.print(f"wrote {escape(str(where / BISECT))}", highlight=False)
    return ExitCode.OK if found.changed else ExitCode.FAILED
