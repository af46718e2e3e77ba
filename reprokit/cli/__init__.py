"""The command line: parse options, call one library function, print, choose the exit code."""

from __future__ import annotations

import functools
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

import reprokit
from reprokit.environment.releases import releases as release_list
from reprokit.environment.uv import env_python, parse_env
from reprokit.errors import ReprokitError, ReprokitWarning
from reprokit.generate.cases import find_cases, load_case
from reprokit.generate.templates import did_you_mean, list_templates
from reprokit.generate.variants import Variant, parse_sets, variants
from reprokit.records import Comparison, DiffSummary
from reprokit.reports import headline
from reprokit.runner import backends, progress, signals
from reprokit.runner.keywords import select
from reprokit.runner.options import TIMEOUT, Options, default_run_dir, jobs
from reprokit.tools.bisect import bisect, describe
from reprokit.tools.merge import merge
from reprokit.tools.minimize import graph as graph_minimize
from reprokit.tools.minimize.params import minimize

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Minimal reproductions and issue-ready bug reports for PyTorch/XLA.",
)
if hasattr(typer.core.TyperOption, "display_type_rich"):  # typer >= 0.29
    # typer 0.29 prints a type after every option, so that a flag reads as if it took a value
    # ("--debug <bool>"): a flag takes none, so it shows none.
    _display_type = typer.core.TyperOption.display_type_rich

    def _flags_untyped(self: typer.core.TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else _display_type(self, ctx)

    typer.core.TyperOption.display_type_rich = _flags_untyped  # type: ignore[method-assign]

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

CasesOpt = Annotated[
    list[Path], typer.Option("--cases", help="a folder of your own cases (wins over built-in)")
]
TemplatesOpt = Annotated[
    list[Path], typer.Option("--templates", help="a folder of your own templates (wins)")
]
SetOpt = Annotated[list[str], typer.Option("--set", help="override a parameter: KEY=VALUE")]
EnvOpt = Annotated[
    list[str],
    typer.Option("--env", help='NAME="REQUIREMENTS": run in this uv environment (repeatable)'),
]
EXECUTORS = ("local", "ray")
RunDirOpt = Annotated[
    Path | None, typer.Option("-o", "--output", help="the run folder", show_default="runs/<time>")
]
XlaDeviceOpt = Annotated[
    str | None,
    typer.Option("--xla-device", help="CPU, TPU or CUDA", show_default="TPU if any, else CPU"),
]


def reports_errors(command):
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
            raise typer.Exit(2) from None
        except KeyboardInterrupt:  # what a command does not catch itself: nothing to keep
            raise typer.Exit(130) from None

    return wrapper


_options = {"debug": False}  # set once per invocation by the root callback


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False) -> None:
    _options["debug"] = debug
    warnings.showwarning = _show_warning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning of ours as one line that says what to change; others as Python shows them."""
    if issubclass(category, ReprokitWarning):
        err.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


@app.command("list")
@reports_errors
def list_(
    name: Annotated[
        str | None, typer.Argument(help="a template or case: its parameters, in full")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    cases: CasesOpt = [],  # noqa: B006 (typer reads the default; it is never mutated)
    templates: TemplatesOpt = [],  # noqa: B006
) -> None:
    """Cases and templates, with their titles; with NAME, one template's parameters (type,
    default, smallest value or choices, help), and a case's values of them."""
    if name is not None:
        return _list_one(name, as_json, cases, templates)
    loaded = [load_case(path, templates=templates) for path in find_cases((), cases)]
    found = list_templates(templates)
    if as_json:
        data = {
            "cases": [case.to_json() | {"variants": [v.label for v in variants(case)]}
                      for case in loaded],
            "templates": [template.to_json() for template in found],
        }  # fmt: skip
        out.print_json(json.dumps(data))
        return
    table = Table(_named("case", loaded), _named("template", found), "variants", "expect")
    for case in loaded:
        count = str(len(variants(case)))
        table.add_row(_titled(case.name, case.title), case.template.name, count, case.expect.value)
    out.print(table)
    table = Table(_named("template", found), Column("parameters", overflow="fold"))
    for t in found:
        table.add_row(_titled(t.name, t.title), ", ".join(t.params))
    out.print(table)
    out.print("`reprokit list NAME`: one template's or case's parameters in full.")


def _named(header: str, items: list[Any]) -> Column:
    """A column of names that are never cut short (text beside them wraps instead)."""
    return Column(header, min_width=max([len(i.name) for i in items] + [len(header)]))


def _titled(name: str, text: str) -> str:
    """A name, and under it, dimmed, its title or help: what wraps is the text, not the name."""
    return f"{escape(name)}\n[dim]{escape(text)}[/]"


def _list_one(name: str, as_json: bool, cases: list[Path], templates: list[Path]) -> None:
    known = {t.name: t for t in list_templates(templates)}
    case = None
    try:  # a case first: its table holds its template's parameters, and its own values
        (path,) = find_cases([name], cases)
    except ReprokitError:
        if name not in known:
            names = sorted({*known, *(p.stem for p in find_cases((), cases))})
            hint = "`reprokit list` shows every template and case."
            raise ReprokitError(f"no template or case named {name!r}{did_you_mean(name, names)}",
                                hint=hint) from None  # fmt: skip
    else:
        case = load_case(path, templates=templates)
    template = case.template if case else known[name]
    if as_json:
        out.print_json(json.dumps(template.to_json() | {"case": case.to_json() if case else None}))
        return
    params = list(template.params.values())
    table = Table(_named("parameter", params), "type", "default", "smallest or choices")
    table.title = f"{template.name}: {template.title}"
    if case is not None:
        table.add_column("in the case")
        table.title = f"{case.name} (template {template.name}): {case.title}"
    for param in params:
        least = ", ".join(map(repr, param.choices)) if param.choices else repr(param.min)
        row = [param.type, "(required)" if param.required else repr(param.default)]
        row.append("" if param.choices is None and param.min is None else least)
        if case is not None:
            given = case.matrix.get(param.name, case.params.get(param.name, row[1]))
            row.append(repr(given) if given is not row[1] else "(default)")
        table.add_row(_titled(param.name, param.help), *map(escape, row))
    out.print(table)


def _one_variant(case: str, sets: list[str], cases: list[Path], templates: list[Path]):
    """The single variant a command works on; a case with a matrix must be pinned."""
    found = reprokit.load_cases([case], sets=parse_sets(sets), cases=cases, templates=templates)
    if len(found) > 1:
        raise ReprokitError(
            f"the case has {len(found)} variants: {', '.join(v.label for v in found)}",
            found[0].case.path,
            hint=f"Pick one by fixing its matrix with --set ({', '.join(found[0].choice)}).",
        )
    return found[0]


@app.command("render")
@reports_errors
def render_(
    case: Annotated[str, typer.Argument(help="a case name or .toml path")],
    set_: SetOpt = [],  # noqa: B006
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write here")] = None,
    cases: CasesOpt = [],  # noqa: B006
    templates: TemplatesOpt = [],  # noqa: B006
) -> None:
    """The standalone script of one case (pin a matrix with --set)."""
    variant = _one_variant(case, set_, cases, templates)
    script = reprokit.render(variant, templates=templates)
    if output is None:
        typer.echo(script, nl=False)
        return
    output.write_text(script, encoding="utf-8")
    beside = [path.name for path in variant.copy_files(output.parent)]  # the script opens them
    also = f", and {', '.join(beside)} beside it" if beside else ""
    err.print(f"wrote {output} ({script.count(chr(10))} lines){also}", highlight=False)


@app.command("env")
@reports_errors
def env_(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """The environment a maintainer asks for, secrets redacted."""
    from reprokit.environment import (
        machine as env,  # collect_env imports torch: only for this command
    )

    captured = env.capture()
    if as_json:
        out.print_json(json.dumps(captured.to_json()))
        return
    table = Table("", "", title="Environment", show_header=False)
    for key, value in captured.rows():
        table.add_row(key, value)
    out.print(table)


@app.command("run")
@reports_errors
def run_(
    case: Annotated[list[str] | None, typer.Argument(help="case names or .toml paths")] = None,
    n: Annotated[str, typer.Option("-n", help="stages at once: N or auto (one per CPU)")] = "1",
    output: RunDirOpt = None,
    keyword: Annotated[
        str | None, typer.Option("-k", help="variants whose label matches, e.g. 'spmd and not x'")
    ] = None,
    set_: SetOpt = [],  # noqa: B006
    timeout: Annotated[float, typer.Option("--timeout", help="seconds per stage")] = TIMEOUT,
    xla_device: XlaDeviceOpt = None,
    dump_hlo: Annotated[
        bool, typer.Option("--dump-hlo", help="XLA stages save their graphs as HLO text")
    ] = False,
    no_cache: Annotated[
        bool,
        typer.Option("--no-cache", help="run every stage, even those whose inputs did not change"),
    ] = False,
    cold: Annotated[
        bool, typer.Option("--cold", help="every stage a fresh Python (no warm-start server)")
    ] = False,
    stages: Annotated[
        str | None,
        typer.Option("--stages", help="only these stages, and those they need: NAME[,NAME...]"),
    ] = None,
    env: EnvOpt = [],  # noqa: B006
    executor: Annotated[
        str, typer.Option("--executor", help="where stages run: local, or ray (a Ray cluster)")
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="the Ray cluster (ray.init's address)")
    ] = None,
    shared_dir: Annotated[
        Path | None,
        typer.Option("--shared-dir", help="a folder every Ray node sees: outputs travel there"),
    ] = None,
    cases: CasesOpt = [],  # noqa: B006
    templates: TemplatesOpt = [],  # noqa: B006
) -> None:
    """Render and run cases (all of them by default), in parallel; write RUN_DIR/summary.json.

    Exit 0: every variant ended as its case expects; 1: some did not; 2: bad input;
    130: interrupted.
    """
    envs = [parse_env(text) for text in env] or None
    sets = parse_sets(set_)
    found = reprokit.load_cases(case or [], sets=sets, cases=cases, templates=templates, envs=envs)
    chosen = select(found, keyword, lambda v: v.label)
    if not chosen:
        hint = "`reprokit list` shows every case and its variants."
        raise ReprokitError(f"no variant matches -k {keyword!r}", hint=hint)
    if not case:  # say what "everything" is before minutes go by
        count = len({v.case.name for v in chosen})
        err.print(f"running {len(chosen)} variants of {count} cases (all; name cases to run fewer)")
    options = Options(
        jobs=jobs(n),
        timeout=timeout,
        xla_device=backends.xla_device(xla_device),
        templates=tuple(templates),
        dump_hlo=dump_hlo,
        cache=not no_cache,
        warm=not cold,
        executor=_executor(executor),
        ray_address=ray_address,
        shared_dir=shared_dir,
        stages=tuple(filter(None, (stages or "").split(","))),
    )
    build_envs(chosen)
    run_dir = output or default_run_dir()
    start = time.monotonic()
    try:
        with progress.reporter(out, len(chosen)) as shown:
            summary = reprokit.run(
                chosen, run_dir=run_dir, options=options, reporter=shown, argv=sys.argv
            )
        signals.ignore()  # summary.json is whole and the exit code decided
    except reprokit.Interrupted as stopped:  # the first signal left the others ignored
        line = progress.closing_line(stopped.summary, run_dir, time.monotonic() - start)
        out.print(line, highlight=False)
        raise typer.Exit(130) from None
    out.print(progress.closing_line(summary, run_dir, time.monotonic() - start), highlight=False)
    raise typer.Exit(1 if summary.count(False) else 0)


def _executor(name: str) -> str:
    if name not in EXECUTORS:
        raise ReprokitError(f"--executor {name!r}: not one of {', '.join(EXECUTORS)}",
                            hint="--executor ray runs stages on a Ray cluster")  # fmt: skip
    return name


def build_envs(variants: list[Variant]) -> None:
    """Each environment the variants name, built before the run (or found in the cache), so
    that minutes of installing are said rather than silent."""
    for spec in dict.fromkeys(v.env for v in variants if v.env):
        env_python(spec, announce=lambda line: err.print(line, highlight=False))


@app.command("report")
@reports_errors
def report_(
    run_dir: Annotated[Path, typer.Argument(help="the folder `reprokit run` wrote")],
    format_: Annotated[str, typer.Option("--format", help="md, html, json or all")] = "all",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write here")] = None,
) -> None:
    """report.md (issue-ready), report.html (with plots), bundle.zip (to attach)."""
    summary, written = reprokit.report(run_dir, formats=format_, out_dir=output)
    out.print(headline(summary), highlight=False)
    for path in written:
        out.print(f"wrote {path} ({path.stat().st_size:,} bytes)", highlight=False)


@app.command("diff")
@reports_errors
def diff_(
    reference: Annotated[Path, typer.Argument(help="checkpoint A: the reference")],
    target: Annotated[Path, typer.Argument(help="checkpoint B: compared with A")],
    rtol: Annotated[float | None, typer.Option(help="relative tolerance [the dtype's]")] = None,
    atol: Annotated[float | None, typer.Option(help="absolute tolerance [the dtype's]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    every: Annotated[bool, typer.Option("--all", help="a row for equal tensors too")] = False,
) -> None:
    """Tensor-by-tensor diff of two checkpoints: torch.save, xser, distributed checkpoint
    folder or safetensors, in any pairing. Exit 0 all close, 1 some differ, 2 bad input."""
    comparisons = reprokit.compare(reference, target, rtol=rtol, atol=atol)
    summary = DiffSummary.of(comparisons)
    if as_json:
        data = {"reference": str(reference), "target": str(target), "summary": summary.to_json()}
        typer.echo(json.dumps(data | {"comparisons": [c.to_json() for c in comparisons]}, indent=2))
        raise typer.Exit(0 if summary.allclose else 1)
    rows = [c for c in comparisons if c.shape is not None]
    shown = [c for c in rows if every or c.cells()["verdict"] != "equal"]
    longest = max((len(c.tensor) for c in shown), default=6)
    tensor = Column("tensor", min_width=min(longest, 16), overflow="fold")  # folded, never cut
    table = Table(tensor, "shape", "dtype", "max abs", "max rel", "mismatched", "")
    for c in shown:
        table.add_row(*_diff_row(c))
    if shown:
        out.print(table)
    if hidden := len(rows) - len(shown):
        out.print(f"{hidden} equal tensors not shown (--all shows every row)", highlight=False)
    for c in comparisons:
        if not c.allclose and c.shape is not None:
            out.print(escape(c.describe()), highlight=False)
    for path, names in ((reference, summary.only_in_reference), (target, summary.only_in_target)):
        if names:
            out.print(f"only in {escape(str(path))}: {escape(', '.join(names))}", highlight=False)
    counts = f"{summary.tensors} tensors: {summary.equal} equal, {summary.close} close"
    counts += f", {summary.differ} differ; {summary.divergence}"
    out.print(escape(counts), highlight=False)
    raise typer.Exit(0 if summary.allclose else 1)


_COLOURS = {"equal": "green", "close": "green", "differ": "red"}


def _diff_row(c: Comparison) -> list[str]:
    cells = c.cells()
    mark = f"[{_COLOURS[cells['verdict']]}]{cells['verdict']}[/]"
    if any(c.nan):  # NaNs in the same places count as equal: flagged all the same
        mark += f" [yellow]NaN {c.nan[0]:,}/{c.nan[1]:,}[/]"
    keys = ("shape", "dtype", "max_abs", "max_rel", "mismatched")
    return [escape(c.tensor), *(cells[k] for k in keys), mark]


@app.command("minimize")
@reports_errors
def minimize_(
    case: Annotated[str, typer.Argument(help="a case name or .toml path")],
    set_: SetOpt = [],  # noqa: B006
    n: Annotated[str, typer.Option("-n", help="candidates at once: N or auto")] = "1",
    budget: Annotated[int, typer.Option("--budget", min=1, help="most candidate runs")] = 40,
    output: Annotated[Path, typer.Option("-o", "--output", help="the output folder")] = Path(
        "minimized"
    ),
    timeout: Annotated[float, typer.Option("--timeout", help="seconds per stage")] = TIMEOUT,
    xla_device: XlaDeviceOpt = None,
    cases: CasesOpt = [],  # noqa: B006
    templates: TemplatesOpt = [],  # noqa: B006
) -> None:
    """Shrink a case to the smallest variant that still shows the same outcome.

    Writes OUTPUT/minimal.toml and OUTPUT/repro.py, and a run folder that `reprokit report`
    reads (summary.json holds the search: run.minimized). A captured program (template
    exported_program) shrinks to the few operations that still show the outcome: also
    OUTPUT/minimal.pt2, and a repro.py of aten calls that needs neither reprokit nor the .pt2.
    Exit 0 done (or budget spent), 130 interrupted.
    """
    variant = _one_variant(case, set_, cases, templates)
    options = Options(
        jobs=jobs(n),
        timeout=timeout,
        xla_device=backends.xla_device(xla_device),
        templates=tuple(templates),
    )
    if variant.template.name == graph_minimize.TEMPLATE:  # a captured program: its graph
        found = graph_minimize.minimize_graph(
            variant, out_dir=output, options=options, budget=budget
        )
    else:
        found = minimize(variant, out_dir=output, options=options, budget=budget)
    table = Table("", "before", "after", title=f"Minimized: {escape(found.target or '')}")
    for what, before, after in found.graph.rows() if found.graph else []:
        table.add_row(what, before, after)
    for change in found.changes:
        table.add_row(change.param, repr(change.before), repr(change.after))
    out.print(table)
    wrote = "minimal.pt2, minimal.toml and repro.py" if found.graph else "minimal.toml and repro.py"
    out.print(
        f"script {found.lines[0]} -> {found.lines[1]} lines; {found.candidates} candidate "
        f"runs, {found.cache_hits} cache hits, {found.seconds} s ({found.stopped}); "
        f"wrote {wrote} into {output}",
        highlight=False,
    )
    raise typer.Exit(130 if found.stopped == "interrupted" else 0)


@app.command("merge")
@reports_errors
def merge_(
    runs: Annotated[list[Path], typer.Argument(help="run folders of the same cases")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the merged run folder")],
    cases: CasesOpt = [],  # noqa: B006
    templates: TemplatesOpt = [],  # noqa: B006
) -> None:
    """One run from the stages of several (the CPU side run here, the TPU side there, each
    with --stages): comparisons and verdicts computed anew; the report shows each machine.
    Exit 0: every variant as its case expects; 1: some not; 2: runs that cannot be merged."""
    start = time.monotonic()
    summary = merge(runs, output, cases=cases, templates=templates, argv=sys.argv)
    out.print(progress.closing_line(summary, output, time.monotonic() - start), highlight=False)
    raise typer.Exit(1 if summary.count(False) else 0)


@app.command("bisect")
@reports_errors
def bisect_(
    case: Annotated[list[str], typer.Argument(help="case names or .toml paths")],
    releases: Annotated[
        str, typer.Option("--releases", help="torch_xla releases: 2.5..2.9, or 2.5,2.7,2.9")
    ],
    output: RunDirOpt = None,
    set_: SetOpt = [],  # noqa: B006
    n: Annotated[str, typer.Option("-n", help="stages at once: N or auto (one per CPU)")] = "1",
    timeout: Annotated[float, typer.Option("--timeout", help="seconds per stage")] = TIMEOUT,
    cases: CasesOpt = [],  # noqa: B006
    templates: TemplatesOpt = [],  # noqa: B006
) -> None:
    """The torch_xla release where the cases' outcome changed: runs the first and the last
    release, then bisects. Each release is a uv environment (torch_xla and its torch).
    Exit 0: a change found (printed, and in OUT/bisect.json); 1: the same outcome at both
    ends; 2: bad input; 130: interrupted."""
    options = Options(jobs=jobs(n), timeout=timeout, templates=tuple(templates))
    run_dir = output or default_run_dir()
    try:
        found = bisect(
            case, release_list(releases), run_dir, options=options, sets=parse_sets(set_),
            cases=cases, templates=templates, announce=lambda line: err.print(line),
        )  # fmt: skip
    except reprokit.Interrupted:
        out.print(f"[bold red]interrupted[/]: what ran is in {escape(str(run_dir))}")
        raise typer.Exit(130) from None
    for line in describe(found):
        out.print(escape(line), highlight=False)
    out.print(f"wrote {escape(str(run_dir / 'bisect.json'))}", highlight=False)
    raise typer.Exit(0 if found.changed else 1)


@app.command("capture")
@reports_errors
def capture_(
    spec: Annotated[
        str, typer.Argument(metavar="FILE.py:FUNCTION", help="returns (module, args[, kwargs])")
    ],
    name: Annotated[str | None, typer.Option("--name", help="the case's name [FUNCTION]")] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="write here")] = Path("."),
    state_dict: Annotated[
        Path | None, typer.Option("--state-dict", help="load these weights first (any format)")
    ] = None,
    random_inputs: Annotated[
        bool, typer.Option("--random-inputs", help="keep only shapes, dtypes and a seed")
    ] = False,
) -> None:
    """Your own model: export it with torch.export into NAME.pt2 and a case, NAME.toml, that
    runs every operation on CPU and XLA and judges XLA against float64."""
    from reprokit.tools.capture import command  # torch: only for this command

    case = command(
        spec, name=name, out_dir=output, state_dict=state_dict, random_inputs=random_inputs
    )
    out.print(f"wrote {case} and {case.with_suffix('.pt2')}", highlight=False)
    out.print(f"next: reprokit run {case} && reprokit report RUN_DIR", highlight=False)


@app.command(
    "wrap", context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True}
)
@reports_errors
def wrap_(
    command: Annotated[list[str], typer.Argument(help="the command: -- python train.py ARGS")],
    output: RunDirOpt = None,
    dump_hlo: Annotated[
        bool, typer.Option("--dump-hlo", help="save XLA's graphs as HLO text")
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds it may run")] = TIMEOUT,
    xla_device: XlaDeviceOpt = None,
) -> None:
    """Your own script under torch_xla's debug settings, as one stage of a run that
    `reprokit report` turns into an issue; the exit code is the script's."""
    from reprokit.tools.wrap import exit_code, wrap

    options = Options(timeout=timeout, xla_device=backends.xla_device(xla_device),
                      dump_hlo=dump_hlo)  # fmt: skip
    run_dir = output or default_run_dir()
    summary = wrap(command, run_dir=run_dir, options=options)
    (variant,) = summary.variants
    out.print(progress.variant_line(variant), highlight=False)
    out.print(f"run folder: {escape(str(run_dir))}; next: reprokit report {escape(str(run_dir))}")
    raise typer.Exit(exit_code(summary))


def main() -> None:
    signals.install()  # SIGTERM and SIGHUP stop a command as Ctrl-C does: exit 130
    try:
        app()
    finally:  # the command is done and its exit code chosen: a late signal must not change it
        signals.ignore()
