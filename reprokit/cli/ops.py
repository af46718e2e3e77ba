"""``reprokit ops``: parsing and printing; the sweep is reprokit.tools.ops.sweep_ops."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from reprokit.cli.app import err, jobs_option, out, reports_errors, run_option
from reprokit.environment.releases import release_env
from reprokit.environment.releases import releases as release_list
from reprokit.errors import ExitCode, ReprokitError, ReprokitWarning
from reprokit.records import EnvSpec
from reprokit.records.ops import OpsSweep
from reprokit.records.report import REPORT_MD
from reprokit.run_flags import build_options, environments
from reprokit.runner.options import default_run_dir, jobs
from reprokit.tools.ops import ALL_DTYPES, DTYPES, OpsInterrupted, Progress, sweep_ops
from reprokit.tools.ops.mesh import parse as parse_mesh

EVERY = 5.0  # seconds between progress lines
DEFAULT_DTYPES = ",".join(DTYPES)
NamesOpt = Annotated[
    list[str] | None, typer.Argument(help="OpInfo names: mean nn.functional.softplus")
]
AllOpt = Annotated[bool, typer.Option("--all", help="every OpInfo (with --edge's samples)")]
DtypesOpt = Annotated[str, typer.Option("--dtypes", help=f"of {','.join(ALL_DTYPES)}")]
BackendsOpt = Annotated[str, typer.Option("--backends", help="xla (torchax: see docs/ops.md)")]
InplaceOpt = Annotated[
    bool, typer.Option("--inplace", help="each op's in-place variant too (x.abs_())")
]
# run's own declarations (run_flags.py), said for workers and samples rather than stages
ColdOpt = run_option("cold", help="workers and repros in fresh interpreters, not forked")
NoCacheOpt = run_option("no_cache", help="judge every sample anew")
JobsOpt = jobs_option("workers")
# A sample's timeout, apart from run's --timeout (seconds per stage); --timeout was its name
SampleTimeoutOpt = Annotated[
    float, typer.Option("--sample-timeout", help="seconds a sample may take", metavar="S")
]
OldTimeoutOpt = Annotated[float | None, typer.Option("--timeout", hidden=True)]
ExecutorOpt = run_option("executor", help="where workers run: local, or ray (a Ray cluster)")
RayAddressOpt = run_option("ray_address")
EnvOpt = run_option("env", help='NAME="REQUIREMENTS": sweep in this uv environment (repeatable)')
MeshOpt = Annotated[
    str | None,
    typer.Option("--mesh", help="each sample sharded on a mesh of devices (4, 2x2, 2x4) "
                 "against itself unsharded, under SPMD", metavar="AxB"),
]  # fmt: skip
# A sharded sample is a compile per spec (126 ms, 8.8x a plain one): every group of the
# 213-OpInfo sweep showed within its task's first 48 samples (docs/ops.md)
MESH_SAMPLES = 64
MeshSamplesOpt = Annotated[
    int,
    typer.Option(
        "--mesh-samples", min=0, help="--mesh: each op's first N samples per spec (0: all)"
    ),
]
ReleasesOpt = Annotated[
    str | None,
    typer.Option("--releases", help="sweep in each torch_xla release: 2.8..2.9, or 2.5,2.9"),
]


@reports_errors
def ops_(
    names: NamesOpt = None,
    every: AllOpt = False,
    dtypes: DtypesOpt = DEFAULT_DTYPES,
    grad: Annotated[bool, typer.Option("--grad", help="the gradients too")] = False,
    backends: BackendsOpt = "xla",
    edge: Annotated[bool, typer.Option("--edge", help="edge values too (docs/ops.md)")] = False,
    inplace: InplaceOpt = False,
    mesh: MeshOpt = None,
    mesh_samples: MeshSamplesOpt = MESH_SAMPLES,
    n: JobsOpt = "1",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="the folder")] = None,
    sample_timeout: SampleTimeoutOpt = 30.0,
    no_cache: NoCacheOpt = False,
    cold: ColdOpt = False,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    env: EnvOpt = None,
    releases: ReleasesOpt = None,
    timeout: OldTimeoutOpt = None,
) -> None:
    """Every sample of torch's OpInfo database (the ops named, or --all) on XLA against CPU and
    float64: ops.json, report.md and a repro_<group>.py per divergence, each run alone.
    --executor ray: the workers on a Ray cluster. --releases/--env: the sweep in each
    environment (DIR/<name>/), merged into one op x release table (report.md, report.html).

    Exit 0: no divergence; 1: some (each a group); 2: bad input; 130: interrupted (what
    finished is kept)."""
    if not names and not every:
        raise ReprokitError("name OpInfos or give --all", hint="reprokit ops mean softplus")
    folder = output or default_run_dir()
    where = {"executor": executor, "ray_address": ray_address, "cold": cold}
    options = build_options(where, jobs=jobs(n))
    envs = _environments(env, releases)
    how = {
        "dtypes": _dtypes(dtypes),
        "grad": grad,
        "edge": edge or every,
        "inplace": inplace,
        **_sharding(mesh, mesh_samples),
        "backends": tuple(b for b in backends.split(",") if b),
        "options": options,
        "cache": not no_cache,
        "timeout": _sample_timeout(sample_timeout, timeout),
        "argv": sys.argv,
        "progress": _progress(),
        "announce": lambda line: err.print(escape(line), highlight=False),
    }
    if envs:
        raise typer.Exit(_across(list(names or []) if not every else [], envs, folder, how))
    try:
        swept = sweep_ops([] if every else list(names or []), out_dir=folder, **how)
    except OpsInterrupted as stopped:
        out.print(
            f"interrupted: kept what finished in {escape(str(folder))}/ops.json "
            f"({len(stopped.sweep.records):,} samples)",
            highlight=False,
        )
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    raise typer.Exit(_said(swept, folder))


def _sharding(mesh: str | None, samples: int) -> dict[str, Any]:
    """--mesh and --mesh-samples as sweep_ops takes them."""
    return {"mesh": parse_mesh(mesh) if mesh else (), "mesh_samples": samples}


def _sample_timeout(given: float, old: float | None) -> float:
    """``--sample-timeout``; ``--timeout``, its name before run's --timeout (seconds per stage)
    took the one meaning, still works with a warning."""
    if old is None:
        return given
    warnings.warn(
        "`reprokit ops --timeout` is `--sample-timeout` now (seconds a sample may take; "
        "--timeout is seconds per stage elsewhere): rename it in your command",
        ReprokitWarning,
        stacklevel=2,
    )
    return old


def _dtypes(given: str) -> tuple[str, ...]:
    chosen = tuple(d for d in given.split(",") if d)
    wrong = [d for d in chosen if d not in ALL_DTYPES]
    if wrong:
        raise ReprokitError(f"dtype {wrong[0]!r} is not swept", hint=f"Use {','.join(ALL_DTYPES)}.")
    return chosen


def _progress() -> Callable[[Progress], None]:
    """A progress line every EVERY seconds, and at the end."""
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

    return progress


def _said(swept: OpsSweep, folder: Path) -> ExitCode:
    """The sweep's headline and groups printed; its exit code."""
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
    out.print(f"report: {escape(str(folder / REPORT_MD))}", highlight=False)
    return ExitCode.FAILED if swept.groups else ExitCode.OK


def _environments(env: list[str] | None, releases: str | None) -> list[EnvSpec]:
    """The environments to sweep in: ``--env``'s, then ``--releases``'s; none: this one."""
    found = environments({"env": env}) or []
    found += [release_env(r) for r in release_list(releases)] if releases else []
    names = [spec.name for spec in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ReprokitError(f"environment {twice[0]!r} is named twice", hint="Name each once.")
    return found


def _across(names: list[str], envs: list[EnvSpec], folder: Path, how: dict) -> ExitCode:
    """The sweep in each environment, merged into the op x release table; its exit code."""
    from reprokit.reports.ops_releases import headline, shown, since
    from reprokit.tools.ops.harness.releases import InterruptedReleases, sweep_releases

    try:
        table = sweep_releases(names, envs, out_dir=folder, **how)
    except InterruptedReleases as stopped:
        done = ", ".join(r.name for r in stopped.table.releases)
        out.print(f"interrupted: kept what finished ({escape(done)}) in {escape(str(folder))}")
        return ExitCode.INTERRUPTED
    out.print(escape(headline(table)), highlight=False)
    order = [r.name for r in table.releases]
    for row in shown(table):
        cells = "; ".join(f"{n}: {row.cells[n].said()}" for n in order if n in row.cells)
        changed = since(row, order)
        out.print(escape(f"  {row.name}: {cells}" + (f" ({changed})" if changed else "")))
    out.print(f"report: {escape(str(folder / REPORT_MD))}", highlight=False)
    differs = any(r.groups for r in table.releases)
    return ExitCode.FAILED if differs else ExitCode.OK
