"""``reprokit render``: one variant's standalone script."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import reprokit
from reprokit.cli.app import (
    CasesOpt,
    SetOpt,
    TemplatesOpt,
    err,
    reports_errors,
)
from reprokit.errors import ReprokitError
from reprokit.generate.selection import load_variant
from reprokit.generate.variants import parse_sets


@reports_errors
def render_(
    case: Annotated[str, typer.Argument(help="a case name or .toml path")],
    set_: SetOpt = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write here")] = None,
    cases: CasesOpt = None,
    templates: TemplatesOpt = None,
) -> None:
    """The standalone script of one case (pin a matrix with --set)."""
    variant = load_variant(case, sets=parse_sets(set_ or []), cases=cases or [],
                           templates=templates or [], any_env=True)  # fmt: skip
    script = reprokit.render(variant, templates=templates or [])
    if output is None:
        typer.echo(script, nl=False)
        return
    if output.is_dir():
        raise ReprokitError(f"{output} is a folder", hint="Give -o the script's file name.")
    output.parent.mkdir(parents=True, exist_ok=True)  # -o new/repro.py makes new/
    output.write_text(script, encoding="utf-8")
    beside = [path.name for path in variant.copy_files(output.parent)]  # the script opens them
    also = f", and {', '.join(beside)} beside it" if beside else ""
    err.print(f"wrote {output} ({script.count(chr(10))} lines){also}", highlight=False)
