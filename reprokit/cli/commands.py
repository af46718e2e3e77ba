"""The commands that run no stages: list, render, env, report, diff, convert, capture (registered on
the app by reprokit/cli/__init__.py, in the order help lists them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Column, Table

import reprokit
from reprokit.cli.app import (
    CasesOpt,
    JsonOpt,
    SetOpt,
    TemplatesOpt,
    err,
    out,
    reports_errors,
)
from reprokit.errors import ExitCode, ReprokitError
from reprokit.generate.cases import find_cases, load_case
from reprokit.generate.selection import case_or_template, load_variant
from reprokit.generate.templates import list_templates
from reprokit.generate.variants import parse_sets, variants
from reprokit.records import Comparison, DiffSummary
from reprokit.reports import headline


@reports_errors
def list_(
    name: Annotated[
        str | None, typer.Argument(help="a template or case: its parameters, in full")
    ] = None,
    as_json: JsonOpt = False,
    cases: CasesOpt = None,
    templates: TemplatesOpt = None,
) -> None:
    """Cases and templates, with their titles; with NAME, one template's parameters (type,
    default, smallest value or choices, help), and a case's values of them."""
    cases, templates = cases or [], templates or []
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
    case, template = case_or_template(name, cases=cases, templates=templates)
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


@reports_errors
def report_(
    run_dir: Annotated[Path, typer.Argument(help="the folder `reprokit run` wrote")],
    format_: Annotated[str, typer.Option("--format", help="md, html, json or all")] = "all",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write here")] = None,
) -> None:
    """report.md (issue-ready), report.html (with plots), bundle.zip (to attach)."""
    reports = reprokit.report(run_dir, formats=format_, out_dir=output)
    summary = reports.summary  # a minimize folder expects its mismatch; an ops folder has no
    if summary.minimized is None and summary.variants:  # variants (its title says): no news
        out.print(headline(summary), highlight=False)
    for path in reports.written:
        out.print(f"wrote {path} ({path.stat().st_size:,} bytes)", highlight=False)
    if reports.title:
        out.print(f"issue title: {reports.title}", highlight=False)
    if reports.next_step:
        out.print(f"for a short repro to paste: {reports.next_step}", highlight=False)


@reports_errors
def diff_(
    reference: Annotated[Path, typer.Argument(help="checkpoint A: the reference")],
    target: Annotated[Path, typer.Argument(help="checkpoint B: compared with A")],
    rtol: Annotated[float | None, typer.Option(help="relative tolerance [the dtype's]")] = None,
    atol: Annotated[float | None, typer.Option(help="absolute tolerance [the dtype's]")] = None,
    as_json: JsonOpt = False,
    every: Annotated[bool, typer.Option("--all", help="a row for equal tensors too")] = False,
) -> None:
    """Tensor-by-tensor diff of two checkpoints: torch.save, xser, distributed checkpoint
    folder or safetensors, in any pairing. Exit 0 all close, 1 some differ, 2 bad input."""
    comparisons = reprokit.compare(reference, target, rtol=rtol, atol=atol)
    summary = DiffSummary.of(comparisons)
    if as_json:
        data = {"reference": str(reference), "target": str(target), "summary": summary.to_json()}
        typer.echo(json.dumps(data | {"comparisons": [c.to_json() for c in comparisons]}, indent=2))
        raise typer.Exit(_differ(summary))
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
    raise typer.Exit(_differ(summary))


def _differ(summary: DiffSummary) -> ExitCode:
    return ExitCode.OK if summary.allclose else ExitCode.FAILED


_COLOURS = {"equal": "green", "close": "green", "differ": "red"}


def _diff_row(c: Comparison) -> list[str]:
    cells = c.cells()
    mark = f"[{_COLOURS[cells['verdict']]}]{cells['verdict']}[/]"
    if any(c.nan):  # NaNs in the same places count as equal: flagged all the same
        mark += f" [yellow]NaN {c.nan[0]:,}/{c.nan[1]:,}[/]"
    keys = ("shape", "dtype", "max_abs", "max_rel", "mismatched")
    return [escape(c.tensor), *(cells[k] for k in keys), mark]


# The named-model form of capture and the sweep's: reprokit.tools.zoo.
ConfigOpt = Annotated[
    list[str] | None,
    typer.Option("--config", help="a named model's configuration: KEY=VALUE (repeatable)"),
]
ShapeOpt = Annotated[
    str | None, typer.Option("--shape", help="a named model's input: 1,3,64,64 or 1,16 (ids)")
]


@reports_errors
def capture_(
    spec: Annotated[
        str,
        typer.Argument(
            metavar="FILE.py:FUNCTION | ZOO:MODEL",
            help="returns (module, args[, kwargs]); or a named model: torchvision:resnet18, "
            "timm:convnext_atto, hf:LlamaForCausalLM, hf:gpt2",
        ),
    ],
    name: Annotated[str | None, typer.Option("--name", help="the case's name [FUNCTION]")] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="write here")] = Path("."),
    state_dict: Annotated[
        Path | None, typer.Option("--state-dict", help="load these weights first (any format)")
    ] = None,
    random_inputs: Annotated[
        bool, typer.Option("--random-inputs", help="keep only shapes, dtypes and a seed")
    ] = False,
    config: ConfigOpt = None,
    shape: ShapeOpt = None,
    train: Annotated[
        bool, typer.Option("--train", help="a training step: forward returns the loss first")
    ] = False,
) -> None:
    """Your own model: export it with torch.export into NAME.pt2 and a case, NAME.toml, that
    runs every operation on CPU and XLA and judges XLA against float64. A named model
    (ZOO:MODEL) is built with random weights and inputs made for its family. --train: the loss
    and every gradient, as one joint forward-and-backward graph (--set steps=3 optimizer=adam)."""
    if _is_named(spec):
        case = _capture_named(spec, name, output, state_dict, config or [], shape, train)
    else:
        command = _capture_command(train)
        case = command(
            spec, name=name, out_dir=output, state_dict=state_dict, random_inputs=random_inputs
        )
    out.print(f"wrote {case} and {case.with_suffix('.pt2')}", highlight=False)
    run_dir = Path("runs") / case.stem  # the report is wanted most when the run mismatches (1)
    out.print(f"next: reprokit run {case} -o {run_dir}; reprokit report {run_dir}", highlight=False)


def _is_named(spec: str) -> bool:
    from reprokit.tools.zoo import is_named

    return is_named(spec)


def _capture_named(
    spec: str, name: str | None, output: Path, state_dict: Path | None, config: list[str],
    shape: str | None, train: bool,
) -> Path:  # fmt: skip
    from reprokit.tools import zoo

    if train:
        raise ReprokitError(
            f"--train is for your own FILE.py:FUNCTION, not a named model ({spec})",
            hint="Write a FUNCTION that returns the model with its loss (see README, "
            "'Your own training step').",
        )
    named = zoo.parse(spec, parse_sets(config), zoo.parse_shape(shape))
    return zoo.capture_named(named, name=name, out_dir=output, state_dict=state_dict)


def _capture_command(train: bool) -> Any:
    """The capture tool's command: the forward program's, or with --train the training
    step's (reprokit.tools.train). torch is imported only for this command."""
    if train:
        from reprokit.tools.train import command as capture_training

        return capture_training
    from reprokit.tools.capture import command

    return command


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
