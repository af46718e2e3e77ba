"""``reprokit list``: the cases and templates, or one of them (the module is list_.py: ``list``
is Python's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Column, Table

from reprokit.cli.app import (
    CasesOpt,
    JsonOpt,
    TemplatesOpt,
    out,
    reports_errors,
)
from reprokit.generate.cases import find_cases, load_case
from reprokit.generate.selection import case_or_template
from reprokit.generate.templates import list_templates
from reprokit.generate.variants import variants


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
