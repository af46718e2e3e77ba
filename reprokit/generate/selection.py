"""What a command that works on one thing means by a name: ``reprokit list NAME`` a case or a
template, ``render`` and ``minimize`` a single variant of a case.

Torch-free, as listing and rendering must be.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.generate.cases import Case, find_cases, load_case
from reprokit.generate.templates import Template, did_you_mean, list_templates
from reprokit.generate.variants import Variant, load_variants


def case_or_template(
    name: str, *, cases: Iterable[Path] = (), templates: Iterable[Path] = ()
) -> tuple[Case | None, Template]:
    """The case called (or at) ``name`` and its template; else the template called ``name``.

    A case is looked for first: what it shows holds its template's parameters and its own
    values of them.
    """
    cases, templates = list(cases), list(templates)
    try:
        (path,) = find_cases([name], cases)
    except ReprokitError:
        known = {t.name: t for t in list_templates(templates)}
        if name in known:
            return None, known[name]
        names = sorted({*known, *(p.stem for p in find_cases((), cases))})
        hint = "`reprokit list` shows every template and case."
        raise ReprokitError(
            f"no template or case named {name!r}{did_you_mean(name, names)}", hint=hint
        ) from None
    case = load_case(path, templates=templates)
    return case, case.template


def load_variant(
    selector: str,
    *,
    sets: dict[str, Any] | None = None,
    cases: Iterable[Path] = (),
    templates: Iterable[Path] = (),
    any_env: bool = False,
) -> Variant:
    """The one variant of a case that a command works on.

    A case with a matrix must be pinned with ``--set``. A case whose ``[envs]`` names several
    environments must name one, unless ``any_env``: a command that only renders the script
    (the same in every environment) takes the variant in the case's first environment.
    """
    found = load_variants([selector], sets=sets, cases=cases, templates=templates)
    if any_env:  # one per script: the variants of one choice differ only by environment
        found = list({_without_env(v): v for v in found}.values())
    if len(found) == 1:
        return found[0]
    first = found[0]
    hints = []
    if len({_without_env(v) for v in found}) > 1:
        hints.append(f"Pick one by fixing its matrix with --set ({', '.join(first.choice)}).")
    if len({v.env for v in found}) > 1:
        names = ", ".join(dict.fromkeys(v.env.name for v in found if v.env))
        hints.append(f"Keep one environment in the case's [envs] ({names}).")
    raise ReprokitError(
        f"the case has {len(found)} variants: {', '.join(v.label for v in found)}",
        first.case.path,
        hint=" ".join(hints),
    )


def _without_env(variant: Variant) -> str:
    """The variant's label, were it in reprokit's own environment."""
    return dataclasses.replace(variant, env=None).label
