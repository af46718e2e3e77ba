"""The command line: each command parses its options, calls one library function, prints, and
chooses the exit code (:class:`reprokit.errors.ExitCode`).

app.py holds the typer app, its error handling and the parameters commands share; running.py
the commands that run stages (run, minimize, merge, bisect, wrap); commands.py the others
(list, render, env, report, diff, convert, capture). They are registered here, in the order that
``reprokit --help`` lists them.
"""

from __future__ import annotations

from reprokit.cli import commands, ops, running
from reprokit.cli.app import app, main

for _name, _command in (
    ("list", commands.list_),
    ("render", commands.render_),
    ("env", commands.env_),
    ("run", running.run_),
    ("report", commands.report_),
    ("diff", commands.diff_),
    ("convert", commands.convert_),
    ("minimize", running.minimize_),
    ("merge", running.merge_),
    ("bisect", running.bisect_),
    ("capture", commands.capture_),
    ("sweep", running.sweep_),
    ("ops", ops.ops_),
):
    app.command(_name)(_command)
app.command("wrap", context_settings=running.WRAP_SETTINGS)(running.wrap_)

__all__ = ["app", "main"]
