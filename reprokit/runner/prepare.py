"""A variant made ready to run: its script rendered into its folder, its files, its Python
(and a stage's own Python, where its STAGES entry names an environment).

Done for every variant before anything runs, so that bad input (a template that does not
render, requirements uv cannot meet) stops the run before its first stage.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import tomli_w

from reprokit.environment.specs import parse_env
from reprokit.environment.uv import env_python
from reprokit.environment.variables import carried as carried_variables
from reprokit.generate.render import render
from reprokit.generate.variants import Variant
from reprokit.records.folder import VariantFolder
from reprokit.runner.options import Options
from reprokit.runner.processes.stage import StageJob


@dataclass(frozen=True)
class Prepared:
    """A variant whose folder holds its script (repro.py) and the files its case brings."""

    variant: Variant
    folder: Path  # RUN_DIR/<label>
    python: str | None = None  # its environment's interpreter (--env); None: the run's


def prepare(
    variant: Variant,
    run_dir: Path,
    options: Options,
    announce: Callable[[str], None] | None = None,
) -> Prepared:
    """Render the script into ``run_dir/<label>``, with the case file (``case.toml``) and the
    files the case brings beside it, clearing the stages an earlier run left there; its
    environment built, unless cached. The steering variables exported now are recorded in
    the variant (over those it was made with, from a record), and set at the script's top."""
    variant = replace(variant, exported={**variant.exported, **carried_variables(os.environ)})
    script = render(variant, templates=options.templates)
    python = str(env_python(variant.env, announce=announce)) if variant.env else None
    where = VariantFolder(run_dir / variant.label)
    folder = where.path
    shutil.rmtree(where.stages, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    where.script.write_text(script, encoding="utf-8")
    variant.copy_files(folder, link=True)
    case, carried = variant.case.path, where.case  # merge judges it again from here
    if case.is_file() and not (carried.exists() and carried.samefile(case)):
        carried.write_text(carried_case(variant, case.read_text("utf-8")), encoding="utf-8")
    return Prepared(variant, folder, python)


def carried_case(variant: Variant, text: str) -> str:
    """The case file ``text`` as ``variant`` ran it: its matrix values and ``--set`` values
    written into ``[params]`` (the matrix dropped, a file by its name: it lies beside), so
    that ``reprokit minimize`` or ``run`` of ``RUN_DIR/<label>/case.toml`` is this variant
    again; the file as it was (its comments kept) where nothing was chosen."""
    chosen = {**variant.choice, **variant.sets}
    if not chosen:
        return text
    data = tomllib.loads(text)
    data.pop("matrix", None)
    kinds = variant.template.params
    for key, value in chosen.items():
        named = key in kinds and kinds[key].type == "file" and value
        data.setdefault("params", {})[key] = Path(value).name if named else value
    head = f"# {variant.case.path.name} as `reprokit run` ran {variant.label}: its matrix and\n"
    return head + "# --set values are in [params].\n" + tomli_w.dumps(data)


def in_stage_env(job: StageJob) -> StageJob:
    """``job`` run by the python of its stage's own environment (``"env"`` in STAGES: torchax
    on JAX beside torch_xla's own copy of it), built at its first use (uv: seconds from its
    cache); unchanged for a stage that names none, which runs in the variant's."""
    if job.stage.env is None:
        return job
    return replace(job, python=str(env_python(parse_env(job.stage.env))))
