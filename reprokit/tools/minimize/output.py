"""What a minimizer leaves in its output folder, whichever searched: the record of the search
(:class:`MinimizeResult`), ``minimal.toml``, the script (with the files it names) and a
summary.json that ``reprokit report`` reads."""

from __future__ import annotations

import dataclasses
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import tomli_w

from reprokit.environment.machine import describe_machine
from reprokit.generate.variants import Variant
from reprokit.records import Change, MinimizeResult, RunSummary, VariantResult, write_summary
from reprokit.records.minimize import MINIMAL_CASE, GraphShrink
from reprokit.tools.minimize.search import Runner
from reprokit.tools.minimize.target import Target


def result_of(
    variant: Variant,
    minimal: Variant,
    target: Target | None,
    runner: Runner,
    *,
    lines: tuple[int, int],
    seconds: float,
    stopped: str,
    graph: GraphShrink | None = None,
) -> MinimizeResult:
    """The search's record: the parameters it moved (not the files: those are the program),
    the script's lines before and after, and what it cost."""
    kinds = variant.template.params
    return MinimizeResult(
        case=variant.case.name,
        target=target.describe() if target else None,
        changes=tuple(
            Change(k, v, minimal.params[k])
            for k, v in variant.params.items()
            if minimal.params[k] != v and kinds[k].type != "file"
        ),
        lines=lines,
        candidates=runner.runs,
        cache_hits=runner.hits,
        seconds=round(seconds, 1),
        stopped=stopped,
        graph=graph,
    )


def write_out(
    out_dir: Path,
    found: MinimizeResult,
    best: VariantResult | None,
    minimal: Variant,
    target: Target | None,
    write_script: Callable[[Path], None],
) -> None:
    """minimal.toml, the script in each folder that gets one, and summary.json."""
    summary, folders = kept(found, best, minimal, out_dir)
    for folder in folders:
        write_script(folder)
    (out_dir / MINIMAL_CASE).write_text(case_toml(minimal, target), encoding="utf-8")
    write_summary(summary, out_dir)


def kept(
    found: MinimizeResult, best: VariantResult | None, minimal: Variant, out_dir: Path
) -> tuple[RunSummary, list[Path]]:
    """The run folder `reprokit report` reads: the search's record, and its best result as
    the one variant, expected to keep the outcome it kept; and the folders that get the
    minimal script (the output folder, and the variant's own)."""
    summary = RunSummary(started="", finished="", env=describe_machine(quick=True), minimized=found)
    if best is None:
        return summary, [out_dir]
    result = dataclasses.replace(
        best,
        label=minimal.label,
        case=minimal.case.name,
        variant=minimal.script_params(),
        changed=minimal.changed,  # the candidate's own would name its hashed program file
        expected=best.outcome,
    )
    shutil.rmtree(out_dir / minimal.label, ignore_errors=True)
    (out_dir / minimal.label).mkdir()
    return summary.with_variants([result]), [out_dir, out_dir / minimal.label]


def case_toml(minimal: Variant, target: Target | None) -> str:
    """The minimal case: only what differs from the template's defaults, in the environment
    the search ran it in."""
    original = tomllib.loads(minimal.case.path.read_text("utf-8"))
    defaults = minimal.template.defaults()
    params = minimal.script_params()  # a file by its name: it is copied beside the case
    params = {k: v for k, v in params.items() if defaults.get(k, object()) != v}
    data = {"case": {**original["case"], "title": f"{minimal.case.title} (minimized)"}}
    data |= {"params": params} if params else {}
    data |= {"compare": original["compare"]} if "compare" in original else {}
    if target is not None:
        data["expect"] = {"outcome": target.outcome.value}
    if minimal.env is not None:
        data["envs"] = {minimal.env.name: list(minimal.env.requirements)}
    data |= {"variables": minimal.variables} if minimal.variables else {}  # the search's
    head = f"# Made by `reprokit minimize {minimal.case.name}`: the smallest variant found that\n"
    head += f"# still shows {target.describe() if target else 'the same outcome'}.\n"
    return head + tomli_w.dumps(data)
