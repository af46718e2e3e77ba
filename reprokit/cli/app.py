"""The typer app: its consoles, how errors and warnings end a command, the parameters that
several commands share, and ``main`` (the console script)."""

from __future__ import annotations

import atexit
import functools
import gc
import inspect
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from reprokit.errors import ExitCode, ReprokitError, ReprokitWarning
from reprokit.records import RunSummary
from reprokit.run_flags import BY_NAME, RUN_OPTIONS, RunOption
from reprokit.runner.processes import signals

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Minimal reproductions and issue-ready bug reports for PyTorch/XLA.",
)

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

Function = TypeVar("Function", bound=Callable[..., Any])


def run_option(option: RunOption | str, *, help: str | None = None) -> Any:
    """The annotated type of a declared run option (run_flags.py), as typer takes
    it; ``help`` where a command says it in its own words."""
    option = BY_NAME[option] if isinstance(option, str) else option
    if option.kind is bool:
        return Annotated[bool, typer.Option(option.flag, help=help or option.help)]
    kind: Any = list[option.kind] if option.repeated else option.kind
    shown: Any = option.shown_default or True
    info = typer.Option(option.flag, help=help or option.help, show_default=shown)
    return Annotated[kind | None, info] if option.default is None else Annotated[kind, info]


def with_run_options(*, at: str, last: tuple[str, ...] = ()) -> Callable[[Function], Function]:
    """Give a command every declared run option as a parameter, shown where its own parameter
    ``at`` is (after it, those named in ``last``: --templates beside --cases, as before); it
    receives their values together in its ``**run_options``."""
    return functools.partial(_with_run_options, at=at, last=last)


def _with_run_options(command: Function, *, at: str, last: tuple[str, ...]) -> Function:
    own = inspect.signature(command, eval_str=True)
    declared = {
        o.name: inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  default=o.default, annotation=run_option(o))
        for o in RUN_OPTIONS
    }  # fmt: skip
    later = [declared.pop(name) for name in last]
    kept = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    index = [p.name for p in kept].index(at)

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return command(*args, **kwargs)

    parameters = [*kept[:index], *declared.values(), kept[index], *later, *kept[index + 1 :]]
    wrapper.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


CasesOpt = Annotated[
    list[Path] | None,
    typer.Option("--cases", help="a folder of your own cases (wins over built-in)"),
]
TemplatesOpt = run_option("templates")
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a parameter: KEY=VALUE")]
RunDirOpt = Annotated[
    Path | None, typer.Option("-o", "--output", help="the run folder", show_default="runs/<time>")
]
XlaDeviceOpt = run_option("xla_device")
TimeoutOpt = run_option("timeout")
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def jobs_option(what: str) -> Any:
    """``-n``, one meaning for every command: how many of ``what`` run at once, N or auto."""
    return Annotated[str, typer.Option("-n", help=f"{what} at once: N or auto (one per CPU)")]


JobsOpt = jobs_option("stages")


def passed(summary: RunSummary) -> ExitCode:
    """A run's exit code: 1 when a variant did not end as its case expects, else 0."""
    return ExitCode.FAILED if summary.count(False) else ExitCode.OK


def reports_errors(command: Function) -> Function:
    """Bad input ends in one message and exit code 2; a traceback only with --debug. A signal
    (Ctrl-C, SIGTERM, SIGHUP: each raises KeyboardInterrupt) ends the command with 130."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ReprokitError as exc:
            if _options["debug"]:
                raise
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(ExitCode.BAD_INPUT) from None
        except KeyboardInterrupt:  # what a command does not catch itself: nothing to keep
            raise typer.Exit(ExitCode.INTERRUPTED) from None

    return wrapper  # type: ignore[return-value]


_options = {"debug": False}  # set once per invocation by the root callback


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,
) -> None:
    _options["debug"] = debug
    warnings.showwarning = _show_warning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning of ours as one line that says what to change; others as Python shows them."""
    if issubclass(category, ReprokitWarning):
        err.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


def main() -> None:
    """The console script ``reprokit``."""
    signals.install()  # SIGTERM and SIGHUP stop a command as Ctrl-C does: exit 130
    gc.freeze()  # the CLI's modules live until the exit: the command's collections skip them
    code: object = 0
    try:
        app()
    except SystemExit as done:  # typer ends every command so, its exit code chosen
        code = done.code
    finally:  # the command is done and its exit code chosen: a late signal must not change it
        signals.ignore()
    _end(code)


def _end(code: object) -> None:
    """Exit with ``code``. Python's teardown ends with a collection of every object left,
    none of them garbage: 40 ms of a 0.3 s re-run, which the freeze spares. Where a command
    imported torch (a run's comparisons, a report), the teardown takes half a second more
    (C++ destructors): the exit handlers still run (they end what libraries started: Ray,
    thread pools, logging), the streams are flushed, and the process ends without that
    teardown. atexit._run_exitfuncs is CPython's own; no library offers "exit now, handlers
    run"."""
    gc.freeze()
    if "torch" not in sys.modules or not (code is None or isinstance(code, int)):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
