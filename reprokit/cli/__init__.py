"""The command line: each command parses its options, calls one library function, prints, and
chooses the exit code (:class:`reprokit.errors.ExitCode`).

One module per command, named after it (``reprokit sweep`` is sweep.py; ``reprokit list`` is
list_.py, ``list`` being Python's), as accelerate keeps its ``commands/``; app.py holds the
typer app, its error handling and the parameters commands share. They are registered here, in
the order that ``reprokit --help`` lists them.
"""

from __future__ import annotations

from reprokit.cli import (
    bisect,
    capture,
    convert,
    diff,
    env,
    list_,
    merge,
    minimize,
    ops,
    render,
    report,
    run,
    sweep,
    wrap,
)
from reprokit.cli.app import app, main

for _name, _command in (
    ("list", list_.list_),
    ("render", render.render_),
    ("env", env.env_),
    ("run", run.run_),
    ("report", report.report_),
    ("diff", diff.diff_),
    ("convert", convert.convert_),
    ("minimize", minimize.minimize_),
    ("merge", merge.merge_),
    ("bisect", bisect.bisect_),
    ("capture", capture.capture_),
    ("sweep", sweep.sweep_),
    ("ops", ops.ops_),
):
    app.command(_name)(_command)
app.command("wrap", context_settings=wrap.WRAP_SETTINGS)(wrap.wrap_)

__all__ = ["app", "main"]
