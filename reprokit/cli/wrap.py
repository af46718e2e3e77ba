"""``reprokit wrap -- python train.py``: your own script as one stage of a run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

import reprokit
from reprokit.cli.app import (
    RunDirOpt,
    XlaDeviceOpt,
    out,
    reports_errors,
    run_option,
)
from reprokit.cli.progress import variant_line
from reprokit.errors import ReprokitError
from reprokit.run_flags import build_options
from reprokit.runner.options import TIMEOUT, default_run_dir

if TYPE_CHECKING:
    from reprokit.records import VariantResult

WrapHloOpt = run_option("dump_hlo", help="save XLA's graphs as HLO text")

WrapTimeoutOpt = run_option("timeout", help="seconds it may run")

# Everything after the command is the command's own: its options are not reprokit's.
WRAP_SETTINGS = {"allow_interspersed_args": False, "ignore_unknown_options": True}


@reports_errors
def wrap_(
    command: Annotated[list[str], typer.Argument(help="the command: -- python train.py ARGS")],
    output: RunDirOpt = None,
    dump_hlo: WrapHloOpt = False,
    timeout: WrapTimeoutOpt = TIMEOUT,
    xla_device: XlaDeviceOpt = None,
    recompiles: Annotated[bool, typer.Option(
        "--recompiles", help="record every graph it compiles and say why each compiled again"
    )] = False,
    repro: Annotated[bool, typer.Option(
        "--repro", help="with --recompiles: the fewest lines of the script that still compile "
        "again (runs cut-down copies of it, minutes)"
    )] = False,
) -> None:  # fmt: skip
    """Your own script under torch_xla's debug settings, as one stage of a run that
    `reprokit report` turns into an issue; the exit code is the script's."""
    from reprokit.tools.wrap import exit_code

    given = {"timeout": timeout, "xla_device": xla_device, "dump_hlo": dump_hlo}
    run_dir = output or default_run_dir()
    if repro and not recompiles:
        raise ReprokitError("--repro needs --recompiles", hint="reprokit wrap --recompiles "
                            "--repro -- python train.py")  # fmt: skip
    summary = reprokit.wrap(command, run_dir=run_dir, options=build_options(given),
                            recompiles=recompiles, repro=repro)  # fmt: skip
    (variant,) = summary.variants
    out.print(variant_line(variant), highlight=False)
    if recompiles:
        out.print(_recompile_lines(run_dir, variant), highlight=False)
    out.print(f"run folder: {escape(str(run_dir))}; next: reprokit report {escape(str(run_dir))}")
    raise typer.Exit(exit_code(summary))


def _recompile_lines(run_dir: Path, variant: VariantResult) -> str:
    """How many graphs the script compiled, a line per cause of a recompile, the repro."""
    from reprokit.records.recompiles import RECOMPILE_REPRO, RECOMPILES
    from reprokit.reports.recompiles import stage_recompiles, steps_shown

    found = stage_recompiles(run_dir, variant.label, variant.stages[0].name)
    if found is None:
        return "recompiles: the script ran no XLA graph"
    lines = [f"recompiles: {len(found.compiles)} graphs compiled in {found.steps} steps, "
             f"{len(found.recompiles)} recompiles"]  # fmt: skip
    for cause, line, compiles in found.by_cause():
        steps = steps_shown(compiles, most=6)
        lines.append(f"  {cause.value} at {line} (steps {steps}): {compiles[0].what}")
    if found.repro is not None:
        repro = found.repro
        lines.append(f"repro of compile {repro.compile}: {repro.lines} of the script's "
                     f"{repro.of} lines, exit {repro.returncode} alone "
                     f"({RECOMPILE_REPRO} beside {RECOMPILES})")  # fmt: skip
    elif found.no_repro:
        lines.append(f"no repro: {found.no_repro}")
    return escape("\n".join(lines))
