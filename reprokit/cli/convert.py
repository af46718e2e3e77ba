"""``reprokit convert``: a checkpoint into another format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

import reprokit
from reprokit.cli.app import (
    err,
    out,
    reports_errors,
)
from reprokit.errors import ExitCode


@reports_errors
def convert_(
    source: Annotated[Path, typer.Argument(help="the checkpoint to read (any format diff reads)")],
    target: Annotated[  # a str: a Path would drop the trailing slash that says "a folder"
        str, typer.Argument(help="where to write it (never over a file; a folder: end in /)")
    ],
    to: Annotated[
        str | None,
        typer.Option("--to", help="torch, xser, safetensors or dcp [from TARGET's name]"),
    ] = None,
) -> None:
    """A checkpoint into another format (torch.save, xser, safetensors, distributed
    checkpoint folder), read as data without torch_xla, written so that plain torch loads
    it, then checked tensor by tensor. Exit 0 bit-exact, 1 some tensor differs, 2 bad input."""
    done = reprokit.convert(source, target, to=to)
    out.print(f"wrote {escape(done.target)} ({done.target_format}): {done.tensors} tensors "
              f"from {escape(done.source)} ({done.source_format})", highlight=False)  # fmt: skip
    if done.left_out:
        names = ", ".join(done.left_out[:8]) + (", ..." if len(done.left_out) > 8 else "")
        out.print(f"left out {len(done.left_out)} values that are not tensors "
                  f"({done.target_format} holds tensors only): {escape(names)}",
                  highlight=False)  # fmt: skip
    if not done.exact:
        err.print(f"[bold red]differ after conversion:[/] {escape(', '.join(done.differ))}")
        raise typer.Exit(ExitCode.FAILED)
    out.print("checked: every tensor reads back bit for bit as in the source", highlight=False)
