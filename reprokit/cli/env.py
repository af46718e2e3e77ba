"""``reprokit env``: the machine as a run records it."""

from __future__ import annotations

import json

from rich.table import Table

from reprokit.cli.app import (
    JsonOpt,
    out,
    reports_errors,
)


@reports_errors
def env_(
    as_json: JsonOpt = False,
) -> None:
    """The environment a maintainer asks for, secrets redacted."""
    from reprokit.environment.machine import describe_machine  # collect_env imports torch

    captured = describe_machine()
    if as_json:
        out.print_json(json.dumps(captured.to_json()))
        return
    table = Table("", "", title="Environment", show_header=False)
    for key, value in captured.rows():
        table.add_row(key, value)
    out.print(table)
