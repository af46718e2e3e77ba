"""``reprokit merge``: one run made of the stage results of several, from several machines.

The reference often runs on one machine (a laptop, a CPU VM) and the target on another (a TPU
VM): ``reprokit run CASE --stages eval_cpu`` here, ``--stages eval_xla`` there. Merging takes
each variant's stages from the run that ran them, recomputes the comparisons and the verdict,
and keeps each machine's environment for the report. It refuses runs of a variant whose
scripts differ, or runs made with other torch or torch_xla releases: their tensors would not
answer the question.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import tomllib
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import tomli_w

from reprokit.comparison.verdict import verdict
from reprokit.errors import ReprokitError, ReprokitWarning
from reprokit.generate.cases import find_cases, load_case
from reprokit.generate.templates import SUFFIX, find_template
from reprokit.generate.variants import Variant, variant_of
from reprokit.records import (
    Machine,
    RunSummary,
    Stage,
    StageResult,
    Status,
    VariantResult,
    write_summary,
)
from reprokit.records.folder import REDUCED, STAGES, RunFolder, VariantFolder, stage_path
from reprokit.reports import load
from reprokit.runner.processes.stage import StagesUnlisted, stage_dag

SAME_RELEASE = ("torch", "torch_xla")  # runs made with other releases are not merged


@dataclass(frozen=True)
class _Run:
    folder: Path
    summary: RunSummary

    def variant(self, label: str) -> VariantResult | None:
        return next((v for v in self.summary.variants if v.label == label), None)


def merge(
    folders: Iterable[Path],
    out: Path,
    *,
    cases: Iterable[Path] = (),
    templates: Iterable[Path] = (),
    argv: Iterable[str] = (),
) -> RunSummary:
    """Merge the run ``folders`` into ``out`` and return its summary (also in summary.json)."""
    runs = [_Run(Path(f), load(Path(f))) for f in folders]
    if len(runs) < 2:
        raise ReprokitError("merge needs two run folders or more", hint="reprokit merge A B -o C")
    if any(Path(out).resolve() == run.folder.resolve() for run in runs):
        raise ReprokitError("the merged run needs a folder of its own", out, hint="-o MERGED")
    _same_releases(runs)
    labels = list(dict.fromkeys(v.label for run in runs for v in run.summary.variants))
    given: dict[Path, set[str]] = {run.folder: set() for run in runs}
    results = []
    for label in labels:
        result = _merge_variant(label, runs, Path(out), given, list(cases), list(templates))
        results.append(result)
    machines = tuple(
        Machine(str(run.folder), run.summary.env, tuple(sorted(given[run.folder])),
                run.summary.xla_device)
        for run in runs
    )  # fmt: skip
    target = next((m for m in machines if m.xla_device not in (None, "CPU")), machines[-1])
    first = runs[0].summary
    summary = RunSummary(
        started=min(run.summary.started for run in runs),
        finished=max(run.summary.finished or run.summary.started for run in runs),
        argv=tuple(argv),
        env=target.env,
        variants=tuple(results),
        interrupted=any(run.summary.interrupted for run in runs),
        xla_device=target.xla_device or first.xla_device,
        machines=machines,
    )
    write_summary(summary, Path(out))
    return summary


def _same_releases(runs: list[_Run]) -> None:
    for package in SAME_RELEASE:
        found = {run.folder: run.summary.env.versions.get(package) for run in runs}
        seen = {version for version in found.values() if version}
        if len(seen) > 1:
            each = ", ".join(f"{folder}: {version}" for folder, version in found.items())
            raise ReprokitError(
                f"the runs used different {package} releases ({each})",
                hint="Run both sides with the same releases (reprokit run --env pins them).",
            )


def _merge_variant(
    label: str,
    runs: list[_Run],
    out: Path,
    given: dict[Path, set[str]],
    cases: list[Path],
    templates: list[Path],
) -> VariantResult:
    """One variant: its script from the runs (the same in each), each stage from the run that
    ran it, and the verdict computed anew."""
    having = [run for run in runs if run.variant(label) is not None]
    scripts = {
        run.folder: RunFolder(run.folder).variant(label).script.read_bytes() for run in having
    }
    if len(set(scripts.values())) > 1:
        raise ReprokitError(
            f"variant {label}: its repro.py differs between "
            + " and ".join(str(folder) for folder in scripts),
            hint="Merge runs of the same case, rendered by the same reprokit and templates.",
        )
    folder = out / label
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(having[0].folder / label, folder, ignore=shutil.ignore_patterns(STAGES))
    stages = _stages(folder)
    chosen: dict[str, StageResult] = {}
    reduced = []
    for stage in stages:
        run, result = _ran(stage.name, label, having)
        chosen[stage.name] = result
        source = RunFolder(run.folder).variant(label).stage(stage.name).path
        if source.is_dir():
            shutil.copytree(source, stage_path(folder, stage.name))
            if (source / REDUCED).is_file():
                reduced.append(stage.name)
        if result.status is not Status.SKIPPED:
            given[run.folder].add(stage.name)
    if reduced:
        _warn_reduced(label, reduced)
    recorded = having[0].variant(label)
    assert recorded is not None
    device = next(
        (r.summary.xla_device for r in having if r.summary.xla_device not in (None, "CPU")), "CPU"
    )
    seconds = sum(result.seconds for result in chosen.values())
    variant = _variant(recorded, having, cases, templates)
    found = verdict(variant, stages, chosen, folder, seconds, xla_device=device)
    return replace(found, label=label, variant=recorded.variant, changed=recorded.changed)


def _warn_reduced(label: str, stages: list[str]) -> None:
    """Stages judged in their own run kept only some recorded operations
    (comparison/retention.py): the merged comparisons cover those alone."""
    warnings.warn(
        f"variant {label}: {', '.join(stages)} kept only some of their recorded operations once "
        "judged in their own run, so the merged comparisons cover those alone. To merge them "
        "all, run with --keep-tensors (or run each machine's stages alone, with --stages).",
        ReprokitWarning,
        stacklevel=3,
    )


def _ran(name: str, label: str, runs: list[_Run]) -> tuple[_Run, StageResult]:
    """The run that ran stage ``name`` (the first, if several did), and its result; else the
    first run's record of it (skipped)."""
    found = [
        (run, stage)
        for run in runs
        for stage in run.variant(label).stages  # type: ignore[union-attr]
        if stage.name == name
    ]
    if not found:
        result = StageResult(name, "cpu", Status.SKIPPED, reason="in none of the merged runs")
        return runs[0], result
    return next(((r, s) for r, s in found if s.status is not Status.SKIPPED), found[0])


def _stages(folder: Path) -> list[Stage]:
    """The script's stage DAG (its STAGES literal, else ``--list-stages`` run here)."""
    try:
        return stage_dag(folder)
    except StagesUnlisted as exc:
        raise ReprokitError(f"no stage DAG: {exc}", VariantFolder(folder).script) from None


def _variant(
    recorded: VariantResult, having: list[_Run], cases: list[Path], templates: list[Path]
) -> Variant:
    """The variant again, from its case (for its tolerances and its expected outcome): the one
    found by name (``--cases``, the built-in ones), else the copy its run folder carries."""
    try:
        (path,) = find_cases([recorded.case], cases)
    except ReprokitError as exc:
        carried = [RunFolder(r.folder).variant(recorded.label).case for r in having]
        path = next((p for p in carried if p.is_file()), None)
        if path is None:  # a run made before runs carried their case
            raise ReprokitError(
                f"the case {recorded.case!r} of the merged runs is not here: {exc.message}",
                hint="Point at it with --cases DIR.",
            ) from None
    with tempfile.TemporaryDirectory(prefix="reprokit-merge-") as folder:
        found = [*templates, *_standing_in(path, recorded, templates, Path(folder))]
        return variant_of(recorded, load_case(path, templates=found))


def _standing_in(
    case: Path, recorded: VariantResult, templates: list[Path], folder: Path
) -> list[Path]:
    """``[folder]`` holding a stand-in for the case's template when neither ``templates`` nor
    the built-in ones have it (a run made with ``--templates DIR``, merged without), else
    ``[]``. The script is rendered already (repro.py, the same in every run); what judging it
    takes of the case is its own tables: tolerances, expectations, variables. The stand-in
    declares the parameters the run recorded, each at its recorded value, with a type that
    takes every value the template took (numbers as float, which takes int too)."""
    try:
        name = tomllib.loads(case.read_text("utf-8"))["case"]["template"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError):
        return []  # a broken case file: load_case says where
    if not isinstance(name, str) or not _TEMPLATE_NAME.fullmatch(name):
        return []  # not a template's name: load_case refuses it
    try:
        find_template(name, templates)
        return []
    except ReprokitError as exc:
        if exc.path is not None:  # here but broken: load_case says where
            return []
    params = {
        key: {"type": _TYPE_OF.get(type(value), "str"), "default": value, "help": "as recorded"}
        for key, value in recorded.variant.items()
    }
    front = tomli_w.dumps({"title": f"{name} (a stand-in: not here)", "params": params})
    (folder / f"{name}{SUFFIX}").write_text(f"{{#- reprokit\n{front}-#}}\n", "utf-8")
    return [folder]


_TEMPLATE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")  # as find_template takes one
# A recorded parameter's type as a template declares it (generate/templates.py's _TYPES)
_TYPE_OF = {bool: "bool", int: "float", float: "float", str: "str", list: "list"}
